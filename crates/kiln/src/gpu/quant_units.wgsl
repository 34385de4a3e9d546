// The quantized matrix-vector kernel's view of a weight row (quant_matvec.wgsl): a row is a run of
// units, each one lane's work per step, read with one to three 16-byte loads. A unit's values are
// runs of 16 consecutive values of the row; run r of unit u starts at value pos_*(u) + off_*(r).
// load_*(row, u, units, doff) reads a unit's words and scales; q_*(w, r, j) gives values 4j.. 4j+4
// of run r as small integers (in f32), so that run r's dot with x is d[r] * sum(q x) - m[r] * sum(x)
// (the formats' own value = d * q - m, ggml's dequantize_row_*).
struct Unit { a: vec4<u32>, b: vec4<u32>, c: vec4<u32>, d: vec4<f32>, m: vec4<f32> }
fn qw(i: u32) -> u32 { return q[i >> 2u][i & 3u]; }
fn half_d(doff: u32, b: u32) -> f32 { return unpack2x16float(qw(doff + (b >> 1u)))[b & 1u]; }
fn vbyte(v: vec4<u32>, i: u32) -> u32 { return (v[i >> 2u] >> (8u * (i & 3u))) & 0xffu; }
const SH4 = vec4<u32>(0u, 8u, 16u, 24u);
// Nibbles (hi = 0: low ones) of the 4 bytes of word w.
fn nib(w: u32, hi: u32) -> vec4<f32> { return vec4<f32>((vec4<u32>(w) >> (SH4 + hi * 4u)) & vec4<u32>(15u)); }

// Q8_0: a unit is a block (32 values, two 16-byte vectors, runs 0..16 and 16..32); value = d * i8.
fn pos_q8_0(u: u32) -> u32 { return u * 32u; }
fn off_q8_0(r: u32) -> u32 { return r * 16u; }
fn load_q8_0(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = row * units + u;
    return Unit(q[b * 2u], q[b * 2u + 1u], vec4<u32>(), vec4<f32>(half_d(doff, b)), vec4<f32>());
}
fn q_q8_0(w: Unit, r: u32, j: u32) -> vec4<f32> {
    let v = select(w.a[j], w.b[j], r == 1u);
    let i = vec4<i32>(bitcast<i32>(v << 24u), bitcast<i32>(v << 16u), bitcast<i32>(v << 8u), bitcast<i32>(v));
    return vec4<f32>(i >> vec4<u32>(24u));
}

// Q4_0: a unit is a block (one vector; run 0 the low nibbles, run 1 the high ones); value =
// d * n - 8 d.
fn pos_q4_0(u: u32) -> u32 { return u * 32u; }
fn off_q4_0(r: u32) -> u32 { return r * 16u; }
fn load_q4_0(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = row * units + u;
    let d = half_d(doff, b);
    return Unit(q[b], vec4<u32>(), vec4<u32>(), vec4<f32>(d), vec4<f32>(8.0 * d));
}
fn q_q4_0(w: Unit, r: u32, j: u32) -> vec4<f32> { return nib(w.a[j], r); }

// Q4_K: unit u is nibble vector v = u % 8 of block u / 8 (vector 0 of a block holds d, dmin and the
// scales): its low nibbles are values 64 (v / 2) + 16 (v % 2).. of sub-block 2 (v / 2), its high
// ones the same 16 positions 32 further on, of the next sub-block; value = d sc n - dmin m.
fn pos_q4_k(u: u32) -> u32 { let v = u & 7u; return (u >> 3u) * 256u + (v >> 1u) * 64u + (v & 1u) * 16u; }
fn off_q4_k(r: u32) -> u32 { return r * 32u; }
fn load_q4_k(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = row * (units >> 3u) + (u >> 3u);
    let v = u & 7u;
    let h = q[b * 9u];
    let dm = unpack2x16float(h.x);
    // get_scale_min_k4 of sub-blocks s and s + 1.
    let s = (v >> 1u) * 2u;
    var sc: vec2<u32>;
    var mn: vec2<u32>;
    if (s < 4u) {
        sc = vec2<u32>(vbyte(h, 4u + s), vbyte(h, 5u + s)) & vec2<u32>(63u);
        mn = vec2<u32>(vbyte(h, 8u + s), vbyte(h, 9u + s)) & vec2<u32>(63u);
    } else {
        let lo = vec2<u32>(vbyte(h, 8u + s), vbyte(h, 9u + s));
        sc = (lo & vec2<u32>(15u)) | ((vec2<u32>(vbyte(h, s), vbyte(h, s + 1u)) >> vec2<u32>(6u)) << vec2<u32>(4u));
        mn = (lo >> vec2<u32>(4u)) | ((vec2<u32>(vbyte(h, 4u + s), vbyte(h, 5u + s)) >> vec2<u32>(6u)) << vec2<u32>(4u));
    }
    let d = dm.x * vec2<f32>(sc);
    let m = dm.y * vec2<f32>(mn);
    return Unit(q[b * 9u + 1u + v], vec4<u32>(), vec4<u32>(), vec4<f32>(d, 0.0, 0.0), vec4<f32>(m, 0.0, 0.0));
}
fn q_q4_k(w: Unit, r: u32, j: u32) -> vec4<f32> { return nib(w.a[j], r); }

// Q6_K: unit u is quarter t = u % 4 of block u / 4: half h = t / 2 (128 values), positions
// 16 (t % 2)..+16 of its four runs of 32 (ql vectors 4h + t % 2 and 4h + 2 + t % 2, qh vector
// 8 + 2h + t % 2, scales 8h + t % 2 + 2r); value = d sc (q - 32).
fn pos_q6_k(u: u32) -> u32 { let t = u & 3u; return (u >> 2u) * 256u + (t >> 1u) * 128u + (t & 1u) * 16u; }
fn off_q6_k(r: u32) -> u32 { return r * 32u; }
fn load_q6_k(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = row * (units >> 2u) + (u >> 2u);
    let t = u & 3u;
    let h = t >> 1u;
    let g = t & 1u;
    let sv = q[b * 13u + 12u];
    let i = 8u * h + g;
    let sc = vec4<u32>(vbyte(sv, i), vbyte(sv, i + 2u), vbyte(sv, i + 4u), vbyte(sv, i + 6u));
    let d = half_d(doff, b) * vec4<f32>(bitcast<vec4<i32>>(sc << vec4<u32>(24u)) >> vec4<u32>(24u));
    return Unit(q[b * 13u + 4u * h + g], q[b * 13u + 4u * h + 2u + g], q[b * 13u + 8u + 2u * h + g], d, 32.0 * d);
}
fn q_q6_k(w: Unit, r: u32, j: u32) -> vec4<f32> {
    let lo = (vec4<u32>(select(w.a[j], w.b[j], (r & 1u) == 1u)) >> (SH4 + (r >> 1u) * 4u)) & vec4<u32>(15u);
    let hi = (vec4<u32>(w.c[j]) >> (SH4 + 2u * r)) & vec4<u32>(3u);
    return vec4<f32>(lo | (hi << vec4<u32>(4u)));
}
