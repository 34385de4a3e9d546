//! Decode attention through a block table (`paged_decode.wgsl`, or `paged_tile.wgsl`: the `tile`
//! decode kernel's loop, where the decode kernel choice is `tile` and it applies): one query per
//! sequence over that sequence's keys and values in a paged KV pool, split-K over the positions as
//! the decode kernel (`decode.wgsl`) with the same combine kernel merging the splits. The pool is
//! never gathered into a contiguous copy. The API checks shapes, dtypes and the table before this
//! runs (block ids in range, lengths covered by the table, every length at least 1); the kernels
//! still clamp block ids to the pool.

use super::decode_lanes::{chosen, DecodeKernel};
use super::decode_tile::{tile_config, tile_pieces, tile_rounds, RowRules, Rows, TileConfig, COMBINE_PUT, LONG_KEYS};
use super::emit::MASK;
use super::{
    combine_source, dispatch, granular, granular_by, granule_loaders, lines, store_fns, CombineParams, MAX_HEAD,
};
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Error, Layout, Result};

const PAGED: &str = include_str!("paged_decode.wgsl");
const PAGED_TILE: &str = include_str!("paged_tile.wgsl");

/// Positions one tile of the kernel takes (splits are multiples of it).
const TILE: usize = 32;
/// Workgroups the split heuristic aims for, and positions a split takes at least.
const TARGET_GROUPS: usize = 1024;
const MIN_SPLIT: usize = 64;
/// Most splits per row (bounds the combine kernel's loop).
const MAX_SPLITS: usize = 1024;

/// One variant: rows per workgroup, head sizes padded (q/k to 32, v to 4), vectorised pool reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PagedConfig {
    r: usize,
    dp: usize,
    dvp: usize,
    vec: bool,
}

impl PagedConfig {
    pub(crate) fn new(d: usize, dv: usize, group: usize, vec: bool) -> PagedConfig {
        PagedConfig {
            r: group.next_power_of_two().min(4),
            dp: d.div_ceil(32).max(1) * 32,
            dvp: dv.div_ceil(4).max(1) * 4,
            vec,
        }
    }

    /// Workgroup memory in vec4s.
    fn total(self) -> usize {
        let (dp4, dv4) = (self.dp / 4, self.dvp / 4);
        let walk = self.r * dp4 + 256 + TILE;
        let g = 128 / dv4;
        walk.max(g * self.r * dv4 + g)
    }

    fn key(self, dt: DType, out: DType) -> String {
        format!("attention_paged:{dt}:{out}:r{}:{}:{}:{}", self.r, self.dp, self.dvp, self.vec)
    }
}

params! {
    /// The paged decode kernel's parameters: sequences, hq, hkv, d, dv, the score scale, row chunks
    /// per head, splits and positions per split, 1 when partial rows are written, workgroups, where
    /// the partial rows start, the block size, the table's row length (most blocks), blocks in the
    /// pool, q's offset and sequence/head/element strides, the k and v pools' offsets, the soft cap
    /// and its inverse (0: none), the window (0: none).
    struct PagedParams {
        seqs: u32,
        hq: u32,
        hkv: u32,
        d: u32,
        dv: u32,
        scale: f32,
        blocks: u32,
        splits: u32,
        per_split: u32,
        partial: u32,
        groups: u32,
        part_start: u32,
        block_size: u32,
        table_len: u32,
        pool_blocks: u32,
        q_off: u32,
        q_ss: u32,
        q_sh: u32,
        q_se: u32,
        k_off: u32,
        v_off: u32,
        softcap: f32,
        softcap_inv: f32,
        window: u32,
    }
}

/// The kernel for pool dtype `dt`, written as `out` (f32 partial rows, or the final dtype).
pub(crate) fn paged_source(dt: DType, out: DType, c: PagedConfig) -> String {
    const XYZW: [&str; 4] = ["x", "y", "z", "w"];
    let r = 0..c.r;
    let ind = "            ";
    let (loaders, arrays) = granule_loaders(dt, [false, c.vec, c.vec]);
    let n = |x: usize| x.to_string();
    render(
        PAGED,
        &[
            ("PARAMS", &PagedParams::wgsl()),
            ("KV_ARRAY", arrays[1]),
            ("PRELUDE", PRELUDE),
            ("MASK", MASK),
            ("LOADERS", &loaders),
            ("STORE", &store_fns(out)),
            ("R", &n(c.r)),
            ("DP4", &n(c.dp / 4)),
            ("DV4", &n(c.dvp / 4)),
            ("TOTAL", &n(c.total())),
            ("DECLARE", &lines(r.clone(), |x| format!("    var o{x} = vec4<f32>(0.0);"))),
            (
                "PARTIAL_DOT",
                &lines(r.clone(), |x| format!("{ind}    pd.{} += dot(sm[QB + {x}u * DP4 + c4], kx);", XYZW[x])),
            ),
            ("RESCALE", &lines(r.clone(), |x| format!("        o{x} *= a.{};", XYZW[x]))),
            ("ACCUMULATE", &lines(r.clone(), |x| format!("{ind}    o{x} += pr.{} * v;", XYZW[x]))),
            ("WRITE_O", &lines(r.clone(), |x| format!("        sm[OB + (grp * R + {x}u) * DV4 + cq] = o{x};"))),
        ],
    )
}

/// The `tile` kernel over a paged pool of dtype `dt` (f16 or bf16), written as `out`.
pub(crate) fn paged_tile_source(dt: DType, out: DType, c: TileConfig) -> String {
    let rounds = tile_rounds(
        c,
        &RowRules {
            valid: "gr < group",
            row: "let grow = b * hq + hk * group + gr;",
            finish: "finish(o, lsum[x], badr[x])",
            put: COMBINE_PUT,
        },
    );
    let (params, loaders, store) = (PagedParams::wgsl(), loader("ld0", "in0", dt), store_fns(out));
    let pieces = tile_pieces(dt, c, Rows::Paged);
    let mut subs: Vec<(&str, &str)> = vec![
        ("PARAMS", &params),
        ("PRELUDE", PRELUDE),
        ("MASK", MASK),
        ("LOADERS", &loaders),
        ("STORE", &store),
        ("ROUNDS", rounds.trim_end()),
    ];
    subs.extend(pieces.iter().map(|(k, v)| (*k, v.as_str())));
    render(PAGED_TILE, &subs)
}

/// Every variant for head sizes 64, 128, 80 and 256 and GQA groups 1, 2 and 4+, and the `tile`
/// one for f16/bf16 (for the MSL/HLSL translation test).
pub(crate) fn catalog() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let outs: &[DType] = if dt == DType::F32 { &[DType::F32] } else { &[dt, DType::F32] };
        for d in [64, 128, 80, 256] {
            for group in [1, 2, 4] {
                for vec in [true, false] {
                    let c = PagedConfig::new(d, d, group, vec);
                    for &o in outs {
                        out.push((c.key(dt, o), paged_source(dt, o, c)));
                    }
                }
                if dt == DType::F32 {
                    continue;
                }
                for (w, keys) in [(8, 0), (32, 0), (32, LONG_KEYS)] {
                    if let Some(c) = tile_config(d, d, group, w, 32 * 1024, 256, keys) {
                        for &o in outs {
                            out.push((tile_key(dt, o, c), paged_tile_source(dt, o, c)));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The pipeline key of the paged `tile` kernel.
fn tile_key(dt: DType, out: DType, c: TileConfig) -> String {
    format!("attention_paged:{dt}:{out}:{}", c.key())
}

/// The operands of [`paged_decode`], checked by the API.
pub(crate) struct PagedArgs<'a> {
    /// Queries `(b, hq, 1, d)`, any strides.
    pub(crate) q: (&'a GpuStorage, &'a Layout),
    /// Contiguous pools `(blocks, hkv, block_size, d)` and `(blocks, hkv, block_size, dv)`.
    pub(crate) k: (&'a GpuStorage, &'a Layout),
    pub(crate) v: (&'a GpuStorage, &'a Layout),
    /// u32 `(b, max_blocks)` block ids and `(b,)` lengths (>= 1), contiguous from element 0.
    pub(crate) table: &'a GpuStorage,
    pub(crate) lens: &'a GpuStorage,
    pub(crate) max_blocks: usize,
    /// The longest length (sizes the splits).
    pub(crate) max_len: usize,
    pub(crate) scale: f64,
    /// The scores' soft cap, and the positions a query sees: its sequence's last `window`.
    pub(crate) softcap: Option<f64>,
    pub(crate) window: Option<usize>,
}

/// Attention output `(b, hq, 1, dv)` in the queries' dtype.
pub(crate) fn paged_decode(a: &PagedArgs) -> Result<GpuStorage> {
    let (q, ql) = a.q;
    let (k, kl) = a.k;
    let (v, vl) = a.v;
    for o in [k, v, a.table, a.lens] {
        q.same_ctx("sdpa_paged", o)?;
    }
    let (b, hq, d) = (ql.dims()[0], ql.dims()[1], ql.dims()[3]);
    let (nblocks, hkv, bs, dv) = (kl.dims()[0], kl.dims()[1], kl.dims()[2], vl.dims()[3]);
    if d > MAX_HEAD || dv > MAX_HEAD {
        return Err(Error::Gpu {
            op: "sdpa_paged",
            msg: format!("head sizes up to {MAX_HEAD} are supported, got d={d}, dv={dv}"),
        });
    }
    let ctx = &q.ctx;
    let dt = q.dtype;
    let group = hq / hkv;
    let cfg = PagedConfig::new(d, dv, group, granular(k, kl) && granular(v, vl));
    // The `tile` kernel where the decode kernel choice is `tile` or `short` and it applies
    // (subgroups, f16/bf16 pools read in 8-element granules, equal head sizes).
    let tile = (matches!(chosen(), DecodeKernel::Tile | DecodeKernel::Short)
        && matches!(dt, DType::F16 | DType::BF16)
        && d == dv
        && crate::gpu::runtime::subgroups::use_subgroups(ctx)
        && granular_by(k, kl, 8)
        && granular_by(v, vl, 8))
    .then(|| {
        let limit = ctx.limits.max_compute_workgroup_storage_size as usize;
        let max_wg = ctx.limits.max_compute_invocations_per_workgroup as usize;
        tile_config(d, d, group, ctx.summary.subgroup_size.0 as usize, limit, max_wg, a.max_len)
    })
    .flatten();
    let (rows_per_group, step) = match tile {
        Some(t) => (t.rows(), t.step()),
        None => (cfg.r, TILE),
    };
    let nrc = group.div_ceil(rows_per_group);
    let base = b * hkv * nrc;
    let want = TARGET_GROUPS.div_ceil(base.max(1)).max(1);
    let c = a.max_len.div_ceil(want).max(MIN_SPLIT).max(a.max_len.div_ceil(MAX_SPLITS)).div_ceil(step) * step;
    let nsplit = a.max_len.div_ceil(c).max(1);
    let rows = b * hq;
    let groups = base * nsplit;
    let part_start = 2 * rows * nsplit;
    let out_dt = if dt != DType::F32 && dv.is_multiple_of(2) { dt } else { DType::F32 };
    let out = GpuStorage::alloc(ctx, out_dt, rows * dv)?;
    let (qs, ks, vs) = (ql.strides(), kl.offset(), vl.offset());
    let params = PagedParams {
        seqs: b as u32,
        hq: hq as u32,
        hkv: hkv as u32,
        d: d as u32,
        dv: dv as u32,
        scale: a.scale as f32,
        blocks: nrc as u32,
        splits: nsplit as u32,
        per_split: c as u32,
        partial: (nsplit > 1) as u32,
        groups: groups as u32,
        part_start: part_start as u32,
        block_size: bs as u32,
        table_len: a.max_blocks as u32,
        pool_blocks: nblocks as u32,
        q_off: ql.offset() as u32,
        q_ss: qs[0] as u32,
        q_sh: qs[1] as u32,
        q_se: qs[3] as u32,
        k_off: ks as u32,
        v_off: vs as u32,
        softcap: a.softcap.unwrap_or(0.0) as f32,
        softcap_inv: a.softcap.map_or(0.0, |c| 1.0 / c) as f32,
        window: a.window.unwrap_or(0) as u32,
    }
    .words();
    let part =
        if nsplit > 1 { Some(GpuStorage::alloc(ctx, DType::F32, part_start + rows * nsplit * dv)?) } else { None };
    let dst = part.as_ref().unwrap_or(&out);
    let o = if nsplit > 1 { DType::F32 } else { out_dt };
    let bufs =
        [dst.buffer.raw(), q.buffer.raw(), k.buffer.raw(), v.buffer.raw(), a.table.buffer.raw(), a.lens.buffer.raw()];
    match tile {
        Some(t) => dispatch(q, tile_key(dt, o, t), || paged_tile_source(dt, o, t), &bufs, &params, groups, 1)?,
        None => dispatch(q, cfg.key(dt, o), || paged_source(dt, o, cfg), &bufs, &params, groups, 1)?,
    }
    if let Some(part) = part {
        // Every row sees all splits (non-causal, `tk` the longest length); splits past a sequence's
        // length, or before its window, hold an empty (-inf, 0) partial row, which the combine skips.
        let cp = CombineParams {
            rows: rows as u32,
            dv: dv as u32,
            splits: nsplit as u32,
            per_split: c as u32,
            tq: 1,
            tk: a.max_len as u32,
            causal: 0,
            part_start: part_start as u32,
            quads: dv.div_ceil(4) as u32,
            window: 0,
        }
        .words();
        let bufs = [out.buffer.raw(), part.buffer.raw()];
        dispatch(q, format!("attention_combine:{out_dt}"), || combine_source(out_dt), &bufs, &cp, rows, 1)?;
    }
    out.finish(dt)
}
