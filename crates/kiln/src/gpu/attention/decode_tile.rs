//! The `tile` decode kernel (`decode_tile.wgsl`: lane groups read whole key rows in 16-byte words,
//! one round of loads per chunk of keys, short code): its variant, where it applies and its emitter,
//! whose pieces the paged `tile` kernel shares (paged_decode.rs). It writes the partial rows `slots`
//! and `lanes` write, so it folds (decode_fold.rs) or combines.

use super::decode::fold_parts;
use super::emit::{lines, store_fns, ROWS, XYZW};
use super::params::AttnParams;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::DType;

const TILE: &str = include_str!("decode_tile.wgsl");
const WALK: &str = include_str!("tile_walk.wgsl");
const CONSTS: &str = include_str!("tile_consts.wgsl");
/// Invocations per workgroup without `KILN_DECODE_WG`.
const WG: usize = 128;
/// Workgroup memory the kernel keeps to (the value-sum rounds shrink to fit).
const BUDGET: usize = 32 * 1024;
/// From this many keys on, a key row takes half the lanes (two words a lane, twice the keys a
/// lane group): a key's dot products are summed in one shuffle step fewer, which pays where the
/// chunk loop is long and costs where the merge of the (twice as many) lane groups dominates. On an
/// H200 (bf16, 32/8 heads, d 128; docs/PERFORMANCE.md, tenth session): 32768 keys 79.3 -> 69.3 us,
/// 4096 keys 28.0 -> 29.8, 512 keys 18.7 -> 21.4; four words a lane spilled (149 us at 32768).
pub(super) const LONG_KEYS: usize = 8192;

/// Shape of one `tile` decode kernel variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TileConfig {
    /// Head size of keys and values (equal, a multiple of 8).
    d: usize,
    /// Query rows per workgroup (1, 2 or 4) and rows merged per round at the end.
    r: usize,
    rr: usize,
    /// Lanes per key row (a power of two within the smallest subgroup) and 16-byte words per lane.
    lpk: usize,
    ch: usize,
    /// Keys per lane group per chunk.
    kpg: usize,
    /// Invocations per workgroup.
    wg: usize,
    /// The split workgroups merge their partial rows themselves (decode_fold.wgsl).
    fold: bool,
}

impl TileConfig {
    fn groups(self) -> usize {
        self.wg / self.lpk
    }

    fn total(self) -> usize {
        let queries = self.r * self.d / 4;
        let merge = 3 * self.groups() + self.groups() * self.rr * self.d / 4;
        queries.max(merge) + self.fold as usize
    }

    pub(super) fn folded(self) -> TileConfig {
        TileConfig { fold: true, ..self }
    }

    /// Query rows per workgroup.
    pub(super) fn rows(self) -> usize {
        self.r
    }

    /// Value columns of a partial row.
    pub(super) fn dv_padded(self) -> usize {
        self.d
    }

    /// Keys per chunk (splits are multiples of it).
    pub(super) fn step(self) -> usize {
        self.groups() * self.kpg
    }

    pub(super) fn key(self) -> String {
        let fold = if self.fold { ":fold" } else { "" };
        format!("tile:{}:{}:{}:l{}:k{}:w{}{fold}", self.d, self.r, self.rr, self.lpk, self.kpg, self.wg)
    }
}

/// A setting that is a power of two within `range`, read once into `cell`; `None` if unset or
/// anything else.
fn pow2_setting(
    s: &crate::settings::Setting,
    cell: &'static std::sync::OnceLock<Option<usize>>,
    range: std::ops::RangeInclusive<usize>,
) -> Option<usize> {
    *cell.get_or_init(|| {
        let v = s.get().ok()?.trim().parse::<usize>().ok()?;
        (v.is_power_of_two() && range.contains(&v)).then_some(v)
    })
}

/// Invocations per workgroup of the `tile` kernel: `KILN_DECODE_WG` (a power of two from 64 to
/// 1024) within `max` (the adapter's limit), else [`WG`].
fn workgroup(max: usize) -> usize {
    workgroup_or(WG, max)
}

/// `KILN_DECODE_WG` (a power of two from 64 to 1024), else `default`, within `max` (the adapter's
/// limit): for the `tile` and `short` kernels.
pub(super) fn workgroup_or(default: usize, max: usize) -> usize {
    static SET: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    pow2_setting(&crate::settings::DECODE_WG, &SET, 64..=1024).unwrap_or(default).min(max.max(64))
}

/// Lanes to a key row with `KILN_DECODE_LPK` (a power of two from 4 to 32; at most the subgroup
/// and the row's words, and four words a lane, in [`tile_config`]), else `None`: by context length.
fn lanes_per_key() -> Option<usize> {
    static SET: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    pow2_setting(&crate::settings::DECODE_LPK, &SET, 4..=32)
}

/// The `tile` variant for head sizes `d`, `dv` and `rows` query rows per key/value head, on
/// subgroups of at least `sg_min` lanes, workgroups of at most `max_wg` invocations (fewer where
/// the merge would not fit 32 KiB of workgroup memory), for contexts of up to `keys` keys (from
/// [`LONG_KEYS`] on, half the lanes to a key row): `None` where it
/// does not apply (`d` != `dv`, `d` not a multiple of 8, fewer than 4 lanes to a key row, or too
/// little workgroup memory). Keys and values must be f16/bf16 read in aligned 8-element granules
/// (`granular_by(.., 8)`): the caller checks.
pub(crate) fn tile_config(
    d: usize,
    dv: usize,
    rows: usize,
    sg_min: usize,
    limit: usize,
    max_wg: usize,
    keys: usize,
) -> Option<TileConfig> {
    if d != dv || d == 0 || !d.is_multiple_of(8) || sg_min < 4 || !sg_min.is_power_of_two() {
        return None;
    }
    let words = d / 8;
    let fewest = words.div_ceil(4).next_power_of_two();
    let mut lpk = sg_min.min(32).min(words.next_power_of_two());
    match lanes_per_key() {
        Some(set) => lpk = lpk.min(set.max(fewest)),
        None if keys >= LONG_KEYS => lpk = lpk.min((words / 2).max(4)),
        None => {}
    }
    while lpk > 1 && !words.is_multiple_of(lpk) {
        lpk /= 2;
    }
    let ch = words / lpk;
    if lpk < 4 || ch > 4 {
        return None;
    }
    let r = rows.next_power_of_two().min(4);
    let wg = workgroup(max_wg);
    let mut c = TileConfig { d, r, rr: r, lpk, ch, kpg: (4 / ch).max(1), wg, fold: false };
    let budget = limit.min(BUDGET);
    while c.rr > 1 && 16 * c.total() > budget {
        c.rr /= 2;
    }
    // More lane groups than the value sums of one row fit: smaller workgroups.
    while c.wg > 64 && c.wg > c.lpk && 16 * c.total() > budget {
        c.wg /= 2;
    }
    (16 * c.total() <= budget).then_some(c)
}

/// Where the `tile` kernel finds key and value rows: views with row strides (`kw0 + j * kst`), or
/// a paged pool through a block table (`prow`, paged_tile.wgsl).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rows {
    Strided,
    Paged,
}

/// `wlo`/`whi`: a 16-byte word's 8 f16 or bf16 values (`dt`) as two vec4s, for the `tile` and `short`
/// kernels, which read key and value rows in such words.
pub(super) fn half_words(dt: DType) -> &'static str {
    match dt {
        DType::F16 => {
            "fn wlo(w: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }\n\
             fn whi(w: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)); }"
        }
        _ => {
            "fn bf2(a: u32, b: u32) -> vec4<f32> { return vec4<f32>(bitcast<f32>(a << 16u), bitcast<f32>(a & 0xffff0000u), \
             bitcast<f32>(b << 16u), bitcast<f32>(b & 0xffff0000u)); }\n\
             fn wlo(w: vec4<u32>) -> vec4<f32> { return bf2(w.x, w.y); }\n\
             fn whi(w: vec4<u32>) -> vec4<f32> { return bf2(w.z, w.w); }"
        }
    }
}

/// The pieces of a `tile` kernel that do not depend on where its rows come from or go, as
/// placeholders of decode_tile.wgsl and paged_tile.wgsl: the workgroup size, the constants and the
/// dtype's word conversions (tile_consts.wgsl), the first chunk's loads, and the walk
/// (tile_walk.wgsl: the chunk loop's loads, scores and online softmax, and the merge of the lane
/// groups' maxima and sums).
pub(super) fn tile_pieces(dt: DType, c: TileConfig, rows: Rows) -> Vec<(&'static str, String)> {
    let (r, ch, kpg) = (c.r, c.ch, c.kpg);
    let ind = "        ";
    let cvt = half_words(dt);
    let pairs = || (0..kpg).flat_map(|i| (0..ch).map(move |n| (i, n)));
    // Key i of the lane's group in the chunk from c0; rows past the split's end read its last row.
    let word = |buf: &str, base: &str, st: &str, key: &str, n: usize| match rows {
        Rows::Strided => format!("{buf}[{base} + min({key}, kend - 1u) * {st} + {}u]", c.lpk * n),
        Rows::Paged => {
            let off = if buf == "in1" { "p.k_off" } else { "p.v_off" };
            format!("{buf}[prow(b, hk, min({key}, kend - 1u), {off}) + lane + {}u]", c.lpk * n)
        }
    };
    let first = lines(pairs(), |(i, n)| {
        let key = format!("kbeg + lg + {}u", c.groups() * i);
        format!(
            "    var kn{i}_{n} = {}; var vn{i}_{n} = {};",
            word("in1", "kw0", "kst", &key, n),
            word("in2", "vw0", "vst", &key, n)
        )
    });
    let queries = lines((0..r).flat_map(|x| (0..ch).map(move |n| (x, n))), |(x, n)| {
        let at = format!("QB + {}u + 2u * (lane + {}u)", x * c.d / 4, c.lpk * n);
        format!("    let q{x}_{n}a = sm[{at}]; let q{x}_{n}b = sm[{at} + 1u];")
    });
    let declare = lines((0..r).flat_map(|x| (0..ch).map(move |n| (x, n))), |(x, n)| {
        format!("    var o{x}_{n}a = vec4<f32>(0.0); var o{x}_{n}b = vec4<f32>(0.0);")
    });
    let take = lines(0..kpg, |i| format!("{ind}let key{i} = c0 + lg + {}u;", c.groups() * i))
        + &lines(pairs(), |(i, n)| format!("{ind}let kk{i}_{n} = kn{i}_{n}; let vv{i}_{n} = vn{i}_{n};"));
    let next = lines(pairs(), |(i, n)| {
        let key = format!("key{i} + step");
        format!(
            "{ind}    kn{i}_{n} = {}; vn{i}_{n} = {};",
            word("in1", "kw0", "kst", &key, n),
            word("in2", "vw0", "vst", &key, n)
        )
    });
    // Each key's R scores in a vec4, summed over the lane group.
    let mut scores = String::new();
    for i in 0..kpg {
        scores += &format!("{ind}var s{i} = vec4<f32>(0.0);\n");
        for n in 0..ch {
            scores += &format!("{ind}{{ let ka = wlo(kk{i}_{n}); let kb = whi(kk{i}_{n});\n");
            scores +=
                &lines(0..r, |x| format!("{ind}    s{i}.{} += dot(q{x}_{n}a, ka) + dot(q{x}_{n}b, kb);", XYZW[x]));
            scores += &format!("{ind}}}\n");
        }
        let mut o = 1;
        while o < c.lpk {
            scores += &format!("{ind}s{i} += subgroupShuffleXor(s{i}, {o}u);\n");
            o *= 2;
        }
    }
    // The group's online softmax over the chunk's keys, all rows at once, on soft-capped scores
    // (mask.wgsl; a no-op without a cap); a key past the row's
    // limit or with a NaN score weighs 0 (a NaN marks the row). Masked keys add nothing (their
    // values may be NaN); visible ones add p * v even when p underflowed to 0, so a NaN value
    // poisons the row as on the CPU.
    let ninf = "vec4<f32>(-inf_f32())";
    let mut update = lines(0..kpg, |i| {
        format!(
            "{ind}s{i} = soft_cap(s{i}, p.softcap, p.softcap_inv);\n\
             {ind}let live{i} = vec4<u32>(key{i}) < limv;\n\
             {ind}bad = bad | (live{i} & nan4v(s{i}));\n\
             {ind}let t{i} = select({ninf}, s{i}, live{i} & (s{i} > {ninf}));"
        )
    });
    let cm = (1..kpg).fold("t0".to_string(), |a, i| format!("max({a}, t{i})"));
    update += &format!(
        "{ind}let mn = max(m, {cm});\n\
         {ind}let a = select(vec4<f32>(1.0), exp(m - mn), mn > {ninf});\n"
    );
    update += &lines(0..kpg, |i| format!("{ind}let p{i} = select(vec4<f32>(0.0), exp(t{i} - mn), t{i} > {ninf});"));
    let psum = (1..kpg).fold("p0".to_string(), |a, i| format!("{a} + p{i}"));
    update += &format!("{ind}l = l * a + {psum}; m = mn;\n");
    for n in 0..ch {
        update += &lines(0..kpg, |i| format!("{ind}let va{i}_{n} = wlo(vv{i}_{n}); let vb{i}_{n} = whi(vv{i}_{n});"));
    }
    // The value sums: where every row sees every key of the chunk (all chunks but a split's last,
    // and a causal chunk's diagonal), plain multiply-adds; else each term selected, since p * v of a
    // masked key would carry a NaN or Inf value into the row. At long contexts the chunk's
    // arithmetic bounds the kernel, and the selects were a large part of it (H200, bf16, 32768
    // keys: 85.0 -> 79.3 us without them; docs/PERFORMANCE.md, tenth session).
    let sums = |masked: bool| {
        let mut s = String::new();
        for n in 0..ch {
            for (x, comp) in XYZW.iter().enumerate().take(r) {
                for half in ["a", "b"] {
                    let terms: String = (0..kpg)
                        .map(|i| {
                            let t = format!("p{i}.{comp} * v{half}{i}_{n}");
                            if masked {
                                format!(" + select(vec4<f32>(0.0), {t}, live{i}.{comp})")
                            } else {
                                format!(" + {t}")
                            }
                        })
                        .collect();
                    s += &format!("{ind}    o{x}_{n}{half} = o{x}_{n}{half} * a.{comp}{terms};\n");
                }
            }
        }
        s
    };
    // `dead`: the chunk's rows past the group (never written), whose keys are all masked.
    let every = (0..kpg).map(|i| format!("all(live{i} | dead)")).collect::<Vec<_>>().join(" && ");
    update += &format!("{ind}if ({every}) {{\n{}{ind}}} else {{\n{}{ind}}}\n", sums(false), sums(true));
    let walk = render(
        WALK,
        &[
            ("QUERIES", queries.trim_end()),
            ("DECLARE", declare.trim_end()),
            ("TAKE", take.trim_end()),
            ("NEXT", next.trim_end()),
            ("SCORES", scores.trim_end()),
            ("UPDATE", update.trim_end()),
        ],
    );
    let n = |x: usize| x.to_string();
    let consts = render(
        CONSTS,
        &[
            ("CVT", cvt),
            ("R", &n(r)),
            ("RR", &n(c.rr)),
            ("WG", &n(c.wg)),
            ("LPK", &n(c.lpk)),
            ("CH", &n(ch)),
            ("KPG", &n(kpg)),
            ("DV4", &n(c.d / 4)),
            ("TOTAL", &n(c.total())),
        ],
    );
    vec![
        ("WG", n(c.wg)),
        ("CONSTS", consts.trim_end().to_string()),
        ("FIRST", first.trim_end().to_string()),
        ("WALK", walk.trim_end().to_string()),
    ]
}

/// How a `tile` kernel's rounds name and finish a row: `valid` (row x of the chunk exists), `row`
/// (its output row), `finish` (its final value from `o`), `put` (its partial row, `pr` and `grow`
/// in scope).
pub(super) struct RowRules<'a> {
    pub(super) valid: &'a str,
    pub(super) row: &'a str,
    pub(super) finish: &'a str,
    pub(super) put: &'a str,
}

/// The end of a `tile` kernel (`ROUNDS`): the groups' value sums, rescaled to the rows' common max,
/// summed through workgroup memory RR rows a round, and the rows written final or partial.
pub(super) fn tile_rounds(c: TileConfig, rules: &RowRules) -> String {
    let (r, ch) = (c.r, c.ch);
    let RowRules { valid, row, finish, put } = rules;
    (0..r).step_by(c.rr).fold(String::new(), |mut s, r0| {
        let writes = lines((0..c.rr).filter(|q| r0 + q < r).flat_map(|q| (0..ch).map(move |n| (q, n))), |(q, n)| {
            let (x, at) = (r0 + q, format!("SB + {}u * DV4 + 2u * (lane + {}u)", q, c.lpk * n));
            format!(
                "        sm[{at} + lg * RR * DV4] = o{x}_{n}a * f.{0}; sm[{at} + lg * RR * DV4 + 1u] = o{x}_{n}b * f.{0};",
                XYZW[x]
            )
        });
        s += &format!(
            "    {{\n{writes}        workgroupBarrier();\n        \
             for (var e = t; e < RR * DV4; e += WG) {{\n            \
             let x = {r0}u + e / DV4; let c4 = e % DV4;\n            \
             let gr = rc * R + x; let c = 4u * c4;\n            \
             if (x < R && {valid} && c < dv) {{\n                \
             var o = vec4<f32>(0.0);\n                \
             for (var k = 0u; k < NG; k++) {{ o += sm[SB + (k * RR + e / DV4) * DV4 + c4]; }}\n                \
             {row}\n                let n = min(4u, dv - c);\n                \
             if (partial) {{\n{put}\n                }} else {{\n                    \
             store4(grow * dv + c, {finish}, n);\n                }}\n            \
             }}\n        }}\n        workgroupBarrier();\n    }}\n"
        );
        s
    })
}

/// A `tile` kernel's partial row for combine.wgsl (`RowRules::put`: the row's (max, sum) words at
/// `2 pr`, its f32 value sums from `p.part_start + pr * dv`), for the two-dispatch and paged paths.
pub(super) const COMBINE_PUT: &str = "                    let pr = grow * nsplit + s;\n                    \
     if (c4 == 0u) { dst[2u * pr] = bitcast<u32>(select(mx[x], nan_f32(), badr[x])); dst[2u * pr + 1u] = bitcast<u32>(lsum[x]); }\n                    \
     put_raw(p.part_start + pr * dv + c, o, n);";

/// The `tile` decode kernel for storage dtype `dt` (f16 or bf16), final output dtype `out`.
pub(crate) fn tile_source(dt: DType, out: DType, c: TileConfig) -> String {
    let put = if c.fold {
        "                    let pr = (ch * nsplit + s) * R + x;\n                    \
         if (c4 == 0u) { part[pr] = vec4<f32>(select(mx[x], nan_f32(), badr[x]), lsum[x], 0.0, 0.0); }\n                    \
         part[p.part_start + pr * DV4 + c4] = o;"
    } else {
        COMBINE_PUT
    };
    let rounds = tile_rounds(
        c,
        &RowRules {
            valid: "gr < group * tq",
            row: "let h = hk * group + gr / tq; let i = gr % tq;\n                let grow = (b * hq + h) * tq + i;",
            finish: "finish(o, lsum[x], badr[x], visible(i, tq, tk, causal))",
            put,
        },
    );
    let fold = fold_parts(c.fold);
    let bindings = fold[0].replace("{{KV_ARRAY}}", "array<vec4<u32>>");
    let (params, loaders, store) = (AttnParams::wgsl(), loader("ld0", "in0", dt), store_fns(out));
    let pieces = tile_pieces(dt, c, Rows::Strided);
    let mut subs: Vec<(&str, &str)> = vec![
        ("BINDINGS", &bindings),
        ("FOLD_DECLS", &fold[1]),
        ("PARTIAL", &fold[2]),
        ("TAIL", &fold[3]),
        ("PARAMS", &params),
        ("PRELUDE", PRELUDE),
        ("ROWS", ROWS),
        ("LOADERS", &loaders),
        ("STORE", &store),
        ("ROUNDS", rounds.trim_end()),
    ];
    subs.extend(pieces.iter().map(|(k, v)| (*k, v.as_str())));
    render(TILE, &subs)
}
