//! Plain-WGSL stand-ins for the cooperative ops (as in the matmul's emulation), which let the
//! conformance tests run the kernel's layouts and passes on adapters without cooperative matrices.
//! A fragment is `(half index, row stride, row-major)` into a staged tile; an accumulator is the
//! `s*s/sg` elements `lane + sg*q` (row-major) of its tile that this invocation owns.

use super::config::Config;

/// The stand-ins (`EMU`): the two products (`emu_mma_qk`: queries from `sq`, keys from `sk`;
/// `emu_mma_pv`: probabilities from `sk`, values from `sv`) and an accumulator's store to and load
/// from `ss`. The kernel's accumulators are arrays of these (`s_acc`, `o_acc`), walked by loops with
/// one call site each where the cooperative kernel has its fragments unrolled: the emulated kernel
/// then compiles quickly.
///
/// llvmpipe (lavapipe) counts every loop iteration of an invocation against one limit (65535,
/// `LP_MAX_TGSI_LOOP_ITERATIONS`) and then leaves every loop at its first test: a product's sum over
/// its `s` terms is written out, so that a tile costs a few hundred iterations, not thousands.
pub(crate) fn functions(c: &Config) -> String {
    let (s, sg) = (c.s, c.sg);
    let e = s * s / sg;
    let rd = |arr: &str| {
        if c.unit == 4 {
            format!("fn emu_{arr}(i: u32) -> f32 {{ return f32({arr}[i >> 2u][i & 3u]); }}\n")
        } else {
            format!("fn emu_{arr}(i: u32) -> f32 {{ return f32({arr}[i]); }}\n")
        }
    };
    let mma = |name: &str, a: &str, b: &str| {
        let terms: String = (0..s)
            .map(|k| format!("        acc += emu_{a}(emu_at(a, row, {k}u)) * emu_{b}(emu_at(b, {k}u, col));\n"))
            .collect();
        format!(
            "fn emu_mma_{name}(a: vec3<u32>, b: vec3<u32>, c: array<f32, {e}>, lane: u32) -> array<f32, {e}> {{
    var r = c;
    // A trip count from parameters (p.lane_elems = {e}): software adapters would unroll a constant
    // one at every call site and take long to compile.
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        let row = x / {s}u;
        let col = x % {s}u;
        var acc = r[q];
{terms}        r[q] = acc;
    }}
    return r;
}}
"
        )
    };
    format!(
        "{}{}{}
fn emu_at(d: vec3<u32>, r: u32, c: u32) -> u32 {{
    return select(d.x + c * d.y + r, d.x + r * d.y + c, d.z == 1u);
}}

{}{}
fn emu_store(c: array<f32, {e}>, off: u32, ld: u32, lane: u32) {{
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        ss_wr(off + (x / {s}u) * ld + x % {s}u, c[q]);
    }}
}}

fn emu_load_c(off: u32, ld: u32, lane: u32) -> array<f32, {e}> {{
    var r = array<f32, {e}>();
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        r[q] = ss_rd(off + (x / {s}u) * ld + x % {s}u);
    }}
    return r;
}}
",
        rd("sq"),
        rd("sk"),
        rd("sv"),
        mma("qk", "sq", "sk"),
        mma("pv", "sk", "sv"),
    )
}
