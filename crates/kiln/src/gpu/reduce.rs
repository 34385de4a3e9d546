//! Reductions and cumulative sums. The reduced axes are moved innermost (a view), the data made
//! contiguous if needed, and each output row reduced by one workgroup into a 4-byte result that is
//! then cast to the op's output dtype.

use super::kernels::render;
use super::wgsl::{self, loader, PRELUDE};
use super::{compute_dtype, BackendStorage, GpuStorage};
use crate::cpu::CpuStorage;
use crate::op::ReduceOp;
use crate::{DType, Layout, Result};

const REDUCE: &str = include_str!("reduce.wgsl");
const CUMSUM: &str = include_str!("cumsum.wgsl");
/// Elements one workgroup reduces before partial results are combined (256 per invocation).
const CHUNK: usize = 256 * 256;

/// The view with `axes` moved last, made contiguous: (storage, offset, rows, k).
fn rows_view(s: &GpuStorage, l: &Layout, axes: &[usize]) -> Result<(Option<GpuStorage>, usize, usize, usize)> {
    let kept: Vec<usize> = (0..l.rank()).filter(|a| !axes.contains(a)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes.iter()).copied().collect();
    let pl = l.permute("reduce", &perm)?;
    let k: usize = axes.iter().map(|&a| l.dims()[a]).product();
    let rows: usize = kept.iter().map(|&a| l.dims()[a]).product();
    if pl.is_contiguous() {
        Ok((None, pl.offset(), rows, k))
    } else {
        Ok((Some(s.copy_contiguous(&pl)?), 0, rows, k))
    }
}

/// The row-reduction kernel of `op` over `src_dt`.
pub(crate) fn reduce_source(op: ReduceOp, src_dt: DType) -> String {
    let is_arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let t = wgsl::ct(src_dt);
    let f = t == "f32";
    let (ident, better) = match op {
        ReduceOp::Sum => ("0", "return true;"),
        ReduceOp::Prod => ("1", "return true;"),
        ReduceOp::Max | ReduceOp::ArgMax => (
            if f {
                "-inf_f32()"
            } else if t == "i32" {
                "i32(-2147483648)"
            } else {
                "0u"
            },
            if f {
                "if (i == 0xffffffffu) { return true; } if (is_nan(v)) { return is_nan(w) && j < i; } \
                 return is_nan(w) || w > v || (w == v && j < i);"
            } else {
                "if (i == 0xffffffffu) { return true; } return w > v || (w == v && j < i);"
            },
        ),
        ReduceOp::Min | ReduceOp::ArgMin => (
            if f {
                "inf_f32()"
            } else if t == "i32" {
                "2147483647"
            } else {
                "0xffffffffu"
            },
            if f {
                "if (i == 0xffffffffu) { return true; } if (is_nan(v)) { return is_nan(w) && j < i; } \
                 return is_nan(w) || w < v || (w == v && j < i);"
            } else {
                "if (i == 0xffffffffu) { return true; } return w < v || (w == v && j < i);"
            },
        ),
    };
    // Sum and prod combine instead of choosing: rewrite the loop body through `better` returning
    // false and accumulating in place.
    let (better, ident) = match op {
        ReduceOp::Sum | ReduceOp::Prod => ("return false;".to_string(), ident.to_string()),
        _ => (better.to_string(), ident.to_string()),
    };
    let combine = match op {
        ReduceOp::Sum => Some("+"),
        ReduceOp::Prod => Some("*"),
        _ => None,
    };
    let write = if is_arg { "dst[row] = si[0];" } else { "dst[row] = bitcast<u32>(sv[0]);" };
    {
        let mut text = render(
            REDUCE,
            &[
                ("PRELUDE", PRELUDE),
                ("LOADERS", &loader("ld0", "in0", src_dt)),
                ("FUNCS", ""),
                ("CT", t),
                ("BETTER", &better),
                ("IDENT", &format!("{t}({ident})")),
                ("WRITE", write),
            ],
        );
        if let Some(c) = combine {
            text = text
                .replace(
                    "if (better(acc, idx, v, start + j)) { acc = v; idx = start + j; }",
                    &format!("acc = acc {c} v; idx = 0u;"),
                )
                .replace(
                    "if (better(a, si[lid.x], b, si[lid.x + s])) { sv[lid.x] = b; si[lid.x] = si[lid.x + s]; }",
                    &format!("sv[lid.x] = a {c} b;"),
                );
        }
        text
    }
}

/// Runs a CPU kernel on a host copy and uploads the result: integer sums and products need 64-bit
/// accumulation, which the 32-bit GPU kernels do not have yet.
fn on_host(
    s: &GpuStorage,
    l: &Layout,
    f: impl FnOnce(&CpuStorage, &Layout) -> Result<CpuStorage>,
) -> Result<GpuStorage> {
    let host = s.to_cpu(l)?;
    let out = f(&host, &Layout::contiguous(l.shape().clone()))?;
    GpuStorage::from_cpu(&s.ctx, &out)
}

pub(crate) fn reduce(s: &GpuStorage, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<GpuStorage> {
    if !s.dtype.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
        return on_host(s, l, |h, hl| h.reduce(hl, op, axes));
    }
    let (copy, offset, rows, k) = rows_view(s, l, axes)?;
    let src = copy.as_ref().unwrap_or(s);
    let ctx = s.ctx.clone();
    let acc_dt = compute_dtype(s.dtype);
    let is_arg = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    let src_dt = s.dtype;
    let key = format!("reduce:{}:{}", op.name(), s.dtype);
    let kernel = ctx.pipelines.get(&ctx, &key, 1, || reduce_source(op, src_dt))?;
    // Sum/prod/max/min of long rows reduce chunks first, then the chunk results.
    let chunk = if is_arg { k.max(1) } else { k.clamp(1, CHUNK) };
    let chunks = k.div_ceil(chunk).max(1);
    let out_dt = if is_arg { DType::U32 } else { acc_dt };
    let out = GpuStorage::alloc(&ctx, out_dt, rows * chunks)?;
    let params = [(rows * chunks) as u32, k as u32, offset as u32, chunk as u32, chunks as u32];
    let groups = wgsl::grid(rows * chunks, 1, ctx.limits.max_compute_workgroups_per_dimension);
    let bufs = [out.buffer.raw(), src.buffer.raw()];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params, groups)?;
    if chunks > 1 {
        let partial = Layout::contiguous([rows, chunks]);
        return reduce(&out, &partial, op, &[1])?.finish(op.output_dtype(s.dtype));
    }
    out.finish(op.output_dtype(s.dtype))
}

/// The prefix-sum kernel over `src_dt` (f32 for floats, i32 for the rest).
pub(crate) fn cumsum_source(src_dt: DType) -> String {
    let t = if src_dt.is_float() { "f32" } else { "i32" };
    render(CUMSUM, &[("PRELUDE", PRELUDE), ("LOADERS", &loader("ld0", "in0", src_dt)), ("CT", t)])
}

pub(crate) fn cumsum(s: &GpuStorage, l: &Layout, axis: usize) -> Result<GpuStorage> {
    if !s.dtype.is_float() {
        return on_host(s, l, |h, hl| h.cumsum(hl, axis));
    }
    let rank = l.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let (copy, offset, rows, k) = rows_view(s, l, &[axis])?;
    let src = copy.as_ref().unwrap_or(s);
    let ctx = s.ctx.clone();
    // Integers and bool accumulate into i64 like the CPU (in 32 bits on the GPU).
    let acc_dt = if s.dtype.is_float() { DType::F32 } else { DType::I32 };
    let src_dt = s.dtype;
    let key = format!("cumsum:{}", s.dtype);
    let kernel = ctx.pipelines.get(&ctx, &key, 1, || cumsum_source(src_dt))?;
    let out = GpuStorage::alloc(&ctx, acc_dt, rows * k)?;
    let params = [rows as u32, k as u32, offset as u32];
    let groups = wgsl::grid(rows, 64, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        &ctx,
        &kernel,
        &[out.buffer.raw(), src.buffer.raw()],
        &params,
        groups,
    )?;
    let out = out.finish(ReduceOp::Sum.output_dtype(s.dtype))?;
    if axis + 1 == rank {
        return Ok(out);
    }
    // `out` holds the permuted order; view it back in the input's axis order and copy.
    let pl = Layout::contiguous(perm.iter().map(|&a| l.dims()[a]).collect::<Vec<_>>());
    let mut inv = vec![0; rank];
    for (i, &a) in perm.iter().enumerate() {
        inv[a] = i;
    }
    out.copy_contiguous(&pl.permute("cumsum", &inv)?)
}
