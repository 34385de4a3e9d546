// One run of 16 values v0..v3 as the integer-dot products read it (quant_i8.wgsl, qx.wgsl): the
// scale dx = max |v| / 32512 and q = round(v / dx) in [-32512, 32512], split as q = 256 hi + lo with
// hi = (q + 128) >> 8 and lo in [-128, 127], both signed bytes, four to a word (`hi` the his of values
// 0..16, `lo` the los), and s = (dx, dx sum(q)): the products' offsets and minima then weigh x's
// rounding as the weight does. A run of zeros (or of values too small for 1 / dx) is all zeros; a run
// whose values are not all finite gets the scale NaN, so the products that read it are NaN.
struct QRun { hi: vec4<u32>, lo: vec4<u32>, s: vec2<f32> }

// The his and los of four values of q, and their sum.
fn split4(v: vec4<f32>, inv: f32) -> vec3<u32> {
    let q = vec4<i32>(round(v * inv));
    let hi = (q + vec4<i32>(128)) >> vec4<u32>(8u);
    return vec3<u32>(pack4xI8(hi), pack4xI8(q - hi * 256), bitcast<u32>(q.x + q.y + q.z + q.w));
}

fn qrun(v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>) -> QRun {
    let a = max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3)));
    let amax = max(max(a.x, a.y), max(a.z, a.w));
    // max() may drop a NaN; the sum keeps it.
    let sx = dot(v0 + v1 + v2 + v3, vec4<f32>(1.0));
    let finite = (bitcast<u32>(amax) & 0x7fffffffu) < 0x7f800000u && (bitcast<u32>(sx) & 0x7fffffffu) < 0x7f800000u;
    let inv = select(0.0, 32512.0 / amax, amax > 1e-30 && finite);
    let dx = select(nan_f32(), amax / 32512.0, finite);
    let s0 = split4(v0, inv);
    let s1 = split4(v1, inv);
    let s2 = split4(v2, inv);
    let s3 = split4(v3, inv);
    let qsum = bitcast<i32>(s0.z) + bitcast<i32>(s1.z) + bitcast<i32>(s2.z) + bitcast<i32>(s3.z);
    return QRun(vec4<u32>(s0.x, s1.x, s2.x, s3.x), vec4<u32>(s0.y, s1.y, s2.y, s3.y), vec2<f32>(dx, f32(qsum) * dx));
}
