//! The folded decode attention launch: one dispatch per call. The split workgroups write their
//! partial rows to an f32 scratch buffer and the last one of each row chunk to finish merges them
//! (decode_fold.wgsl); which is last is counted in a per-context counter buffer that every dispatch
//! leaves zeroed. Vulkan only (naga writes `storageBarrier()` there as a device-scope acquire-release
//! control barrier, what the "last workgroup merges" pattern needs); elsewhere, and with
//! `KILN_DECODE_FOLD=0`, the two-dispatch path with combine.wgsl runs.
//!
//! Keys per split: the chunks (batch x key/value heads x row chunks) times the splits aim at
//! [`TARGET_GROUPS`] workgroups (a few per SM on an H200, enough bytes in flight to stream at long
//! contexts), at least [`MIN_SPLIT`] keys (two steps of 16: short contexts take one round of loads
//! per workgroup) and at most [`MAX_SPLITS`] splits (the last workgroup's merge reads them all).
//! For 1 sequence, 8 key/value heads and 4 query heads each (one row chunk a head): 512 keys -> 32
//! keys x 16 splits (128 workgroups), 4096 -> 128 x 32 (256), 32768 -> 1024 x 32 (256).
//! `KILN_DECODE_SPLIT` fixes the keys per split, `KILN_DECODE_GROUPS` the target, for sweeps.

use super::decode_lanes::DecodeVariant;
use super::emit::dispatch_rw;
use super::params::AttnParams;
use crate::gpu::runtime::{GpuContext, GpuStorage};
use crate::{DType, Result};

/// Workgroups the folded split aims for: 256 rather than 512, since on an H200 (bf16, 32 query / 8
/// key/value heads, head size 128) 256 was faster at 4096 and 32768 keys and the same at 512.
const TARGET_GROUPS: usize = 256;
/// Fewest keys per split.
const MIN_SPLIT: usize = 32;
/// Most splits per row chunk.
const MAX_SPLITS: usize = 64;

/// Whether decode attention folds its combine into the attention dispatch on this context: Vulkan
/// adapters, unless `KILN_DECODE_FOLD=0`.
pub(super) fn enabled(ctx: &GpuContext) -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = match FORCE.with(|f| f.get()) {
        1 => false,
        2 => true,
        _ => *ON.get_or_init(|| crate::settings::DECODE_FOLD.is_not_zero()),
    };
    ctx.summary.backend == "Vulkan" && on
}

thread_local! {
    /// 0: `KILN_DECODE_FOLD` decides; 1: the two-dispatch path; 2: the folded one (on Vulkan).
    static FORCE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Forces the folded (`Some(true)`) or the two-dispatch (`Some(false)`) decode path for calls on
/// this thread, or hands the choice back to the setting (`None`): for tests of both paths in one
/// run (each test's thread its own choice, so tests running meanwhile keep theirs).
pub(crate) fn force(on: Option<bool>) {
    FORCE.with(|f| f.set(on.map_or(0, |on| 1 + on as u8)));
}

/// A positive integer setting, read once.
fn setting(s: &crate::settings::Setting, cell: &'static std::sync::OnceLock<Option<usize>>) -> Option<usize> {
    *cell.get_or_init(|| s.get().ok().and_then(|v| v.trim().parse().ok()).filter(|&n| n > 0))
}

/// Keys per split for `tk` keys when `chunks` workgroups exist without splitting: a multiple of
/// `step` (the kernel's keys per loop iteration).
pub(super) fn split_keys(tk: usize, chunks: usize, step: usize) -> usize {
    static FIXED: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    static GROUPS: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let c = match setting(&crate::settings::DECODE_SPLIT, &FIXED) {
        Some(fixed) => fixed,
        None => {
            let target = setting(&crate::settings::DECODE_GROUPS, &GROUPS).unwrap_or(TARGET_GROUPS);
            let splits = target.div_ceil(chunks.max(1)).clamp(1, MAX_SPLITS);
            tk.div_ceil(splits).max(MIN_SPLIT)
        }
    };
    c.max(1).div_ceil(step) * step
}

/// Records the folded decode kernel `cfg` (already folded) over `groups` workgroups: `chunks` row
/// chunks times `nsplit` splits (more than one). `params` has everything but `part_start`.
#[allow(clippy::too_many_arguments)]
pub(super) fn launch(
    [out, q, k, v]: [&GpuStorage; 4],
    dt: DType,
    out_dt: DType,
    cfg: DecodeVariant,
    mut params: AttnParams,
    chunks: usize,
    nsplit: usize,
) -> Result<()> {
    let ctx = &q.ctx;
    // Per (chunk, split, row): a vec4 (max, sum), then the rows' value sums in vec4s.
    let rows = chunks * nsplit * cfg.rows();
    params.part_start = rows as u32;
    let part = GpuStorage::alloc(ctx, DType::F32, 4 * rows * (1 + cfg.dv_padded() / 4))?;
    let tickets = ctx.counters("attention_decode_tickets", chunks);
    let params = params.words();
    let bufs = [out.buffer.raw(), part.buffer.raw(), &tickets, q.buffer.raw(), k.buffer.raw(), v.buffer.raw()];
    dispatch_rw(q, cfg.key(dt, out_dt), || cfg.source(dt, out_dt), 3, &bufs, &params, chunks * nsplit, 1)
}
