// A bf16 operand of a cooperative-matrix kernel as a contiguous f16 copy, every line multiplied by
// the power of two 2^-e that puts its largest finite magnitude (from line_maxima.wgsl, in `mx`) in
// [2^14, 2^15): exact for every value at most 2^28 below the maximum (f16 keeps bf16's 8 bits).
// The copy is (batch, line, k) when `p[6] == 1` (K contiguous), else (batch, k, line); invocation w
// writes output word w (elements 2w and 2w + 1, each placed on its own, so lines of odd length work).
// Params: p[0] lines, p[1] K, p[2] offset, p[3] line stride, p[4] k stride, p[5] first slot in `mx`,
// p[6] K contiguous, p[7] batch rank (<= 4), p[8..12] batch dims, p[12..16] batch strides,
// p[16] elements.
@group(0) @binding(0) var<storage, read_write> dst: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> mx: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 32>;

{{LINE_EXP}}

fn value(e: u32) -> f32 {
    let lines = p[0];
    let k = p[1];
    var line: u32;
    var kk: u32;
    var z: u32;
    if (p[6] == 1u) {
        kk = e % k;
        line = (e / k) % lines;
        z = e / k / lines;
    } else {
        line = e % lines;
        kk = (e / lines) % k;
        z = e / lines / k;
    }
    var base = p[2];
    var rem = z;
    for (var d = p[7]; d > 0u; d--) {
        let i = d - 1u;
        base += (rem % p[8u + i]) * p[12u + i];
        rem /= p[8u + i];
    }
    let i = base + line * p[3] + kk * p[4];
    let w = x[i >> 1u];
    let v = bitcast<f32>(select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u));
    // 2^-e as a float: e is within [-110, 115], so the exponent field stays normal.
    let s = bitcast<f32>(u32(127 - line_exp(mx[p[5] + z * lines + line])) << 23u);
    return v * s;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let w = gid.x + gid.y * nw.x * 256u;
    let e = 2u * w;
    if (e >= p[16]) {
        return;
    }
    var b = 0.0;
    if (e + 1u < p[16]) {
        b = value(e + 1u);
    }
    dst[w] = pack2x16float(vec2<f32>(value(e), b));
}
