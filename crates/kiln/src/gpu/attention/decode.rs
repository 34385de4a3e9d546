//! The split-K decode kernel (`decode.wgsl`, query lengths up to `DECODE_MAX_TQ`): its variants, its
//! emitter and its tunables. The two-dispatch variant writes partial rows that combine.wgsl merges;
//! the folded one (`fold`) merges them in the last split workgroup of each row chunk
//! (decode_fold.wgsl, launched by `decode_fold.rs`).

use super::emit::{granule_loaders, lines, store_fns, ROWS, XYZW};
use super::params::AttnParams;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::PRELUDE;
use crate::DType;
use std::fmt::Write;

const DECODE: &str = include_str!("decode.wgsl");
const FOLD: &str = include_str!("decode_fold.wgsl");
/// Keys one decode workgroup takes at least when the keys are split (two-dispatch variant). 64 keys
/// sped up an 8B-shaped LLM's bf16 decode on an H100 at contexts 512-2048 (+10%) but slowed the
/// 8192-key `sdpa_decode` bench (55 -> 90 us) (session 5, docs/PERFORMANCE.md): the decode split
/// follows the context length up to this (`min_decode_split`).
const MIN_DECODE_SPLIT: usize = 256;
/// Splits the folded variant's last workgroup loads at a time when it merges them.
const MERGE_BATCH: usize = 8;

/// Shape of one decode kernel variant: 16 key slots x 8 column groups of 128 invocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DecodeConfig {
    /// Head sizes padded to multiples of 32 (8 groups of 4-element granules).
    dp: usize,
    dvp: usize,
    /// Query rows per workgroup (1, 2 or 4) and rows merged per round at the end.
    r: usize,
    rr: usize,
    /// Keys and values read as whole 4-element granules (unit last stride, aligned rows).
    vec: bool,
    exact: bool,
    /// Steps of 16 keys per loop iteration: their loads are issued together, one barrier for all.
    u: usize,
    /// The 8 lanes of a key slot sum their partial dot products with subgroup shuffles (subgroups
    /// of at least 8), so the key loop has no barrier; else through workgroup memory.
    sg: bool,
    /// The split workgroups merge their partial rows themselves: the last of a row chunk to finish
    /// merges them all (decode_fold.wgsl), instead of a combine dispatch.
    fold: bool,
    /// A part left out, to see what it costs (`KILN_DECODE_ABLATE`; wrong results).
    ablate: Ablate,
}

/// The parts of the `slots` decode kernel an ablation can leave out (`KILN_DECODE_ABLATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ablate {
    None,
    /// Everything: each workgroup returns at once (the dispatch's own cost).
    Empty,
    /// The key loop (the first step's loads stay): the prologue, the merge and the writes remain.
    Loop,
    /// The folded variant's ticket and last-workgroup merge.
    Fold,
}

impl Ablate {
    fn from_env() -> Ablate {
        static A: std::sync::OnceLock<Ablate> = std::sync::OnceLock::new();
        *A.get_or_init(|| match crate::settings::DECODE_ABLATE.get().as_deref().map(str::trim) {
            Ok("empty") => Ablate::Empty,
            Ok("loop") => Ablate::Loop,
            Ok("fold") => Ablate::Fold,
            _ => Ablate::None,
        })
    }
}

impl DecodeConfig {
    fn total(self) -> usize {
        let walk = self.r * self.dp / 4 + 2 * self.u * 16 * self.r * 2;
        let merge = 16 * self.r + 16 * self.rr * self.dvp / 4;
        // One vec4 of room for the folded variant's ticket.
        walk.max(merge) + self.fold as usize
    }

    /// The folded variant of this one (see `fold`).
    pub(super) fn folded(self) -> DecodeConfig {
        DecodeConfig { fold: true, ..self }
    }

    /// Steps of 16 keys per loop iteration.
    pub(super) fn steps(self) -> usize {
        self.u
    }

    /// Query rows per workgroup.
    pub(super) fn rows(self) -> usize {
        self.r
    }

    /// Value columns padded to a multiple of 32.
    pub(super) fn dv_padded(self) -> usize {
        self.dvp
    }

    pub(super) fn key(self) -> String {
        let sg = if self.sg { ":sg" } else { "" };
        let fold = if self.fold { ":fold" } else { "" };
        let ablate = if self.ablate == Ablate::None { String::new() } else { format!(":no-{:?}", self.ablate) };
        format!(
            "{}:{}:{}:{}:{}:{}:u{}{sg}{fold}{ablate}",
            self.dp, self.dvp, self.r, self.rr, self.vec, self.exact, self.u
        )
    }
}

/// Keys one decode workgroup takes at least when `tk` keys are split: a 32nd of the context
/// (a power of two from 32 to [`MIN_DECODE_SPLIT`]), so that short contexts fill the GPU with
/// small splits and long ones keep at most ~32 splits for the combine kernel to merge;
/// `KILN_DECODE_SPLIT` fixes it, for A/B runs.
pub(super) fn min_decode_split(tk: usize) -> usize {
    static C: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let fixed =
        *C.get_or_init(|| crate::settings::DECODE_SPLIT.get().ok().and_then(|v| v.parse().ok()).filter(|&c| c >= 16));
    fixed.unwrap_or_else(|| (tk / 32).next_power_of_two().clamp(32, MIN_DECODE_SPLIT))
}

/// Whether the decode kernel may sum partial dot products with subgroup shuffles
/// (`KILN_DECODE_SG=0` turns it off, for A/B runs).
pub(super) fn decode_subgroups() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::DECODE_SG.is_not_zero())
}

/// Steps of 16 keys per iteration of the decode kernel (`KILN_DECODE_UNROLL` overrides, for A/B runs).
pub(super) fn decode_unroll() -> usize {
    static U: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *U.get_or_init(|| {
        crate::settings::DECODE_UNROLL
            .get()
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|u| [1, 2, 4].contains(u))
            .unwrap_or(1)
    })
}

/// The decode variant for `rows` query rows per key/value head.
pub(crate) fn decode_config(
    d: usize,
    dv: usize,
    rows: usize,
    vec: bool,
    sg: bool,
    limit: usize,
) -> Option<DecodeConfig> {
    let dp = d.div_ceil(32).max(1) * 32;
    let dvp = dv.div_ceil(32).max(1) * 32;
    let r = rows.next_power_of_two().min(4);
    // Merge as many rows per round as fit in 24 KiB (or the limit).
    let budget = limit.min(24 * 1024);
    let mut rr = r;
    let mut c = DecodeConfig {
        dp,
        dvp,
        r,
        rr,
        vec,
        exact: d == dp,
        u: decode_unroll(),
        sg,
        fold: false,
        ablate: Ablate::from_env(),
    };
    while rr > 1 && 16 * c.total() > budget {
        rr /= 2;
        c.rr = rr;
    }
    (16 * c.total() <= limit).then_some(c)
}

/// The decode kernel for storage dtype `dt`, final output dtype `out`.
pub(crate) fn decode_source(dt: DType, out: DType, c: DecodeConfig) -> String {
    let (nk, nv, r, rr, u) = (c.dp / 32, c.dvp / 32, c.r, c.rr, c.u);
    let ind = "        ";
    let declare = lines(0..r, |x| {
        format!(
            "    var m{x} = -inf_f32(); var l{x} = 0.0; var b{x} = false;\n{}",
            lines(0..nv, |n| format!("    var o{x}_{n} = vec4<f32>(0.0);")).trim_end()
        )
    });
    // Step `w` of an iteration takes keys j0 + 16w + slot (registers k{w}_{n} / v{w}_{n}; partial
    // dots in workgroup memory at buffer `buf * U + w` without subgroups). Its keys and values were
    // loaded one iteration ahead (`pk`, `pv`: the next keys' loads are in flight while this step
    // computes); rows past the split's end load its last row instead, and are masked by `key < lim`.
    let fetch = |w: usize, key: &str, decl: &str| -> String {
        let k = lines(0..nk, |n| {
            format!("{ind}{decl}pk{w}_{n} = ldk4(kbase + {key} * kst, 4u * (cg + {}u), kse, d);", 8 * n)
        });
        let v = lines(0..nv, |n| {
            format!("{ind}{decl}pv{w}_{n} = ldv4(vbase + {key} * vst, 4u * (cg + {}u), vse, dv);", 8 * n)
        });
        k + &v
    };
    let prefetch =
        lines(0..u, |w| fetch(w, &format!("min(kbeg + {}u + slot, kend - 1u)", 16 * w), "var ").trim_end().to_string());
    let take = lines(0..u, |w| {
        format!(
            "{ind}let key{w} = j0 + {}u + slot;\n{}{}",
            16 * w,
            lines(0..nk, |n| format!("{ind}let k{w}_{n} = pk{w}_{n};")),
            lines(0..nv, |n| format!("{ind}let v{w}_{n} = pv{w}_{n};")).trim_end()
        )
    });
    // The next iteration's loads, when there is one (a split of one iteration issues no more).
    let next = lines(0..u, |w| {
        format!(
            "{ind}let nkey{w} = min(key{w} + 16u * U, kend - 1u);\n{}",
            fetch(w, &format!("nkey{w}"), "").trim_end()
        )
    });
    let load = format!("{take}{ind}if (j0 + 16u * U < kend) {{\n{next}{ind}}}");
    let dot_terms = |w: usize, x: usize| -> String {
        let terms: Vec<String> =
            (0..nk).map(|n| format!("dot(sm[QB + {}u + cg], k{w}_{n})", x * c.dp / 4 + 8 * n)).collect();
        terms.join(" + ")
    };
    let dots = if c.sg {
        // Row x's partial dot in component x (R <= 4), summed over the slot's 8 consecutive lanes.
        lines(0..u, |w| {
            format!(
                "{ind}var sv{w} = vec4<f32>(0.0);\n{}{ind}sv{w} += subgroupShuffleXor(sv{w}, 1u);\n\
                 {ind}sv{w} += subgroupShuffleXor(sv{w}, 2u);\n{ind}sv{w} += subgroupShuffleXor(sv{w}, 4u);",
                lines(0..r, |x| format!("{ind}sv{w}.{} = {};", XYZW[x], dot_terms(w, x)))
            )
        })
    } else {
        lines((0..u).flat_map(|w| (0..r).map(move |x| (w, x))), |(w, x)| {
            format!("{ind}sm[{} + cg / 4u][cg % 4u] = {};", slot_at(w, x), dot_terms(w, x))
        })
    };
    let update = decode_update(&c);
    let write_ml = lines(0..r, |x| {
        format!("        sm[MB + slot * R + {x}u] = vec4<f32>(select(m{x}, nan_f32(), b{x}), l{x}, 0.0, 0.0);")
    });
    let merge_ml = decode_merge(&c);
    let rounds = decode_rounds(&c);
    let (loaders, arrays) = granule_loaders(dt, [false, c.vec, c.vec]);
    let n = |x: usize| x.to_string();
    let mut fold = fold_parts(c.fold);
    // Ablations: conditions the compiler cannot see through (p.groups > 0 in every dispatch).
    let (empty, loop_on) = match c.ablate {
        Ablate::Empty => ("    if (p.groups > 0u) { return; }", " && p.groups == 0u"),
        Ablate::Loop => ("", " && p.groups == 0u"),
        _ => ("", ""),
    };
    if c.ablate == Ablate::Fold {
        fold[3] = fold[3].replacen("if (partial) {", "if (partial && p.groups == 0u) {", 1);
    }
    render(
        DECODE,
        &[
            ("BINDINGS", &fold[0]),
            ("FOLD_DECLS", &fold[1]),
            ("PARTIAL", &fold[2]),
            ("TAIL", &fold[3]),
            ("PARAMS", &AttnParams::wgsl()),
            ("KV_ARRAY", arrays[1]),
            ("PRELUDE", PRELUDE),
            ("ROWS", ROWS),
            ("LOADERS", &loaders),
            ("STORE", &store_fns(out)),
            ("R", &n(r)),
            ("RR", &n(rr)),
            ("U", &n(u)),
            ("DP4", &n(c.dp / 4)),
            ("DV4", &n(c.dvp / 4)),
            ("EXACT_D", if c.exact { "true" } else { "false" }),
            ("TOTAL", &n(c.total())),
            ("DECLARE", &declare),
            ("PREFETCH", &prefetch),
            ("LOAD", &load),
            ("PARTIAL_DOTS", &dots),
            ("LOOP_BARRIER", if c.sg { "" } else { "        workgroupBarrier();" }),
            ("UPDATE", &update),
            ("WRITE_ML", &write_ml),
            ("MERGE_ML", &merge_ml),
            ("ROUNDS", &rounds),
            ("ABLATE_EMPTY", empty),
            ("ABLATE_LOOP", loop_on),
        ],
    )
}

/// Where step `w`'s partial dot of row `x` sits in the decode kernel's workgroup memory.
fn slot_at(w: usize, x: usize) -> String {
    format!("PB + (((buf * U + {w}u) * 16u + slot) * R + {x}u) * 2u")
}

/// The decode kernel's branch-free online-softmax update of each row for each step (`UPDATE`).
fn decode_update(c: &DecodeConfig) -> String {
    let (nv, r, u, ind) = (c.dvp / 32, c.r, c.u, "        ");
    lines((0..u).flat_map(|w| (0..r).map(move |x| (w, x))), |(w, x)| {
        // The score, soft-capped (mask.wgsl; a no-op without a cap).
        let score = if c.sg {
            format!("{ind}    let sc = soft_cap1(sv{w}.{}, p.softcap, p.softcap_inv);\n", XYZW[x])
        } else {
            let at = slot_at(w, x);
            format!(
                "{ind}    let pa = sm[{at}]; let pb = sm[{at} + 1u];\n\
                 {ind}    let sc = soft_cap1(dot(pa, vec4<f32>(1.0)) + dot(pb, vec4<f32>(1.0)), p.softcap, p.softcap_inv);\n"
            )
        };
        // Branch-free online softmax, so the rows' updates interleave: a key past the row's
        // limit or with a NaN score weighs 0 (a NaN marks the row), and the running max only grows.
        format!(
            "{ind}{{\n{score}\
             {ind}    let live = key{w} < lim[{x}];\n\
             {ind}    b{x} = b{x} || (live && is_nan(sc));\n\
             {ind}    let s2 = select(-inf_f32(), sc, live && sc > -inf_f32());\n\
             {ind}    let mn = max(m{x}, s2);\n\
             {ind}    let a = select(1.0, exp(m{x} - mn), mn > -inf_f32());\n\
             {ind}    let pr = select(0.0, exp(s2 - mn), s2 > -inf_f32());\n\
             {ind}    l{x} = l{x} * a + pr; m{x} = mn;\n{}\
             {ind}}}",
            // Masked keys add nothing (their values may be NaN); visible ones add pr * v even when pr
            // underflowed to 0, so a NaN value poisons the row as on the CPU.
            lines(0..nv, |n| format!(
                "{ind}    o{x}_{n} = o{x}_{n} * a + select(vec4<f32>(0.0), pr * v{w}_{n}, live);"
            ))
        )
    })
}

/// The decode kernel's merge of the 16 key slots' maxima and sums (`MERGE_ML`).
fn decode_merge(c: &DecodeConfig) -> String {
    let nv = c.dvp / 32;
    lines(0..c.r, |x| {
        format!(
            "    {{\n        var mm = -inf_f32(); var nn = false;\n        \
             for (var k = 0u; k < 16u; k++) {{ let e = sm[MB + k * R + {x}u]; nn = nn || is_nan(e.x); mm = max(mm, e.x); }}\n        \
             var ll = 0.0;\n        \
             for (var k = 0u; k < 16u; k++) {{ let e = sm[MB + k * R + {x}u]; if (e.x > -inf_f32()) {{ ll += e.y * exp(e.x - mm); }} }}\n        \
             var f = 0.0;\n        if (m{x} > -inf_f32()) {{ f = exp(m{x} - mm); }}\n{}        \
             mx[{x}] = mm; lsum[{x}] = ll; bad[{x}] = nn;\n    }}",
            lines(0..nv, |n| format!("        o{x}_{n} *= f;"))
        )
    })
}

/// The decode kernel's output: the slots' accumulators summed `rr` rows at a time (`ROUNDS`).
fn decode_rounds(c: &DecodeConfig) -> String {
    let (nv, r, rr) = (c.dvp / 32, c.r, c.rr);
    // Partial rows: for combine.wgsl at row-major (row, split), or the folded layout of decode_fold.wgsl.
    let put = if c.fold {
        "                    let pr = (ch * nsplit + s) * R + x;\n                    \
         if (c4 == 0u) { part[pr] = vec4<f32>(select(mx[x], nan_f32(), bad[x]), lsum[x], 0.0, 0.0); }\n                    \
         part[p.part_start + pr * DV4 + c4] = o;\n"
    } else {
        "                    let pr = grow * nsplit + s;\n                    \
         if (c4 == 0u) { dst[2u * pr] = bitcast<u32>(select(mx[x], nan_f32(), bad[x])); dst[2u * pr + 1u] = bitcast<u32>(lsum[x]); }\n                    \
         put_raw(p.part_start + pr * dv + c, o, n);\n"
    };
    (0..r).step_by(rr).fold(String::new(), |mut s, r0| {
        let writes = lines((0..rr).filter(|q| r0 + q < r), |q| {
            lines(0..nv, |n| {
                format!("        sm[SB + (slot * RR + {q}u) * DV4 + cg + {}u] = o{}_{n};", 8 * n, r0 + q)
            })
            .trim_end()
            .to_string()
        });
        let _ = write!(
            s,
            "    {{\n{writes}        workgroupBarrier();\n        \
             for (var e = t; e < RR * DV4; e += 128u) {{\n            \
             let x = {r0}u + e / DV4; let c4 = e % DV4;\n            \
             let gr = rc * R + x;\n            let c = 4u * c4;\n            \
             if (x < R && gr < group * tq && c < dv) {{\n                \
             var o = vec4<f32>(0.0);\n                \
             for (var k = 0u; k < 16u; k++) {{ o += sm[SB + (k * RR + e / DV4) * DV4 + c4]; }}\n                \
             let h = hk * group + gr / tq; let i = gr % tq;\n                \
             let grow = (b * hq + h) * tq + i;\n                let n = min(4u, dv - c);\n                \
             if (partial) {{\n{put}                \
             }} else {{\n                    \
             store4(grow * dv + c, finish(o, lsum[x], bad[x], visible(i, tq, tk, causal)), n);\n                }}\n            \
             }}\n        }}\n        workgroupBarrier();\n    }}\n"
        );
        s
    })
}

/// The parts of the decode kernel that differ between the two-dispatch and the folded variants:
/// bindings, module-scope declarations, `partial` (whether the workgroup writes partial rows), and
/// the end of `main` (the folded variant's ticket and merge).
pub(super) fn fold_parts(fold: bool) -> [String; 4] {
    if !fold {
        return [
            "@group(0) @binding(0) var<storage, read_write> dst: array<u32>;\n\
             @group(0) @binding(1) var<storage, read> in0: array<u32>;\n\
             @group(0) @binding(2) var<storage, read> in1: {{KV_ARRAY}};\n\
             @group(0) @binding(3) var<storage, read> in2: {{KV_ARRAY}};"
                .to_string(),
            String::new(),
            "    let partial = p.partial == 1u;".to_string(),
            String::new(),
        ];
    }
    let loads = lines(0..MERGE_BATCH, |u| {
        format!(
            "                var ml{u} = vec4<f32>(-inf_f32(), 0.0, 0.0, 0.0); var ov{u} = vec4<f32>(0.0);\n                \
             if (s0 + {u}u < ns) {{ let pr = (ch * nsplit + s0 + {u}u) * R + x; ml{u} = part[pr]; ov{u} = part[p.part_start + pr * DV4 + c4]; }}"
        )
    }) + &lines(0..MERGE_BATCH, |u| format!("                a = fold(a, ml{u}.x, ml{u}.y, ov{u});"));
    [
        "@group(0) @binding(0) var<storage, read_write> dst: array<u32>;\n\
         @group(0) @binding(1) var<storage, read_write> part: array<vec4<f32>>;\n\
         @group(0) @binding(2) var<storage, read_write> tickets: array<atomic<u32>>;\n\
         @group(0) @binding(3) var<storage, read> in0: array<u32>;\n\
         @group(0) @binding(4) var<storage, read> in1: {{KV_ARRAY}};\n\
         @group(0) @binding(5) var<storage, read> in2: {{KV_ARRAY}};"
            .to_string(),
        render(FOLD, &[("MS", &MERGE_BATCH.to_string()), ("MERGE_LOADS", loads.trim_end())]),
        "    // A chunk whose rows see keys of one split only is finished by that split.\n    \
         let partial = nvis > 1u;\n    let ch = (b * hkv + hk) * nrc + rc;"
            .to_string(),
        "    if (partial) {\n        \
         storageBarrier();\n        \
         if (t == 0u) { ticket = atomicAdd(&tickets[ch], 1u); }\n        \
         if (workgroupUniformLoad(&ticket) + 1u == nvis) {\n            \
         storageBarrier();\n            \
         if (t == 0u) { atomicStore(&tickets[ch], 0u); }\n            \
         merge_splits(t, ch, rc, b, hk, nvis);\n        }\n    }"
            .to_string(),
    ]
}
