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

