//! Softmax, RMSNorm/LayerNorm (kernels in `rowwise.rs`), RoPE and attention launchers.

use super::elementwise::{Elementwise, FUNCS};
use super::kernels::render;
use super::wgsl::{self, loader, PRELUDE};
use super::{BackendStorage, GpuStorage};
use crate::op::AttentionParams;
use crate::{DType, Error, Layout, Result};

const ATTENTION: &str = include_str!("attention.wgsl");

pub(crate) fn attention_source(dt: DType) -> String {
    let loaders = loader("ld0", "in0", dt) + &loader("ld1", "in1", dt) + &loader("ld2", "in2", dt);
    render(ATTENTION, &[("PRELUDE", PRELUDE), ("LOADERS", &loaders)])
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
    super::rowwise::softmax_last(s, l, log)
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
    super::rowwise::norm(s, l, w, wl, b, eps, rms)
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

pub(crate) fn attention(
    q: &GpuStorage,
    ql: &Layout,
    k: &GpuStorage,
    kl: &Layout,
    v: &GpuStorage,
    vl: &Layout,
    p: AttentionParams,
) -> Result<GpuStorage> {
    let (b, hq, tq, d) = (ql.dims()[0], ql.dims()[1], ql.dims()[2], ql.dims()[3]);
    let (hkv, tk, dv) = (kl.dims()[1], kl.dims()[2], vl.dims()[3]);
    if d > 256 || dv > 256 {
        return Err(Error::Gpu {
            op: "attention",
            msg: format!("head sizes up to 256 are supported, got d={d}, dv={dv}"),
        });
    }
    let cont = |s: &GpuStorage, l: &Layout| -> Result<(Option<GpuStorage>, usize)> {
        if l.is_contiguous() {
            Ok((None, l.offset()))
        } else {
            Ok((Some(s.copy_contiguous(l)?), 0))
        }
    };
    let (qc, qo) = cont(q, ql)?;
    let (kc, ko) = cont(k, kl)?;
    let (vc, vo) = cont(v, vl)?;
    let rows = b * hq * tq;
    let out = GpuStorage::alloc(&q.ctx, DType::F32, rows * dv)?;
    let params = [
        rows as u32,
        hq as u32,
        hkv as u32,
        tq as u32,
        tk as u32,
        d as u32,
        dv as u32,
        (p.scale as f32).to_bits(),
        p.causal as u32,
        qo as u32,
        ko as u32,
        vo as u32,
    ];
    let dt = q.dtype;
    let (qs, ks, vs) = (qc.as_ref().unwrap_or(q), kc.as_ref().unwrap_or(k), vc.as_ref().unwrap_or(v));
    launch(
        q,
        format!("attention:{dt}"),
        || attention_source(dt),
        &[out.buffer.raw(), qs.buffer.raw(), ks.buffer.raw(), vs.buffer.raw()],
        3,
        &params,
        rows,
    )?;
    out.finish(dt)
}
