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
//! kernel.

pub(crate) mod paged_decode;
pub(crate) mod paged_write;
mod params;

use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{self, loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::op::AttentionParams;
use crate::{DType, Error, Layout, Result};
use params::{AttnParams, CombineParams};
use std::fmt::Write;

pub(crate) mod flash_coop;

const FLASH: &str = include_str!("flash.wgsl");
const DECODE: &str = include_str!("decode.wgsl");
const COMBINE: &str = include_str!("combine.wgsl");

/// Query lengths up to this take the decode kernel.
const DECODE_MAX_TQ: usize = 8;
/// Workgroups the split heuristics aim for (an H200 has 132 SMs, each running several of ours).
const TARGET_GROUPS: usize = 1024;
/// Keys one prefill / decode workgroup takes at least when the keys are split. Decode: 64 keys
/// sped up an 8B-shaped LLM's bf16 decode on an H100 at contexts 512-2048 (+10%) but slowed the
/// 8192-key `sdpa_decode` bench (55 -> 90 us) (session 5, docs/PERFORMANCE.md): the decode split
/// follows the context length up to this (`min_decode_split`).
const MIN_FLASH_SPLIT: usize = 256;
const MIN_DECODE_SPLIT: usize = 256;
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
}

impl DecodeConfig {
    fn total(self) -> usize {
        let walk = self.r * self.dp / 4 + 2 * self.u * 16 * self.r * 2;
        let merge = 16 * self.r + 16 * self.rr * self.dvp / 4;
        walk.max(merge)
    }

    fn key(self) -> String {
        let sg = if self.sg { ":sg" } else { "" };
        format!("{}:{}:{}:{}:{}:{}:u{}{sg}", self.dp, self.dvp, self.r, self.rr, self.vec, self.exact, self.u)
    }
}

/// Keys one decode workgroup takes at least when `tk` keys are split: a 32nd of the context
/// (a power of two from 32 to [`MIN_DECODE_SPLIT`]), so that short contexts fill the GPU with
/// small splits and long ones keep at most ~32 splits for the combine kernel to merge;
/// `KILN_DECODE_SPLIT` fixes it, for A/B runs.
fn min_decode_split(tk: usize) -> usize {
    static C: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    let fixed =
        *C.get_or_init(|| crate::settings::DECODE_SPLIT.get().ok().and_then(|v| v.parse().ok()).filter(|&c| c >= 16));
    fixed.unwrap_or_else(|| (tk / 32).next_power_of_two().clamp(32, MIN_DECODE_SPLIT))
}

/// Whether the decode kernel may sum partial dot products with subgroup shuffles
/// (`KILN_DECODE_SG=0` turns it off, for A/B runs).
fn decode_subgroups() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::DECODE_SG.is_not_zero())
}

/// Steps of 16 keys per iteration of the decode kernel (`KILN_DECODE_UNROLL` overrides, for A/B runs).
fn decode_unroll() -> usize {
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
    let mut c = DecodeConfig { dp, dvp, r, rr, vec, exact: d == dp, u: decode_unroll(), sg };
    while rr > 1 && 16 * c.total() > budget {
        rr /= 2;
        c.rr = rr;
    }
    (16 * c.total() <= limit).then_some(c)
}

/// `fn store4(e, v, n)`: elements `e..e + n` (n <= 4) of the final output, in `out` (f16/bf16 packed:
/// `e` and `n` even) and `fn put_raw(e, v, n)`: the same as f32 words.
fn store_fns(out: DType) -> String {
    let raw = "fn put_raw(e: u32, v: vec4<f32>, n: u32) { for (var k = 0u; k < n; k++) { dst[e + k] = bitcast<u32>(v[k]); } }\n";
    let store = match out {
        DType::F16 => "fn store4(e: u32, v: vec4<f32>, n: u32) { dst[e >> 1u] = pack2x16float(v.xy); \
                       if (n > 2u) { dst[(e >> 1u) + 1u] = pack2x16float(v.zw); } }"
            .to_string(),
        DType::BF16 => {
            "fn store4(e: u32, v: vec4<f32>, n: u32) { dst[e >> 1u] = bf16_bits(v.x) | (bf16_bits(v.y) << 16u); \
                        if (n > 2u) { dst[(e >> 1u) + 1u] = bf16_bits(v.z) | (bf16_bits(v.w) << 16u); } }"
                .to_string()
        }
        _ => "fn store4(e: u32, v: vec4<f32>, n: u32) { put_raw(e, v, n); }".to_string(),
    };
    format!("{raw}{store}\n")
}

/// Appends one formatted line per item of `it`.
fn lines<I: IntoIterator>(it: I, f: impl Fn(I::Item) -> String) -> String {
    it.into_iter().fold(String::new(), |mut s, x| {
        let _ = writeln!(s, "{}", f(x));
        s
    })
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
             let lim{i} = min(visible(q0 + {r}, tq, tk, causal), kstop);\n    \
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
    let softmax_a = format!(
        "        if (masked) {{\n            let kk = vec4<u32>(j0 + kg, j0 + kg + 8u, j0 + kg + 16u, j0 + kg + 24u);\n{}        }}\n{}",
        lines(rows.clone(), |i| format!(
            "            s{i} = select(s{i}, vec4<f32>(-inf_f32()), kk >= vec4<u32>(lim{i}));"
        )),
        lines(rows.clone(), |i| format!(
            "        sm[rr{i} + kg / 4u][kg % 4u] = select(max4(s{i}), nan_f32(), nan4(s{i}));"
        ))
    );
    let softmax_b = flash_softmax_b(nv);
    let sum_l = lines(rows.clone(), |i| format!("    sm[rr{i} + kg / 4u][kg % 4u] = l{i};"));
    let output = flash_output(nv);
    let (loaders, arrays) = granule_loaders(dt, [c.vec; 3]);
    let finish = "fn finish(o: vec4<f32>, l: f32, bad: bool, vis: u32) -> vec4<f32> {\n    \
                  if (bad) { return vec4<f32>(nan_f32()); }\n    \
                  if (l == 0.0) { return select(vec4<f32>(0.0), vec4<f32>(nan_f32()), vis > 0u); }\n    \
                  return o / l;\n}\n";
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
            ("STORE", &(store_fns(out) + finish)),
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

/// `fn ldq4(row, c, se, n)`, `ldk4`, `ldv4`: the 4-element granule at column `c` of the query / key /
/// value row starting at element `row` (columns past `n` read as 0), from bindings 1, 2, 3, and the
/// array types of those bindings. A binding marked in `vec` is read as whole aligned granules (unit
/// last stride, rows at multiples of 4 elements, `n` a multiple of 4); the others element by element
/// (then `ld0`, `ld1`, `ld2` exist too).
fn granule_loaders(dt: DType, vec: [bool; 3]) -> (String, [&'static str; 3]) {
    let (vec_ty, body) = match dt {
        DType::F16 => ("array<vec2<u32>>", "return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));"),
        DType::BF16 => (
            "array<vec2<u32>>",
            "return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u), \
             bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u));",
        ),
        _ => ("array<vec4<u32>>", "return bitcast<vec4<f32>>(w);"),
    };
    let mut s = String::new();
    let mut types = ["array<u32>"; 3];
    for (i, f) in ["ldq4", "ldk4", "ldv4"].into_iter().enumerate() {
        if vec[i] {
            types[i] = vec_ty;
            let _ = writeln!(
                s,
                "fn {f}(row: u32, c: u32, se: u32, n: u32) -> vec4<f32> {{ if (c >= n) {{ return vec4<f32>(0.0); }} \
                 let w = in{i}[(row + c) >> 2u]; {body} }}"
            );
        } else {
            s += &loader(&format!("ld{i}"), &format!("in{i}"), dt);
            let _ = writeln!(
                s,
                "fn {f}(row: u32, c: u32, se: u32, n: u32) -> vec4<f32> {{ var o = vec4<f32>(0.0); \
                 for (var k = 0u; k < 4u; k++) {{ if (c + k < n) {{ o[k] = ld{i}(row + (c + k) * se); }} }} return o; }}"
            );
        }
    }
    (s, types)
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
    let load = lines(0..u, |w| {
        format!(
            "{ind}let key{w} = j0 + {}u + slot;\n{}{}{ind}let nkey{w} = min(key{w} + 16u * U, kend - 1u);\n{}",
            16 * w,
            lines(0..nk, |n| format!("{ind}let k{w}_{n} = pk{w}_{n};")),
            lines(0..nv, |n| format!("{ind}let v{w}_{n} = pv{w}_{n};")),
            fetch(w, &format!("nkey{w}"), "").trim_end()
        )
    });
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
    render(
        DECODE,
        &[
            ("PARAMS", &AttnParams::wgsl()),
            ("KV_ARRAY", arrays[1]),
            ("PRELUDE", PRELUDE),
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
        ],
    )
}

/// Where step `w`'s partial dot of row `x` sits in the decode kernel's workgroup memory.
fn slot_at(w: usize, x: usize) -> String {
    format!("PB + (((buf * U + {w}u) * 16u + slot) * R + {x}u) * 2u")
}

const XYZW: [&str; 4] = ["x", "y", "z", "w"];

/// The decode kernel's branch-free online-softmax update of each row for each step (`UPDATE`).
fn decode_update(c: &DecodeConfig) -> String {
    let (nv, r, u, ind) = (c.dvp / 32, c.r, c.u, "        ");
    lines((0..u).flat_map(|w| (0..r).map(move |x| (w, x))), |(w, x)| {
        let score = if c.sg {
            format!("{ind}    let sc = sv{w}.{};\n", XYZW[x])
        } else {
            let at = slot_at(w, x);
            format!(
                "{ind}    let pa = sm[{at}]; let pb = sm[{at} + 1u];\n\
                 {ind}    let sc = dot(pa, vec4<f32>(1.0)) + dot(pb, vec4<f32>(1.0));\n"
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
             if (partial) {{\n                    let pr = grow * nsplit + s;\n                    \
             if (c4 == 0u) {{ dst[2u * pr] = bitcast<u32>(select(mx[x], nan_f32(), bad[x])); dst[2u * pr + 1u] = bitcast<u32>(lsum[x]); }}\n                    \
             put_raw(p.part_start + pr * dv + c, o, n);\n                \
             }} else {{\n                    \
             store4(grow * dv + c, finish(o, lsum[x], bad[x], visible(i, tq, tk, causal)), n);\n                }}\n            \
             }}\n        }}\n        workgroupBarrier();\n    }}\n"
        );
        s
    })
}

/// The kernel merging split partial rows into the final output of dtype `out`.
pub(crate) fn combine_source(out: DType) -> String {
    render(COMBINE, &[("PARAMS", &CombineParams::wgsl()), ("PRELUDE", PRELUDE), ("STORE", &store_fns(out))])
}

/// Every attention kernel variant the launcher can pick for the usual head sizes (64, 128) and one
/// odd one (80), on 32 KiB and 48 KiB of workgroup memory: for the MSL/HLSL translation test.
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
                    for &o in outs {
                        out.push((format!("attention_decode:{dt}:{o}:{}", c.key()), decode_source(dt, o, c)));
                    }
                }
            }
        }
        out.push((format!("attention_combine:{dt}"), combine_source(dt)));
    }
    out.extend(flash_coop::catalog());
    out
}

/// Whether a view can be read in aligned 4-element granules (`granule_loaders`).
fn granular(s: &GpuStorage, l: &Layout) -> bool {
    let st = l.strides();
    let e = l.dims()[3];
    (st[3] == 1 || e <= 1)
        && e.is_multiple_of(4)
        && [l.offset(), st[0], st[1], st[2]].iter().all(|x| x.is_multiple_of(4))
        && s.buffer.size().is_multiple_of(16)
}

/// Records `groups` workgroups of `wg` invocations of kernel `key` (folded past the grid limit).
fn dispatch(
    ctx: &GpuStorage,
    key: String,
    src: impl FnOnce() -> String,
    bufs: &[&wgpu::Buffer],
    params: &[u32],
    groups: usize,
    wg: usize,
) -> Result<()> {
    let ctx = &ctx.ctx;
    let kernel = ctx.pipelines.get(ctx, &key, bufs.len() - 1, src)?;
    let grid = wgsl::grid(groups * wg, wg, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, bufs, params, grid)
}

/// Keys per split for `tk` keys when `base` workgroups exist without splitting: a multiple of
/// `step`, at least `min_keys`, and at most [`MAX_SPLITS`] splits.
fn split_keys(tk: usize, base: usize, step: usize, min_keys: usize) -> usize {
    let want = TARGET_GROUPS.div_ceil(base.max(1)).max(1);
    let c = tk.div_ceil(want).max(min_keys).max(tk.div_ceil(MAX_SPLITS));
    c.div_ceil(step) * step
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
        Decode(DecodeConfig),
        Flash(FlashConfig),
    }
    let (kernel, blocks, ndv, base, c) = if tq <= DECODE_MAX_TQ {
        let group = hq / hkv;
        let vec = granular(k, kl) && granular(v, vl);
        let sg = crate::gpu::runtime::subgroups::use_subgroups(ctx)
            && ctx.summary.subgroup_size.0 >= 8
            && decode_subgroups();
        let cfg = decode_config(d, dv, group * tq, vec, sg, limit).ok_or_else(too_small)?;
        let nrc = (group * tq).div_ceil(cfg.r);
        let base = b * hkv * nrc;
        (Kernel::Decode(cfg), nrc, 1, base, split_keys(tk, base, 16 * cfg.u, min_decode_split(tk)))
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
    let params = params.words();
    // With split keys the kernel writes f32 partial rows and the combine kernel the output.
    let part =
        if nsplit > 1 { Some(GpuStorage::alloc(ctx, DType::F32, part_start + rows * nsplit * dv)?) } else { None };
    let dst = part.as_ref().unwrap_or(&out);
    let o = if nsplit > 1 { DType::F32 } else { out_dt };
    let bufs = [dst.buffer.raw(), q.buffer.raw(), k.buffer.raw(), v.buffer.raw()];
    match kernel {
        Kernel::Decode(cfg) => {
            let key = format!("attention_decode:{dt}:{o}:{}", cfg.key());
            dispatch(q, key, || decode_source(dt, o, cfg), &bufs, &params, groups, 1)?;
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
        }
        .words();
        let bufs = [out.buffer.raw(), part.buffer.raw()];
        dispatch(q, format!("attention_combine:{out_dt}"), || combine_source(out_dt), &bufs, &cp, rows, 1)?;
    }
    out.finish(dt)
}
