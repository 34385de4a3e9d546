// Merges the per-split partial rows of split-K attention (flash.wgsl, decode.wgsl, paged_decode.wgsl):
// for output row r, split s holds (max m, sum l) at words 2(r * splits + s) and the unnormalised
// value sums from p.part_start + (r * splits + s) * dv. The result is sum_s e^(m_s - M) acc_s / sum_s
// e^(m_s - M) l_s with M the largest m_s; only the splits holding a key the row may see are read
// (from the one holding its first key, with a sliding window, to the one holding its last).
//
// One workgroup of 256 per row: invocation t takes column quad t % Q (Q = p.quads quads per row) and the
// splits s = t / Q, s + L, ... (L = 256 / Q lanes), four at a time so their loads are in flight
// together, keeping a running (max, sum, values); then the L lanes of each quad are merged. (A
// decode step over 8192 keys in 64 splits with dv = 128: 8 lanes, two rounds of loads per lane.)
// Params: `CombineParams` (mod.rs).
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
{{PARAMS}}
{{PRELUDE}}
{{STORE}}

var<workgroup> part: array<vec4<f32>, 256>;
var<workgroup> ml: array<vec2<f32>, 256>;

{{ROWS}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let row = wid.x + wid.y * nw.x;
    if (row >= p.rows) { return; }
    let dv = p.dv; let nsplit = p.splits; let nq = p.quads;
    let lanes = 256u / nq;
    let q = t % nq; let lane = t / nq;
    let c = 4u * q;
    let n = min(4u, dv - c);
    let vis = visible(row % p.tq, p.tq, p.tk, p.causal == 1u);
    let ns = min(nsplit, (vis + p.per_split - 1u) / p.per_split);
    let s0 = first_key(row % p.tq, p.tq, p.tk, p.window) / p.per_split;
    var a = Acc(-inf_f32(), 0.0, vec4<f32>(0.0), false);
    if (lane < lanes) {
        for (var s = s0 + lane; s < ns; s += 4u * lanes) {
            var mv = vec4<f32>(-inf_f32()); var lv = vec4<f32>(0.0);
            var o0 = vec4<f32>(0.0); var o1 = vec4<f32>(0.0); var o2 = vec4<f32>(0.0); var o3 = vec4<f32>(0.0);
            for (var u = 0u; u < 4u; u++) {
                let su = s + u * lanes;
                if (su < ns) {
                    let pr = row * nsplit + su;
                    mv[u] = bitcast<f32>(in0[2u * pr]);
                    lv[u] = bitcast<f32>(in0[2u * pr + 1u]);
                    var x = vec4<f32>(0.0);
                    for (var k = 0u; k < n; k++) { x[k] = bitcast<f32>(in0[p.part_start + pr * dv + c + k]); }
                    if (u == 0u) { o0 = x; } else if (u == 1u) { o1 = x; } else if (u == 2u) { o2 = x; } else { o3 = x; }
                }
            }
            a = fold(a, mv.x, lv.x, o0);
            a = fold(a, mv.y, lv.y, o1);
            a = fold(a, mv.z, lv.z, o2);
            a = fold(a, mv.w, lv.w, o3);
        }
    }
    part[t] = a.o;
    ml[t] = vec2<f32>(select(a.m, nan_f32(), a.bad), a.l);
    workgroupBarrier();
    if (lane == 0u) {
        var b = Acc(-inf_f32(), 0.0, vec4<f32>(0.0), false);
        for (var k = 0u; k < lanes; k++) { let e = ml[k * nq + q]; b = fold(b, e.x, e.y, part[k * nq + q]); }
        var out = b.o / b.l;
        if (b.bad) {
            out = vec4<f32>(nan_f32());
        } else if (b.l == 0.0) {
            out = select(vec4<f32>(0.0), vec4<f32>(nan_f32()), vis > 0u);
        }
        store4(row * dv + c, out, n);
    }
}
