// Reading quantized blocks from kiln's planar layout (quant/mod.rs), bound as 16-byte vectors `q`
// (the data is padded to whole vectors): the block bodies (Q8_0 2 vectors a block, Q4_0 1, Q4_K 9,
// Q6_K 13), then from word `doff` the f16 scales `d` of the formats that move them out, two a word.
// A block is read in units of 32 values, each in two groups of 16: ws_*(b, s) gives the scales of
// unit s of block b, ld_*(b, s, g) the raw words of group g (one or two 16-byte loads), and
// wq_*(v, s, g, j, sc) values 16g + 4j .. 16g + 4j + 4 of the unit from them. Each follows ggml's
// dequantize_row_* (the same f32 products in the same order).
struct QV { a: vec4<u32>, b: vec4<u32> }
fn qw(i: u32) -> u32 { return q[i >> 2u][i & 3u]; }
fn half_d(doff: u32, b: u32) -> f32 { return unpack2x16float(qw(doff + (b >> 1u)))[b & 1u]; }
// Byte i (0..16) of a 16-byte vector.
fn vbyte(v: vec4<u32>, i: u32) -> u32 { return (v[i >> 2u] >> (8u * (i & 3u))) & 0xffu; }
const SH4 = vec4<u32>(0u, 8u, 16u, 24u);

// Q8_0: 32 i8 (two vectors) a block.
fn ws_q8_0(b: u32, s: u32, doff: u32) -> vec4<f32> { return vec4<f32>(half_d(doff, b), 0.0, 0.0, 0.0); }
fn ld_q8_0(b: u32, s: u32, g: u32) -> QV { return QV(q[b * 2u + g], vec4<u32>()); }
fn wq_q8_0(v: QV, s: u32, g: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let w = v.a[j];
    let i = vec4<i32>(bitcast<i32>(w << 24u), bitcast<i32>(w << 16u), bitcast<i32>(w << 8u), bitcast<i32>(w));
    return vec4<f32>(i >> vec4<u32>(24u)) * sc.x;
}

// Q4_0: 16 bytes (one vector); values 0..16 are the low nibbles, 16..32 the high ones.
fn ws_q4_0(b: u32, s: u32, doff: u32) -> vec4<f32> { return vec4<f32>(half_d(doff, b), 0.0, 0.0, 0.0); }
fn ld_q4_0(b: u32, s: u32, g: u32) -> QV { return QV(q[b], vec4<u32>()); }
fn wq_q4_0(v: QV, s: u32, g: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let n = (vec4<u32>(v.a[j]) >> (SH4 + g * 4u)) & vec4<u32>(15u);
    return (vec4<f32>(n) - 8.0) * sc.x;
}

// Q4_K: vector 0 holds d and dmin (word 0) and the 12 scale bytes (get_scale_min_k4), vectors 1..9
// the nibbles: unit s uses bytes 32 (s / 2).. of them (two vectors), low nibbles for even s.
fn ws_q4_k(b: u32, s: u32, doff: u32) -> vec4<f32> {
    let h = q[b * 9u];
    let dm = unpack2x16float(h.x);
    var sc: u32;
    var m: u32;
    if (s < 4u) {
        sc = vbyte(h, 4u + s) & 63u;
        m = vbyte(h, 8u + s) & 63u;
    } else {
        sc = (vbyte(h, 8u + s) & 15u) | ((vbyte(h, s) >> 6u) << 4u);
        m = (vbyte(h, 8u + s) >> 4u) | ((vbyte(h, 4u + s) >> 6u) << 4u);
    }
    return vec4<f32>(dm.x * f32(sc), dm.y * f32(m), 0.0, 0.0);
}
fn ld_q4_k(b: u32, s: u32, g: u32) -> QV { return QV(q[b * 9u + 1u + (s >> 1u) * 2u + g], vec4<u32>()); }
fn wq_q4_k(v: QV, s: u32, g: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let n = (vec4<u32>(v.a[j]) >> (SH4 + (s & 1u) * 4u)) & vec4<u32>(15u);
    return sc.x * vec4<f32>(n) - sc.y;
}

// Q6_K: vectors 0..8 low nibbles (ql), 8..12 high bit pairs (qh), 12 the 16 i8 scales. Unit
// s = 4h + t is values 128h + 32t.. : ql bytes 64h + 32(t & 1).., nibble t / 2; qh bytes 32h..,
// bits 2t; scales 8h + 2t (values 0..16 of the unit, group 0) and 8h + 2t + 1 (group 1).
fn ws_q6_k(b: u32, s: u32, doff: u32) -> vec4<f32> {
    let d = half_d(doff, b);
    let v = q[b * 13u + 12u];
    let i = (s >> 2u) * 8u + (s & 3u) * 2u;
    let lo = bitcast<i32>(vbyte(v, i) << 24u) >> 24u;
    let hi = bitcast<i32>(vbyte(v, i + 1u) << 24u) >> 24u;
    return vec4<f32>(d * f32(lo), d * f32(hi), 0.0, 0.0);
}
fn ld_q6_k(b: u32, s: u32, g: u32) -> QV {
    let h = s >> 2u;
    return QV(q[b * 13u + 4u * h + 2u * (s & 1u) + g], q[b * 13u + 8u + 2u * h + g]);
}
fn wq_q6_k(v: QV, s: u32, g: u32, j: u32, sc: vec4<f32>) -> vec4<f32> {
    let t = s & 3u;
    let lo = (vec4<u32>(v.a[j]) >> (SH4 + (t >> 1u) * 4u)) & vec4<u32>(15u);
    let hi = (vec4<u32>(v.b[j]) >> (SH4 + 2u * t)) & vec4<u32>(3u);
    let x = vec4<f32>(vec4<i32>(lo | (hi << vec4<u32>(4u))) - vec4<i32>(32));
    return select(sc.x, sc.y, g == 1u) * x;
}
