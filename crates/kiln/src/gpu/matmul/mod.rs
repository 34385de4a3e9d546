//! Batched matmul on the GPU: the problem as the kernels see it (strides normalised, batch dims
//! merged, each operand's layout mode), the shared parameter block, and the launch of each plan:
//! - `tiled` (tiled.rs): register-blocked, workgroup-memory tiles; float dtypes;
//! - `skinny` (skinny.rs): few output rows, streams B once; float dtypes;
//! - `naive` (naive.wgsl): one output per invocation, 16x16 tiles; every numeric dtype (integers
//!   accumulate exactly in i32/u32), and the fallback when no tile fits the adapter.
//!
//! Any plan may run on the transposed problem (C^T = B^T A^T, written through transposed output
//! strides) and split K over workgroups (partial products summed by `splitk.wgsl`). Which plan
//! runs is `plan.rs`'s heuristic, or autotune's cached winner when it is on.
//!
//! Every matmul kernel takes `MatmulParams` (problem.rs): sizes, operand offsets and strides, merged
//! batch dims, output strides, the K split and the first batch of the dispatch.

use crate::gpu::runtime::autotune;
use crate::gpu::runtime::kernels::render;
pub mod coop;
mod plan;
mod problem;
mod skinny;
#[cfg(test)]
mod tests;
mod tiled;

use crate::gpu::runtime::params::params;
use crate::gpu::runtime::storage::compute_dtype;
use crate::gpu::runtime::wgsl::{self, loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Error, Layout, Result};
use plan::{Kernel, Plan};
pub(crate) use problem::{is_float, Mode};
use problem::{MatmulParams, Problem, BASES};
use skinny::Skinny;
use std::path::{Path, PathBuf};
use tiled::Tile;

const NAIVE: &str = include_str!("naive.wgsl");
const SPLITK: &str = include_str!("splitk.wgsl");

/// How `matmul_with` picks its plan.
pub(crate) enum Choice {
    /// The fixed heuristic (the default).
    Heuristic,
    /// The cached autotune winner for this device and shape bucket, benchmarked now if there is
    /// none; the cache file is this path (`None`: memory only).
    Tune(Option<PathBuf>),
    /// This plan (tests).
    #[allow(dead_code)]
    Force(Plan),
}

/// The naive kernel for `dt`.
pub(crate) fn naive_source(dt: DType) -> String {
    let loaders = loader("ld0", "in0", dt) + &loader("ld1", "in1", dt);
    render(
        NAIVE,
        &[
            ("PARAMS", &MatmulParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loaders),
            ("BASES", BASES),
            ("CT", wgsl::ct(dt)),
        ],
    )
}

/// `(key, WGSL)` of every matmul kernel variant of `dt`, for the catalog: naive (all numeric
/// dtypes); for floats every tile configuration with every pair of load modes, and every skinny
/// variant.
pub(crate) fn variants(dt: DType) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if dt == DType::Bool {
        return out;
    }
    out.push((format!("matmul:{dt}"), naive_source(dt)));
    if !is_float(dt) {
        return out;
    }
    for t in &tiled::TILES {
        for am in Mode::ALL {
            for bm in Mode::ALL {
                out.push((tiled_key(t, dt, am, bm), tiled::source(t, dt, am, bm)));
            }
        }
    }
    for s in Skinny::all(dt) {
        out.push((s.key(), skinny::source(&s)));
    }
    out
}

fn tiled_key(t: &Tile, dt: DType, am: Mode, bm: Mode) -> String {
    format!("matmul_tiled:{}:{dt}:{}:{}", t.name, am.name(), bm.name())
}

/// Split lanes per output of the split-K sum (`splitk.wgsl`): about a quarter of the splits,
/// a power of two up to 8.
fn splitk_lanes(splits: usize) -> usize {
    (splits / 4).clamp(1, 8).next_power_of_two().min(8)
}

/// The kernel summing split-K partial products.
pub(crate) fn splitk_source() -> String {
    render(SPLITK, &[("PARAMS", &SplitkParams::wgsl())])
}

params! {
    /// The split-K sum's parameters: outputs, splits, split lanes per output.
    struct SplitkParams { len: u32, splits: u32, lanes: u32 }
}

pub(crate) fn matmul(a: &GpuStorage, al: &Layout, b: &GpuStorage, bl: &Layout) -> Result<GpuStorage> {
    // f16 on tensor cores / simdgroup matrices where the adapter and the shape allow it.
    if let Some(r) = coop::try_matmul_coop(a, al, b, bl) {
        return r;
    }
    let choice = if autotune::enabled(&a.ctx) { Choice::Tune(autotune::default_path()) } else { Choice::Heuristic };
    matmul_with(a, al, b, bl, choice)
}

/// `a @ b` with the plan `choice` gives.
pub(crate) fn matmul_with(
    a: &GpuStorage,
    al: &Layout,
    b: &GpuStorage,
    bl: &Layout,
    choice: Choice,
) -> Result<GpuStorage> {
    let ctx = a.ctx.clone();
    let p = Problem::new(a.dtype, al, bl)?;
    let acc = compute_dtype(a.dtype);
    let len = p.batch * p.m * p.n;
    if len == 0 {
        return GpuStorage::alloc(&ctx, acc, 0)?.finish(a.dtype);
    }
    let out = GpuStorage::alloc(&ctx, acc, len)?;
    if p.k == 0 {
        out.fill_words(&[0])?;
        return out.finish(a.dtype);
    }
    let plan = match choice {
        Choice::Heuristic => plan::heuristic(&p, &ctx.limits),
        Choice::Force(plan) => plan,
        Choice::Tune(path) => tuned_plan(&p, path.as_deref(), a, b, &out)?,
    };
    run(&p, plan, a, b, &out)?;
    out.finish(a.dtype)
}

/// The autotuned plan for `p`: the cached winner of its shape bucket on this device, else the
/// fastest candidate now (timed into `out`), remembered in `path`.
fn tuned_plan(p: &Problem, path: Option<&Path>, a: &GpuStorage, b: &GpuStorage, out: &GpuStorage) -> Result<Plan> {
    let ctx = &a.ctx;
    if !is_float(p.dt) {
        return Ok(Plan::NAIVE);
    }
    let key = format!("{}|{}", autotune::device_key(ctx), plan::tune_key(p));
    let cached = || autotune::lookup(path, &key).and_then(|s| Plan::decode(&s));
    if let Some(plan) = cached() {
        return Ok(plan);
    }
    let _session = autotune::session();
    if let Some(plan) = cached() {
        return Ok(plan);
    }
    let candidates = plan::candidates(p, &ctx.limits);
    // The first candidate is the heuristic's plan; a failure here shows again in its timing.
    if let Some(&first) = candidates.first() {
        let _ = autotune::warm_up(ctx, || run(p, first, a, b, out));
    }
    // Two rounds over the candidates, each keeping its best time. A candidate that fails (compile
    // error, limits) is skipped; one over twice the best after the first round is not timed again.
    let mut times: Vec<Option<f64>> = vec![None; candidates.len()];
    for round in 0..2 {
        for (plan, slot) in candidates.iter().zip(0..) {
            let best = times.iter().flatten().copied().fold(f64::INFINITY, f64::min);
            if round > 0 && times[slot].is_none_or(|t| t > 2.0 * best) {
                continue;
            }
            if let Ok(t) = autotune::time(ctx, 3, 4.0 * best, || run(p, *plan, a, b, out)) {
                times[slot] = Some(times[slot].map_or(t, |old: f64| old.min(t)));
            }
        }
    }
    let fastest =
        times.iter().zip(&candidates).filter_map(|(t, c)| t.map(|t| (t, *c))).min_by(|x, y| x.0.total_cmp(&y.0));
    let plan = fastest.map_or_else(|| plan::heuristic(p, &ctx.limits), |(_, plan)| plan);
    autotune::record(path, &key, &plan.encode());
    Ok(plan)
}

/// Records the dispatches of `plan` computing `p` (operands `a`, `b`) into `out`, the contiguous
/// (batch, M, N) output in the compute dtype. Plans a dtype cannot take fall back to the naive
/// kernel, tile configurations the adapter cannot run to the heuristic.
pub(crate) fn run(p: &Problem, plan: Plan, a: &GpuStorage, b: &GpuStorage, out: &GpuStorage) -> Result<()> {
    let ctx = &a.ctx;
    let plan = match plan.kernel {
        _ if !is_float(p.dt) => Plan::NAIVE,
        Kernel::Tiled(t) if !t.fits(&ctx.limits) => plan::heuristic(p, &ctx.limits),
        _ => plan,
    };
    let (p, a, b) = if plan.swap { (p.transposed(), b, a) } else { (p.clone(), a, b) };
    let (kchunk, splits) = plan::chunking(&p, &plan);
    let part = if splits > 1 { Some(GpuStorage::alloc(ctx, DType::F32, splits * out.len)?) } else { None };
    let dst = part.as_ref().unwrap_or(out);
    let bufs = [dst.buffer.raw(), a.buffer.raw(), b.buffer.raw()];
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let too_big = || Error::Gpu {
        op: "matmul",
        msg: format!("a {}x{} output (batch {}) exceeds the grid limit of {max}", p.m, p.n, p.batch),
    };
    // (kernel key, source, grid x, grid y, batches per z step, row blocks)
    let (key, src, gx, gy, zstep, mblocks): (String, Box<dyn FnOnce() -> String>, usize, usize, usize, usize) =
        match plan.kernel {
            Kernel::Naive => {
                let dt = p.dt;
                (format!("matmul:{dt}"), Box::new(move || naive_source(dt)), p.n.div_ceil(16), p.m.div_ceil(16), 1, 0)
            }
            Kernel::Tiled(t) => {
                let (dt, am, bm) = (p.dt, p.a.mode(), p.b.mode());
                let key = tiled_key(&t, dt, am, bm);
                let gx = p.n.div_ceil(t.bn as usize);
                (key, Box::new(move || tiled::source(&t, dt, am, bm)), gx, p.m.div_ceil(t.bm as usize), splits, 0)
            }
            Kernel::Skinny => {
                let s = Skinny::for_problem(&p);
                let key = s.key();
                let mblocks = p.m.div_ceil(s.rows as usize);
                let gx = p.n.div_ceil(s.cols_per_group() as usize) * mblocks;
                (key, Box::new(move || skinny::source(&s)), gx, splits, 1, mblocks)
            }
        };
    if gx > max || gy > max || zstep > max {
        return Err(too_big());
    }
    let kernel = ctx.pipelines.get(ctx, &key, 2, src)?;
    let mut params = p.params(splits, kchunk, mblocks);
    let per_dispatch = max / zstep;
    let mut first = 0;
    while first < p.batch {
        let count = per_dispatch.min(p.batch - first);
        params.first_batch = first as u32;
        let groups = [gx as u32, gy as u32, (count * zstep) as u32];
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)?;
        first += count;
    }
    if let Some(part) = &part {
        splitk_sum(ctx, out, part, out.len, splits)?;
    }
    Ok(())
}

/// `out` (f32, `len`) = the sum of the `splits` planes of `len` partial products in `part`.
pub(crate) fn splitk_sum(
    ctx: &std::sync::Arc<crate::gpu::runtime::GpuContext>,
    out: &GpuStorage,
    part: &GpuStorage,
    len: usize,
    splits: usize,
) -> Result<()> {
    let kernel = ctx.pipelines.get(ctx, "matmul_splitk", 1, splitk_source)?;
    let lanes = splitk_lanes(splits);
    let groups = wgsl::grid(len.div_ceil(256 / lanes), 1, ctx.limits.max_compute_workgroups_per_dimension);
    let bufs = [out.buffer.raw(), part.buffer.raw()];
    let params = SplitkParams { len: len as u32, splits: splits as u32, lanes: lanes as u32 };
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)
}
