//! Line maxima of bf16 operands for the cooperative-matrix kernels (`line_maxima.wgsl`): wgpu has no
//! bf16 cooperative type, so bf16 operands are staged as f16, each line (a row of A or a column of
//! B in a matmul; a query, key or value-column line in attention) multiplied by a power of two from
//! its largest finite magnitude (exact: only the exponent changes) and the result scaled back.
//! This pass finds those magnitudes; [`LINE_EXP`] turns one into the exponent.

use crate::gpu::runtime::{wgsl, GpuContext, GpuStorage};
use crate::Result;
use std::sync::Arc;

const SOURCE: &str = include_str!("line_maxima.wgsl");
const SCALE: &str = include_str!("line_scale.wgsl");
/// Elements of one line each invocation reads (`BLOCK` in the kernel).
const BLOCK: usize = 64;

pub(crate) fn source() -> String {
    SOURCE.to_string()
}

pub(crate) fn scale_source() -> String {
    crate::gpu::runtime::kernels::render(SCALE, &[("LINE_EXP", LINE_EXP)])
}

/// WGSL `fn line_exp(bits) -> i32`: the power of two that puts a line's largest finite magnitude
/// (f32 bits from this pass) in [2^14, 2^15): f16 then holds every value of the line up to 65504,
/// and those up to 2^28 below its maximum as normals. Clamped so that `2^-e` and `2^e` stay normal
/// f32 numbers.
pub(crate) const LINE_EXP: &str = "fn line_exp(bits: u32) -> i32 {
    if (bits == 0u) {
        return 0;
    }
    return clamp(i32(bits >> 23u) - 141, -110, 115);
}
";

/// One operand's lines as the pass reads them: `lines` lines of `k` elements, `line_stride` and
/// `k_stride` apart, from `offset`, for each entry of the (collapsed) batch `dims`/`strides`.
pub(crate) struct Lines<'a> {
    pub(crate) lines: usize,
    pub(crate) k: usize,
    pub(crate) offset: usize,
    pub(crate) line_stride: usize,
    pub(crate) k_stride: usize,
    pub(crate) batch: usize,
    pub(crate) dims: &'a [usize],
    pub(crate) strides: &'a [usize],
}

/// A zeroed buffer of `words` line maxima, for [`line_maxima`] to fill.
pub(crate) fn maxima_buffer(ctx: &Arc<GpuContext>, words: usize) -> Result<GpuStorage> {
    let mx = GpuStorage::alloc(ctx, crate::DType::U32, words)?;
    mx.fill_words(&[0])?;
    Ok(mx)
}

/// Maxes the largest finite |x| of every line of bf16 `x` (per batch entry) into `mx` from word
/// `first` on: slot `first + z * lines + line`.
pub(crate) fn line_maxima(x: &GpuStorage, l: &Lines, mx: &GpuStorage, first: usize) -> Result<()> {
    let ctx = &x.ctx;
    let kernel = ctx.pipelines.get(ctx, "line_maxima", 1, source)?;
    let blocks = l.k.div_ceil(BLOCK);
    let n = l.batch * l.lines * blocks;
    // Consecutive invocations along whichever of the line and K strides is the unit one.
    let line_fast = l.k_stride != 1;
    let mut params = vec![
        l.lines as u32,
        l.k as u32,
        l.offset as u32,
        l.line_stride as u32,
        l.k_stride as u32,
        first as u32,
        blocks as u32,
        line_fast as u32,
        if l.batch > 1 { l.dims.len() as u32 } else { 0 },
    ];
    params.resize(18, 0);
    if l.batch > 1 {
        for (i, (&d, &s)) in l.dims.iter().zip(l.strides).enumerate() {
            params[9 + i] = d as u32;
            params[13 + i] = s as u32;
        }
    }
    params[17] = n as u32;
    let groups = wgsl::grid(n, 256, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        ctx,
        &kernel,
        &[mx.buffer.raw(), x.buffer.raw()],
        &params,
        groups,
    )
}

/// bf16 `x`'s lines as a contiguous f16 copy scaled by the powers of two of `mx` (from word `first`
/// on): `(batch, lines, k)` when `k_fast`, else `(batch, k, lines)` (`line_scale.wgsl`).
pub(crate) fn scale_to_f16(
    x: &GpuStorage,
    l: &Lines,
    mx: &GpuStorage,
    first: usize,
    k_fast: bool,
) -> Result<GpuStorage> {
    let ctx = &x.ctx;
    let kernel = ctx.pipelines.get(ctx, "line_scale", 2, scale_source)?;
    let n = l.batch * l.lines * l.k;
    let out = GpuStorage::alloc(ctx, crate::DType::F16, n)?;
    let mut params = vec![
        l.lines as u32,
        l.k as u32,
        l.offset as u32,
        l.line_stride as u32,
        l.k_stride as u32,
        first as u32,
        k_fast as u32,
        if l.batch > 1 { l.dims.len() as u32 } else { 0 },
    ];
    params.resize(17, 0);
    if l.batch > 1 {
        for (i, (&d, &s)) in l.dims.iter().zip(l.strides).enumerate() {
            params[8 + i] = d as u32;
            params[12 + i] = s as u32;
        }
    }
    params[16] = n as u32;
    let groups = wgsl::grid(n.div_ceil(2), 256, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        ctx,
        &kernel,
        &[out.buffer.raw(), x.buffer.raw(), mx.buffer.raw()],
        &params,
        groups,
    )?;
    Ok(out)
}
