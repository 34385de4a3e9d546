// Units (units.wgsl) of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS. Every unit
// is 32 consecutive values of a row (pos = 32u, runs 0..16 and 16..32), read by words (these
// blocks are word aligned but not all 16-byte aligned). load_* puts each value of runs 0 and 1 as
// one byte of w.a and w.b (the format's fields combined: nibble, fifth bit, high bit), so that q_*
// is a byte unpacked under 2^23 minus the format's offset; d and m hold run 0's and run 1's scale
// and min (value = d q - m: m is minus ggml's min for Q4_1/Q5_1). IQ4 values index a table.
// Each follows ggml's dequantize_row_*.
fn qv4(i: u32) -> vec4<u32> { return vec4<u32>(qw(i), qw(i + 1u), qw(i + 2u), qw(i + 3u)); }
// Bits 0..3 of h to bit 0 of bytes 0..3.
fn spread4(h: u32) -> u32 { return ((h & 15u) * 0x00204081u) & 0x01010101u; }
// Bits s.. s + 16 of h to bit 0 of the 16 bytes of a vector.
fn spread16(h: u32, s: u32) -> vec4<u32> {
    return vec4<u32>(spread4(h >> s), spread4(h >> (s + 4u)), spread4(h >> (s + 8u)), spread4(h >> (s + 12u)));
}
// Byte k of the words from word i on.
fn qbyte(i: u32, k: u32) -> u32 { return (qw(i + (k >> 2u)) >> (8u * (k & 3u))) & 255u; }
fn pos32(u: u32) -> u32 { return u * 32u; }
fn off16(r: u32) -> u32 { return r * 16u; }
fn run_byte(w: Unit, r: u32, j: u32) -> vec4<f32> { return big(select(w.a[j], w.b[j], r == 1u), 0u, 255u); }
const LO4 = vec4<u32>(0x0f0f0f0fu);

// Q4_1: 5 words a block: d and m, then 16 bytes of nibbles (values 0..16 low, 16..32 high).
fn pos_q4_1(u: u32) -> u32 { return pos32(u); }
fn off_q4_1(r: u32) -> u32 { return off16(r); }
fn load_q4_1(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = (row * units + u) * 5u;
    let dm = unpack2x16float(qw(b));
    let v = qv4(b + 1u);
    return Unit(v & LO4, (v >> vec4<u32>(4u)) & LO4, vec4<u32>(), vec4<f32>(dm.x), vec4<f32>(-dm.y));
}
fn q_q4_1(w: Unit, r: u32, j: u32) -> vec4<f32> { return run_byte(w, r, j) - 8388608.0; }

// Q5_0: 5 words a block (d moved out): qh (value i's fifth bit is bit i), then the nibbles.
fn pos_q5_0(u: u32) -> u32 { return pos32(u); }
fn off_q5_0(r: u32) -> u32 { return off16(r); }
fn load_q5_0(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let bl = row * units + u;
    let qh = qw(bl * 5u);
    let v = qv4(bl * 5u + 1u);
    let a = (v & LO4) | (spread16(qh, 0u) << vec4<u32>(4u));
    let c = ((v >> vec4<u32>(4u)) & LO4) | (spread16(qh, 16u) << vec4<u32>(4u));
    return Unit(a, c, vec4<u32>(), vec4<f32>(half_d(doff, bl)), vec4<f32>());
}
fn q_q5_0(w: Unit, r: u32, j: u32) -> vec4<f32> { return run_byte(w, r, j) - 8388624.0; }

// Q5_1: 6 words a block: d and m, qh, the nibbles.
fn pos_q5_1(u: u32) -> u32 { return pos32(u); }
fn off_q5_1(r: u32) -> u32 { return off16(r); }
fn load_q5_1(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = (row * units + u) * 6u;
    let dm = unpack2x16float(qw(b));
    let qh = qw(b + 1u);
    let v = qv4(b + 2u);
    let a = (v & LO4) | (spread16(qh, 0u) << vec4<u32>(4u));
    let c = ((v >> vec4<u32>(4u)) & LO4) | (spread16(qh, 16u) << vec4<u32>(4u));
    return Unit(a, c, vec4<u32>(), vec4<f32>(dm.x), vec4<f32>(-dm.y));
}
fn q_q5_1(w: Unit, r: u32, j: u32) -> vec4<f32> { return run_byte(w, r, j) - 8388608.0; }

// Q2_K: 21 words a block: 16 scale bytes (low nibble scale, high nibble min, one per 16 values),
// 64 bytes of 2-bit values, d and dmin. Unit s (0..8) = half h = s / 4, shift 2 (s % 4): run r
// is bytes 32h + 16r.. of the values, scale byte 2s + r.
fn pos_q2_k(u: u32) -> u32 { return pos32(u); }
fn off_q2_k(r: u32) -> u32 { return off16(r); }
fn load_q2_k(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = (row * (units >> 3u) + (u >> 3u)) * 21u;
    let s = u & 7u;
    let dm = unpack2x16float(qw(b + 20u));
    let sh = vec4<u32>(2u * (s & 3u));
    let m3 = vec4<u32>(0x03030303u);
    let a = (qv4(b + 4u + 8u * (s >> 2u)) >> sh) & m3;
    let c = (qv4(b + 8u + 8u * (s >> 2u)) >> sh) & m3;
    let sc = qw(b + (s >> 1u)) >> (16u * (s & 1u));
    let s0 = sc & 255u;
    let s1 = (sc >> 8u) & 255u;
    let d = dm.x * vec2<f32>(f32(s0 & 15u), f32(s1 & 15u));
    let m = dm.y * vec2<f32>(f32(s0 >> 4u), f32(s1 >> 4u));
    return Unit(a, c, vec4<u32>(), vec4<f32>(d, 0.0, 0.0), vec4<f32>(m, 0.0, 0.0));
}
fn q_q2_k(w: Unit, r: u32, j: u32) -> vec4<f32> { return run_byte(w, r, j) - 8388608.0; }

// Q3_K: 27 words a block (d moved out): hmask (8 words), 2-bit values (16), 12 scale bytes (3).
// Unit s (0..8) = half h = s / 4, j = s % 4: run r is value bytes 32h + 16r.. at shift 2j with
// hmask bytes 16r.. bit 4h + j (set: + 0, clear: - 4), 6-bit scale 2s + r (offset 32).
fn pos_q3_k(u: u32) -> u32 { return pos32(u); }
fn off_q3_k(r: u32) -> u32 { return off16(r); }
fn q3_scale(b: u32, is: u32) -> f32 {
    let lo = (qbyte(b + 24u, is & 7u) >> (4u * (is >> 3u))) & 15u;
    let hi = (qbyte(b + 24u, 8u + (is & 3u)) >> (2u * (is >> 2u))) & 3u;
    return f32(i32(lo | (hi << 4u)) - 32);
}
fn load_q3_k(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let bl = row * (units >> 3u) + (u >> 3u);
    let b = bl * 27u;
    let s = u & 7u;
    let h = s >> 2u;
    let sh = vec4<u32>(2u * (s & 3u));
    let hs = vec4<u32>(4u * h + (s & 3u));
    let m3 = vec4<u32>(0x03030303u);
    let m1 = vec4<u32>(0x01010101u);
    let a = ((qv4(b + 8u + 8u * h) >> sh) & m3) | (((qv4(b) >> hs) & m1) << vec4<u32>(2u));
    let c = ((qv4(b + 12u + 8u * h) >> sh) & m3) | (((qv4(b + 4u) >> hs) & m1) << vec4<u32>(2u));
    let d = half_d(doff, bl);
    return Unit(a, c, vec4<u32>(), vec4<f32>(d * q3_scale(b, 2u * s), d * q3_scale(b, 2u * s + 1u), 0.0, 0.0), vec4<f32>());
}
fn q_q3_k(w: Unit, r: u32, j: u32) -> vec4<f32> { return run_byte(w, r, j) - 8388612.0; }

// Q5_K: 44 words a block: d and dmin, 12 bytes of 6-bit scales and mins (get_scale_min_k4), qh
// (8 words), nibbles (32 words). Unit s (0..8): nibble bytes 32 (s / 2).., low nibbles for even
// s, fifth bit s of qh bytes 0.. (run 0) and 16.. (run 1).
fn pos_q5_k(u: u32) -> u32 { return pos32(u); }
fn off_q5_k(r: u32) -> u32 { return off16(r); }
fn load_q5_k(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = (row * (units >> 3u) + (u >> 3u)) * 44u;
    let s = u & 7u;
    let dm = unpack2x16float(qw(b));
    let ns = vec4<u32>(4u * (s & 1u));
    let hs = vec4<u32>(s);
    let m1 = vec4<u32>(0x01010101u);
    let q0 = b + 12u + 8u * (s >> 1u);
    let a = ((qv4(q0) >> ns) & LO4) | (((qv4(b + 4u) >> hs) & m1) << vec4<u32>(4u));
    let c = ((qv4(q0 + 4u) >> ns) & LO4) | (((qv4(b + 8u) >> hs) & m1) << vec4<u32>(4u));
    var sc: u32;
    var mn: u32;
    if (s < 4u) {
        sc = qbyte(b + 1u, s) & 63u;
        mn = qbyte(b + 1u, s + 4u) & 63u;
    } else {
        sc = (qbyte(b + 1u, s + 4u) & 15u) | ((qbyte(b + 1u, s - 4u) >> 6u) << 4u);
        mn = (qbyte(b + 1u, s + 4u) >> 4u) | ((qbyte(b + 1u, s) >> 6u) << 4u);
    }
    return Unit(a, c, vec4<u32>(), vec4<f32>(dm.x * f32(sc)), vec4<f32>(dm.y * f32(mn)));
}
fn q_q5_k(w: Unit, r: u32, j: u32) -> vec4<f32> { return run_byte(w, r, j) - 8388608.0; }

// IQ4_NL and IQ4_XS: nibbles index ggml's kvalues_iq4nl.
var<private> KV_IQ4: array<f32, 16> = array<f32, 16>(
    -127.0, -104.0, -83.0, -65.0, -49.0, -35.0, -22.0, -10.0, 1.0, 13.0, 25.0, 38.0, 53.0, 69.0, 89.0, 113.0);
fn iq4(w: u32) -> vec4<f32> {
    return vec4<f32>(KV_IQ4[w & 15u], KV_IQ4[(w >> 8u) & 15u], KV_IQ4[(w >> 16u) & 15u], KV_IQ4[(w >> 24u) & 15u]);
}

// IQ4_NL: 4 words a block (d moved out), nibbles as Q4_0's.
fn pos_iq4_nl(u: u32) -> u32 { return pos32(u); }
fn off_iq4_nl(r: u32) -> u32 { return off16(r); }
fn load_iq4_nl(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let bl = row * units + u;
    let v = qv4(bl * 4u);
    return Unit(v & LO4, (v >> vec4<u32>(4u)) & LO4, vec4<u32>(), vec4<f32>(half_d(doff, bl)), vec4<f32>());
}
fn q_iq4_nl(w: Unit, r: u32, j: u32) -> vec4<f32> { return iq4(select(w.a[j], w.b[j], r == 1u)); }

// IQ4_XS: 34 words a block: d and scales_h (2 bits of sub-block s at bit 2s), scales_l (4 bits
// at bit 4s), then 16 bytes of nibbles a sub-block; sub-block scale d (ls - 32).
fn pos_iq4_xs(u: u32) -> u32 { return pos32(u); }
fn off_iq4_xs(r: u32) -> u32 { return off16(r); }
fn load_iq4_xs(row: u32, u: u32, units: u32, doff: u32) -> Unit {
    let b = (row * (units >> 3u) + (u >> 3u)) * 34u;
    let s = u & 7u;
    let w0 = qw(b);
    let ls = ((qw(b + 1u) >> (4u * s)) & 15u) | (((w0 >> (16u + 2u * s)) & 3u) << 4u);
    let d = unpack2x16float(w0).x * f32(i32(ls) - 32);
    let v = qv4(b + 2u + 4u * s);
    return Unit(v & LO4, (v >> vec4<u32>(4u)) & LO4, vec4<u32>(), vec4<f32>(d), vec4<f32>());
}
fn q_iq4_xs(w: Unit, r: u32, j: u32) -> vec4<f32> { return iq4(select(w.a[j], w.b[j], r == 1u)); }
