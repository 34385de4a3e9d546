// Merges the per-split partial rows of split-K attention (attention.wgsl, attention_decode.wgsl):
// for output row r, split s holds (max m, sum l) at words 2(r * splits + s) and the unnormalised
// value sums from p[7] + (r * splits + s) * dv. The result is sum_s e^(m_s - M) acc_s / sum_s
// e^(m_s - M) l_s with M the largest m_s; only the splits holding a key the row may see are read.
// One invocation per 4 output columns.
// Params: p[0] rows, p[1] dv, p[2] splits, p[3] keys per split, p[4] tq, p[5] tk, p[6] causal,
// p[7] start of the partial rows, p[8] column quads per row, p[9] invocations.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{STORE}}

fn visible(i: u32, tq: u32, tk: u32, causal: bool) -> u32 {
    if (!causal) { return tk; }
    return u32(clamp(i32(i) + 1 + i32(tk) - i32(tq), 0, i32(tk)));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let e = gid.x + gid.y * nw.x * 64u;
    if (e >= p[9]) { return; }
    let dv = p[1]; let nsplit = p[2];
    let row = e / p[8];
    let c = 4u * (e % p[8]);
    let n = min(4u, dv - c);
    let vis = visible(row % p[4], p[4], p[5], p[6] == 1u);
    let ns = min(nsplit, (vis + p[3] - 1u) / p[3]);
    var mm = -inf_f32();
    var bad = false;
    for (var s = 0u; s < ns; s++) {
        let m = bitcast<f32>(in0[2u * (row * nsplit + s)]);
        bad = bad || is_nan(m);
        mm = max(mm, m);
    }
    var l = 0.0;
    var o = vec4<f32>(0.0);
    for (var s = 0u; s < ns; s++) {
        let pr = row * nsplit + s;
        let m = bitcast<f32>(in0[2u * pr]);
        if (m > -inf_f32()) {
            let w = exp(m - mm);
            l += w * bitcast<f32>(in0[2u * pr + 1u]);
            let a = p[7] + pr * dv + c;
            var x = vec4<f32>(0.0);
            for (var k = 0u; k < n; k++) { x[k] = bitcast<f32>(in0[a + k]); }
            o += w * x;
        }
    }
    var out = o / l;
    if (bad) {
        out = vec4<f32>(nan_f32());
    } else if (l == 0.0) {
        out = select(vec4<f32>(0.0), vec4<f32>(nan_f32()), vis > 0u);
    }
    store4(row * dv + c, out, n);
}
