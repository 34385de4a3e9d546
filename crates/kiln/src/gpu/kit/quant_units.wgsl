// The quantized matrix-vector kernel's view of a weight row (matvec/quant.wgsl): a row is a run of
// units, each one lane's work per step, read with one to three 16-byte loads. A unit's values are
// runs of 16 consecutive values of the row; run r of unit u starts at value pos_*(u) + off_*(r).
// load_*(row, u, units, doff) reads a unit's words and scales; q_*(w, r, j) gives values 4j.. 4j+4
// of run r as small integers (in f32), so that run r's dot with x is d[r] * sum(q x) - m[r] * sum(x)
// (the formats' own value = d * q - m, ggml's dequantize_row_*; m is 0 but for Q4_K).
// Integers become floats without conversion instructions (a quarter of the FP32 rate or less on
// GPUs): the bits are put under the exponent of 2^23 and 2^23 (plus the format's offset) is
// subtracted, exactly.
struct Unit { a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<f32>, m: vec4<f32> }
// A unit as loaded, before its scales are decoded: raw_*(row, u, units, doff) issues the loads,
// dec_*(w, row, u, units) makes the Unit, so a kernel may request the next unit's words before it
// works on this one (load_* is the two at once). Each format fills the fields it needs.
struct Raw { a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, h: vec4<u32>, s: u32 }
fn qw(i: u32) -> u32 { return q[i >> 2u][i & 3u]; }
// Block b's f16 scale: in the word of its pair (word doff + b / 2 of the scale section), half b % 2.
fn half_of(word: u32, b: u32) -> f32 { return unpack2x16float(word)[b & 1u]; }
fn half_d(doff: u32, b: u32) -> f32 { return half_of(qw(doff + (b >> 1u)), b); }
const SH4 = vec4<u32>(0u, 8u, 16u, 24u);
// 2^23 + the field (bits s.. of each byte of w, under mask) of the 4 bytes of w.
fn big(w: u32, s: u32, mask: u32) -> vec4<f32> {
    return bitcast<vec4<f32>>(((vec4<u32>(w) >> (SH4 + s)) & vec4<u32>(mask)) | vec4<u32>(0x4b000000u));
}

// Q8_0: a unit is a block (32 values, two 16-byte vectors, runs 0..16 and 16..32); value = d * i8.
fn pos_q8_0(u: u32) -> u32 { return u * 32u; }
fn off_q8_0(r: u32) -> u32 { return r * 16u; }
fn raw_q8_0(row: u32, u: u32, units: u32, doff: u32) -> Raw {
    let b = row * units + u;
    return Raw(q[b * 2u], q[b * 2u + 1u], vec4<u32>(), vec4<u32>(), qw(doff + (b >> 1u)));
}
fn dec_q8_0(w: Raw, row: u32, u: u32, units: u32) -> Unit {
    return Unit(w.a, w.b, vec4<u32>(), vec4<f32>(half_of(w.s, row * units + u)), vec4<f32>());
}
fn load_q8_0(row: u32, u: u32, units: u32, doff: u32) -> Unit { return dec_q8_0(raw_q8_0(row, u, units, doff), row, u, units); }
fn q_q8_0(w: Unit, r: u32, j: u32) -> vec4<f32> {
    // The i8 plus 128 as a u8, under 2^23.
    return big(select(w.a[j], w.b[j], r == 1u) ^ 0x80808080u, 0u, 255u) - 8388736.0;
}

// Q4_0: a unit is a block (one vector; run 0 the low nibbles, run 1 the high ones); value =
// d (n - 8).
fn pos_q4_0(u: u32) -> u32 { return u * 32u; }
fn off_q4_0(r: u32) -> u32 { return r * 16u; }
fn raw_q4_0(row: u32, u: u32, units: u32, doff: u32) -> Raw {
    let b = row * units + u;
    return Raw(q[b], vec4<u32>(), vec4<u32>(), vec4<u32>(), qw(doff + (b >> 1u)));
}
fn dec_q4_0(w: Raw, row: u32, u: u32, units: u32) -> Unit {
    return Unit(w.a, vec4<u32>(), vec4<u32>(), vec4<f32>(half_of(w.s, row * units + u)), vec4<f32>());
}
fn load_q4_0(row: u32, u: u32, units: u32, doff: u32) -> Unit { return dec_q4_0(raw_q4_0(row, u, units, doff), row, u, units); }
fn q_q4_0(w: Unit, r: u32, j: u32) -> vec4<f32> { return big(w.a[j], r * 4u, 15u) - 8388616.0; }

// Q4_K: unit u is nibble vectors 2c and 2c + 1 (c = u % 4) of block u / 4, 64 values (vector 0 of a
// block holds d, dmin and the 12 bytes of 6-bit scales and mins): low nibbles are values 64c.. of
// sub-block 2c (runs 0, 1), high nibbles values 64c + 32.. of sub-block 2c + 1 (runs 2, 3);
// value = d sc n - dmin m.
fn pos_q4_k(u: u32) -> u32 { return (u >> 2u) * 256u + (u & 3u) * 64u; }
fn off_q4_k(r: u32) -> u32 { return r * 16u; }
fn raw_q4_k(row: u32, u: u32, units: u32, doff: u32) -> Raw {
    let b = row * (units >> 2u) + (u >> 2u);
    let c = u & 3u;
    return Raw(q[b * 9u + 1u + 2u * c], q[b * 9u + 2u + 2u * c], vec4<u32>(), q[b * 9u], 0u);
}
fn dec_q4_k(w: Raw, row: u32, u: u32, units: u32) -> Unit {
    let c = u & 3u;
    let h = w.h;
    let dm = unpack2x16float(h.x);
    // get_scale_min_k4 of sub-blocks 2c and 2c + 1, two bytes at a time: scale bytes 4.. are h.y,
    // h.z, h.w.
    let sh = (c & 1u) * 16u;
    var sc: u32;
    var mn: u32;
    if (c < 2u) {
        sc = (h.y >> sh) & 0x3f3fu;
        mn = (h.z >> sh) & 0x3f3fu;
    } else {
        let lo = h.w >> sh;
        sc = (lo & 0x0f0fu) | ((h.y >> (sh + 2u)) & 0x3030u);
        mn = ((lo >> 4u) & 0x0f0fu) | ((h.z >> (sh + 2u)) & 0x3030u);
    }
    let d = dm.x * vec2<f32>(f32(sc & 255u), f32(sc >> 8u));
    let m = dm.y * vec2<f32>(f32(mn & 255u), f32(mn >> 8u));
    return Unit(w.a, w.b, vec4<u32>(), d.xxyy, m.xxyy);
}
fn load_q4_k(row: u32, u: u32, units: u32, doff: u32) -> Unit { return dec_q4_k(raw_q4_k(row, u, units, doff), row, u, units); }
fn q_q4_k(w: Unit, r: u32, j: u32) -> vec4<f32> {
    return big(select(w.a[j], w.b[j], (r & 1u) == 1u), (r >> 1u) * 4u, 15u) - 8388608.0;
}

// Q6_K: unit u is quarter t = u % 4 of block u / 4: half h = t / 2 (128 values), positions
// 16 (t % 2)..+16 of its four runs of 32 (ql vectors 4h + t % 2 and 4h + 2 + t % 2, qh vector
// 8 + 2h + t % 2, scales 8h + t % 2 + 2r); value = d sc (q - 32).
fn pos_q6_k(u: u32) -> u32 { let t = u & 3u; return (u >> 2u) * 256u + (t >> 1u) * 128u + (t & 1u) * 16u; }
fn off_q6_k(r: u32) -> u32 { return r * 32u; }
fn raw_q6_k(row: u32, u: u32, units: u32, doff: u32) -> Raw {
    let b = row * (units >> 2u) + (u >> 2u);
    let t = u & 3u;
    let h = t >> 1u;
    let g = t & 1u;
    return Raw(q[b * 13u + 4u * h + g], q[b * 13u + 4u * h + 2u + g], q[b * 13u + 8u + 2u * h + g], q[b * 13u + 12u],
        qw(doff + (b >> 1u)));
}
fn dec_q6_k(w: Raw, row: u32, u: u32, units: u32) -> Unit {
    let b = row * (units >> 2u) + (u >> 2u);
    let t = u & 3u;
    let h = t >> 1u;
    let g = t & 1u;
    // Scale bytes 8h + g + {0, 2} are in word 2h, + {4, 6} in word 2h + 1.
    let sv = w.h;
    let w0 = select(sv.x, sv.z, h == 1u);
    let w1 = select(sv.y, sv.w, h == 1u);
    let sc = vec4<u32>(w0, w0, w1, w1) >> (vec4<u32>(0u, 16u, 0u, 16u) + 8u * g);
    let d = half_of(w.s, b) * vec4<f32>(bitcast<vec4<i32>>(sc << vec4<u32>(24u)) >> vec4<u32>(24u));
    return Unit(w.a, w.b, w.c, d, vec4<f32>());
}
fn load_q6_k(row: u32, u: u32, units: u32, doff: u32) -> Unit { return dec_q6_k(raw_q6_k(row, u, units, doff), row, u, units); }
fn q_q6_k(w: Unit, r: u32, j: u32) -> vec4<f32> {
    let lo = (vec4<u32>(select(w.a[j], w.b[j], (r & 1u) == 1u)) >> (SH4 + (r >> 1u) * 4u)) & vec4<u32>(15u);
    let hi = (vec4<u32>(w.c[j]) >> (SH4 + 2u * r)) & vec4<u32>(3u);
    return bitcast<vec4<f32>>(lo | (hi << vec4<u32>(4u)) | vec4<u32>(0x4b000000u)) - 8388640.0;
}
