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
