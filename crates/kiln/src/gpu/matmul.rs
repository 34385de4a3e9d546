//! Batched matmul: a 16x16 tiled kernel over strided operands (the performance issue replaces it with
//! register-blocked and cooperative-matrix variants).

use super::kernels::render;
use super::wgsl::{self, loader, PRELUDE};
use super::{compute_dtype, GpuStorage};
use crate::layout::collapse;
use crate::{DType, Error, Layout, Result};

const MATMUL: &str = include_str!("matmul.wgsl");

/// The tiled matmul kernel for `dt`.
pub(crate) fn source(dt: DType) -> String {
    let loaders = loader("ld0", "in0", dt) + &loader("ld1", "in1", dt);
    render(MATMUL, &[("PRELUDE", PRELUDE), ("LOADERS", &loaders), ("CT", wgsl::ct(dt))])
}

pub(crate) fn matmul(a: &GpuStorage, al: &Layout, b: &GpuStorage, bl: &Layout) -> Result<GpuStorage> {
    let rank = al.rank();
    let (m, k) = (al.dims()[rank - 2], al.dims()[rank - 1]);
    let n = bl.dims()[rank - 1];
    let batch_dims = &al.dims()[..rank - 2];
    let batch: usize = batch_dims.iter().product();
    let (bd, bs) = collapse(batch_dims, &[&al.strides()[..rank - 2], &bl.strides()[..rank - 2]]);
    if bd.len() > 4 {
        return Err(Error::Gpu {
            op: "matmul",
            msg: format!("batch dims {batch_dims:?} do not merge into 4 or fewer"),
        });
    }
    let ctx = a.ctx.clone();
    let acc = compute_dtype(a.dtype);
    let out = GpuStorage::alloc(&ctx, acc, batch * m * n)?;
    if batch * m * n == 0 {
        return out.finish(a.dtype);
    }
    if k == 0 {
        super::index::fill_words(&out, &[0])?;
        return out.finish(a.dtype);
    }
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    if batch > max as usize {
        return Err(Error::Gpu { op: "matmul", msg: format!("{batch} batches exceed the grid limit of {max}") });
    }
    let dt = a.dtype;
    let key = format!("matmul:{dt}");
    let kernel = ctx.pipelines.get(&ctx, &key, 2, || source(dt))?;
    let s = |l: &Layout, i: usize| l.strides()[i] as u32;
    let mut params = vec![
        m as u32,
        n as u32,
        k as u32,
        al.offset() as u32,
        bl.offset() as u32,
        s(al, rank - 2),
        s(al, rank - 1),
        s(bl, rank - 2),
        s(bl, rank - 1),
        if batch > 1 { bd.len() as u32 } else { 0 },
    ];
    params.resize(22, 0);
    if batch > 1 {
        for (i, &d) in bd.iter().enumerate() {
            params[10 + i] = d as u32;
            params[14 + i] = bs[0][i] as u32;
            params[18 + i] = bs[1][i] as u32;
        }
    }
    let groups = [n.div_ceil(16) as u32, m.div_ceil(16) as u32, batch as u32];
    if groups[0] > max || groups[1] > max {
        return Err(Error::Gpu { op: "matmul", msg: format!("a {m}x{n} output exceeds the grid limit") });
    }
    let bufs = [out.buffer.raw(), a.buffer.raw(), b.buffer.raw()];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params, groups)?;
    out.finish(a.dtype)
}
