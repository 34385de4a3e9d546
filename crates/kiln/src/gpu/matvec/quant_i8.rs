//! The quantized few-row product on 4-way integer dot products (`dot4I8Packed`, DP4A on NVIDIA,
//! `quant_i8.wgsl`) for the formats of real GGUF files (Q8_0, Q4_0, Q4_K, Q6_K): x is first put in
//! 16-bit fixed point per run of 16 values by `qx.rs` (with the product's prologue), then each
//! weight word's four integers meet four x bytes in one instruction. The f32 kernel (`quant.rs`)
//! spends four to five ALU operations on every weight value (unpacking, conversion, FMA), which
//! bounds Q4_K far below the memory's rate; here a word of eight 4-bit values costs about five.
//!
//! What it computes differs from the f32 kernel only by x's rounding to 16 bits per run of 16 values
//! (relative 1.5e-5 of the run's largest value), inside `qlinear`'s documented tolerance.

use super::emit::{lane_sum, lanes, rows_setup, sg_args, stores, sum_name, AddRead};
use super::qx::QuantizedX;
use crate::gpu::kit::quant_units::{fname, units};
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::PRELUDE;
use crate::gpu::runtime::GpuStorage;
use crate::quant::QuantType;
use crate::{DType, Result};
use std::fmt::Write;

const MATVEC: &str = include_str!("quant_i8.wgsl");
const INT8: &str = include_str!("../kit/quant_int8.wgsl");

params! {
    /// The integer-dot product's parameters: m, n, k, the scales' word offset (doff), x's first run
    /// (0) and runs per row, the addend's row stride (0 for a bias) and offset in elements (even for
    /// 16-bit outputs).
    struct QuantI8Params {
        m: u32,
        n: u32,
        k: u32,
        doff: u32,
        x_off: u32,
        x_stride: u32,
        add_stride: u32,
        add_off: u32,
    }
}

thread_local! {
    static F32_KERNEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether `qt` has integer-dot units (the formats of Q4_K_M, Q8_0 and Q4_0 files).
pub(crate) fn has_units(qt: QuantType) -> bool {
    matches!(qt, QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4K | QuantType::Q6K)
}

/// Whether a product of `qt` takes this kernel: it has units, and neither `KILN_QMV_I8=0` nor a
/// test on this thread chose the f32 kernel.
pub(crate) fn applies(qt: QuantType) -> bool {
    has_units(qt) && super::quant::overrides().i8 && !F32_KERNEL.with(|c| c.get())
}

/// Runs `f` with the f32 kernel for every format (on this thread), so that tests cover it too.
#[cfg(test)]
pub(crate) fn with_f32_kernel<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            F32_KERNEL.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(F32_KERNEL.with(|c| c.replace(true)));
    f()
}

/// One integer-dot kernel: format, output dtype (f32, or x's 16-bit dtype written as words),
/// rows of x per workgroup, weight rows per lane set and lanes per set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuantI8 {
    pub(crate) qt: QuantType,
    pub(crate) odt: DType,
    pub(crate) mt: u32,
    pub(crate) c: u32,
    pub(crate) ln: u32,
    pub(crate) sg: bool,
    pub(crate) add: bool,
}

/// Values per unit (one lane's step) and runs of 16 values in it, as in `quant.rs`.
fn unit_shape(qt: QuantType) -> (u32, u32) {
    match qt {
        QuantType::Q4K | QuantType::Q6K => (64, 4),
        _ => (32, 2),
    }
}

impl QuantI8 {
    /// The kernel for an `(n, k)` weight and `m` rows of x, output `odt`: 4 weight rows a set
    /// (fewer as rows of x add accumulators), lanes as `quant.rs` chooses them.
    pub(crate) fn for_problem(qt: QuantType, odt: DType, n: usize, k: usize, m: usize, sg_max: Option<u32>) -> QuantI8 {
        let mt = (m.next_power_of_two() as u32).min(8);
        let o = super::quant::overrides();
        let c = o.c.unwrap_or(4).min(16 / mt).max(2);
        let ln = lanes(k / unit_shape(qt).0 as usize, 4, n, c);
        let ln = o.ln.map_or(ln, |v| v.clamp(32, 256));
        let sg = sg_max.is_some_and(|s| s <= ln) && o.sg;
        QuantI8 { qt, odt, mt, c, ln, sg, add: false }
    }

    pub(crate) fn key(&self) -> String {
        let sg = if self.sg { ":sg" } else { "" };
        let add = if self.add { ":add" } else { "" };
        format!("quant_i8:{}->{}:r{}:c{}:l{}{sg}{add}", self.qt, self.odt, self.mt, self.c, self.ln)
    }

    /// Weight rows (output columns) per workgroup.
    fn cols(&self) -> u32 {
        256 / self.ln * self.c
    }

    pub(crate) fn source(&self) -> String {
        let (mt, c) = (self.mt, self.c);
        let mut setup = String::new();
        for j in 0..c {
            writeln!(setup, "    let row{j} = min(col0 + {j}u, n - 1u);").unwrap();
        }
        rows_setup(&mut setup, mt, c);
        let packed = (self.odt != DType::F32).then_some(self.odt);
        let add = if self.add { AddRead::F32 } else { AddRead::None };
        let finish = stores(mt, c, false, packed, add);
        let elem = if packed.is_some() { "u32" } else { "f32" };
        let addend = if self.add {
            format!("@group(0) @binding(4) var<storage, read> addend: array<{elem}>;")
        } else {
            String::new()
        };
        render(
            MATVEC,
            &[
                ("PARAMS", &QuantI8Params::wgsl()),
                ("QT", self.qt.name()),
                ("ODT", self.odt.as_str()),
                ("MT", &mt.to_string()),
                ("C", &c.to_string()),
                ("LN", &self.ln.to_string()),
                ("SETS", &(256 / self.ln).to_string()),
                ("UV", &unit_shape(self.qt).0.to_string()),
                ("DST_ELEM", elem),
                ("ADDEND", &addend),
                ("PRELUDE", PRELUDE),
                ("UNITS", &format!("{}\n{INT8}", units())),
                ("RED", &(256 * c * mt).to_string()),
                ("F", fname(self.qt)),
                ("SETUP", &setup),
                ("BODY", &self.body()),
                ("REDUCE", &lane_sum(mt, c, self.ln, self.sg)),
                ("FINISH", &finish),
                ("SUM", sum_name(self.sg)),
                ("SG_ARGS", sg_args(self.sg)),
            ],
        )
    }

    /// One step of a lane: each weight row's unit, then per run of 16 values each x row's two
    /// planes and scale, the row's packed integers and the integer dots.
    fn body(&self) -> String {
        let (mt, c, f) = (self.mt, self.c, fname(self.qt));
        let (_, runs) = unit_shape(self.qt);
        let o = f.to_uppercase();
        let offset = !matches!(self.qt, QuantType::Q8_0);
        let mut body = String::new();
        for j in 0..c {
            writeln!(body, "        let w{j} = load_{f}(row{j}, u, units, doff);").unwrap();
        }
        for i in 0..runs {
            for r in 0..mt {
                writeln!(
                    body,
                    "        let t{i}_{r} = xb{r} + t0 + off_{f}({i}u) / 16u; let h{i}_{r} = xq[2u * t{i}_{r}]; \
                     let l{i}_{r} = xq[2u * t{i}_{r} + 1u]; let s{i}_{r} = xs[t{i}_{r}];"
                )
                .unwrap();
            }
            for j in 0..c {
                let us = (0..4).map(|v| format!("qi_{f}(w{j}, {i}u, {v}u)")).collect::<Vec<_>>();
                writeln!(body, "        let u{j}_{i} = vec4<u32>({});", us.join(", ")).unwrap();
                if offset {
                    writeln!(body, "        let dm{j}_{i} = w{j}.d[{i}] * O_{o} + w{j}.m[{i}];").unwrap();
                }
                for r in 0..mt {
                    let dot = format!("idot(u{j}_{i}.x, u{j}_{i}.y, u{j}_{i}.z, u{j}_{i}.w, h{i}_{r}, l{i}_{r})");
                    let min = if offset { format!(" - dm{j}_{i} * s{i}_{r}.y") } else { String::new() };
                    writeln!(body, "        acc{j}_{r} += w{j}.d[{i}] * s{i}_{r}.x * {dot}{min};").unwrap();
                }
            }
        }
        body
    }
}

/// Every integer-dot variant, for the catalog (the translation test).
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for qt in QuantType::ALL.into_iter().filter(|&q| has_units(q)) {
        for odt in [DType::F32, DType::F16, DType::BF16] {
            for mt in [1usize, 2, 4, 8] {
                for (sg, add) in [(None, false), (Some(32), false), (Some(32), true)] {
                    let mv = QuantI8 { add, ..QuantI8::for_problem(qt, odt, 4096, 4096, mt, sg) };
                    push(mv.key(), mv.source());
                }
            }
        }
    }
}

/// `x @ w^T (+ add)` from x's runs `xq` (`m` rows): a fresh `(m, n)` buffer in `odt`. The addend
/// `(buf, offset, row_stride)` is in `odt` (word aligned for 16-bit outputs, as the caller checks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn qmatmul_i8(
    x: &QuantizedX,
    w: &GpuStorage,
    qt: QuantType,
    odt: DType,
    n: usize,
    k: usize,
    m: usize,
    add: Option<(&GpuStorage, usize, usize)>,
) -> Result<GpuStorage> {
    let ctx = x.xq.ctx.clone();
    let sg_max = crate::gpu::runtime::subgroups::use_subgroups(&ctx).then_some(ctx.summary.subgroup_size.1);
    let mv = QuantI8 { add: add.is_some(), ..QuantI8::for_problem(qt, odt, n, k, m, sg_max) };
    let dst = GpuStorage::alloc(&ctx, odt, m * n)?;
    let kernel = ctx.pipelines.get(&ctx, &mv.key(), 3 + mv.add as usize, || mv.source())?;
    let blocks = n * k / qt.block_elems();
    let (a_off, a_stride) = add.map_or((0, 0), |(_, o, s)| (o, s));
    let params = QuantI8Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        doff: crate::gpu::kit::quant_units::doff(qt, blocks),
        x_off: 0,
        x_stride: (k / 16) as u32,
        add_stride: a_stride as u32,
        add_off: a_off as u32,
    };
    let groups = [n.div_ceil(mv.cols() as usize) as u32, m.div_ceil(mv.mt as usize) as u32, 1];
    let mut bufs = vec![dst.buffer.raw(), x.xq.buffer.raw(), x.xs.buffer.raw(), w.buffer.raw()];
    if let Some((a, _, _)) = add {
        bufs.push(a.buffer.raw());
    }
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(dst)
}
