//! What the two quantized few-row products (`quant.rs`, the f32 kernel; `quant_i8.rs`, the
//! integer-dot one) share: the A/B overrides of their shape, the shape of a unit, what they do to x
//! first and the RMSNorm sum that begins it.

use crate::gpu::pointwise::Pro;
use crate::gpu::runtime::storage::At;
use crate::quant::QuantType;
use std::fmt::Write;

/// Values per unit (one lane's step, `kit/quant_units.wgsl`) and runs of 16 values in it.
pub(super) fn unit_shape(qt: QuantType) -> (u32, u32) {
    match qt {
        QuantType::Q4K | QuantType::Q6K => (64, 4),
        _ => (32, 2),
    }
}

/// RMSNorm's sum of squares of the `mt` rows of x (`ss{r}`), each invocation taking every 256th run
/// of 16 values; for `emit::norm_scale`.
pub(super) fn norm_sum_loop(mt: u32) -> String {
    let mut sum = String::from("    for (var e = tid * 16u; e < k; e += 4096u) {\n");
    for r in 0..mt {
        for v in 0..4 {
            writeln!(sum, "        let s{r}_{v} = xv(xb{r} + e, {v}u); ss{r} += dot(s{r}_{v}, s{r}_{v});").unwrap();
        }
    }
    sum + "    }\n"
}

/// A/B overrides of the quantized products' shape, read once: `KILN_QMV_C` (rows per set) and `KILN_QMV_LN`
/// (lanes per set), powers of two; `KILN_QMV_SG=0` (no subgroupAdd); `KILN_QMV_GRID` (the streamed
/// kernel's workgroups), `KILN_QMV_STREAM` (rows from which it streams), `KILN_QMV_PREFETCH`
/// (its loads a step ahead), `KILN_QMV_ABLATE` (a part of it left out).
pub(super) struct Overrides {
    pub(super) c: Option<u32>,
    pub(super) ln: Option<u32>,
    pub(super) sg: bool,
    /// `KILN_QMV_I8=0`: the f32 kernel for every format (no integer-dot products).
    pub(super) i8: bool,
    /// `KILN_QMV_GRID`: workgroups of the streamed integer-dot product (0: not streamed).
    pub(super) grid: u32,
    /// `KILN_QMV_STREAM`: weight rows from which a product is streamed.
    pub(super) stream_n: usize,
    /// `KILN_QMV_PREFETCH`: whether the streamed product loads a step ahead in every format (1)
    /// or in none (0); unset, in all but Q6_K and Q8_0.
    pub(super) prefetch: Option<bool>,
    /// `KILN_QMV_ABLATE`: a part of the streamed product left out (wrong results).
    pub(super) ablate: Ablate,
}

/// The parts of the streamed integer-dot product an ablation can leave out (`KILN_QMV_ABLATE`), to
/// time the rest: `Arith` keeps only the weight loads (a unit's words XORed into the sum), `Scales`
/// skips the scales' decoding, `X` reads no x runs from workgroup memory, `Prologue` makes none
/// (where the workgroup would make them itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ablate {
    None,
    Arith,
    Scales,
    X,
    Prologue,
}

pub(super) fn overrides() -> &'static Overrides {
    static O: std::sync::OnceLock<Overrides> = std::sync::OnceLock::new();
    O.get_or_init(|| {
        let pow2 = |s: crate::settings::Setting| s.get().ok()?.parse().ok().filter(|v: &u32| v.is_power_of_two());
        Overrides {
            c: pow2(crate::settings::QMV_C),
            ln: pow2(crate::settings::QMV_LN),
            sg: crate::settings::QMV_SG.is_not_zero(),
            i8: crate::settings::QMV_I8.is_not_zero(),
            grid: crate::settings::QMV_GRID.get().ok().and_then(|v| v.parse().ok()).unwrap_or(264),
            stream_n: crate::settings::QMV_STREAM.get().ok().and_then(|v| v.parse().ok()).unwrap_or(0),
            prefetch: crate::settings::QMV_PREFETCH.get().ok().map(|v| v != "0"),
            ablate: match crate::settings::QMV_ABLATE.get().as_deref().map(str::trim) {
                Ok("arith") => Ablate::Arith,
                Ok("scales") => Ablate::Scales,
                Ok("x") => Ablate::X,
                Ok("prologue") => Ablate::Prologue,
                _ => Ablate::None,
            },
        }
    })
}

/// What a quantized product does to x first (`Tensor::qlinear_fused`): rows of x `x_stride`
/// values apart (`2k` for silu_mul, whose up half follows the gate half) and the `(k,)` norm weight
/// (x's dtype, from a multiple of 16 values) with its eps.
pub(crate) struct Prologue<'a> {
    pub(crate) pro: Pro,
    pub(crate) x_stride: usize,
    pub(crate) norm: Option<(At<'a>, f64)>,
}
