//! The quantized few-row product `x (m, k) @ w^T` that reads kiln's planar quantized weight
//! directly and dequantises it in registers (`quant.wgsl`, through the units of
//! `kit/quant_units.rs`), with the same prologues (RMSNorm, silu_mul) and addend as the dense one.

use super::emit::{lane_sum, lanes, norm_scale, rows_setup, sg_args, stores, sum_name, x_loaders, AddRead};
pub(crate) use super::quant_args::Prologue;
use super::quant_args::{norm_sum_loop, overrides, unit_shape};
use crate::gpu::kit::quant_units::{doff, fname, is_more, units};
use crate::gpu::pointwise::Pro;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::PRELUDE;
use crate::gpu::runtime::GpuStorage;
use crate::quant::QuantType;
use crate::{DType, Error, Result};
use std::fmt::Write;

const MATVEC: &str = include_str!("quant.wgsl");

/// Rows of x per matvec workgroup.
const ROWS: [u32; 4] = [1, 2, 4, 8];

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

/// One matrix-vector kernel: format, x dtype, output in x's dtype (else f32), rows of x per
/// workgroup, weight rows per lane set and lanes per set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuantMatvec {
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
    /// the row's two halves; as `dense.rs`).
    pub(crate) pro: Pro,
}

impl QuantMatvec {
    /// The kernel for an `(n, k)` weight and `m` rows of `xdt` input. Weight rows per set: 2 or 4
    /// (fewer as rows of x add accumulators); lanes per set: at most 4 units per lane, then more
    /// lanes (and fewer sets) while the grid has under ~2 workgroups per SM of a large GPU and
    /// every lane keeps a unit.
    pub(crate) fn for_problem(
        qt: QuantType,
        xdt: DType,
        n: usize,
        k: usize,
        m: usize,
        sg_max: Option<u32>,
    ) -> QuantMatvec {
        let mt = (m.next_power_of_two() as u32).min(8);
        // Measured on an H100 at M = 1 (docs/PERFORMANCE.md, session 5): 4 rows for Q8_0 and
        // Q4_0, 2 for the k-quants, whose larger units (64 values) with 4 rows per lane cost
        // occupancy.
        let base = match qt {
            QuantType::Q4K | QuantType::Q6K => 2,
            _ => 4,
        };
        let c = overrides().c.unwrap_or(base).min(16 / mt).max(2);
        let ln = lanes(k / unit_shape(qt).0 as usize, 4, n, c);
        let ln = overrides().ln.map_or(ln, |v| v.clamp(32, 256));
        let out16 = xdt != DType::F32 && n.is_multiple_of(2);
        let sg = sg_max.is_some_and(|s| s <= ln) && overrides().sg;
        QuantMatvec { qt, xdt, out16, mt, c, ln, sg, add: false, pro: Pro::Plain }
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
        let (uv, _) = unit_shape(self.qt);
        let mut setup = String::new();
        for j in 0..c {
            writeln!(setup, "    let row{j} = min(col0 + {j}u, n - 1u);").unwrap();
        }
        rows_setup(&mut setup, mt, c);
        if self.pro == Pro::RmsNorm {
            norm_scale(&mut setup, mt, &norm_sum_loop(mt), self.sg);
        }
        let add = if self.add { AddRead::F32 } else { AddRead::None };
        let finish = stores(mt, c, self.pro == Pro::RmsNorm, self.out16.then_some(self.xdt), add);
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
                ("UNITS", &units()),
                ("RED", &(256 * c * mt).to_string()),
                ("XLOAD", &x_loaders(self.xdt, self.pro)),
                ("F", f),
                ("SETUP", &setup),
                ("BODY", &self.body()),
                ("REDUCE", &lane_sum(mt, c, self.ln, self.sg)),
                ("FINISH", &finish),
                ("SUM", sum_name(self.sg)),
                ("SG_ARGS", sg_args(self.sg)),
            ],
        )
    }

    /// One step of a lane: each weight row's unit, then per run of 16 values x (through the
    /// prologue), the row's integer values and the dot products, less the minima where the format
    /// has them.
    fn body(&self) -> String {
        let (mt, c, f) = (self.mt, self.c, fname(self.qt));
        let (_, runs) = unit_shape(self.qt);
        let mins =
            matches!(self.qt, QuantType::Q4K | QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q2K | QuantType::Q5K);
        let mut body = String::new();
        for j in 0..c {
            writeln!(body, "        let w{j} = load_{f}(row{j}, u, units, doff);").unwrap();
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
        body
    }
}

/// Every quantized matvec variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for qt in QuantType::ALL {
        for xdt in [DType::F32, DType::F16, DType::BF16] {
            for (mt, n) in ROWS.into_iter().flat_map(|mt| [(mt, 4096), (mt, 13)]) {
                // The newer formats share the kernel's code paths: their units at 1 and 8 rows.
                if (xdt == DType::F32 && n == 13) || (is_more(qt) && (n == 13 || mt == 2 || mt == 4)) {
                    continue;
                }
                for (sg, add) in [(None, false), (Some(32), false), (Some(32), true)] {
                    let mv = QuantMatvec { add, ..QuantMatvec::for_problem(qt, xdt, n, 4096, mt as usize, sg) };
                    push(mv.key(), mv.source());
                    if mt <= 2 && n == 4096 {
                        for pro in [Pro::RmsNorm, Pro::SiluMul] {
                            let mv = QuantMatvec { pro, ..mv };
                            push(mv.key(), mv.source());
                        }
                    }
                }
            }
        }
    }
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
    let mut mv = QuantMatvec::for_problem(qt, x.dtype, n, k, m, sg_max);
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
    if super::quant_i8::applies(qt) {
        let odt = if mv.out16 { x.dtype } else { DType::F32 };
        let add = add.as_ref().map(|a| (a.buf, a.offset, a.row_stride));
        return super::quant_i8::qmatmul_i8(xs, off, w, qt, odt, (n, k, m), add, &pro, super::quant_i8::Out::Fresh);
    }
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
