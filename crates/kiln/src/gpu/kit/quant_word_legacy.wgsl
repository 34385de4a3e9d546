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

