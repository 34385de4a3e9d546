//! Softmax, RMSNorm/LayerNorm and RoPE launchers.

use super::elementwise::{Elementwise, FUNCS};
use super::kernels::render;
use super::wgsl::{self, loader, PRELUDE};
use super::{BackendStorage, GpuStorage};
use crate::{DType, Layout, Result};

const SOFTMAX: &str = include_str!("softmax.wgsl");
const NORM: &str = include_str!("norm.wgsl");
const ROW_SUM: &str = include_str!("row_sum.wgsl");

pub(crate) fn softmax_source(dt: DType) -> String {
    render(SOFTMAX, &[("PRELUDE", PRELUDE), ("LOADERS", &loader("ld0", "in0", dt)), ("REDUCE_SUM", ROW_SUM)])
}

pub(crate) fn norm_source(dt: DType, w: DType, b: DType) -> String {
    let loaders = loader("ld0", "in0", dt) + &loader("ld1", "in1", w) + &loader("ld2", "in2", b);
    render(NORM, &[("PRELUDE", PRELUDE), ("LOADERS", &loaders), ("REDUCE_SUM", ROW_SUM)])
}

pub(crate) fn rope_body(interleaved: bool) -> String {
    if interleaved {
        "let d = p[37]; let t = p[38]; let half = d / 2u; let j = e % d; let pos = (e / d) % t; \
         let row = p[34] + e - j; let i = j / 2u; let x1 = ld0(row + 2u * i); let x2 = ld0(row + 2u * i + 1u); \
         let c = ld1(p[35] + pos * half + i); let s = ld2(p[36] + pos * half + i); \
         return select(x1 * s + x2 * c, x1 * c - x2 * s, (j & 1u) == 0u);"
            .into()
    } else {
        "let d = p[37]; let t = p[38]; let half = d / 2u; let j = e % d; let pos = (e / d) % t; \
         let row = p[34] + e - j; let i = j % half; let x1 = ld0(row + i); let x2 = ld0(row + i + half); \
         let c = ld1(p[35] + pos * half + i); let s = ld2(p[36] + pos * half + i); \
         return select(x2 * c + x1 * s, x1 * c - x2 * s, j < half);"
            .into()
    }
}

/// `s` viewed by `l` as contiguous rows: (copy if one was needed, offset, rows, k).
fn rows(s: &GpuStorage, l: &Layout) -> Result<(Option<GpuStorage>, usize, usize, usize)> {
    let k = *l.dims().last().unwrap_or(&1);
    let rows = l.elem_count().checked_div(k).unwrap_or(0);
    if l.is_contiguous() {
        Ok((None, l.offset(), rows, k))
    } else {
        Ok((Some(s.copy_contiguous(l)?), 0, rows, k))
    }
}

fn launch(
    s: &GpuStorage,
    key: String,
    src: impl FnOnce() -> String,
    bufs: &[&wgpu::Buffer],
    inputs: usize,
    params: &[u32],
    groups: usize,
) -> Result<()> {
    let ctx = &s.ctx;
    let kernel = ctx.pipelines.get(ctx, &key, inputs, src)?;
    let grid = wgsl::grid(groups, 1, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, bufs, params, grid)
}

pub(crate) fn softmax_last(s: &GpuStorage, l: &Layout, log: bool) -> Result<GpuStorage> {
    let (copy, off, rows, k) = rows(s, l)?;
    let src = copy.as_ref().unwrap_or(s);
    let out = GpuStorage::alloc(&s.ctx, DType::F32, rows * k)?;
    let dt = s.dtype;
    let params = [rows as u32, k as u32, off as u32, log as u32];
    launch(s, format!("softmax:{dt}"), || softmax_source(dt), &[out.buffer.raw(), src.buffer.raw()], 1, &params, rows)?;
    out.finish(dt)
}

pub(crate) fn norm(
    s: &GpuStorage,
    l: &Layout,
    w: &GpuStorage,
    wl: &Layout,
    b: Option<(&GpuStorage, &Layout)>,
    eps: f64,
    rms: bool,
) -> Result<GpuStorage> {
    let (copy, off, rows, k) = rows(s, l)?;
    let src = copy.as_ref().unwrap_or(s);
    let out = GpuStorage::alloc(&s.ctx, DType::F32, rows * k)?;
    let dt = s.dtype;
    let (bs, bl) = b.unwrap_or((w, wl));
    let st = |l: &Layout| l.strides().first().copied().unwrap_or(0) as u32;
    let params = [
        rows as u32,
        k as u32,
        off as u32,
        rms as u32,
        (eps as f32).to_bits(),
        wl.offset() as u32,
        st(wl),
        bl.offset() as u32,
        st(bl),
        b.is_some() as u32,
    ];
    launch(
        s,
        format!("norm:{dt}:{}:{}", w.dtype, bs.dtype),
        || norm_source(dt, w.dtype, bs.dtype),
        &[out.buffer.raw(), src.buffer.raw(), w.buffer.raw(), bs.buffer.raw()],
        3,
        &params,
        rows,
    )?;
    out.finish(dt)
}

pub(crate) fn rope(
    x: &GpuStorage,
    l: &Layout,
    cos: &GpuStorage,
    cl: &Layout,
    sin: &GpuStorage,
    sl: &Layout,
    interleaved: bool,
) -> Result<GpuStorage> {
    let (copy, off, _, d) = rows(x, l)?;
    let src = copy.as_ref().unwrap_or(x);
    let cos_c = cos.copy_contiguous(cl)?;
    let sin_c = sin.copy_contiguous(sl)?;
    let n = l.elem_count();
    let t = l.dims()[l.rank() - 2];
    let body = rope_body(interleaved);
    let l0 = Layout::new(vec![n].into(), vec![0], off);
    let l1 = Layout::new(vec![n].into(), vec![0], 0);
    Elementwise {
        name: format!("rope:{interleaved}"),
        inputs: vec![(src, &l0), (&cos_c, &l1), (&sin_c, &l1)],
        out: x.dtype,
        body,
        funcs: FUNCS,
        consts: vec![d as u32, t as u32],
        raw: Some(n),
    }
    .run()
}
