//! Line maxima of bf16 operands for the cooperative-matrix kernels (`line_maxima.wgsl`): wgpu has no
//! bf16 cooperative type, so bf16 operands are staged as f16, each line (a row of A or a column of
//! B in a matmul; a query, key or value-column line in attention) multiplied by a power of two from
//! its largest finite magnitude (exact: only the exponent changes) and the result scaled back.
//! This pass finds those magnitudes; [`LINE_EXP`] turns one into the exponent. [`maxima`] takes
//! K-contiguous lines whole, a workgroup's invocations per line (`line_maxima_whole.wgsl`: one
//! dispatch, nothing to zero), and other lines in blocks maxed atomically into a zeroed buffer (a
//! fill and `line_maxima.wgsl`: two dispatches).

use crate::gpu::runtime::params::params;
use crate::gpu::runtime::{wgsl, GpuContext, GpuStorage};
use crate::Result;
use std::sync::Arc;

const SOURCE: &str = include_str!("line_maxima.wgsl");
const WHOLE: &str = include_str!("line_maxima_whole.wgsl");
/// Elements of one line each invocation reads (`BLOCK` in the kernel).
const BLOCK: usize = 64;

/// The pass's source: `x4` reads 8 values at a time along K-contiguous lines.
pub(crate) fn source(x4: bool) -> String {
    let (x, scan) = if x4 { ("array<vec4<u32>>", SCAN_X4) } else { ("array<u32>", SCAN_X1) };
    crate::gpu::runtime::kernels::render(SOURCE, &[("X", x), ("PARAMS", &LineParams::wgsl()), ("SCAN", scan)])
}

params! {
    /// The pass's parameters: lines, K, the operand's offset, line and K strides, the first slot in
    /// `mx`, blocks per line, the line order (1: consecutive invocations take consecutive lines),
    /// the merged batch rank (<= 4), dims and strides, and the invocation count.
    struct LineParams {
        lines: u32,
        k: u32,
        offset: u32,
        line_stride: u32,
        k_stride: u32,
        first: u32,
        blocks: u32,
        line_fast: u32,
        rank: u32,
        dims: [u32; 4],
        strides: [u32; 4],
        count: u32,
    }
}

/// One value at a time, any strides.
const SCAN_X1: &str = "    for (var k = blk * BLOCK; k < k1; k++) {
        let i = e0 + k * p.k_stride;
        let w = x[i >> 1u];
        let bits = select(w << 16u, w & 0xffff0000u, (i & 1u) == 1u) & 0x7fffffffu;
        if (bits < 0x7f800000u) {
            m = max(m, bits);
        }
    }
";

/// Eight values (one `vec4<u32>`) at a time along K.
const SCAN_X4: &str = "    for (var k = blk * BLOCK; k < k1; k += 8u) {
        let w = x[(e0 + k) >> 3u];
        let hi = w & vec4<u32>(0x7fff0000u);
        let lo = (w << vec4<u32>(16u)) & vec4<u32>(0x7fffffffu);
        let inf = vec4<u32>(0x7f800000u);
        let h = select(vec4<u32>(0u), hi, hi < inf);
        let l = select(vec4<u32>(0u), lo, lo < inf);
        let v = max(h, l);
        m = max(m, max(max(v.x, v.y), max(v.z, v.w)));
    }
";

params! {
    /// The whole-line pass's parameters: lines, K, the operand's offset and line stride, the first
    /// slot in `mx`, invocations per line (a power of two up to 256), the merged batch rank (<= 4),
    /// dims and strides, and the line count over the batch.
    struct WholeParams {
        lines: u32,
        k: u32,
        offset: u32,
        line_stride: u32,
        first: u32,
        threads: u32,
        rank: u32,
        dims: [u32; 4],
        strides: [u32; 4],
        count: u32,
    }
}

/// The whole-line pass's source; `scaled`: it also writes the scaled f16 lines (`a16`).
pub(crate) fn whole_source(scaled: bool) -> String {
    let (a16, xb, exp, body) = if scaled {
        ("@group(0) @binding(1) var<storage, read_write> a16: array<vec4<u32>>;\n", "2", LINE_EXP, SCALED)
    } else {
        ("", "1", "", "")
    };
    crate::gpu::runtime::kernels::render(
        WHOLE,
        &[("A16", a16), ("XB", xb), ("PARAMS", &WholeParams::wgsl()), ("LINE_EXP", exp), ("SCALED", body)],
    )
}

/// The scaled variant's second pass over its line: the 8 values of each word times 2^-e of the
/// line's maximum (every invocation of the line reads it from `red` after the last barrier), as
/// f16 pairs.
const SCALED: &str = "    if (idx < p.count) {
        let s = bitcast<f32>(u32(127 - line_exp(red[li - lane])) << 23u);
        for (var w = lane; w < words; w += t) {
            let v = x[w0 + w];
            let lo = bitcast<vec4<f32>>(v << vec4<u32>(16u)) * s;
            let hi = bitcast<vec4<f32>>(v & vec4<u32>(0xffff0000u)) * s;
            a16[idx * words + w] = vec4<u32>(
                pack2x16float(vec2<f32>(lo.x, hi.x)),
                pack2x16float(vec2<f32>(lo.y, hi.y)),
                pack2x16float(vec2<f32>(lo.z, hi.z)),
                pack2x16float(vec2<f32>(lo.w, hi.w)),
            );
        }
    }
";

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

impl Lines<'_> {
    /// The batch as the passes' parameters: rank (0 without a batch), dims and strides.
    fn batch_words(&self) -> (u32, [u32; 4], [u32; 4]) {
        let (mut dims, mut strides) = ([0; 4], [0; 4]);
        if self.batch <= 1 {
            return (0, dims, strides);
        }
        for (i, (&d, &s)) in self.dims.iter().zip(self.strides).enumerate() {
            dims[i] = d as u32;
            strides[i] = s as u32;
        }
        (self.dims.len() as u32, dims, strides)
    }
}

/// The line maxima of bf16 `x` (slot `z * lines + line`), from the whole-line pass where the lines
/// are K-contiguous and 16-byte aligned (one dispatch), else zeroed and maxed block by block (two);
/// `KILN_LINE_MAXIMA=blocks` takes the second way everywhere, for A/B runs.
pub(crate) fn maxima(x: &GpuStorage, l: &Lines) -> Result<GpuStorage> {
    let ctx = &x.ctx;
    let words = l.batch * l.lines;
    if !whole_applies(x, l) {
        let mx = maxima_buffer(ctx, words)?;
        line_maxima(x, l, &mx, 0)?;
        return Ok(mx);
    }
    let mx = GpuStorage::alloc(ctx, crate::DType::U32, words)?;
    whole(x, l, &mx, None)?;
    Ok(mx)
}

/// Whether [`maxima`] takes `l`'s lines whole (and [`maxima_scaled`] runs): K-contiguous lines on
/// 16-byte boundaries, unless `KILN_LINE_MAXIMA=blocks`.
pub(crate) fn whole_applies(x: &GpuStorage, l: &Lines) -> bool {
    vec_lines(x, l) && whole_enabled()
}

/// The line maxima of bf16 `x` (as [`maxima`]) and its lines scaled and rounded to f16 as the
/// cooperative matmul stages them, contiguous (line `z * lines + line` at that times K), in one
/// dispatch, where [`whole_applies`].
pub(crate) fn maxima_scaled(x: &GpuStorage, l: &Lines) -> Result<(GpuStorage, GpuStorage)> {
    let ctx = &x.ctx;
    let words = l.batch * l.lines;
    let mx = GpuStorage::alloc(ctx, crate::DType::U32, words)?;
    let a16 = GpuStorage::alloc(ctx, crate::DType::F16, words * l.k)?;
    whole(x, l, &mx, Some(&a16))?;
    Ok((mx, a16))
}

/// Records the whole-line pass over `l` into `mx` (and the scaled lines into `a16`).
fn whole(x: &GpuStorage, l: &Lines, mx: &GpuStorage, a16: Option<&GpuStorage>) -> Result<()> {
    let ctx = &x.ctx;
    let words = l.batch * l.lines;
    let kernel = match a16 {
        Some(_) => ctx.pipelines.get_with(ctx, "line_maxima_whole_scaled", 2, 1, || whole_source(true))?,
        None => ctx.pipelines.get(ctx, "line_maxima_whole", 1, || whole_source(false))?,
    };
    // Enough invocations per line that each reads its 16-byte words in one or a few rounds.
    let threads = (l.k / 8).next_power_of_two().clamp(1, WHOLE_WG);
    let (rank, dims, strides) = l.batch_words();
    let params = WholeParams {
        lines: l.lines as u32,
        k: l.k as u32,
        offset: l.offset as u32,
        line_stride: l.line_stride as u32,
        threads: threads as u32,
        rank,
        dims,
        strides,
        count: words as u32,
        ..WholeParams::default()
    };
    let groups = words.div_ceil(WHOLE_WG / threads) * WHOLE_WG;
    let groups = wgsl::grid(groups, WHOLE_WG, ctx.limits.max_compute_workgroups_per_dimension);
    let bufs = match a16 {
        Some(a16) => vec![mx.buffer.raw(), a16.buffer.raw(), x.buffer.raw()],
        None => vec![mx.buffer.raw(), x.buffer.raw()],
    };
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)
}

/// Invocations per workgroup of the whole-line pass.
const WHOLE_WG: usize = 256;

/// `KILN_LINE_MAXIMA`: 2 `scaled` (the default), 1 `whole`, 0 `blocks`.
fn mode() -> u8 {
    static MODE: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| match crate::settings::LINE_MAXIMA.get().as_deref().map(str::trim) {
        Ok("blocks") => 0,
        Ok("whole") => 1,
        _ => 2,
    })
}

/// Whether the whole-line pass may run (`KILN_LINE_MAXIMA` not `blocks`).
fn whole_enabled() -> bool {
    mode() > 0
}

/// Whether bf16 cooperative products take their A operand scaled to f16 by the whole-line pass
/// (`KILN_LINE_MAXIMA` neither `whole` nor `blocks`) where it applies.
pub(crate) fn scaled_enabled() -> bool {
    mode() == 2
}

/// Whether `l`'s lines can be read 8 values (16 bytes) at a time: K-contiguous, every line starting
/// on 8 values, K a multiple of 8.
fn vec_lines(x: &GpuStorage, l: &Lines) -> bool {
    let eight = |v: usize| v.is_multiple_of(8);
    l.k_stride == 1
        && eight(l.k)
        && eight(l.offset)
        && (l.lines == 1 || eight(l.line_stride))
        && (l.batch == 1 || l.strides.iter().all(|&s| eight(s)))
        && x.buffer.size() >= 16
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
    // 16-byte reads where every line starts on 8 values and K fills whole vectors.
    let x4 = vec_lines(x, l);
    let kernel = if x4 {
        ctx.pipelines.get(ctx, "line_maxima_x4", 1, || source(true))?
    } else {
        ctx.pipelines.get(ctx, "line_maxima", 1, || source(false))?
    };
    let blocks = l.k.div_ceil(BLOCK);
    let n = l.batch * l.lines * blocks;
    // Consecutive invocations along whichever of the line and K strides is the unit one.
    let line_fast = l.k_stride != 1;
    let (rank, dims, strides) = l.batch_words();
    let params = LineParams {
        lines: l.lines as u32,
        k: l.k as u32,
        offset: l.offset as u32,
        line_stride: l.line_stride as u32,
        k_stride: l.k_stride as u32,
        first: first as u32,
        blocks: blocks as u32,
        line_fast: line_fast as u32,
        rank,
        dims,
        strides,
        count: n as u32,
    };
    let groups = wgsl::grid(n, 256, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        ctx,
        &kernel,
        &[mx.buffer.raw(), x.buffer.raw()],
        &params.words(),
        groups,
    )
}

#[cfg(test)]
mod tests;
