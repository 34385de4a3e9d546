//! Quantized weights on the GPU (kiln's planar layout, `quant/mod.rs`): dequantisation to a float
//! dtype (`dequant.wgsl`, `dequant_units.wgsl`) and the few-row matrix product that reads the packed
//! weight directly (`matvec.wgsl`); they read blocks through `formats.wgsl` or the units of
//! `units.wgsl` (16-byte loads) and `word_units.wgsl` (formats read by words).

use crate::gpu::pointwise::Pro;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::storage::At;
use crate::gpu::runtime::wgsl::{self, store_word, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::quant::QuantType;
use crate::{DType, Error, Result};
use std::fmt::Write;

const FORMATS: &str = include_str!("formats.wgsl");
const DEQUANT: &str = include_str!("dequant.wgsl");
const MATVEC: &str = include_str!("matvec.wgsl");
const UNITS: &str = include_str!("units.wgsl");
/// Units of the formats beyond Q8_0/Q4_0/Q4_K/Q6_K, and their dequantisation through them.
const WORD_UNITS: &str = include_str!("word_units.wgsl");
const DEQUANT_UNITS: &str = include_str!("dequant_units.wgsl");

/// Rows of x per matvec workgroup.
const ROWS: [u32; 4] = [1, 2, 4, 8];

/// The suffix of the format's WGSL functions.
fn fname(qt: QuantType) -> &'static str {
    match qt {
        QuantType::Q8_0 => "q8_0",
        QuantType::Q4_0 => "q4_0",
        QuantType::Q4K => "q4_k",
        QuantType::Q6K => "q6_k",
        QuantType::Q4_1 => "q4_1",
        QuantType::Q5_0 => "q5_0",
        QuantType::Q5_1 => "q5_1",
        QuantType::Q2K => "q2_k",
        QuantType::Q3K => "q3_k",
        QuantType::Q5K => "q5_k",
        QuantType::IQ4NL => "iq4_nl",
        QuantType::IQ4XS => "iq4_xs",
    }
}

/// Formats whose units are in `word_units.wgsl` (dequantised through them).
fn is_more(qt: QuantType) -> bool {
    !matches!(qt, QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4K | QuantType::Q6K)
}

params! {
    /// Dequantisation: values, and the word offset of the scale section (doff).
    struct DequantParams { n: u32, doff: u32 }
}

params! {
    /// The quantized product's parameters: m, n, k, the scales' word offset (doff), x's offset in
    /// values (a multiple of 16), the addend's row stride (0 for a bias) and offset in elements
    /// (even for 16-bit outputs), x's row stride, the norm weight's offset, eps, and the up half's
    /// offset from the gate (values, silu_mul).
    struct QuantMatvecParams {
        m: u32,
        n: u32,
        k: u32,
        doff: u32,
        x_off: u32,
        add_stride: u32,
        add_off: u32,
        x_stride: u32,
        nw_off: u32,
        eps: f32,
        up_off: u32,
    }
}

/// Word offset of the scale section (0 for Q4_K, which has none).
fn doff(qt: QuantType, blocks: usize) -> u32 {
    (blocks * qt.body_bytes() / 4) as u32
}

/// The dequantisation kernel of `qt` into `out` (f32, f16 or bf16).
pub(crate) fn dequant_source(qt: QuantType, out: DType) -> String {
    let (store, _) = store_word(out, 0);
    if is_more(qt) {
        let units = format!("{UNITS}\n{WORD_UNITS}");
        return render(
            DEQUANT_UNITS,
            &[
                ("QT", qt.name()),
                ("OUT", out.as_str()),
                ("PARAMS", &DequantParams::wgsl()),
                ("PRELUDE", PRELUDE),
                ("UNITS", &units),
                ("F", fname(qt)),
                ("STORE", &store),
            ],
        );
    }
    render(
        DEQUANT,
        &[
            ("QT", qt.name()),
            ("OUT", out.as_str()),
            ("PARAMS", &DequantParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("FORMATS", FORMATS),
            ("BS", &qt.block_elems().to_string()),
            ("F", fname(qt)),
            ("STORE", &store),
        ],
    )
}

/// One matrix-vector kernel: format, x dtype, output in x's dtype (else f32), rows of x per
/// workgroup, weight rows per lane set and lanes per set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Matvec {
    pub(crate) qt: QuantType,
    pub(crate) xdt: DType,
    pub(crate) out16: bool,
    pub(crate) mt: u32,
    pub(crate) c: u32,
    pub(crate) ln: u32,
    /// Lanes summed with subgroupAdd first (the adapter's subgroups are at most `ln` lanes).
    pub(crate) sg: bool,
    /// Adds a bias or residual (the last binding, in the output's dtype) before the store.
    pub(crate) add: bool,
    /// What the kernel does to x first (RMSNorm with the norm weight at binding 3, or silu_mul of
    /// the row's two halves; `decode/mod.rs`).
    pub(crate) pro: Pro,
}

/// Values per unit (one lane's step, `units.wgsl`) and runs of 16 values in it.
fn unit_shape(qt: QuantType) -> (u32, u32) {
    match qt {
        QuantType::Q4K | QuantType::Q6K => (64, 4),
        _ => (32, 2),
    }
}

/// A/B overrides of the matvec shape, read once: `KILN_QMV_C` (rows per set) and `KILN_QMV_LN`
/// (lanes per set), powers of two; `KILN_QMV_SG=0` (no subgroupAdd).
struct Overrides {
    c: Option<u32>,
    ln: Option<u32>,
    sg: bool,
}

fn overrides() -> &'static Overrides {
    static O: std::sync::OnceLock<Overrides> = std::sync::OnceLock::new();
    O.get_or_init(|| {
        let pow2 = |s: crate::settings::Setting| s.get().ok()?.parse().ok().filter(|v: &u32| v.is_power_of_two());
        Overrides {
            c: pow2(crate::settings::QMV_C),
            ln: pow2(crate::settings::QMV_LN),
            sg: crate::settings::QMV_SG.is_not_zero(),
        }
    })
}

impl Matvec {
    /// The kernel for an `(n, k)` weight and `m` rows of `xdt` input. Weight rows per set: 2 or 4
    /// (fewer as rows of x add accumulators); lanes per set: at most 4 units per lane, then more
    /// lanes (and fewer sets) while the grid has under ~2 workgroups per SM of a large GPU and
    /// every lane keeps a unit.
    pub(crate) fn for_problem(qt: QuantType, xdt: DType, n: usize, k: usize, m: usize, sg_max: Option<u32>) -> Matvec {
        let mt = (m.next_power_of_two() as u32).min(8);
        // Measured on an H100 at M = 1 (docs/PERFORMANCE.md, session 5): 4 rows for Q8_0 and
        // Q4_0, 2 for the k-quants, whose larger units (64 values) with 4 rows per lane cost
        // occupancy.
        let base = match qt {
            QuantType::Q4K | QuantType::Q6K => 2,
            _ => 4,
        };
        let c = overrides().c.unwrap_or(base).min(16 / mt).max(2);
        let units = k / unit_shape(qt).0 as usize;
        let wgs = |ln: usize| n.div_ceil(256 / ln * c as usize);
        let mut ln = (units / 4).max(1).next_power_of_two().clamp(32, 256);
        while ln < 256 && 2 * ln <= units && wgs(ln) < 264 {
            ln *= 2;
        }
        let ln = overrides().ln.map_or(ln as u32, |v| v.clamp(32, 256));
        let out16 = xdt != DType::F32 && n.is_multiple_of(2);
        let sg = sg_max.is_some_and(|s| s <= ln) && overrides().sg;
        Matvec { qt, xdt, out16, mt, c, ln, sg, add: false, pro: Pro::Plain }
    }

    pub(crate) fn key(&self) -> String {
        let o = if self.out16 { self.xdt } else { DType::F32 };
        let sg = if self.sg { ":sg" } else { "" };
        let add = if self.add { ":add" } else { "" };
        let pro = if self.pro == Pro::Plain { String::new() } else { format!(":{}", self.pro.name()) };
        format!("quant_matvec:{}:{}->{o}:r{}:c{}:l{}{sg}{add}{pro}", self.qt, self.xdt, self.mt, self.c, self.ln)
    }

    /// Weight rows (output columns) per workgroup.
    fn cols(&self) -> u32 {
        256 / self.ln * self.c
    }

    pub(crate) fn source(&self) -> String {
        let (mt, c, f) = (self.mt, self.c, fname(self.qt));
        let (uv, runs) = unit_shape(self.qt);
        let mins =
            matches!(self.qt, QuantType::Q4K | QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q2K | QuantType::Q5K);
        let (mut setup, mut body, mut reduce, mut finish) =
            (String::new(), String::new(), String::new(), String::new());
        for j in 0..c {
            writeln!(setup, "    let row{j} = min(col0 + {j}u, n - 1u);").unwrap();
            writeln!(body, "        let w{j} = load_{f}(row{j}, u, units, doff);").unwrap();
        }
        for r in 0..mt {
            writeln!(setup, "    let xb{r} = p.x_off + min(m0 + {r}u, m - 1u) * p.x_stride;").unwrap();
            for j in 0..c {
                writeln!(setup, "    var acc{j}_{r} = 0.0;").unwrap();
            }
        }
        if self.pro == Pro::RmsNorm {
            // Each workgroup takes the sum of squares of its rows itself (k values from cache).
            for r in 0..mt {
                writeln!(setup, "    var ss{r} = 0.0;").unwrap();
            }
            setup += "    for (var e = tid * 16u; e < k; e += 4096u) {\n";
            for r in 0..mt {
                for v in 0..4 {
                    writeln!(setup, "        let s{r}_{v} = xv(xb{r} + e, {v}u); ss{r} += dot(s{r}_{v}, s{r}_{v});")
                        .unwrap();
                }
            }
            setup += "    }\n";
            for r in 0..mt {
                writeln!(setup, "    red[{r}u * 256u + tid] = ss{r};").unwrap();
            }
            setup += "    workgroupBarrier();\n    for (var s = 128u; s > 0u; s >>= 1u) {\n        if (tid < s) {\n";
            for r in 0..mt {
                writeln!(setup, "            red[{r}u * 256u + tid] += red[{r}u * 256u + tid + s];").unwrap();
            }
            setup += "        }\n        workgroupBarrier();\n    }\n";
            for r in 0..mt {
                writeln!(setup, "    let scale{r} = inverseSqrt(red[{r}u * 256u] / f32(k) + p.eps);").unwrap();
            }
            setup += "    workgroupBarrier();\n";
        }
        for i in 0..runs {
            for r in 0..mt {
                for v in 0..4 {
                    writeln!(body, "        let x{i}_{r}_{v} = xin(xb{r}, pos + off_{f}({i}u), {v}u);").unwrap();
                }
                if mins {
                    writeln!(
                        body,
                        "        let sx{i}_{r} = dot(x{i}_{r}_0 + x{i}_{r}_1 + x{i}_{r}_2 + x{i}_{r}_3, vec4<f32>(1.0));"
                    )
                    .unwrap();
                }
            }
            for j in 0..c {
                for v in 0..4 {
                    writeln!(body, "        let q{j}_{i}_{v} = q_{f}(w{j}, {i}u, {v}u);").unwrap();
                }
                for r in 0..mt {
                    let dots =
                        (0..4).map(|v| format!("dot(q{j}_{i}_{v}, x{i}_{r}_{v})")).collect::<Vec<_>>().join(" + ");
                    let min = if mins { format!(" - w{j}.m[{i}] * sx{i}_{r}") } else { String::new() };
                    writeln!(body, "        acc{j}_{r} += w{j}.d[{i}] * ({dots}){min};").unwrap();
                }
            }
        }
        // The set's lanes summed into t{slot} of its lane 0.
        let slots = (0..c * mt).collect::<Vec<_>>();
        let acc = |slot: u32| format!("acc{}_{}", slot / mt, slot % mt);
        if self.sg {
            for &sl in &slots {
                writeln!(reduce, "    var t{sl} = subgroupAdd({});", acc(sl)).unwrap();
            }
            writeln!(reduce, "    if (sgi == 0u) {{").unwrap();
            for &sl in &slots {
                writeln!(reduce, "        red[{sl}u * 256u + tid] = t{sl};").unwrap();
            }
            writeln!(reduce, "    }}\n    workgroupBarrier();\n    if (lane == 0u) {{").unwrap();
            writeln!(reduce, "        for (var i = sgs; i < {}u; i += sgs) {{", self.ln).unwrap();
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
                self.ln / 2
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
        // The addend of output (m0 + r, col0 + j): element p.add_off + (m0 + r) * p.add_stride + col0 + j.
        let at = |r: u32, j: u32| format!("p.add_off + (m0 + {r}u) * p.add_stride + col0 + {j}u");
        let tv = |s: u32, r: u32| if self.pro == Pro::RmsNorm { format!("t{s} * scale{r}") } else { format!("t{s}") };
        for r in 0..mt {
            if self.out16 {
                let pack = if self.xdt == DType::F16 {
                    "pack2x16float(vec2<f32>(a, b))"
                } else {
                    "bf16_bits(a) | (bf16_bits(b) << 16u)"
                };
                for j in (0..c).step_by(2) {
                    let (s0, s1) = (j * mt + r, (j + 1) * mt + r);
                    let add = if !self.add {
                        String::new()
                    } else if self.xdt == DType::F16 {
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
                         dst[((m0 + {r}u) * n + col0 + {j}u) / 2u] = {pack}; }}",
                        tv(s0, r),
                        tv(s1, r)
                    )
                    .unwrap();
                }
            } else {
                for j in 0..c {
                    let add = if self.add { format!(" + addend[{}]", at(r, j)) } else { String::new() };
                    writeln!(
                        finish,
                        "        if (col0 + {j}u < n && m0 + {r}u < m) {{ dst[(m0 + {r}u) * n + col0 + {j}u] = {}{add}; }}",
                        tv(j * mt + r, r)
                    )
                    .unwrap();
                }
            }
        }
        let xload = match self.xdt {
            DType::F32 => "fn xv(e: u32, i: u32) -> vec4<f32> { return bitcast<vec4<f32>>(x[e / 4u + i]); }",
            DType::F16 => "fn xv(e: u32, i: u32) -> vec4<f32> { let v = x[e / 8u + i / 2u]; let o = (i & 1u) * 2u; \
                 return vec4<f32>(unpack2x16float(v[o]), unpack2x16float(v[o + 1u])); }",
            _ => "fn bf2(w: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }\n\
                 fn xv(e: u32, i: u32) -> vec4<f32> { let v = x[e / 8u + i / 2u]; let o = (i & 1u) * 2u; \
                 return vec4<f32>(bf2(v[o]), bf2(v[o + 1u])); }",
        };
        let xin = match self.pro {
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
        let xload = format!("{xload}\n{xin}");
        let mut extra = String::new();
        if self.pro == Pro::RmsNorm {
            extra += "@group(0) @binding(3) var<storage, read> nw: array<vec4<u32>>;\n";
        }
        if self.add {
            let b = 3 + (self.pro == Pro::RmsNorm) as u32;
            let elem = if self.out16 { "u32" } else { "f32" };
            writeln!(extra, "@group(0) @binding({b}) var<storage, read> addend: array<{elem}>;").unwrap();
        }
        let odt = if self.out16 { self.xdt } else { DType::F32 };
        render(
            MATVEC,
            &[
                ("PARAMS", &QuantMatvecParams::wgsl()),
                ("QT", self.qt.name()),
                ("XDT", self.xdt.as_str()),
                ("ODT", odt.as_str()),
                ("MT", &mt.to_string()),
                ("C", &c.to_string()),
                ("LN", &self.ln.to_string()),
                ("SETS", &(256 / self.ln).to_string()),
                ("UV", &uv.to_string()),
                ("DST_ELEM", if self.out16 { "u32" } else { "f32" }),
                ("ADDEND", &extra),
                ("PRELUDE", PRELUDE),
                ("UNITS", &format!("{UNITS}\n{WORD_UNITS}")),
                ("RED", &(256 * c * mt).to_string()),
                ("XLOAD", &xload),
                ("F", f),
                ("SETUP", &setup),
                ("BODY", &body),
                ("REDUCE", &reduce),
                ("FINISH", &finish),
                ("SUM", if self.sg { "subgroupAdd, then workgroup memory" } else { "a tree in workgroup memory" }),
                (
                    "SG_ARGS",
                    if self.sg {
                        ",\n        @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_size) sgs: u32"
                    } else {
                        ""
                    },
                ),
            ],
        )
    }
}

/// Every quant kernel variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for qt in QuantType::ALL {
        for out in [DType::F32, DType::F16, DType::BF16] {
            push(format!("quant_dequant:{qt}:{out}"), dequant_source(qt, out));
        }
        for xdt in [DType::F32, DType::F16, DType::BF16] {
            for (mt, n) in ROWS.into_iter().flat_map(|mt| [(mt, 4096), (mt, 13)]) {
                // The newer formats share the kernel's code paths: their units at 1 and 8 rows.
                if (xdt == DType::F32 && n == 13) || (is_more(qt) && (n == 13 || mt == 2 || mt == 4)) {
                    continue;
                }
                for (sg, add) in [(None, false), (Some(32), false), (Some(32), true)] {
                    let mv = Matvec { add, ..Matvec::for_problem(qt, xdt, n, 4096, mt as usize, sg) };
                    push(mv.key(), mv.source());
                    if mt <= 2 && n == 4096 {
                        for pro in [Pro::RmsNorm, Pro::SiluMul] {
                            let mv = Matvec { pro, ..mv };
                            push(mv.key(), mv.source());
                        }
                    }
                }
            }
        }
    }
}

/// Dequantises the planar words `q` (`blocks` blocks of `qt`) into a fresh `out` buffer.
pub(crate) fn dequantize(q: &GpuStorage, qt: QuantType, blocks: usize, out: DType) -> Result<GpuStorage> {
    let ctx = q.ctx.clone();
    let n = blocks * qt.block_elems();
    if n > u32::MAX as usize || q.len > u32::MAX as usize {
        return Err(Error::Gpu { op: "dequantize", msg: format!("{n} values exceed the 32-bit index range") });
    }
    let dst = GpuStorage::alloc(&ctx, out, n)?;
    let key = format!("quant_dequant:{qt}:{out}");
    let kernel = ctx.pipelines.get(&ctx, &key, 1, || dequant_source(qt, out))?;
    let threads = n.div_ceil(wgsl::per_word(out));
    let groups = wgsl::grid(threads, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let params = DequantParams { n: n as u32, doff: doff(qt, blocks) }.words();
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        &ctx,
        &kernel,
        &[dst.buffer.raw(), q.buffer.raw()],
        &params,
        groups,
    )?;
    Ok(dst)
}

/// An addend of a quantized product: `(n,)` (a bias, `row_stride` 0) or `(m, n)` rows `row_stride`
/// apart (a residual), from element `offset` of `buf`, in the output's dtype.
pub(crate) struct Addend<'a> {
    pub(crate) buf: &'a GpuStorage,
    pub(crate) offset: usize,
    pub(crate) row_stride: usize,
}

/// `x (m, k) @ w^T (+ add)` (`x` f32, f16 or bf16 from element `x_off`, `w` the `(n, k)` planar
/// words of `qt`): a fresh `(m, n)` buffer in `x`'s dtype, or in f32 when a 16-bit output row would
/// not end on a word (odd `n`; the caller casts). `Ok(None)` when `add` cannot be fused (a 16-bit
/// addend that is not word aligned, or one in f32 output): the caller adds it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qmatmul(
    x: &GpuStorage,
    x_off: usize,
    w: &GpuStorage,
    qt: QuantType,
    n: usize,
    k: usize,
    m: usize,
    add: Option<Addend>,
) -> Result<Option<GpuStorage>> {
    qmatmul_fused(x, x_off, w, qt, n, k, m, add, Prologue { pro: Pro::Plain, x_stride: k, norm: None })
}

/// What a quantized product does to x first (`Tensor::qlinear_fused`): rows of x `x_stride`
/// values apart (`2k` for silu_mul, whose up half follows the gate half) and the `(k,)` norm weight
/// (x's dtype, from a multiple of 16 values) with its eps.
pub(crate) struct Prologue<'a> {
    pub(crate) pro: Pro,
    pub(crate) x_stride: usize,
    pub(crate) norm: Option<(At<'a>, f64)>,
}

/// [`qmatmul`] with a prologue; the caller passes x at a multiple of 16 values for one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qmatmul_fused(
    x: &GpuStorage,
    x_off: usize,
    w: &GpuStorage,
    qt: QuantType,
    n: usize,
    k: usize,
    m: usize,
    add: Option<Addend>,
    pro: Prologue,
) -> Result<Option<GpuStorage>> {
    let op = "qlinear";
    x.same_ctx(op, w)?;
    let ctx = x.ctx.clone();
    if (n * k).max(m * pro.x_stride) + x_off > u32::MAX as usize {
        return Err(Error::Gpu { op, msg: format!("a ({n}, {k}) weight exceeds the 32-bit index range") });
    }
    let sg_max = crate::gpu::runtime::subgroups::use_subgroups(&ctx).then_some(ctx.summary.subgroup_size.1);
    let mut mv = Matvec::for_problem(qt, x.dtype, n, k, m, sg_max);
    if let Some(a) = &add {
        let fits = if mv.out16 { a.offset % 2 == 0 && a.row_stride % 2 == 0 } else { x.dtype == DType::F32 };
        if !fits || a.buf.dtype != x.dtype || a.offset + m * a.row_stride + n > u32::MAX as usize {
            return Ok(None);
        }
        a.buf.same_ctx(op, x)?;
        mv.add = true;
    }
    mv.pro = pro.pro;
    // Runs of x are read as 16-byte vectors: copy x when its offset is not a multiple of 16 values.
    let copy;
    let (xs, off) = if x_off.is_multiple_of(16) {
        (x, x_off)
    } else {
        let l = crate::Layout::new(vec![m * pro.x_stride].into(), vec![1], x_off);
        copy = GpuStorage::copy_contiguous(x, &l)?;
        (&copy, 0)
    };
    let dst = GpuStorage::alloc(&ctx, if mv.out16 { x.dtype } else { DType::F32 }, m * n)?;
    let inputs = 2 + mv.add as usize + (mv.pro == Pro::RmsNorm) as usize;
    let kernel = ctx.pipelines.get(&ctx, &mv.key(), inputs, || mv.source())?;
    let blocks = n * k / qt.block_elems();
    let (a_off, a_stride) = add.as_ref().map_or((0, 0), |a| (a.offset, a.row_stride));
    let (nw_off, eps) = pro.norm.as_ref().map_or((0, 0.0), |(g, e)| (g.offset, *e as f32));
    let params = QuantMatvecParams {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        doff: doff(qt, blocks),
        x_off: off as u32,
        add_stride: a_stride as u32,
        add_off: a_off as u32,
        x_stride: pro.x_stride as u32,
        nw_off: nw_off as u32,
        eps,
        up_off: k as u32,
    };
    let groups = [n.div_ceil(mv.cols() as usize) as u32, m.div_ceil(mv.mt as usize) as u32, 1];
    let mut bufs = vec![dst.buffer.raw(), xs.buffer.raw(), w.buffer.raw()];
    if let Some((g, _)) = &pro.norm {
        g.buf.same_ctx(op, x)?;
        bufs.push(g.buf.buffer.raw());
    }
    if let Some(a) = &add {
        bufs.push(a.buf.buffer.raw());
    }
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(Some(dst))
}
