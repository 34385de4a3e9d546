//! The emulated kernel's stand-ins for the cooperative ops (plain WGSL over workgroup memory), so
//! that everything around them runs on adapters without cooperative matrices (e.g. lavapipe).

use super::config::Stage;

/// Plain-WGSL stand-ins for the cooperative ops (`emulate`): a fragment is `(offset, row stride,
/// row-major)` into `sa`/`sb`, read when multiplied; an accumulator is the `s*s/sg` elements
/// `lane + sg*q` (row-major) of the tile that this invocation owns. Same memory layouts and the same
/// row-/column-major meaning as coopLoadT/coopLoad, so everything around them is tested.
pub(super) fn emulation(s: u32, sg: u32, stage: Stage) -> String {
    let e = s * s / sg;
    let half = |arr: &str| match stage {
        Stage::H1 => format!("f32({arr}[i])"),
        Stage::H4 => format!("f32({arr}[i >> 2u][i & 3u])"),
    };
    let (ha, hb) = (half("sa"), half("sb"));
    format!(
        "
fn emu_sa(i: u32) -> f32 {{
    return {ha};
}}

fn emu_sb(i: u32) -> f32 {{
    return {hb};
}}

fn emu_at(d: vec3<u32>, r: u32, c: u32) -> u32 {{
    return select(d.x + c * d.y + r, d.x + r * d.y + c, d.z == 1u);
}}

fn emu_mma(a: vec3<u32>, b: vec3<u32>, c: array<f32, {e}>, lane: u32) -> array<f32, {e}> {{
    var r = c;
    // Trip counts from parameters (p.lane_elems = {e}, p.frag = {s}): software adapters would unroll
    // constant ones at every call site and take long to compile.
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        let row = x / {s}u;
        let col = x % {s}u;
        var acc = r[q];
        for (var k = 0u; k < p.frag; k++) {{
            acc += emu_sa(emu_at(a, row, k)) * emu_sb(emu_at(b, k, col));
        }}
        r[q] = acc;
    }}
    return r;
}}

fn emu_store(c: array<f32, {e}>, off: u32, ld: u32, lane: u32) {{
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        sc[off + (x / {s}u) * ld + x % {s}u] = c[q];
    }}
}}
"
    )
}
