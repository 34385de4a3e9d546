// The integer-dot view of the units of quant_units.wgsl (matvec/quant_i8.wgsl): qi_*(w, r, j) packs
// values 4j.. 4j + 4 of run r as four signed bytes for dot4I8Packed, the format's integers u with
// value = d[r] (u - o) - m[r] (o_* the format's offset: 0 for Q8_0, whose u are signed, and Q4_K,
// which has mins; 8 for Q4_0; 32 for Q6_K). idot takes four such words against a run's two planes
// of x (matvec/qrun.wgsl), for both integer-dot kernels (quant_i8.wgsl, quant_i8_stream.wgsl).
fn qi_q8_0(w: Unit, r: u32, j: u32) -> u32 { return select(w.a[j], w.b[j], r == 1u); }
const O_Q8_0 = 0.0;
fn qi_q4_0(w: Unit, r: u32, j: u32) -> u32 { return (w.a[j] >> (r * 4u)) & 0x0f0f0f0fu; }
const O_Q4_0 = 8.0;
fn qi_q4_k(w: Unit, r: u32, j: u32) -> u32 {
    return (select(w.a[j], w.b[j], (r & 1u) == 1u) >> ((r >> 1u) * 4u)) & 0x0f0f0f0fu;
}
const O_Q4_K = 0.0;
fn qi_q6_k(w: Unit, r: u32, j: u32) -> u32 {
    let lo = (select(w.a[j], w.b[j], (r & 1u) == 1u) >> ((r >> 1u) * 4u)) & 0x0f0f0f0fu;
    return lo | (((w.c[j] >> (2u * r)) & 0x03030303u) << 4u);
}
const O_Q6_K = 32.0;

// 256 sum(u hi) + sum(u lo) of the four words of u and a run's two planes, as f32.
fn idot(u: vec4<u32>, h: vec4<u32>, l: vec4<u32>) -> f32 {
    let hi = dot4I8Packed(u.x, h.x) + dot4I8Packed(u.y, h.y) + dot4I8Packed(u.z, h.z) + dot4I8Packed(u.w, h.w);
    let lo = dot4I8Packed(u.x, l.x) + dot4I8Packed(u.y, l.y) + dot4I8Packed(u.z, l.z) + dot4I8Packed(u.w, l.w);
    return f32(hi * 256 + lo);
}
