//! Which kernel a call runs: the checks that the path applies (dtypes, one device, shapes, sizes
//! that fit u32 and the grid), the operand stagings, and the tile choice (presets, the measured
//! Vulkan choice, or a spelled-out `CoopSpec`), first that fits the adapter; then the bf16 line
//! maxima and the launch.

use super::config::{operand, Config, CoopTile, Out, Stage};
use super::launch::run;
use super::spec::{stage_from_env, CoopSpec, DEFAULT_STAGE};
use crate::gpu::pointwise::line_maxima;
use crate::gpu::runtime::coop::support;
use crate::gpu::runtime::wgsl;
use crate::gpu::runtime::GpuStorage;
use crate::layout::collapse;
use crate::{DType, Layout, Result};
use std::sync::Arc;

/// Below this many multiply-adds (or with M or N under `MIN_SIDE`) the generic kernel is used. bf16
/// too, now that a weight's line maxima are kept: at 16 x 4096 -> 14336 (H200) the cooperative
/// kernel took 94 us against the skinny kernel's 163 (which reads the weight once per 16 rows).
const MIN_WORK: usize = 32 * 32 * 32;
const MIN_SIDE: usize = 16;
/// The automatic choice on Vulkan takes 128x256 tiles from this many on (about 1.5 waves of an
/// H100/H200's 132 SMs; fewer: 128x128 tiles, two workgroups per SM).
const WIDE_MIN_TILES: usize = 200;
/// `Auto` picks `Small` when `Large` would make fewer workgroups than this.
const LARGE_MIN_TILES: usize = 256;
/// What `GpuStorage::derived` keys a bf16 operand's line maxima by (then the view it was read as).
const MAXIMA: usize = 0x6d61_7861;
/// The automatic choice on Vulkan takes its few-row tiles up to this many rows, 96-row ones from
/// this many columns on (fewer: too few workgroups).
const FEW_ROWS: usize = 128;
const WIDE_FEW_N: usize = 8192;
/// The automatic choice splits K when the tiles make fewer workgroups than this (about 1.5 waves of
/// an H100/H200's 132 SMs), into splits of at least `MIN_SPLIT_K` (on the H200 a split paid only for
/// deep K, e.g. the 14336-deep down projection: 204 -> 118 us at 32 rows; shallower it cost more
/// than it gained).
const SPLIT_BELOW: usize = 200;
const MIN_SPLIT_K: usize = 4096;
/// The partial products of a split stay within one binding of this size.
const MAX_PART_BYTES: u64 = 256 << 20;

/// `try_matmul_coop` (mod.rs) with a forced preset, an optional size threshold, and `emulate: Some(s)` to
/// run the emulated kernel with `s x s` tiles instead (any adapter with SHADER_F16).
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_coop(
    a: &GpuStorage,
    al: &Layout,
    b: &GpuStorage,
    bl: &Layout,
    tile: CoopTile,
    threshold: bool,
    emulate: Option<u32>,
    spec: Option<CoopSpec>,
) -> Option<Result<GpuStorage>> {
    let bf16 = match (a.dtype, b.dtype) {
        (DType::F16, DType::F16) => false,
        (DType::BF16, DType::BF16) => true,
        _ => return None,
    };
    if !Arc::ptr_eq(&a.ctx, &b.ctx) {
        return None;
    }
    let ctx = &a.ctx;
    let (s, sg) = match emulate {
        Some(s) => (ctx.has(wgpu::Features::SHADER_F16) && matches!(s, 8 | 16)).then_some((s, 32))?,
        None => support(ctx)?,
    };
    let rank = al.rank();
    if rank < 2 || bl.rank() != rank || al.dims()[..rank - 2] != bl.dims()[..rank - 2] {
        return None;
    }
    let (m, k, n) = (al.dims()[rank - 2], al.dims()[rank - 1], bl.dims()[rank - 1]);
    if bl.dims()[rank - 2] != k || m == 0 || n == 0 || k == 0 {
        return None;
    }
    if threshold && (m < MIN_SIDE || n < MIN_SIDE || m * n * k < MIN_WORK) {
        return None;
    }
    let batch_dims = &al.dims()[..rank - 2];
    let batch: usize = batch_dims.iter().product();
    if batch == 0 {
        return None;
    }
    let (bd, bs) = collapse(batch_dims, &[&al.strides()[..rank - 2], &bl.strides()[..rank - 2]]);
    // Every index the kernel computes must fit in u32.
    let fits = wgsl::indexable;
    if bd.len() > 4 || !fits(al) || !fits(bl) || (batch * m * n) as u64 >= u32::MAX as u64 {
        return None;
    }
    let (sa, sb) = (al.strides(), bl.strides());
    // Batch strides only step with more than one batch (`collapse` gives [1] for none).
    let bstr = |i: usize| if batch > 1 { &bs[i][..] } else { &[] };
    // bf16 operands are read in place, as f16 ones are (`Config::out`).
    let ops = |w: usize| {
        (
            operand(m, sa[rank - 2], k, sa[rank - 1], al.offset(), bstr(0), a.buffer.size(), w),
            operand(n, sb[rank - 1], k, sb[rank - 2], bl.offset(), bstr(1), b.buffer.size(), w),
        )
    };
    // Vector staging on Vulkan (Metal's simdgroup loads take only scalar pointers).
    let vulkan = ctx.summary.backend == "Vulkan" || emulate.is_some();
    let stage = match spec {
        Some(sp) => sp.stage,
        None if !vulkan => Stage::H1,
        None => stage_from_env().unwrap_or(DEFAULT_STAGE),
    };
    if !vulkan && stage != Stage::H1 {
        return None;
    }
    let (a_op, b_op) = ops(stage.chunk() as usize);
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let tiles = |c: &Config| m.div_ceil(c.bm() as usize) * n.div_ceil(c.bn() as usize);
    let fits_device = |c: &Config| {
        c.workgroup_bytes() <= ctx.limits.max_compute_workgroup_storage_size
            && c.wg() <= ctx.limits.max_compute_invocations_per_workgroup
            && c.wg() <= ctx.limits.max_compute_workgroup_size_x
            && tiles(c) <= max
    };
    let out = match (bf16, n % 2) {
        (false, _) => Out::F16,
        (true, 0) => Out::Bf16Pairs,
        (true, _) => Out::Bf16ViaF32,
    };
    let preset =
        |t: CoopTile| Config { emulate: emulate.is_some(), stage, out, ..Config::preset(t, s, sg, a_op, b_op) };
    let want = match tile {
        CoopTile::Auto if batch * tiles(&preset(CoopTile::Large)) < LARGE_MIN_TILES => CoopTile::Small,
        CoopTile::Auto => CoopTile::Large,
        t => t,
    };
    // The preset, then with half the K slice where workgroup memory is short (32 KiB adapters);
    // the automatic choice may also end on the small preset.
    let mut candidates = vec![preset(want), Config { bk: 16, ..preset(want) }];
    if tile == CoopTile::Auto {
        candidates.push(preset(CoopTile::Small));
    }
    if tile == CoopTile::Auto && stage == Stage::H4 && s == 16 {
        let large = preset(CoopTile::Large);
        if let Some(c) = measured_choice(&large, (m, n), |c| batch * tiles(c)) {
            candidates.insert(0, c);
        }
    }
    if let Some(sp) = spec {
        let base = preset(CoopTile::Large);
        candidates = vec![Config {
            wm: sp.wm,
            wn: sp.wn,
            tm: sp.tm,
            tn: sp.tn,
            bk: sp.bk,
            ahead: sp.ahead,
            fast: sp.fast,
            probe: sp.probe,
            words: sp.words,
            ..base
        }];
    }
    let mut c = candidates.into_iter().find(|c| c.well_formed() && fits_device(c))?;
    if batch > max {
        return None;
    }
    let lines = |lines, offset, line_stride, k_stride, strides| line_maxima::Lines {
        lines,
        k,
        offset,
        line_stride,
        k_stride,
        batch,
        dims: &bd,
        strides,
    };
    let la = lines(m, al.offset(), sa[rank - 2], sa[rank - 1], &bs[0][..]);
    let lb = lines(n, bl.offset(), sb[rank - 1], sb[rank - 2], &bs[1][..]);
    // A bf16 A read along K is scaled to f16 once, by its line maxima pass, where the copy fits one
    // binding: the product's workgroups then stage it without converting (each converted all of A).
    let copy = (batch * m * k) as u64;
    c.a16 = bf16
        && line_maxima::scaled_enabled()
        && line_maxima::whole_applies(a, &la)
        && copy < u32::MAX as u64
        && 2 * copy <= ctx.max_binding();
    let (mut splits, mut kper) = match spec {
        Some(sp) => k_split(k, c.bk as usize, sp.splits as usize),
        None if tile == CoopTile::Auto && vulkan && split_enabled() => auto_split(&c, batch * tiles(&c), k),
        None => (1, k),
    };
    // Every partial product's index must fit in u32, and the planes one binding: else no split.
    let planes = splits * batch * m * n;
    if splits > max || planes as u64 >= u32::MAX as u64 || planes as u64 * 4 > MAX_PART_BYTES {
        (splits, kper) = (1, k);
    }
    c.split = splits > 1;
    Some((|| {
        if !bf16 {
            return run(a, al, b, bl, &c, (m, n, k), batch, (&bd, &bs), tiles(&c), None, (splits, kper));
        }
        // B is most often a weight, multiplied again and again: its maxima are kept with its storage
        // until it is written (`GpuStorage::derived`), so a serving step does not read every weight
        // twice.
        let key = [vec![MAXIMA, n, k, bl.offset(), sb[rank - 1], sb[rank - 2], batch], bd.clone(), bs[1].clone()];
        let mxb = b.derived(key.concat(), || line_maxima::maxima(b, &lb))?;
        if c.a16 {
            // The copy: contiguous, batch entries (in `bd` order) m x k apart.
            let (mxa, a16) = line_maxima::maxima_scaled(a, &la)?;
            let mut strides = vec![0; bd.len()];
            let mut step = m * k;
            for (s, &d) in strides.iter_mut().zip(&bd).rev() {
                *s = step;
                step *= d;
            }
            let bs16 = [strides, bs[1].clone()];
            let al16 = Layout::contiguous(al.dims());
            let (mx, sp) = (Some((&mxa, &*mxb)), (splits, kper));
            return run(&a16, &al16, b, bl, &c, (m, n, k), batch, (&bd, &bs16), tiles(&c), mx, sp);
        }
        let mxa = line_maxima::maxima(a, &la)?;
        run(a, al, b, bl, &c, (m, n, k), batch, (&bd, &bs), tiles(&c), Some((&mxa, &mxb)), (splits, kper))
    })())
}

/// The measured choice on Vulkan with 16x16 matrices (NVIDIA), or `None` for the presets; `groups`
/// counts a config's workgroups. On an H200 (docs/PERFORMANCE.md, session 8): interior tiles on the
/// fast reads; 8 subgroups of 4x4 accumulators (128x256 tiles) over 16-deep slices with four in
/// flight where there are 1.5 waves of such tiles or more, else 128x128 tiles as 8 subgroups of 4x2
/// over 32-deep slices with four in flight (eleventh session: 4 subgroups of 4x4 spilled; 777 x
/// 4096 x 3000 f16 432.7 -> 371.6 us, bf16 467.7 -> 317.1; `linear` 512 x 4096 -> 11008 f16 341.3
/// -> 325.7, bf16 492.4 -> 348.2). Few rows (batched decode, serving;
/// 2026-11-28, sixth session): little tensor-core work spent on rows past M, four slices in flight,
/// one row of 4 subgroups: 32 x 64 tiles over 64-deep slices to 32 rows, else 64 x 64, except 96 x
/// 128 over 32-deep slices (the weight read once) for 65-96 rows of a wide product. bf16 (its A
/// scaled beforehand) takes 8 subgroups past 32 rows, measured in the tenth session (4096 -> N):
/// 64 x 64 tiles as two rows of 4 (64 x 14336: 115.9 -> 100.4 us; 96 x 4096: 52.0 -> 46.1), the
/// wide 96 x 128 as one row of 8 (96 x 14336: 141.2 -> 121.7); to 32 rows 8 did not pay (89.7
/// against 94.4); f16 is not yet measured so. K is split
/// (`auto_split`) where it is deep and the tiles few; f16 is read as words (`Config::words`: 32 x
/// 4096 -> 14336 129 -> 72 us; on the large tiles words did not pay).
fn measured_choice(large: &Config, (m, n): (usize, usize), groups: impl Fn(&Config) -> usize) -> Option<Config> {
    let big = |wm, wn, bk, ahead| Config { wm, wn, tm: 4, tn: 4, bk, ahead, fast: true, ..*large };
    let few = |wm, wn, tm, tn, bk| Config { wm, wn, tm, tn, bk, ahead: 4, fast: true, words: true, ..*large };
    // 128 x 128 tiles as 8 subgroups of 4x2 accumulators: 214 registers, none spilled, where 4
    // subgroups of 4x4 took 255 and spilled 176-288 bytes (`examples/pipeline_stats.rs`).
    let (wide, square) =
        (big(2, 4, 16, 4), Config { wm: 2, wn: 4, tm: 4, tn: 2, bk: 32, ahead: 4, fast: true, ..*large });
    // bf16 takes 8 subgroups where they were measured to pay (f16: not yet measured).
    let bf16 = large.out.bf16();
    if m <= FEW_ROWS {
        Some(match m {
            ..=32 => few(1, 4, 2, 1, 64),
            65..=96 if n >= WIDE_FEW_N && bf16 => few(1, 8, 6, 1, 32),
            65..=96 if n >= WIDE_FEW_N => few(1, 4, 6, 2, 32),
            _ if bf16 => few(2, 4, 2, 1, 64),
            _ => few(1, 4, 4, 1, 64),
        })
    } else if groups(&wide) >= WIDE_MIN_TILES {
        Some(wide)
    } else if groups(&square) >= LARGE_MIN_TILES / 4 {
        Some(square)
    } else {
        None
    }
}

/// `splits` splits of K as (splits, K per split): each a whole number of `bk` slices (so no slice
/// crosses into the next split), the last one shorter; fewer splits where K has fewer slices.
fn k_split(k: usize, bk: usize, splits: usize) -> (usize, usize) {
    let kper = k.div_ceil(splits.max(1)).div_ceil(bk) * bk;
    (k.div_ceil(kper), kper)
}

/// The automatic K split: enough splits that `groups` tiles make `SPLIT_BELOW` workgroups, each
/// split at least `MIN_SPLIT_K` deep.
fn auto_split(c: &Config, groups: usize, k: usize) -> (usize, usize) {
    if groups >= SPLIT_BELOW || k < 2 * MIN_SPLIT_K {
        return (1, k);
    }
    let want = SPLIT_BELOW.div_ceil(groups).min(k / MIN_SPLIT_K);
    if want < 2 {
        return (1, k);
    }
    k_split(k, c.bk as usize, want)
}

fn split_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::COOP_SPLIT.is_not_zero())
}
