//! Scaled dot-product attention: a flash-attention prefill kernel (`flash.wgsl`), a split-K
//! decode kernel for short query lengths (`decode.wgsl`) and the kernel that merges split
//! partial rows (`combine.wgsl`). Queries, keys and values are read through their strides
//! (KV-cache views need no copy); f16/bf16 are computed in f32 and written packed when `dv` is even.
//!
//! The register-blocked inner loops are generated here as straight-line WGSL over named `vec4`
//! variables, so no accumulator lives in an indexed array (which a driver may put in local memory).
//!
//! Choice of kernel: query lengths up to [`DECODE_MAX_TQ`] take the decode kernel, longer ones the
//! prefill kernel. Both split the keys across workgroups when (batch, heads, blocks) alone would
//! launch fewer than about [`TARGET_GROUPS`] workgroups, and then merge the splits with the combine
//! kernel; on Vulkan the decode kernel merges its splits itself, in one dispatch (`decode_fold.rs`).
//! The decode kernels' emitters are `decode.rs` (`slots`), `decode_lanes.rs` (`lanes`, and the
//! choice between them), `decode_tile.rs` (`tile`) and `decode_short.rs` (`short`: one query row over
//! a short context, never split); pieces the kernels share are in `emit.rs`.

mod decode;
pub(crate) mod decode_fold;
pub(crate) mod decode_lanes;
mod decode_short;
mod decode_tile;
mod emit;
pub(crate) mod paged_decode;
pub(crate) mod paged_write;
mod params;

use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{self, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::op::AttentionParams;
use crate::{DType, Error, Layout, Result};
use decode::{decode_config, decode_source, decode_subgroups, min_decode_split};
use decode_lanes::{chosen, lanes_config, lanes_source, DecodeKernel, DecodeVariant};
use decode_short::{short_config, short_source};
use decode_tile::{tile_config, tile_source, LONG_KEYS};
use emit::{dispatch, granular, granular_by, granule_loaders, lines, store_fns, ROWS};
use params::{AttnParams, CombineParams};
use std::fmt::Write;

pub(crate) mod flash_coop;

const FLASH: &str = include_str!("flash.wgsl");
const COMBINE: &str = include_str!("combine.wgsl");

/// Query lengths up to this take the decode kernel.
const DECODE_MAX_TQ: usize = 8;
/// Workgroups the split heuristics aim for (an H200 has 132 SMs, each running several of ours).
const TARGET_GROUPS: usize = 1024;
/// Keys one prefill workgroup takes at least when the keys are split.
const MIN_FLASH_SPLIT: usize = 256;
/// Most splits per row (bounds the combine kernel's loop).
const MAX_SPLITS: usize = 1024;
/// Largest head sizes.
const MAX_HEAD: usize = 256;

/// Shape of one prefill kernel variant: 64 queries x 32 keys per tile, 128 invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlashConfig {
    /// Head size of q/k padded to a multiple of `dc`.
    dp: usize,
    /// Head columns staged per pass; `dc == dp` keeps the queries resident for the whole walk.
    dc: usize,
    /// Value columns per workgroup / 32 (1..=4): each invocation holds 4 x 4nv outputs.
    nv: usize,
    /// `d == dp`: loads need no bound check on the head axis.
    exact: bool,
    /// q, k and v read as whole aligned 4-element granules.
    vec: bool,
}

impl FlashConfig {
    fn resident(self) -> bool {
        self.dc == self.dp
    }

    /// Workgroup memory in vec4s: (q, k, v, probabilities, row partials) region starts and total.
    fn regions(self) -> [usize; 6] {
        let cs = self.dc / 4 + 1;
        let vs = 8 * self.nv;
        let (qb, kb, vb, pb) = if self.resident() {
            let u = (32 * cs).max(32 * vs);
            (0, 64 * cs, 64 * cs, 64 * cs + u)
        } else {
            (0, 64 * cs, 0, (96 * cs).max(32 * vs))
        };
        let rb = pb + 64 * 9;
        [qb, kb, vb, pb, rb, rb + 128]
    }

    fn smem_bytes(self) -> usize {
        16 * self.regions()[5]
    }

    fn key(self) -> String {
        format!("{}:{}:{}:{}:{}", self.dp, self.dc, self.nv, self.exact, self.vec)
    }
}

/// The prefill variant for head sizes `d`, `dv` within `limit` bytes of workgroup memory: the
/// queries resident if they fit, else staged in the largest chunk of 64, 32 or 16 columns that
/// divides the head size rounded to 16.
pub(crate) fn flash_config(d: usize, dv: usize, vec: bool, limit: usize) -> Option<FlashConfig> {
    let nv = dv.div_ceil(32).clamp(1, 4);
    let d4 = d.div_ceil(4).max(1) * 4;
    let d16 = d.div_ceil(16).max(1) * 16;
    let resident = FlashConfig { dp: d4, dc: d4, nv, exact: d == d4, vec };
    let chunked = [64, 32, 16].map(|dc| FlashConfig { dp: d16, dc, nv, exact: d == d16, vec });
    std::iter::once(resident)
        .chain(chunked.into_iter().filter(|c| c.dp.is_multiple_of(c.dc)))
        .find(|c| c.smem_bytes() <= limit)
}

/// The prefill kernel for storage dtype `dt`, final output dtype `out` (f32, or `dt` packed).
pub(crate) fn flash_source(dt: DType, out: DType, c: FlashConfig) -> String {
    let nv = c.nv;
    let rows = 0..4usize;
    let cols = || 0..nv;
    let ind = "                ";
    let [qb, kb, vb, pb, rb, total] = c.regions();
    let declare = lines(rows.clone(), |i| {
        let r = if i == 0 { "rg".to_string() } else { format!("(rg + {}u)", 16 * i) };
        let k = if i == 0 { "kg".to_string() } else { format!("(kg + {}u)", 8 * i) };
        format!(
            "    var m{i} = -inf_f32(); var l{i} = 0.0; var bad{i} = false;\n    \
             let lim{i} = min(visible(q0 + {r}, tq, tk, causal), kstop); let lo{i} = first_key(q0 + {r}, tq, tk, p.window);\n    \
             let qr{i} = QB + {r} * CS; let kr{i} = KB + {k} * CS; let pr{i} = PB + {r} * PS; let rr{i} = RB + {r} * 2u;\n{}",
            lines(cols(), |n| format!("    var o{i}_{n} = vec4<f32>(0.0);")).trim_end()
        )
    });
    let s_body = format!(
        "{}{}",
        lines(rows.clone(), |i| format!("{ind}let qa{i} = sm[qr{i} + c4]; let ka{i} = sm[kr{i} + c4];")),
        lines(rows.clone(), |i| format!(
            "{ind}s{i} += vec4<f32>(dot(qa{i}, ka0), dot(qa{i}, ka1), dot(qa{i}, ka2), dot(qa{i}, ka3));"
        ))
    );
    // 32 keys x 8nv granules of values: 2nv per invocation.
    let v_load = lines(0..2 * nv, |k| {
        format!(
            "        var vx{k} = vec4<f32>(0.0); {{ let e = t + {}u; let key = e / VS; let c = col0 + 4u * (e % VS); \
             if (j0 + key < kstop && c < dv) {{ vx{k} = ldv4(vbase + (j0 + key) * vst, c, vse, dv); }} }}",
            128 * k
        )
    });
    let v_store = lines(0..2 * nv, |k| format!("        sm[VB + t + {}u] = vx{k};", 128 * k));
    // The soft cap before the mask, which would otherwise turn -inf into -cap.
    let softmax_a = format!(
        "        if (p.softcap != 0.0) {{\n{}        }}\n        if (masked) {{\n            let kk = vec4<u32>(j0 + kg, j0 + kg + 8u, j0 + kg + 16u, j0 + kg + 24u);\n{}        }}\n{}",
        lines(rows.clone(), |i| format!("            s{i} = soft_cap(s{i}, p.softcap, p.softcap_inv);")),
        lines(rows.clone(), |i| format!(
            "            s{i} = select(s{i}, vec4<f32>(-inf_f32()), (kk >= vec4<u32>(lim{i})) | (kk < vec4<u32>(lo{i})));"
        )),
        lines(rows.clone(), |i| format!(
            "        sm[rr{i} + kg / 4u][kg % 4u] = select(max4(s{i}), nan_f32(), nan4(s{i}));"
        ))
    );
    let softmax_b = flash_softmax_b(nv);
    let sum_l = lines(rows.clone(), |i| format!("    sm[rr{i} + kg / 4u][kg % 4u] = l{i};"));
    let output = flash_output(nv);
    let (loaders, arrays) = granule_loaders(dt, [c.vec; 3]);
    let n = |x: usize| x.to_string();
    render(
        FLASH,
        &[
            ("PARAMS", &AttnParams::wgsl()),
            ("Q_ARRAY", arrays[0]),
            ("K_ARRAY", arrays[1]),
            ("V_ARRAY", arrays[2]),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loaders),
            ("STORE", &store_fns(out)),
            ("ROWS", ROWS),
            ("DC", &n(c.dc)),
            ("NCH", &n(c.dp / c.dc)),
            ("QRES", if c.resident() { "true" } else { "false" }),
            ("EXACT_D", if c.exact { "true" } else { "false" }),
            ("DVC", &n(32 * nv)),
            ("CS", &n(c.dc / 4 + 1)),
            ("VS", &n(8 * nv)),
            ("QB", &n(qb)),
            ("KB", &n(kb)),
            ("VB", &n(vb)),
            ("PB", &n(pb)),
            ("RB", &n(rb)),
            ("TOTAL", &n(total)),
            ("DECLARE", &declare),
            ("S_BODY", &s_body),
            ("V_LOAD", &v_load),
            ("V_STORE", &v_store),
            ("SOFTMAX_A", &softmax_a),
            ("SOFTMAX_B", &softmax_b),
            ("O_BODY", &flash_o_body(nv, false)),
            ("O_BODY_MASKED", &flash_o_body(nv, true)),
            ("SUM_L", &sum_l),
            ("OUTPUT", &output),
        ],
    )
}

/// The flash kernel's output accumulation over one 4-key step (`O_BODY`, `O_BODY_MASKED`): rows
/// 0..4 times value columns 0..nv.
fn flash_o_body(nv: usize, masked: bool) -> String {
    let (rows, cols, ind) = (0..4usize, || 0..nv, "                ");
    let mut s = lines(rows.clone(), |i| format!("{ind}let pa{i} = sm[pr{i} + j4];"));
    let _ = writeln!(s, "{ind}let vr = VB + 4u * j4 * VS + kg;");
    for (jj, comp) in ["x", "y", "z", "w"].iter().enumerate() {
        let _ = writeln!(s, "{ind}{{");
        for n in cols() {
            let off = 8 * n;
            let row = if jj == 0 { String::new() } else { format!(" + {jj}u * VS") };
            let _ = writeln!(s, "{ind}    let v{n} = sm[vr{row} + {off}u];");
        }
        for i in rows.clone() {
            for n in cols() {
                let upd = format!("o{i}_{n} + pa{i}.{comp} * v{n}");
                if masked {
                    // -0 marks a masked key (or a -inf score): skipped, since its value may
                    // be NaN. A visible key whose weight underflowed to +0 still adds 0 * v,
                    // so a NaN value makes the row NaN as on the CPU.
                    let _ = writeln!(
                        s,
                        "{ind}    o{i}_{n} = select({upd}, o{i}_{n}, bitcast<u32>(pa{i}.{comp}) == 0x80000000u);"
                    );
                } else {
                    let _ = writeln!(s, "{ind}    o{i}_{n} = {upd};");
                }
            }
        }
        let _ = writeln!(s, "{ind}}}");
    }
    s
}

/// The flash kernel's online-softmax update of each row (`SOFTMAX_B`).
fn flash_softmax_b(nv: usize) -> String {
    let cols = || 0..nv;
    lines(0..4usize, |i| {
        format!(
            "        {{\n            let ra = sm[rr{i}]; let rb = sm[rr{i} + 1u];\n            \
             bad{i} = bad{i} || nan4(ra) || nan4(rb);\n            \
             let mn = max(m{i}, max(max4(ra), max4(rb)));\n            \
             var al = 1.0; var pv = vec4<f32>(0.0);\n            \
             if (mn > -inf_f32()) {{ al = exp(m{i} - mn); pv = exp(s{i} - mn); }}\n            \
             pv = select(pv, vec4<f32>(-0.0), s{i} == vec4<f32>(-inf_f32()));\n            \
             m{i} = mn;\n            l{i} = l{i} * al + dot(pv, vec4<f32>(1.0));\n{}            \
             let pc = pr{i} + kg / 4u; let pk = kg % 4u;\n            \
             sm[pc][pk] = pv.x; sm[pc + 2u][pk] = pv.y; sm[pc + 4u][pk] = pv.z; sm[pc + 6u][pk] = pv.w;\n        }}",
            lines(cols(), |n| format!("            o{i}_{n} *= al;"))
        )
    })
}

/// The flash kernel's rows written out (`OUTPUT`): partial rows with their max and sum, or final.
fn flash_output(nv: usize) -> String {
    let cols = || 0..nv;
    lines(0..4usize, |i| {
        let r = if i == 0 { "rg".to_string() } else { format!("(rg + {}u)", 16 * i) };
        format!(
            "    {{\n        let ra = sm[rr{i}]; let rb = sm[rr{i} + 1u];\n        \
             let ls = dot(ra, vec4<f32>(1.0)) + dot(rb, vec4<f32>(1.0));\n        \
             let row = q0 + {r};\n        \
             if (row < tq) {{\n            let grow = bh * tq + row;\n            \
             if (partial) {{\n                let pr = grow * nsplit + s;\n                \
             if (kg == 0u && dvc == 0u) {{ dst[2u * pr] = bitcast<u32>(select(m{i}, nan_f32(), bad{i})); dst[2u * pr + 1u] = bitcast<u32>(ls); }}\n{}            \
             }} else {{\n                let vis = visible(row, tq, tk, causal);\n{}            }}\n        }}\n    }}",
            lines(cols(), |n| format!(
                "                {{ let c = col0 + 4u * (kg + {}u); if (c < dv) {{ put_raw(p.part_start + pr * dv + c, o{i}_{n}, min(4u, dv - c)); }} }}",
                8 * n
            )),
            lines(cols(), |n| format!(
                "                {{ let c = col0 + 4u * (kg + {}u); if (c < dv) {{ store4(grow * dv + c, finish(o{i}_{n}, ls, bad{i}, vis), min(4u, dv - c)); }} }}",
                8 * n
            ))
        )
    })
}

/// The kernel merging split partial rows into the final output of dtype `out`.
pub(crate) fn combine_source(out: DType) -> String {
    render(
        COMBINE,
        &[("PARAMS", &CombineParams::wgsl()), ("PRELUDE", PRELUDE), ("ROWS", ROWS), ("STORE", &store_fns(out))],
    )
}

/// Every attention kernel variant the launcher can pick for the usual head sizes (64, 128) and one
/// odd one (80), on 32 KiB and 48 KiB of workgroup memory, and the `lanes` decode kernel on
/// subgroups of 8 and 32, and the `tile` and `short` ones (f16/bf16): for the MSL/HLSL translation test.
pub(crate) fn catalog() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let outs: &[DType] = if dt == DType::F32 { &[DType::F32] } else { &[dt, DType::F32] };
        let mut flash = Vec::new();
        for (d, dv) in [(64, 64), (128, 128), (80, 80), (256, 256)] {
            for limit in [32 * 1024, 48 * 1024] {
                for vec in [true, false] {
                    if let Some(c) = flash_config(d, dv, vec && d.is_multiple_of(4) && dv.is_multiple_of(4), limit) {
                        if !flash.contains(&c) {
                            flash.push(c);
                        }
                    }
                }
            }
        }
        for c in flash {
            for &o in outs {
                out.push((format!("attention_flash:{dt}:{o}:{}", c.key()), flash_source(dt, o, c)));
            }
        }
        for (d, dv) in [(64, 64), (128, 128), (80, 80)] {
            for rows in [1, 2, 4] {
                for (vec, sg) in [(true, false), (false, false), (true, true), (false, true)] {
                    let c = decode_config(d, dv, rows, vec, sg, 32 * 1024).expect("decode fits 32 KiB");
                    for c in [c, c.folded()] {
                        for &o in outs {
                            out.push((format!("attention_decode:{dt}:{o}:{}", c.key()), decode_source(dt, o, c)));
                        }
                    }
                }
            }
        }
        for (d, w) in [(64, 8), (128, 8), (128, 32), (256, 32)] {
            for rows in [2, 8] {
                let c = lanes_config(d, d, rows, w, 32 * 1024).expect("lanes decode fits 32 KiB");
                for c in [c, c.folded()] {
                    for &o in outs {
                        out.push((DecodeVariant::Lanes(c).key(dt, o), lanes_source(dt, o, c)));
                    }
                }
            }
        }
        if dt != DType::F32 {
            for (d, w) in [(64, 8), (128, 8), (128, 32), (96, 32), (256, 32)] {
                for (rows, keys) in [(1, 0), (2, 0), (4, 0), (4, LONG_KEYS)] {
                    let c = tile_config(d, d, rows, w, 32 * 1024, 256, keys).expect("tile decode fits 32 KiB");
                    for c in [c, c.folded()] {
                        for &o in outs {
                            out.push((DecodeVariant::Tile(c).key(dt, o), tile_source(dt, o, c)));
                        }
                    }
                }
            }
            for (d, w, limit) in [(64, 8, 32 * 1024), (128, 32, 32 * 1024), (128, 32, 16 * 1024), (256, 32, 32 * 1024)]
            {
                let c = short_config([1, 512, d, d], w, limit, 1024).expect("short decode fits");
                for c in [c.with_touch(true), c.with_touch(false)] {
                    for &o in outs {
                        out.push((DecodeVariant::Short(c).key(dt, o), short_source(dt, o, c)));
                    }
                }
            }
        }
        out.push((format!("attention_combine:{dt}"), combine_source(dt)));
    }
    out.extend(flash_coop::catalog());
    out
}

/// Keys per split for `tk` keys when `base` workgroups exist without splitting: a multiple of
/// `step`, at least `min_keys`, and at most [`MAX_SPLITS`] splits.
fn split_keys(tk: usize, base: usize, step: usize, min_keys: usize) -> usize {
    let want = TARGET_GROUPS.div_ceil(base.max(1)).max(1);
    let c = tk.div_ceil(want).max(min_keys).max(tk.div_ceil(MAX_SPLITS));
    c.div_ceil(step) * step
}

/// The decode kernel for sizes `[b, hq, hkv, tq, tk, d, dv]` of dtype `dt` (`vec`: keys and values
/// read in granules, `vec8`: keys in 8-element ones too, `v8`: values too; `fold`: the folded path's
/// split): its variant, row chunks per head, row chunks in all, keys per split. The kernel
/// [`chosen`] where it applies (`lanes`: subgroups, granular keys and values, its head sizes; `tile`:
/// subgroups, f16/bf16 keys and values in 8-element granules, its head sizes), else the `slots` one.
/// `None` when none fits the adapter's workgroup memory.
fn decode_plan(
    ctx: &crate::gpu::runtime::GpuContext,
    dt: DType,
    [b, hq, hkv, tq, tk, d, dv]: [usize; 7],
    [vec, vec8, v8]: [bool; 3],
    fold: bool,
) -> Option<(DecodeVariant, usize, usize, usize)> {
    let rows = hq / hkv * tq;
    let limit = ctx.limits.max_compute_workgroup_storage_size as usize;
    let subgroups = crate::gpu::runtime::subgroups::use_subgroups(ctx);
    let sg = subgroups && ctx.summary.subgroup_size.0 >= 8 && decode_subgroups();
    let sg_min = ctx.summary.subgroup_size.0 as usize;
    let half = matches!(dt, DType::F16 | DType::BF16);
    let max_wg = ctx.limits.max_compute_invocations_per_workgroup as usize;
    let tile = || tile_config(d, dv, rows, sg_min, limit, max_wg, tk).map(DecodeVariant::Tile);
    let cfg = match chosen() {
        DecodeKernel::Short if subgroups && half && vec8 && v8 => {
            short_config([tq, tk, d, dv], sg_min, limit, max_wg).map(DecodeVariant::Short).or_else(tile)
        }
        DecodeKernel::Tile if subgroups && half && vec8 && v8 => tile(),
        DecodeKernel::Lanes if subgroups && vec && vec8 => {
            lanes_config(d, dv, rows, sg_min, limit).map(DecodeVariant::Lanes)
        }
        _ => None,
    };
    let cfg = match cfg {
        Some(c) => c,
        None => DecodeVariant::Slots(decode_config(d, dv, rows, vec, sg, limit)?),
    };
    let nrc = rows.div_ceil(cfg.rows());
    let base = b * hkv * nrc;
    let step = cfg.step();
    let c = match cfg {
        DecodeVariant::Short(_) => tk,
        _ if fold => decode_fold::split_keys(tk, base, step),
        _ => split_keys(tk, base, step, min_decode_split(tk)),
    };
    Some((cfg, nrc, base, c))
}

/// The pipeline key of the decode kernel variant [`attention`] would take for these sizes (keys and
/// values contiguous, before folding): for the tests that check which kernel runs.
pub(crate) fn decode_variant_name(ctx: &crate::gpu::runtime::GpuContext, sizes: [usize; 7], dt: DType) -> String {
    let fold = decode_fold::enabled(ctx);
    let vec = sizes[5].is_multiple_of(4) && sizes[6].is_multiple_of(4);
    let vec8 = dt == DType::F32 || sizes[5].is_multiple_of(8);
    let v8 = sizes[6].is_multiple_of(8);
    decode_plan(ctx, dt, sizes, [vec, vec8, v8], fold).map_or_else(|| "none".into(), |(c, ..)| c.key(dt, dt))
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
    if d > MAX_HEAD || dv > MAX_HEAD {
        return Err(Error::Gpu {
            op: "attention",
            msg: format!("head sizes up to {MAX_HEAD} are supported, got d={d}, dv={dv}"),
        });
    }
    // One query with a window sees the last `w` keys: the decode kernels read just those (a view)
    // and have no window left to mask. Longer runs of queries with a window take the prefill
    // kernels, which start each block at its first row's first key and mask each row's.
    if let (Some(w), 1) = (p.window, tq) {
        if w < tk {
            let (kw, vw) = (kl.narrow("sdpa", 2, tk - w, w)?, vl.narrow("sdpa", 2, tk - w, w)?);
            return attention(q, ql, k, &kw, v, &vw, AttentionParams { window: None, ..p });
        }
    }
    let decode = tq <= DECODE_MAX_TQ && p.window.is_none();
    // f16/bf16 prefill on cooperative matrices where the adapter has them.
    if tq > DECODE_MAX_TQ {
        if let Some(r) = flash_coop::try_flash_coop(q, ql, k, kl, v, vl, p, None, false) {
            return r;
        }
    }
    let ctx = &q.ctx;
    let dt = q.dtype;
    let limit = ctx.limits.max_compute_workgroup_storage_size as usize;
    let rows = b * hq * tq;
    // f16/bf16 rows of even length are written packed by the kernels; others as f32, then cast.
    let out_dt = if dt != DType::F32 && dv.is_multiple_of(2) { dt } else { DType::F32 };
    let out = GpuStorage::alloc(ctx, out_dt, rows * dv)?;
    let [q_off, q_sb, q_sh, q_st, q_se] = wgsl::view_words(ql);
    let [k_off, k_sb, k_sh, k_st, k_se] = wgsl::view_words(kl);
    let [v_off, v_sb, v_sh, v_st, v_se] = wgsl::view_words(vl);
    #[rustfmt::skip]
    let mut params = AttnParams {
        b: b as u32, hq: hq as u32, hkv: hkv as u32, tq: tq as u32, tk: tk as u32, d: d as u32, dv: dv as u32,
        scale: p.scale as f32,
        causal: p.causal as u32,
        softcap: p.softcap.unwrap_or(0.0) as f32,
        softcap_inv: p.softcap.map_or(0.0, |c| 1.0 / c) as f32,
        window: p.window.unwrap_or(0) as u32,
        q_off, q_sb, q_sh, q_st, q_se,
        k_off, k_sb, k_sh, k_st, k_se,
        v_off, v_sb, v_sh, v_st, v_se,
        ..AttnParams::default()
    };
    let too_small = || Error::Gpu {
        op: "attention",
        msg: format!("d={d}, dv={dv} need more workgroup memory than the adapter's {limit} bytes"),
    };
    // Either kernel: its variant, the blocks per head (query blocks or row chunks), the value
    // chunks, and the workgroups and keys per split it would take without splitting.
    enum Kernel {
        Decode(DecodeVariant),
        Flash(FlashConfig),
    }
    let fold = decode && decode_fold::enabled(ctx);
    let (kernel, blocks, ndv, base, c) = if decode {
        let vec = granular(k, kl) && granular(v, vl);
        let vec8 = dt == DType::F32 || granular_by(k, kl, 8);
        let v8 = granular_by(v, vl, 8);
        let sizes = [b, hq, hkv, tq, tk, d, dv];
        let (cfg, nrc, base, c) = decode_plan(ctx, dt, sizes, [vec, vec8, v8], fold).ok_or_else(too_small)?;
        (Kernel::Decode(cfg), nrc, 1, base, c)
    } else {
        let vec = granular(q, ql) && granular(k, kl) && granular(v, vl);
        let cfg = flash_config(d, dv, vec, limit).ok_or_else(too_small)?;
        let nqb = tq.div_ceil(64);
        let ndv = dv.div_ceil(32 * cfg.nv);
        let base = b * hq * nqb * ndv;
        let c = if base >= TARGET_GROUPS { tk } else { split_keys(tk, base, 32, MIN_FLASH_SPLIT) };
        (Kernel::Flash(cfg), nqb, ndv, base, c)
    };
    let nsplit = tk.div_ceil(c);
    let groups = base * nsplit;
    let part_start = 2 * rows * nsplit;
    params.blocks = blocks as u32;
    params.vchunks = ndv as u32;
    params.splits = nsplit as u32;
    params.per_split = c as u32;
    params.partial = (nsplit > 1) as u32;
    params.groups = groups as u32;
    params.part_start = part_start as u32;
    if let (Kernel::Decode(cfg), true) = (&kernel, fold && nsplit > 1) {
        decode_fold::launch([&out, q, k, v], dt, out_dt, cfg.folded(), params, base, nsplit)?;
        return out.finish(dt);
    }
    let params = params.words();
    // With split keys the kernel writes f32 partial rows and the combine kernel the output.
    let part =
        if nsplit > 1 { Some(GpuStorage::alloc(ctx, DType::F32, part_start + rows * nsplit * dv)?) } else { None };
    let dst = part.as_ref().unwrap_or(&out);
    let o = if nsplit > 1 { DType::F32 } else { out_dt };
    let bufs = [dst.buffer.raw(), q.buffer.raw(), k.buffer.raw(), v.buffer.raw()];
    match kernel {
        Kernel::Decode(cfg) => {
            dispatch(q, cfg.key(dt, o), || cfg.source(dt, o), &bufs, &params, groups, 1)?;
        }
        Kernel::Flash(cfg) => {
            let key = format!("attention_flash:{dt}:{o}:{}", cfg.key());
            dispatch(q, key, || flash_source(dt, o, cfg), &bufs, &params, groups, 1)?;
        }
    }
    if let Some(part) = part {
        let cp = CombineParams {
            rows: rows as u32,
            dv: dv as u32,
            splits: nsplit as u32,
            per_split: c as u32,
            tq: tq as u32,
            tk: tk as u32,
            causal: p.causal as u32,
            part_start: part_start as u32,
            quads: dv.div_ceil(4) as u32,
            window: p.window.unwrap_or(0) as u32,
        }
        .words();
        let bufs = [out.buffer.raw(), part.buffer.raw()];
        dispatch(q, format!("attention_combine:{out_dt}"), || combine_source(out_dt), &bufs, &cp, rows, 1)?;
    }
    out.finish(dt)
}
