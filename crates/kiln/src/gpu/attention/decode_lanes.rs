//! The `lanes` decode kernel (`decode_lanes.wgsl`, FlashDecoding style: a lane owns whole keys for
//! the scores and value columns for P.V, one softmax rescale per block of keys): its variant, its
//! emitter, where it applies, the variant enum of the four decode kernels (`slots` in `decode.rs`,
//! `tile` in `decode_tile.rs`, `short` in `decode_short.rs`) and the `KILN_DECODE_KERNEL` choice
//! between them. The first three write the same partial rows, so each folds (decode_fold.rs) or
//! combines; `short` never splits its keys.

use super::decode::{decode_source, fold_parts, DecodeConfig};
use super::decode_short::{short_source, ShortConfig};
use super::decode_tile::{tile_source, TileConfig};
use super::emit::{lines, store_fns, ROWS, XYZW};
use super::params::AttnParams;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::DType;

const LANES: &str = include_str!("decode_lanes.wgsl");
/// Segments of W lanes per workgroup.
const NSEG: usize = 4;
/// Most query rows per workgroup.
const MAX_ROWS: usize = 8;

/// Shape of one `lanes` decode kernel variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LanesConfig {
    /// Head sizes (`d` a multiple of 8, `dv` of 4W).
    d: usize,
    dv: usize,
    /// Query rows per workgroup (1, 2, 4 or 8).
    r: usize,
    /// Lanes per segment: a power of two that divides the subgroup size (keys per block).
    w: usize,
    /// The split workgroups merge their partial rows themselves (decode_fold.wgsl).
    fold: bool,
}

impl LanesConfig {
    fn total(self) -> usize {
        let walk = self.r * self.d / 4;
        let merge = 3 * NSEG * self.r.div_ceil(4) + NSEG * self.r * self.dv / 4;
        walk.max(merge) + self.fold as usize
    }

    pub(super) fn folded(self) -> LanesConfig {
        LanesConfig { fold: true, ..self }
    }

    /// Query rows per workgroup.
    pub(super) fn rows(self) -> usize {
        self.r
    }

    /// Value columns (a multiple of 4).
    pub(super) fn dv_padded(self) -> usize {
        self.dv
    }

    /// Keys per block (splits are multiples of it).
    pub(super) fn step(self) -> usize {
        self.w
    }

    pub(super) fn key(self) -> String {
        let fold = if self.fold { ":fold" } else { "" };
        format!("lanes:{}:{}:{}:w{}{fold}", self.d, self.dv, self.r, self.w)
    }
}

/// A decode kernel variant: the `slots` kernel (decode.wgsl), the `lanes` one (decode_lanes.wgsl),
/// the `tile` one (decode_tile.wgsl) or the `short` one (decode_short.wgsl, which never splits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeVariant {
    Slots(DecodeConfig),
    Lanes(LanesConfig),
    Tile(TileConfig),
    Short(ShortConfig),
}

impl DecodeVariant {
    /// The folded variant of this one (the last split workgroup merges).
    pub(super) fn folded(self) -> DecodeVariant {
        match self {
            DecodeVariant::Slots(c) => DecodeVariant::Slots(c.folded()),
            DecodeVariant::Lanes(c) => DecodeVariant::Lanes(c.folded()),
            DecodeVariant::Tile(c) => DecodeVariant::Tile(c.folded()),
            DecodeVariant::Short(c) => DecodeVariant::Short(c),
        }
    }

    /// Query rows per workgroup.
    pub(super) fn rows(self) -> usize {
        match self {
            DecodeVariant::Slots(c) => c.rows(),
            DecodeVariant::Lanes(c) => c.rows(),
            DecodeVariant::Tile(c) => c.rows(),
            DecodeVariant::Short(_) => 1,
        }
    }

    /// Value columns of a partial row (a multiple of 4).
    pub(super) fn dv_padded(self) -> usize {
        match self {
            DecodeVariant::Slots(c) => c.dv_padded(),
            DecodeVariant::Lanes(c) => c.dv_padded(),
            DecodeVariant::Tile(c) => c.dv_padded(),
            DecodeVariant::Short(c) => c.d(),
        }
    }

    /// Keys per loop iteration (splits are multiples of it; `short` takes all keys at once).
    pub(super) fn step(self) -> usize {
        match self {
            DecodeVariant::Slots(c) => 16 * c.steps(),
            DecodeVariant::Lanes(c) => c.step(),
            DecodeVariant::Tile(c) => c.step(),
            DecodeVariant::Short(_) => super::decode_short::SHORT_KEYS,
        }
    }

    /// The pipeline key of the kernel for storage dtype `dt`, output dtype `out`.
    pub(super) fn key(self, dt: DType, out: DType) -> String {
        let config = match self {
            DecodeVariant::Slots(c) => c.key(),
            DecodeVariant::Lanes(c) => c.key(),
            DecodeVariant::Tile(c) => c.key(),
            DecodeVariant::Short(c) => c.key(),
        };
        format!("attention_decode:{dt}:{out}:{config}")
    }

    /// The kernel's source for storage dtype `dt`, output dtype `out`.
    pub(super) fn source(self, dt: DType, out: DType) -> String {
        match self {
            DecodeVariant::Slots(c) => decode_source(dt, out, c),
            DecodeVariant::Lanes(c) => lanes_source(dt, out, c),
            DecodeVariant::Tile(c) => tile_source(dt, out, c),
            DecodeVariant::Short(c) => short_source(dt, out, c),
        }
    }
}

/// The decode attention kernels `KILN_DECODE_KERNEL` chooses between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DecodeKernel {
    /// 16 key slots of 8 lanes (decode.wgsl): every adapter, dtype and head size.
    Slots,
    /// A lane owns whole keys, then value columns (decode_lanes.wgsl).
    Lanes,
    /// Lane groups read whole key rows, short code (decode_tile.wgsl).
    Tile,
    /// One query row over a short context, every key at once (decode_short.wgsl); `tile` where it
    /// does not apply.
    Short,
}

impl DecodeKernel {
    /// The kernel a setting's value names (`slots`, `lanes`, `tile` or `short`).
    pub(crate) fn parse(v: &str) -> Option<DecodeKernel> {
        match v.trim() {
            "slots" => Some(DecodeKernel::Slots),
            "lanes" => Some(DecodeKernel::Lanes),
            "tile" => Some(DecodeKernel::Tile),
            "short" => Some(DecodeKernel::Short),
            _ => None,
        }
    }
}

/// The kernel decode attention takes where it applies (`slots` runs where the chosen one does not):
/// a test's [`force`], else `KILN_DECODE_KERNEL`, else [`DEFAULT_KERNEL`].
pub(super) fn chosen() -> DecodeKernel {
    static SET: std::sync::OnceLock<DecodeKernel> = std::sync::OnceLock::new();
    FORCE.with(|f| f.get()).unwrap_or_else(|| {
        *SET.get_or_init(|| {
            crate::settings::DECODE_KERNEL.get().ok().and_then(|v| DecodeKernel::parse(&v)).unwrap_or(DEFAULT_KERNEL)
        })
    })
}

/// The decode kernel without a setting: `short` where it applies (one query row over at most 1024
/// keys), else `tile` (f16/bf16 with subgroups), else `slots`. On an H200 (docs/PERFORMANCE.md, the
/// fourteenth session) `short` took an 8B-shaped bf16 step at 512 keys in 14.6 us against `tile`'s
/// 19.4, and a 1B-shaped f16 decode's attention at context 512 in 300 us a token against 470;
/// `tile` was the fastest of the three split kernels (the eighth session).
const DEFAULT_KERNEL: DecodeKernel = DecodeKernel::Short;

thread_local! {
    /// A test's choice for calls on this thread; `None`: `KILN_DECODE_KERNEL` decides.
    static FORCE: std::cell::Cell<Option<DecodeKernel>> = const { std::cell::Cell::new(None) };
}

/// Forces a decode kernel for calls on this thread (`Some`), or hands the choice back to the
/// setting (`None`): for tests of every kernel in one run (each test's thread its own choice, so
/// tests running meanwhile keep theirs).
pub(crate) fn force(kernel: Option<DecodeKernel>) {
    FORCE.with(|f| f.set(kernel));
}

/// The `lanes` variant for head sizes `d`, `dv` and `rows` query rows per key/value head, on
/// subgroups of at least `sg_min` lanes: `None` where it does not apply (subgroups under 4 lanes,
/// `d` not a multiple of 8, `dv` not of 4 lanes per segment, or too little workgroup memory).
/// The keys and values must be read as granules (`granular`, keys in 8-element granules for
/// f16/bf16): the caller checks.
pub(crate) fn lanes_config(d: usize, dv: usize, rows: usize, sg_min: usize, limit: usize) -> Option<LanesConfig> {
    let w = sg_min.min(32);
    if w < 4 || !w.is_power_of_two() || d == 0 || !d.is_multiple_of(8) || !dv.is_multiple_of(4 * w) {
        return None;
    }
    let mut c = LanesConfig { d, dv, r: rows.next_power_of_two().min(MAX_ROWS), w, fold: false };
    while c.r > 1 && 16 * c.total() > limit {
        c.r /= 2;
    }
    (16 * c.total() <= limit).then_some(c)
}

/// The `lanes` decode kernel for storage dtype `dt`, final output dtype `out`.
pub(crate) fn lanes_source(dt: DType, out: DType, c: LanesConfig) -> String {
    let (r, w, np) = (c.r, c.w, c.r.div_ceil(4));
    let nq = c.dv / (4 * w);
    let half = dt != DType::F32;
    // Keys in 16-byte granules of 8 (f16/bf16) or 4 (f32) values; values in granules of 4.
    let nk = if half { c.d / 8 } else { c.d / 4 };
    let (v_ty, v_zero) = if half { ("vec2<u32>", "vec2<u32>(0u)") } else { ("vec4<u32>", "vec4<u32>(0u)") };
    let cvt = match dt {
        DType::F16 => {
            "fn cv2(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }\n\
             fn klo(w: vec4<u32>) -> vec4<f32> { return cv2(w.xy); }\nfn khi(w: vec4<u32>) -> vec4<f32> { return cv2(w.zw); }\n\
             fn vcv(w: vec2<u32>) -> vec4<f32> { return cv2(w); }\n"
        }
        DType::BF16 => {
            "fn cv2(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u), \
             bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u)); }\n\
             fn klo(w: vec4<u32>) -> vec4<f32> { return cv2(w.xy); }\nfn khi(w: vec4<u32>) -> vec4<f32> { return cv2(w.zw); }\n\
             fn vcv(w: vec2<u32>) -> vec4<f32> { return cv2(w); }\n"
        }
        _ => "fn klo(w: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(w); }\n\
              fn vcv(w: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(w); }\n",
    };
    let loaders = format!("{}{cvt}", loader("ld0", "in0", dt));
    let limits = lines(0..np, |pk| {
        format!(
            "    let lim{pk} = vec4<u32>({});",
            (0..4).map(|i| format!("lim[{}]", 4 * pk + i)).collect::<Vec<_>>().join(", ")
        )
    });
    let declare = lines(0..np, |pk| {
        format!("    var m{pk} = vec4<f32>(-inf_f32()); var l{pk} = vec4<f32>(0.0); var bd{pk} = vec4<bool>(false);")
    }) + &lines(0..r, |x| {
        lines(0..nq, |q| format!("    var o{x}_{q} = vec4<f32>(0.0);")).trim_end().to_string()
    });
    let ind = "        ";
    // Rows past the split's end read its last key and value rows (masked below).
    let kshift = if half { 3 } else { 2 };
    let loads = format!(
        "{}{}{ind}if (j0 < kend) {{\n{ind}    let kr = (kbase + min(key, kend - 1u) * kst) >> {kshift}u;\n{}{}{ind}}}",
        lines(0..nk, |n| format!("{ind}var kw{n} = vec4<u32>(0u);")),
        lines(0..w, |i| lines(0..nq, |q| format!("{ind}var vw{i}_{q} = {v_zero};")).trim_end().to_string()),
        lines(0..nk, |n| format!("{ind}    kw{n} = in1[kr + {n}u];")),
        lines(0..w, |i| {
            format!(
                "{ind}    {{ let vr = (vbase + min(j0 + {i}u, kend - 1u) * vst) >> 2u;{} }}",
                (0..nq).map(|q| format!(" vw{i}_{q} = in2[vr + lane + {}u];", w * q)).collect::<String>()
            )
        })
    );
    let scores = scores(&c, nk, half);
    let softmax = softmax(&c, nq);
    let pv = pv(&c, nq);
    let (seg_sums, merge) = merge(&c, nq);
    let put = if c.fold {
        "                let pr = (ch * nsplit + s) * R + x;\n                \
         if (c4 == 0u) { part[pr] = vec4<f32>(select(mx[x], nan_f32(), bad[x]), lsum[x], 0.0, 0.0); }\n                \
         part[p.part_start + pr * DV4 + c4] = o;"
    } else {
        "                let pr = grow * nsplit + s;\n                \
         if (c4 == 0u) { dst[2u * pr] = bitcast<u32>(select(mx[x], nan_f32(), bad[x])); dst[2u * pr + 1u] = bitcast<u32>(lsum[x]); }\n                \
         put_raw(p.part_start + pr * dv + c, o, n);"
    };
    let fold = fold_parts(c.fold);
    let bindings = fold[0]
        .replace("in1: {{KV_ARRAY}}", "in1: array<vec4<u32>>")
        .replace("{{KV_ARRAY}}", &format!("array<{v_ty}>"));
    let n = |x: usize| x.to_string();
    render(
        LANES,
        &[
            ("BINDINGS", &bindings),
            ("FOLD_DECLS", &fold[1]),
            ("PARTIAL", &fold[2]),
            ("TAIL", &fold[3]),
            ("PARAMS", &AttnParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("ROWS", ROWS),
            ("LOADERS", &loaders),
            ("STORE", &store_fns(out)),
            ("R", &n(r)),
            ("NR", &n(4 * np)),
            ("W", &n(w)),
            ("NSEG", &n(NSEG)),
            ("WG", &n(NSEG * w)),
            ("DP4", &n(c.d / 4)),
            ("DV4", &n(c.dv / 4)),
            ("NP", &n(np)),
            ("TOTAL", &n(c.total())),
            ("LIMITS", &limits),
            ("DECLARE", &declare),
            ("LOADS", &loads),
            ("SCORES", &scores),
            ("SOFTMAX", &softmax),
            ("PV", &pv),
            ("SEG_SUMS", &seg_sums),
            ("MERGE", &merge),
            ("PUT", put),
        ],
    )
}

/// Phase 1 (`SCORES`): each lane's dot products of its key with the R queries, rows packed by 4.
fn scores(c: &LanesConfig, nk: usize, half: bool) -> String {
    let (ind, dp4) = ("        ", c.d / 4);
    let mut s = lines(0..c.r.div_ceil(4), |pk| format!("{ind}var sc{pk} = vec4<f32>(0.0);"));
    for n in 0..nk {
        let mut k = format!("{ind}{{ let ka = klo(kw{n});");
        if half {
            k += &format!(" let kb = khi(kw{n});");
        }
        k += "\n";
        s += &k;
        s += &lines(0..c.r, |x| {
            let (pk, comp, at) = (x / 4, XYZW[x % 4], x * dp4);
            if half {
                format!(
                    "{ind}    sc{pk}.{comp} += dot(sm[QB + {}u], ka) + dot(sm[QB + {}u], kb);",
                    at + 2 * n,
                    at + 2 * n + 1
                )
            } else {
                format!("{ind}    sc{pk}.{comp} += dot(sm[QB + {}u], ka);", at + n)
            }
        });
        s += &format!("{ind}}}\n");
    }
    s.trim_end().to_string()
}

/// Phase 2 (`SOFTMAX`): the block's max per row over the segment (a butterfly of shuffles), the
/// running max, sum and value sums rescaled once, and the lane's probabilities `pr{pk}`. Scores are
/// soft-capped first (mask.wgsl). A key past the row's limit or with a NaN score weighs 0 (a NaN marks
/// the row).
fn softmax(c: &LanesConfig, nq: usize) -> String {
    let ind = "        ";
    let mut s = String::new();
    for pk in 0..c.r.div_ceil(4) {
        let mut bfly = String::new();
        let mut o = 1;
        while o < c.w {
            bfly += &format!("{ind}bm{pk} = max(bm{pk}, subgroupShuffleXor(bm{pk}, {o}u));\n");
            o *= 2;
        }
        s += &format!(
            "{ind}sc{pk} = soft_cap(sc{pk}, p.softcap, p.softcap_inv);\n\
             {ind}let live{pk} = vec4<u32>(key) < lim{pk};\n\
             {ind}bd{pk} = bd{pk} | (live{pk} & nan4v(sc{pk}));\n\
             {ind}let s2_{pk} = select(vec4<f32>(-inf_f32()), sc{pk}, live{pk} & (sc{pk} > vec4<f32>(-inf_f32())));\n\
             {ind}var bm{pk} = s2_{pk};\n{bfly}\
             {ind}let mn{pk} = max(m{pk}, bm{pk});\n\
             {ind}let a{pk} = select(vec4<f32>(1.0), exp(m{pk} - mn{pk}), mn{pk} > vec4<f32>(-inf_f32()));\n\
             {ind}let pr{pk} = select(vec4<f32>(0.0), exp(s2_{pk} - mn{pk}), s2_{pk} > vec4<f32>(-inf_f32()));\n\
             {ind}l{pk} = l{pk} * a{pk} + pr{pk}; m{pk} = mn{pk};\n"
        );
    }
    s += &lines(0..c.r, |x| {
        lines(0..nq, |q| format!("{ind}o{x}_{q} *= a{}.{};", x / 4, XYZW[x % 4])).trim_end().to_string()
    });
    s.trim_end().to_string()
}

/// Phase 3 (`PV`): the block's W keys in turn, their probabilities broadcast from their lanes. Keys
/// a row does not see add nothing (their values may be NaN); visible ones add p * v even when p
/// underflowed to 0, so a NaN value poisons the row as on the CPU.
fn pv(c: &LanesConfig, nq: usize) -> String {
    let (ind, np) = ("        ", c.r.div_ceil(4));
    lines(0..c.w, |i| {
        let mut s = format!("{ind}{{\n");
        s += &lines(0..np, |pk| {
            format!(
                "{ind}    let p{pk} = subgroupShuffle(pr{pk}, sbase + {i}u); let v{pk} = vec4<u32>(j0 + {i}u) < lim{pk};"
            )
        });
        s += &lines(0..nq, |q| format!("{ind}    let x{q} = vcv(vw{i}_{q});"));
        s += &lines(0..c.r, |x| {
            let (pk, comp) = (x / 4, XYZW[x % 4]);
            lines(0..nq, |q| {
                format!("{ind}    o{x}_{q} += select(vec4<f32>(0.0), p{pk}.{comp} * x{q}, v{pk}.{comp});")
            })
            .trim_end()
            .to_string()
        });
        s + &format!("{ind}}}")
    })
    .trim_end()
    .to_string()
}

/// The segments' merge: each segment's (max, summed sum, NaN flag) per row pack into workgroup
/// memory (`SEG_SUMS`); then every invocation takes the rows' common max, total sum and NaN flag,
/// and each segment stores its value sums rescaled to the common max (`MERGE`).
fn merge(c: &LanesConfig, nq: usize) -> (String, String) {
    let (ind, np) = ("    ", c.r.div_ceil(4));
    let mut seg = format!("{ind}workgroupBarrier();\n");
    for pk in 0..np {
        seg += &format!("{ind}{{\n{ind}    var lt = l{pk}; var bt = select(vec4<f32>(0.0), vec4<f32>(1.0), bd{pk});\n");
        let mut o = 1;
        while o < c.w {
            seg +=
                &format!("{ind}    lt += subgroupShuffleXor(lt, {o}u); bt = max(bt, subgroupShuffleXor(bt, {o}u));\n");
            o *= 2;
        }
        seg += &format!(
            "{ind}    if (lane == 0u) {{ let at = MB + (seg * NP + {pk}u) * 3u; sm[at] = m{pk}; sm[at + 1u] = lt; sm[at + 2u] = bt; }}\n{ind}}}\n"
        );
    }
    let mut merge = format!(
        "{ind}for (var x = 0u; x < R; x++) {{\n{ind}    var mm = -inf_f32(); var nn = false;\n{ind}    \
         for (var k = 0u; k < NSEG; k++) {{ let at = MB + (k * NP + x / 4u) * 3u; mm = max(mm, sm[at][x % 4u]); nn = nn || sm[at + 2u][x % 4u] > 0.0; }}\n{ind}    \
         var ll = 0.0;\n{ind}    \
         for (var k = 0u; k < NSEG; k++) {{ let at = MB + (k * NP + x / 4u) * 3u; let mk = sm[at][x % 4u]; if (mk > -inf_f32()) {{ ll += sm[at + 1u][x % 4u] * exp(mk - mm); }} }}\n{ind}    \
         mx[x] = mm; lsum[x] = ll; bad[x] = nn;\n{ind}}}\n"
    );
    merge += &lines(0..c.r, |x| {
        let m = format!("m{}.{}", x / 4, XYZW[x % 4]);
        format!(
            "{ind}{{\n{ind}    var f = 0.0;\n{ind}    if ({m} > -inf_f32()) {{ f = exp({m} - mx[{x}]); }}\n{}{ind}}}",
            lines(0..nq, |q| format!("{ind}    sm[SB + (seg * R + {x}u) * DV4 + lane + {}u] = o{x}_{q} * f;", c.w * q))
        )
    });
    (seg.trim_end().to_string(), merge.trim_end().to_string())
}
