//! What both few-row products share (`dense.rs`, `quant.rs`): the lanes per set, and the emitter
//! pieces: where each row of x starts and its accumulators, RMSNorm's per-row scale, the sum over a
//! lane set, and the stores of the outputs with the addend.

use crate::gpu::pointwise::Pro;
use crate::DType;
use std::fmt::Write;

/// Lanes per set (32 to 256) for rows of `units` units and `c` weight rows a set: a lane takes
/// about `per_lane` units, then lanes double (fewer sets, more workgroups) while the grid over `n`
/// weight rows has under ~2 workgroups per SM of a large GPU and every lane keeps a unit.
pub(super) fn lanes(units: usize, per_lane: usize, n: usize, c: u32) -> u32 {
    let wgs = |ln: usize| n.div_ceil(256 / ln * c as usize);
    let mut ln = (units / per_lane).max(1).next_power_of_two().clamp(32, 256);
    while ln < 256 && 2 * ln <= units && wgs(ln) < 264 {
        ln *= 2;
    }
    ln as u32
}

/// Per row `r` of x its first unit `xb{r}`, and an accumulator `acc{j}_{r}` per weight row `j`.
pub(super) fn rows_setup(setup: &mut String, mt: u32, c: u32) {
    for r in 0..mt {
        writeln!(setup, "    let xb{r} = p.x_off + min(m0 + {r}u, m - 1u) * p.x_stride;").unwrap();
        for j in 0..c {
            writeln!(setup, "    var acc{j}_{r} = 0.0;").unwrap();
        }
    }
}

/// RMSNorm's scale `scale{r}` of each row of x: `sum_loop` adds the squares of this invocation's
/// values into `ss{r}`, then they are summed: with subgroupAdd (`sg`: `sgi`, `sgs` in scope), each
/// subgroup's sum at its first lane in workgroup memory, one barrier, and every invocation adds the
/// 256 / `sgs` of them (as `lane_sum`, subgroups are runs of consecutive invocations); else by a
/// tree in workgroup memory (eight barriers). The products wait for this before their first FMA.
pub(super) fn norm_scale(setup: &mut String, mt: u32, sum_loop: &str, sg: bool) {
    // Each workgroup takes the sum of squares of its rows itself (k values from cache).
    for r in 0..mt {
        writeln!(setup, "    var ss{r} = 0.0;").unwrap();
    }
    *setup += sum_loop;
    if sg {
        for r in 0..mt {
            writeln!(setup, "    let sq{r} = subgroupAdd(ss{r});").unwrap();
        }
        *setup += "    if (sgi == 0u) {\n";
        for r in 0..mt {
            writeln!(setup, "        red[{r}u * 256u + tid] = sq{r};").unwrap();
        }
        *setup += "    }\n    workgroupBarrier();\n";
        for r in 0..mt {
            writeln!(setup, "    var tot{r} = 0.0;").unwrap();
        }
        *setup += "    for (var i = 0u; i < 256u; i += sgs) {\n";
        for r in 0..mt {
            writeln!(setup, "        tot{r} += red[{r}u * 256u + i];").unwrap();
        }
        *setup += "    }\n";
        for r in 0..mt {
            writeln!(setup, "    let scale{r} = inverseSqrt(tot{r} / f32(k) + p.eps);").unwrap();
        }
        *setup += "    workgroupBarrier();\n";
        return;
    }
    for r in 0..mt {
        writeln!(setup, "    red[{r}u * 256u + tid] = ss{r};").unwrap();
    }
    *setup += "    workgroupBarrier();\n    for (var s = 128u; s > 0u; s >>= 1u) {\n        if (tid < s) {\n";
    for r in 0..mt {
        writeln!(setup, "            red[{r}u * 256u + tid] += red[{r}u * 256u + tid + s];").unwrap();
    }
    *setup += "        }\n        workgroupBarrier();\n    }\n";
    for r in 0..mt {
        writeln!(setup, "    let scale{r} = inverseSqrt(red[{r}u * 256u] / f32(k) + p.eps);").unwrap();
    }
    *setup += "    workgroupBarrier();\n";
}

/// The `c * mt` accumulators of each lane set of `ln` lanes summed into `t{slot}` of its lane 0:
/// with subgroupAdd first (`sg`), then workgroup memory, or by a tree in workgroup memory.
pub(super) fn lane_sum(mt: u32, c: u32, ln: u32, sg: bool) -> String {
    let mut reduce = String::new();
    let slots = (0..c * mt).collect::<Vec<_>>();
    let acc = |slot: u32| format!("acc{}_{}", slot / mt, slot % mt);
    if sg {
        for &sl in &slots {
            writeln!(reduce, "    var t{sl} = subgroupAdd({});", acc(sl)).unwrap();
        }
        writeln!(reduce, "    if (sgi == 0u) {{").unwrap();
        for &sl in &slots {
            writeln!(reduce, "        red[{sl}u * 256u + tid] = t{sl};").unwrap();
        }
        writeln!(reduce, "    }}\n    workgroupBarrier();\n    if (lane == 0u) {{").unwrap();
        writeln!(reduce, "        for (var i = sgs; i < {ln}u; i += sgs) {{").unwrap();
        for &sl in &slots {
            writeln!(reduce, "            t{sl} += red[{sl}u * 256u + tid + i];").unwrap();
        }
        writeln!(reduce, "        }}\n    }}").unwrap();
    } else {
        for &sl in &slots {
            writeln!(reduce, "    red[{sl}u * 256u + tid] = {};", acc(sl)).unwrap();
        }
        writeln!(
            reduce,
            "    workgroupBarrier();\n    for (var h = {}u; h > 0u; h >>= 1u) {{\n        if (lane < h) {{",
            ln / 2
        )
        .unwrap();
        for &sl in &slots {
            writeln!(reduce, "            red[{sl}u * 256u + tid] += red[{sl}u * 256u + tid + h];").unwrap();
        }
        writeln!(reduce, "        }}\n        workgroupBarrier();\n    }}").unwrap();
        for &sl in &slots {
            writeln!(reduce, "    let t{sl} = red[{sl}u * 256u + tid];").unwrap();
        }
    }
    reduce
}

/// How the stores read the addend of an f32 output: none, from an `array<f32>`, or from the
/// `array<u32>` words that hold f32 values. (16-bit outputs read it as words of two values.)
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AddRead {
    None,
    F32,
    Bits,
}

/// The stores of output (m0 + r, col0 + j) at element (m0 + r) * n + col0 + j: the sum, scaled by
/// the row's norm (`rms`), plus the addend at element p.add_off + (m0 + r) * p.add_stride + col0 + j;
/// `packed` 16-bit outputs as words of two columns (c is even).
pub(super) fn stores(mt: u32, c: u32, rms: bool, packed: Option<DType>, add: AddRead) -> String {
    stores_at(mt, c, rms, packed, add, ("n", ""))
}

/// [`stores`] into rows `dst.0` elements apart from element `dst.1` on (an expression starting
/// with " + ", or empty): a column range of a wider output.
pub(super) fn stores_at(mt: u32, c: u32, rms: bool, packed: Option<DType>, add: AddRead, dst: (&str, &str)) -> String {
    let (stride, off) = dst;
    let mut finish = String::new();
    let at = |r: u32, j: u32| format!("p.add_off + (m0 + {r}u) * p.add_stride + col0 + {j}u");
    let scaled = |s: u32, r: u32| if rms { format!("t{s} * scale{r}") } else { format!("t{s}") };
    for r in 0..mt {
        if let Some(dt) = packed {
            let pack = if dt == DType::F16 {
                "pack2x16float(vec2<f32>(a, b))"
            } else {
                "bf16_bits(a) | (bf16_bits(b) << 16u)"
            };
            for j in (0..c).step_by(2) {
                let (s0, s1) = (j * mt + r, (j + 1) * mt + r);
                let add = if add == AddRead::None {
                    String::new()
                } else if dt == DType::F16 {
                    format!("let e = unpack2x16float(addend[({}) / 2u]); a += e.x; b += e.y; ", at(r, j))
                } else {
                    format!(
                        "let e = addend[({}) / 2u]; a += bitcast<f32>(e << 16u); b += bitcast<f32>(e & 0xffff0000u); ",
                        at(r, j)
                    )
                };
                writeln!(
                    finish,
                    "        if (col0 + {j}u < n && m0 + {r}u < m) {{ var a = {}; var b = {}; {add}\
                     dst[((m0 + {r}u) * {stride}{off} + col0 + {j}u) / 2u] = {pack}; }}",
                    scaled(s0, r),
                    scaled(s1, r)
                )
                .unwrap();
            }
        } else {
            for j in 0..c {
                let add = match add {
                    AddRead::None => String::new(),
                    AddRead::F32 => format!(" + addend[{}]", at(r, j)),
                    AddRead::Bits => format!(" + bitcast<f32>(addend[{}])", at(r, j)),
                };
                writeln!(
                    finish,
                    "        if (col0 + {j}u < n && m0 + {r}u < m) {{ dst[(m0 + {r}u) * {stride}{off} + col0 + {j}u] = {}{add}; }}",
                    scaled(j * mt + r, r)
                )
                .unwrap();
            }
        }
    }
    finish
}

/// The template's `SUM`: how a lane set is summed.
pub(super) fn sum_name(sg: bool) -> &'static str {
    if sg {
        "subgroupAdd, then workgroup memory"
    } else {
        "a tree in workgroup memory"
    }
}

/// The template's `SG_ARGS`: the subgroup builtins the entry point takes with `sg`.
pub(super) fn sg_args(sg: bool) -> &'static str {
    if sg {
        ",\n        @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_size) sgs: u32"
    } else {
        ""
    }
}

/// `xv` (4 values of x as f32) for x's dtype and `xin` (the same through the prologue).
pub(super) fn x_loaders(xdt: DType, pro: Pro) -> String {
    let xload = match xdt {
        DType::F32 => "fn xv(e: u32, i: u32) -> vec4<f32> { return bitcast<vec4<f32>>(x[e / 4u + i]); }",
        DType::F16 => {
            "fn xv(e: u32, i: u32) -> vec4<f32> { let v = x[e / 8u + i / 2u]; let o = (i & 1u) * 2u; \
             return vec4<f32>(unpack2x16float(v[o]), unpack2x16float(v[o + 1u])); }"
        }
        _ => {
            "fn bf2(w: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }\n\
             fn xv(e: u32, i: u32) -> vec4<f32> { let v = x[e / 8u + i / 2u]; let o = (i & 1u) * 2u; \
             return vec4<f32>(bf2(v[o]), bf2(v[o + 1u])); }"
        }
    };
    let xin = match pro {
        Pro::Plain => "fn xin(b: u32, e: u32, i: u32) -> vec4<f32> { return xv(b + e, i); }".to_string(),
        Pro::SiluMul => "fn xin(b: u32, e: u32, i: u32) -> vec4<f32> { let g = xv(b + e, i); \
             return g / (vec4<f32>(1.0) + exp(-g)) * xv(b + p.up_off + e, i); }"
            .to_string(),
        // The norm weight read like x, from its own buffer and offset p.nw_off.
        Pro::RmsNorm => {
            let start = xload.find("fn xv(").expect("xv is defined");
            let nwv = xload[start..].replace("fn xv(", "fn nwv(").replace("x[", "nw[");
            format!(
                "{nwv}\nfn xin(b: u32, e: u32, i: u32) -> vec4<f32> {{ return xv(b + e, i) * nwv(p.nw_off + e, i); }}"
            )
        }
    };
    format!("{xload}\n{xin}")
}
