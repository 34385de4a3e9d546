// Scaled dot-product attention, one workgroup of 64 per query row, online softmax over key blocks of
// 64 (flash-attention style, O(d) memory per row). q (b, hq, tq, d), k (b, hkv, tk, d),
// v (b, hkv, tk, dv) contiguous; output (b, hq, tq, dv) in f32. d, dv <= 256.
// Params: p[0] rows (b*hq*tq), p[1] hq, p[2] hkv, p[3] tq, p[4] tk, p[5] d, p[6] dv, p[7] scale bits,
// p[8] causal, p[9..12] q/k/v offsets.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> in0: array<u32>;
@group(0) @binding(2) var<storage, read> in1: array<u32>;
@group(0) @binding(3) var<storage, read> in2: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;
{{PRELUDE}}
{{LOADERS}}
var<workgroup> qs: array<f32, 256>;
var<workgroup> sc: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid3: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nw: vec3<u32>) {
    let lid = lid3.x;
    let r = wid.x + wid.y * nw.x;
    if (r >= p[0]) { return; }
    let hq = p[1]; let hkv = p[2]; let tq = p[3]; let tk = p[4]; let d = p[5]; let dv = p[6];
    let i = r % tq;
    let h = (r / tq) % hq;
    let b = r / (tq * hq);
    let hk = h / (hq / hkv);
    let qbase = p[9] + r * d;
    let kbase = p[10] + (b * hkv + hk) * tk * d;
    let vbase = p[11] + (b * hkv + hk) * tk * dv;
    let scale = bitcast<f32>(p[7]);
    for (var c = lid; c < d; c += 64u) { qs[c] = ld0(qbase + c) * scale; }
    workgroupBarrier();
    var limit = tk;
    if (p[8] == 1u) { limit = u32(clamp(i32(i) + i32(tk) - i32(tq) + 1, 0, i32(tk))); }
    var m = -inf_f32();
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var kb = 0u; kb < limit; kb += 64u) {
        let j = kb + lid;
        var s = -inf_f32();
        if (j < limit) {
            s = 0.0;
            for (var c = 0u; c < d; c++) { s += qs[c] * ld1(kbase + j * d + c); }
        }
        sc[lid] = s;
        workgroupBarrier();
        var bm = -inf_f32();
        for (var t = 0u; t < 64u; t++) { bm = max(bm, sc[t]); }
        let mn = max(m, bm);
        let corr = exp(m - mn);
        l *= corr;
        for (var c = 0u; c < 4u; c++) { acc[c] *= corr; }
        let cnt = min(64u, limit - kb);
        for (var t = 0u; t < cnt; t++) {
            let w = exp(sc[t] - mn);
            l += w;
            for (var c = 0u; c < 4u; c++) {
                let col = lid + 64u * c;
                if (col < dv) { acc[c] += w * ld2(vbase + (kb + t) * dv + col); }
            }
        }
        m = mn;
        workgroupBarrier();
    }
    for (var c = 0u; c < 4u; c++) {
        let col = lid + 64u * c;
        if (col < dv) { dst[r * dv + col] = bitcast<u32>(select(acc[c] / l, 0.0, l == 0.0)); }
    }
}
