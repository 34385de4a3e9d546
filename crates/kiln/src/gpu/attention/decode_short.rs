//! The `short` decode kernel (`decode_short.wgsl`: one query row over a short context, one workgroup
//! a query head, no key split): its variant, where it applies and its emitter. At short contexts the
//! split kernels' cost is not their bytes but their dependent phases (a walk of online-softmax steps,
//! the merge of lane groups, the fold of the splits; docs/PERFORMANCE.md, the eighth session). This
//! one reads every key row at once, takes the softmax over the whole row in workgroup memory, then
//! every value row at once, and writes the final row: no partial rows, no second pass.

use super::decode_tile::half_words;
use super::emit::{lines, store_fns, ROWS};
use super::params::AttnParams;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::DType;

const SHORT: &str = include_str!("decode_short.wgsl");
/// Most keys the kernel takes (its scores live in workgroup memory): 4 KiB of scores.
pub(crate) const SHORT_KEYS: usize = 1024;
/// Invocations per workgroup without `KILN_DECODE_WG`.
const WG: usize = 512;
/// Key words (16 bytes, 8 values) an invocation requests at once in the scores' phase: a key row
/// of more words is read in chunks of this many.
const KCHUNK: usize = 16;
/// Most value rows an invocation requests at once.
const UMAX: usize = 16;
/// Workgroup memory the kernel keeps to.
const BUDGET: usize = 32 * 1024;

/// Shape of one `short` decode kernel variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShortConfig {
    /// Head size of keys and values (equal, a multiple of 8, at most 256).
    d: usize,
    /// Invocations per workgroup.
    wg: usize,
    /// Value rows an invocation requests at once.
    u: usize,
    /// Whether a word of each of the first value rows is requested at the start (`KILN_DECODE_VTOUCH`).
    touch: bool,
}

impl ShortConfig {
    /// Head size.
    pub(super) fn d(self) -> usize {
        self.d
    }

    /// Words of a key or value row.
    fn dw(self) -> usize {
        self.d / 8
    }

    /// Key ranges of the value phase.
    fn nr(self) -> usize {
        self.wg / self.dw()
    }

    fn bytes(self) -> usize {
        16 * self.d / 4 + 4 * SHORT_KEYS + 4 * 3 * (self.wg / 4) + 32 * self.nr() * self.dw()
    }

    /// This variant with the first value rows touched at the start or not (the catalog has both).
    pub(super) fn with_touch(self, touch: bool) -> ShortConfig {
        ShortConfig { touch, ..self }
    }

    pub(super) fn key(self) -> String {
        let t = if self.touch { ":t" } else { "" };
        format!("short:{}:w{}:u{}{t}", self.d, self.wg, self.u)
    }
}

/// The `short` variant for one query row (`tq`) of `tk` keys, head sizes `d`, `dv`, on subgroups
/// of at least `sg_min` lanes, workgroups of at most `max_wg` invocations within `limit` bytes of
/// workgroup memory: `None` where it does not apply (more than one query row, no key or more than
/// [`SHORT_KEYS`], `d` != `dv`, `d` not a multiple of 8 or over 256, subgroups under 4 lanes).
/// Keys and values must be f16/bf16 read in aligned 8-element granules (`granular_by(.., 8)`):
/// the caller checks.
pub(crate) fn short_config(
    [tq, tk, d, dv]: [usize; 4],
    sg_min: usize,
    limit: usize,
    max_wg: usize,
) -> Option<ShortConfig> {
    if tq != 1 || tk == 0 || tk > SHORT_KEYS || d != dv || d == 0 || !d.is_multiple_of(8) || d > 256 || sg_min < 4 {
        return None;
    }
    let mut c = ShortConfig { d, wg: super::decode_tile::workgroup_or(WG, max_wg).max(d / 8), u: 0, touch: touch() };
    while c.wg > 64 && c.bytes() > limit.min(BUDGET) {
        c.wg /= 2;
    }
    c.u = SHORT_KEYS.div_ceil(c.nr()).clamp(1, UMAX);
    (c.bytes() <= limit.min(BUDGET) && c.wg >= c.dw()).then_some(c)
}

/// `KILN_DECODE_VTOUCH` (default on): whether the kernel requests a word of each of its first value
/// rows at the start, so that they come from memory while the scores and the softmax run.
fn touch() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::DECODE_VTOUCH.is_not_zero())
}

/// The `short` decode kernel for storage dtype `dt` (f16 or bf16), final output dtype `out`.
pub(crate) fn short_source(dt: DType, out: DType, c: ShortConfig) -> String {
    let (dw, u) = (c.dw(), c.u);
    let first = dw.min(KCHUNK);
    let ind = "        ";
    let kfirst = lines(0..first, |w| format!("    var k{w} = in1[kr0 + {w}u];"));
    let knext = lines(0..first, |w| format!("{ind}    k{w} = in1[kr0 + {w}u];"));
    // The first chunk's words were requested ahead; later chunks (head sizes over 128) load here.
    let mut dot = String::new();
    for c0 in (0..dw).step_by(KCHUNK) {
        let ws = c0..(c0 + KCHUNK).min(dw);
        dot += &format!("{ind}{{\n");
        if c0 > 0 {
            dot += &lines(ws.clone(), |w| format!("{ind}    let k{w} = in1[kr0 + {w}u];"));
        }
        dot += &lines(ws, |w| {
            format!("{ind}    s += dot(qs[{}u], wlo(k{w})) + dot(qs[{}u], whi(k{w}));", 2 * w, 2 * w + 1)
        });
        dot += &format!("{ind}}}\n");
    }
    let at = |j: &str, i: usize| format!("in2[vb + min({j} + {}u, tk - 1u) * vst]", i * c.nr());
    let vfirst = lines(0..u, |i| format!("    var v{i} = {};", at("kr", i)));
    let vnext = lines(0..u, |i| format!("            v{i} = {};", at("j0", i)));
    // The touched words are used once, after the last barrier, where waiting on them costs nothing
    // (they are long back): a condition that never holds (tk >= 1) keeps the loads alive.
    let (vtouch, vtouched) = if c.touch {
        let ors = (0..u).map(|i| format!("vt{i}")).collect::<Vec<_>>().join(" | ");
        (
            lines(0..u, |i| format!("    let vt{i} = in2[vb + min(kr + {}u, tk - 1u) * vst].x;", i * c.nr())),
            format!("    if (tk == 0u && ({ors}) == 1u) {{ return; }}\n"),
        )
    } else {
        (String::new(), String::new())
    };
    let plain = lines(0..u, |i| {
        format!("                {{ let pj = sc[j0 + {0}u]; oa += pj * wlo(v{i}); ob += pj * whi(v{i}); }}", i * c.nr())
    });
    let masked = lines(0..u, |i| {
        format!(
            "                if (j0 + {0}u < tk) {{ let pj = sc[j0 + {0}u]; oa += pj * wlo(v{i}); ob += pj * whi(v{i}); }}",
            i * c.nr()
        )
    });
    let vsum = format!(
        "            if (j0 + {}u < tk) {{\n{plain}            }} else {{\n{masked}            }}",
        (u - 1) * c.nr()
    );
    let n = |x: usize| x.to_string();
    render(
        SHORT,
        &[
            ("PARAMS", &AttnParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loader("ld0", "in0", dt)),
            ("STORE", &store_fns(out)),
            ("ROWS", ROWS),
            ("WG", &n(c.wg)),
            ("DW", &n(dw)),
            ("NR", &n(c.nr())),
            ("U", &n(u)),
            ("KMAX", &n(SHORT_KEYS)),
            ("DV4", &n(c.d / 4)),
            ("PARTS", &n(3 * (c.wg / 4))),
            ("SUMS", &n(2 * c.nr() * dw)),
            ("CVT", half_words(dt)),
            ("KFIRST", kfirst.trim_end()),
            ("KNEXT", knext.trim_end()),
            ("DOT", dot.trim_end()),
            ("VFIRST", vfirst.trim_end()),
            ("VSUM", &vsum),
            ("VNEXT", vnext.trim_end()),
            ("VTOUCH", vtouch.trim_end()),
            ("VTOUCHED", vtouched.trim_end()),
        ],
    )
}
