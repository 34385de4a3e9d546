// Reading quantized blocks from kiln's planar layout (quant/mod.rs): `q` holds the block bodies
// (Q8_0 8 words, Q4_0 4, Q4_K 36, Q6_K 52 a block), then from word `doff` the f16 scales `d` of
// the formats that move them out, two a word. A block is read in units of 32 values: ws_*(b, s)
// gives the scales of unit s of block b, wq_*(b, s, j, sc) values 4j..4j+4 of the unit. Each
// follows ggml's dequantize_row_* (the same f32 products in the same order).
fn half_d(doff: u32, b: u32) -> f32 { return unpack2x16float(q[doff + (b >> 1u)])[b & 1u]; }
fn qbyte(base: u32, i: u32) -> u32 { return (q[base + (i >> 2u)] >> (8u * (i & 3u))) & 0xffu; }
const SH4 = vec4<u32>(0u, 8u, 16u, 24u);

fn ws_q8_0(b: u32, s: u32, doff: u32) -> vec4<f32> { return vec4<f32>(half_d(doff, b), 0.0, 0.0, 0.0); }
fn wq_q8_0(b: u32, s: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let w = q[b * 8u + j];
    let v = vec4<i32>(bitcast<i32>(w << 24u), bitcast<i32>(w << 16u), bitcast<i32>(w << 8u), bitcast<i32>(w));
    return vec4<f32>(v >> vec4<u32>(24u)) * sc.x;
}

fn ws_q4_0(b: u32, s: u32, doff: u32) -> vec4<f32> { return vec4<f32>(half_d(doff, b), 0.0, 0.0, 0.0); }
fn wq_q4_0(b: u32, s: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let w = q[b * 4u + (j & 3u)];
    let n = (vec4<u32>(w) >> (SH4 + (j >> 2u) * 4u)) & vec4<u32>(15u);
    return (vec4<f32>(n) - 8.0) * sc.x;
}

// Q4_K: word 0 holds d and dmin, words 1..4 the 12 scale bytes (get_scale_min_k4), words 4..36 the
// nibbles: unit s uses bytes 32 (s / 2).. of them, low nibbles for even s, high for odd.
fn ws_q4_k(b: u32, s: u32, doff: u32) -> vec4<f32> {
    let base = b * 36u;
    let dm = unpack2x16float(q[base]);
    let sb = base + 1u;
    var sc: u32;
    var m: u32;
    if (s < 4u) {
        sc = qbyte(sb, s) & 63u;
        m = qbyte(sb, s + 4u) & 63u;
    } else {
        sc = (qbyte(sb, s + 4u) & 15u) | ((qbyte(sb, s - 4u) >> 6u) << 4u);
        m = (qbyte(sb, s + 4u) >> 4u) | ((qbyte(sb, s) >> 6u) << 4u);
    }
    return vec4<f32>(dm.x * f32(sc), dm.y * f32(m), 0.0, 0.0);
}
fn wq_q4_k(b: u32, s: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let w = q[b * 36u + 4u + (s >> 1u) * 8u + j];
    let n = (vec4<u32>(w) >> (SH4 + (s & 1u) * 4u)) & vec4<u32>(15u);
    return sc.x * vec4<f32>(n) - sc.y;
}

// Q6_K: words 0..32 low nibbles (ql), 32..48 high bit pairs (qh), 48..52 the 16 i8 scales. Unit
// s = 4h + t is values 128h + 32t.. : ql bytes 64h + 32(t & 1).., nibble t / 2; qh bytes 32h..,
// bits 2t; scales 8h + 2t (values 0..16 of the unit) and 8h + 2t + 1 (16..32).
fn ws_q6_k(b: u32, s: u32, doff: u32) -> vec4<f32> {
    let d = half_d(doff, b);
    let sb = b * 52u + 48u;
    let i = (s >> 2u) * 8u + (s & 3u) * 2u;
    let lo = bitcast<i32>(qbyte(sb, i) << 24u) >> 24u;
    let hi = bitcast<i32>(qbyte(sb, i + 1u) << 24u) >> 24u;
    return vec4<f32>(d * f32(lo), d * f32(hi), 0.0, 0.0);
}
fn wq_q6_k(b: u32, s: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let h = s >> 2u;
    let t = s & 3u;
    let wl = q[b * 52u + 16u * h + 8u * (t & 1u) + j];
    let wh = q[b * 52u + 32u + 8u * h + j];
    let lo = (vec4<u32>(wl) >> (SH4 + (t >> 1u) * 4u)) & vec4<u32>(15u);
    let hi = (vec4<u32>(wh) >> (SH4 + 2u * t)) & vec4<u32>(3u);
    let v = vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u))) - vec4<i32>(32));
    return select(sc.x, sc.y, j >= 4u) * v;
}
