// Units (quant_units.wgsl) of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL and IQ4_XS. Every unit
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

