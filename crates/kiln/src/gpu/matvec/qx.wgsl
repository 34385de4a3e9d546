// The rows of x ({{XDT}}) through the prologue ({{PRO}}), as 16-bit fixed point per run of 16
// values for the integer-dot products (quant_i8.wgsl): run t of row r has the scale
// dx = max |v| / 32512 and the sum of its rounded values dx sum(q) (xs[r * runs + t]: the
// products' offsets and minima then weigh x's rounding as the weight does), q = round(v / dx)
// in [-32512, 32512] split as q = 256 hi + lo with hi = (q + 128) >> 8 and lo in [-128, 127], both
// signed bytes, four to a word (xq[2 (r * runs + t)] the his of values 0..16, + 1 the los). A run
// whose values are not all finite gets the scale NaN (the products that read it are NaN).
// Grid: x = blocks of 64 runs, y = rows. Params: `QxParams` (qx.rs).
@group(0) @binding(0) var<storage, read_write> xq: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> xs: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> x: array<vec4<u32>>;
{{NORM_BINDING}}
{{PARAMS}}
var<workgroup> red: array<f32, 64>;

{{XLOAD}}

// The his and los of four values of q, and their sum.
fn split(v: vec4<f32>, inv: f32) -> vec3<u32> {
    let q = vec4<i32>(round(v * inv));
    let hi = (q + vec4<i32>(128)) >> vec4<u32>(8u);
    return vec3<u32>(pack4xI8(hi), pack4xI8(q - hi * 256), bitcast<u32>(q.x + q.y + q.z + q.w));
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let runs = p.k / 16u;
    let row = wid.y;
    let xb = p.x_off + row * p.x_stride;
{{SCALE}}
    let t = wid.x * 64u + lid;
    if (t >= runs) {
        return;
    }
    let e = t * 16u;
    let v0 = xin(xb, e, 0u) * scale;
    let v1 = xin(xb, e, 1u) * scale;
    let v2 = xin(xb, e, 2u) * scale;
    let v3 = xin(xb, e, 3u) * scale;
    let a = max(max(abs(v0), abs(v1)), max(abs(v2), abs(v3)));
    let amax = max(max(a.x, a.y), max(a.z, a.w));
    let sx = dot(v0 + v1 + v2 + v3, vec4<f32>(1.0));
    // A run of zeros (or of values too small for 1 / dx) is all zeros; a NaN or an infinity in the
    // run makes amax or sx NaN or infinite, and the scale NaN.
    let finite = (bitcast<u32>(amax) & 0x7fffffffu) < 0x7f800000u && (bitcast<u32>(sx) & 0x7fffffffu) < 0x7f800000u;
    let inv = select(0.0, 32512.0 / amax, amax > 1e-30 && finite);
    let dx = select(nan_f32(), amax / 32512.0, finite);
    let s0 = split(v0, inv);
    let s1 = split(v1, inv);
    let s2 = split(v2, inv);
    let s3 = split(v3, inv);
    let o = row * runs + t;
    xq[2u * o] = vec4<u32>(s0.x, s1.x, s2.x, s3.x);
    xq[2u * o + 1u] = vec4<u32>(s0.y, s1.y, s2.y, s3.y);
    let qsum = bitcast<i32>(s0.z) + bitcast<i32>(s1.z) + bitcast<i32>(s2.z) + bitcast<i32>(s3.z);
    xs[o] = vec2<f32>(dx, f32(qsum) * dx);
}
