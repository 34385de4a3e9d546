//! Prefill attention on cooperative matrices (`flash_coop.wgsl`, issues 22 and 34): f16 and bf16
//! queries, keys and values with head sizes up to 128, where the adapter has f16 cooperative
//! matrices. One pass over the keys with a lazily rescaled maximum; the kernel's layout and steps
//! are described in the `.wgsl`. `emulate` builds the same kernel with plain WGSL in place of the
//! cooperative ops (`emulation.rs`; same workgroup-memory layouts), which the conformance tests run
//! on adapters without cooperative matrices.

mod config;
mod emit;
mod emulation;

use super::params::AttnParams;
use crate::gpu::pointwise::line_maxima::{self, Lines};
use crate::gpu::runtime::coop::support;
use crate::gpu::runtime::wgsl;
use crate::gpu::runtime::{GpuContext, GpuStorage};
use crate::op::AttentionParams;
use crate::{DType, Layout, Result};

use config::CoopAttnParams;
pub(crate) use config::{Ablate, Config};
pub(crate) use emit::source;

/// `(subgroups, keys per tile, lanes per query row)` in order of preference: the first whose
/// workgroup memory fits the adapter is taken.
const SHAPES: [(u32, u32, u32); 8] =
    [(4, 64, 2), (4, 32, 2), (2, 64, 2), (2, 32, 2), (2, 32, 1), (1, 32, 1), (2, 16, 2), (1, 16, 1)];
/// Largest head size (q/k and v).
pub(crate) const MAX_HEAD: usize = 128;
/// Below this many workgroups the plain flash kernel, which also splits the keys, is used.
const MIN_GROUPS: usize = 64;

/// The configuration for these head sizes on `ctx` (`emulate: Some(s)` on any adapter with
/// SHADER_F16), or `None` when the kernel does not apply.
pub(crate) fn config(ctx: &GpuContext, bf16: bool, d: usize, dv: usize, emulate: Option<u32>) -> Option<Config> {
    let (s, sg) = match emulate {
        Some(s) => (ctx.has(wgpu::Features::SHADER_F16) && matches!(s, 8 | 16)).then_some((s, 32))?,
        None => support(ctx)?,
    };
    if d == 0 || dv == 0 || d > MAX_HEAD || dv > MAX_HEAD || !sg.is_multiple_of(s) {
        return None;
    }
    let vulkan = ctx.summary.backend == "Vulkan" || emulate.is_some();
    let round = |x: usize| (x.div_ceil(s as usize) * s as usize) as u32;
    let base = Config {
        s,
        sg,
        unit: if vulkan { 4 } else { 1 },
        d: round(d).max(4),
        dv: round(dv),
        bf16,
        pairs: dv.is_multiple_of(2),
        nsg: 0,
        bk: 0,
        lpr: 1,
        emulate: emulate.is_some(),
        ablate: Ablate::from_env(),
    };
    // Two lanes per row agree through subgroup shuffles: adjacent invocations share a subgroup
    // wherever subgroups exist (the emulated kernel's 32-lane "subgroups" included).
    let shuffles = ctx.has(wgpu::Features::SUBGROUP);
    let lim = &ctx.limits;
    shape(base, lim.max_compute_workgroup_storage_size, lim.max_compute_invocations_per_workgroup, shuffles)
}

/// `base` with the first of [`SHAPES`] (after `KILN_COOP_ATTN_SHAPE`'s) that fits `bytes` of
/// workgroup memory and `invocations`, with two lanes per row only where `shuffles`.
fn shape(base: Config, bytes: u32, invocations: u32, shuffles: bool) -> Option<Config> {
    let chosen = crate::settings::COOP_ATTN_SHAPE.get().ok().and_then(|v| {
        let n: Vec<u32> = v.split(',').map(|x| x.trim().parse().ok()).collect::<Option<_>>()?;
        (n.len() == 3).then(|| (n[0], n[1], n[2]))
    });
    chosen.into_iter().chain(SHAPES).map(|(nsg, bk, lpr)| Config { nsg, bk, lpr, ..base }).find(|c| {
        c.bk.is_multiple_of(c.s)
            && matches!(c.lpr, 1 | 2)
            && (c.bk / c.lpr).is_multiple_of(4)
            && (c.lpr == 1 || shuffles)
            && c.sg.is_multiple_of(c.lpr)
            && c.r().is_multiple_of(c.s)
            && c.workgroup_bytes() <= bytes
            && c.nsg * c.sg <= invocations
    })
}

/// The automatic path takes this kernel unless `KILN_COOP_ATTN=0`: on an H100 it is 2.6-4.4x the
/// plain flash kernel in f16 and 1.7-4.1x in bf16 (docs/PERFORMANCE.md).
fn disabled_by_env() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| !crate::settings::COOP_ATTN.is_not_zero())
}

/// Attention through the cooperative kernel, or `None` where it does not apply (dtype, head sizes,
/// adapter, too few workgroups without `force`, views whose indices do not fit in u32).
#[allow(clippy::too_many_arguments)]
pub(crate) fn try_flash_coop(
    q: &GpuStorage,
    ql: &Layout,
    k: &GpuStorage,
    kl: &Layout,
    v: &GpuStorage,
    vl: &Layout,
    p: AttentionParams,
    emulate: Option<u32>,
    force: bool,
) -> Option<Result<GpuStorage>> {
    if !force && emulate.is_none() && disabled_by_env() {
        return None;
    }
    let dt = q.dtype;
    if !matches!(dt, DType::F16 | DType::BF16) || k.dtype != dt || v.dtype != dt {
        return None;
    }
    let (b, hq, tq, d) = (ql.dims()[0], ql.dims()[1], ql.dims()[2], ql.dims()[3]);
    let (hkv, tk, dv) = (kl.dims()[1], kl.dims()[2], vl.dims()[3]);
    if b * hq * tq * tk == 0 || hkv == 0 || hq % hkv != 0 {
        return None;
    }
    let ctx = &q.ctx;
    let c = config(ctx, dt == DType::BF16, d, dv, emulate)?;
    let nqb = tq.div_ceil(c.bq() as usize);
    let groups = b * hq * nqb;
    if !force && groups < MIN_GROUPS {
        return None;
    }
    let fits = wgsl::indexable;
    let aligned = [q, k, v].iter().all(|s| s.buffer.size().is_multiple_of(8));
    if !fits(ql) || !fits(kl) || !fits(vl) || !aligned || (b * hq * tq * dv) as u64 >= u32::MAX as u64 {
        return None;
    }
    Some(run(q, ql, k, kl, v, vl, p, &c, groups))
}

#[allow(clippy::too_many_arguments)]
fn run(
    q: &GpuStorage,
    ql: &Layout,
    k: &GpuStorage,
    kl: &Layout,
    v: &GpuStorage,
    vl: &Layout,
    p: AttentionParams,
    c: &Config,
    groups: usize,
) -> Result<GpuStorage> {
    let ctx = &q.ctx;
    let dt = q.dtype;
    let (b, hq, tq, d) = (ql.dims()[0], ql.dims()[1], ql.dims()[2], ql.dims()[3]);
    let (hkv, tk, dv) = (kl.dims()[1], kl.dims()[2], vl.dims()[3]);
    let out_dt = if c.pairs { dt } else { DType::F32 };
    let out = GpuStorage::alloc(ctx, out_dt, b * hq * tq * dv)?;
    let (xq, xk, xv) = (0, b * hq * tq, b * hq * tq + b * hkv * tk);
    let [q_off, q_sb, q_sh, q_st, q_se] = wgsl::view_words(ql);
    let [k_off, k_sb, k_sh, k_st, k_se] = wgsl::view_words(kl);
    let [v_off, v_sb, v_sh, v_st, v_se] = wgsl::view_words(vl);
    #[rustfmt::skip]
    let base = AttnParams {
        b: b as u32, hq: hq as u32, hkv: hkv as u32, tq: tq as u32, tk: tk as u32, d: d as u32, dv: dv as u32,
        scale: p.scale as f32,
        causal: p.causal as u32,
        softcap: p.softcap.unwrap_or(0.0) as f32,
        softcap_inv: p.softcap.map_or(0.0, |c| 1.0 / c) as f32,
        window: p.window.unwrap_or(0) as u32,
        blocks: tq.div_ceil(c.bq() as usize) as u32,
        groups: groups as u32,
        q_off, q_sb, q_sh, q_st, q_se,
        k_off, k_sb, k_sh, k_st, k_se,
        v_off, v_sb, v_sh, v_st, v_se,
        ..AttnParams::default()
    };
    let params =
        CoopAttnParams { base, xq: xq as u32, xk: xk as u32, xv: xv as u32, lane_elems: c.s * c.s / c.sg }.words();
    // bf16: the largest magnitude of every query row, key row and value column.
    let mx = if c.bf16 {
        let mx = line_maxima::maxima_buffer(ctx, xv + b * hkv * dv)?;
        let (sq, sk, sv) = (ql.strides(), kl.strides(), vl.strides());
        let (qd, kd) = ([b, hq], [b, hkv]);
        let (qs, ks, vs) = ([sq[0], sq[1]], [sk[0], sk[1]], [sv[0], sv[1]]);
        let lq = Lines {
            lines: tq,
            k: d,
            offset: ql.offset(),
            line_stride: sq[2],
            k_stride: sq[3],
            batch: b * hq,
            dims: &qd,
            strides: &qs,
        };
        let lk = Lines {
            lines: tk,
            k: d,
            offset: kl.offset(),
            line_stride: sk[2],
            k_stride: sk[3],
            batch: b * hkv,
            dims: &kd,
            strides: &ks,
        };
        let lv = Lines {
            lines: dv,
            k: tk,
            offset: vl.offset(),
            line_stride: sv[3],
            k_stride: sv[2],
            batch: b * hkv,
            dims: &kd,
            strides: &vs,
        };
        line_maxima::line_maxima(q, &lq, &mx, xq)?;
        line_maxima::line_maxima(k, &lk, &mx, xk)?;
        line_maxima::line_maxima(v, &lv, &mx, xv)?;
        Some(mx)
    } else {
        None
    };
    let kernel = ctx.pipelines.get(ctx, &c.key(), if c.bf16 { 4 } else { 3 }, || source(c))?;
    let mut bufs = vec![out.buffer.raw(), q.buffer.raw(), k.buffer.raw(), v.buffer.raw()];
    bufs.extend(mx.as_ref().map(|m| m.buffer.raw()));
    let wg = (c.nsg * c.sg) as usize;
    let grid = wgsl::grid(groups * wg, wg, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params, grid)?;
    out.finish(dt)
}

/// Every variant, for the translation test.
pub(crate) fn catalog() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (s, unit, emulate) in [(16, 4, false), (8, 1, false), (16, 4, true)] {
        for bf16 in [false, true] {
            for (d, dv, pairs) in [(128, 128, true), (64, 64, true), (80, 48, false)] {
                let ablate = Ablate::None;
                let base = Config { s, sg: 32, unit, d, dv, bf16, pairs, nsg: 0, bk: 0, lpr: 1, emulate, ablate };
                // The shapes taken with 48 KiB (NVIDIA) and 32 KiB (lavapipe, many mobile GPUs).
                for bytes in [48 << 10, 32 << 10] {
                    let c = shape(base, bytes, 1024, true).expect("a shape fits");
                    if !out.iter().any(|(k, _)| *k == c.key()) {
                        out.push((c.key(), source(&c)));
                    }
                }
            }
        }
    }
    // The ablations (`KILN_COOP_ATTN_ABLATE`), so that each keeps compiling.
    for bf16 in [false, true] {
        for ablate in [Ablate::Stage, Ablate::Scores, Ablate::Softmax, Ablate::Pv] {
            let base = Config {
                s: 16,
                sg: 32,
                unit: 4,
                d: 128,
                dv: 128,
                bf16,
                pairs: true,
                nsg: 0,
                bk: 0,
                lpr: 1,
                emulate: false,
                ablate,
            };
            let c = shape(base, 48 << 10, 1024, true).expect("a shape fits");
            out.push((c.key(), source(&c)));
        }
    }
    out
}
