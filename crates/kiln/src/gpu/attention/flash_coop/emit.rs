//! The kernel's source: `flash_coop.wgsl` with its placeholders filled for one [`Config`].

use super::super::emit::MASK;
use super::config::{Ablate, Config, CoopAttnParams};
use super::emulation;
use crate::gpu::pointwise::line_maxima::LINE_EXP;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::PRELUDE;

const SOURCE: &str = include_str!("flash_coop.wgsl");

impl Config {
    fn mat(&self, t: &str, role: &str) -> String {
        format!("coop_mat{s}x{s}<{t}, {role}>", s = self.s)
    }
    /// A fragment of `role` at half index `idx` of `arr`, row-major (`t`) or column-major, rows `ld`
    /// apart.
    fn frag(&self, t: bool, role: &str, arr: &str, idx: String, ld: u32) -> String {
        if self.emulate {
            format!("vec3<u32>({idx}, {ld}u, {}u)", t as u32)
        } else {
            let (idx, ld) = self.unit_index(idx, ld);
            format!("{}<{}>(&{arr}[{idx}], {ld}u)", if t { "coopLoadT" } else { "coopLoad" }, self.mat("f16", role))
        }
    }
    /// An element index and row stride in units of the workgroup arrays' element.
    fn unit_index(&self, idx: String, ld: u32) -> (String, u32) {
        if self.unit == 1 {
            (idx, ld)
        } else {
            (format!("({idx}) >> 2u"), ld / 4)
        }
    }
    /// `acc += a b` for the product `which` (`qk` or `pv`).
    fn mma(&self, which: &str, a: &str, b: &str, acc: &str) -> String {
        if self.emulate {
            format!("{acc} = emu_mma_{which}({a}, {b}, {acc}, lane);")
        } else {
            format!("{acc} = coopMultiplyAdd({a}, {b}, {acc});")
        }
    }
    /// Stores accumulator `acc` row-major at f32 index `off` of `ss`.
    fn store(&self, acc: &str, off: String) -> String {
        if self.emulate {
            format!("emu_store({acc}, {off}, {}u, lane);", self.ls())
        } else {
            let (off, ld) = self.unit_index(off, self.ls());
            format!("coopStoreT({acc}, &ss[{off}], {ld}u);")
        }
    }
    /// Loads accumulator `acc` row-major from f32 index `off` of `ss`.
    fn load_acc(&self, acc: &str, off: String) -> String {
        if self.emulate {
            format!("{acc} = emu_load_c({off}, {}u, lane);", self.ls())
        } else {
            let (off, ld) = self.unit_index(off, self.ls());
            format!("{acc} = coopLoadT<{}>(&ss[{off}], {ld}u);", self.mat("f32", "C"))
        }
    }
    fn mt(&self) -> u32 {
        self.r() / self.s
    }
}

/// The kernel source for `c`.
pub(crate) fn source(c: &Config) -> String {
    let (s, unit) = (c.s, c.unit);
    let (lq, lv, lp) = c.strides();
    let (enable, zero, sg_param, sg_let) = flavour(c);
    let (fetch_decl, fetch, put_kv) = fetch_put(c);
    let (read_s, pass_max, pass_p) = softmax(c);
    let num = |v: u32| v.to_string();
    let u = |v: u32| v / unit;
    // The lanes of a row agree on its maximum and whether it saw a NaN or +Inf, and sum its parts.
    let (row_max, row_sum) = if c.lpr == 2 {
        (
            "        mt = max(mt, subgroupShuffleXor(mt, 1u));
        // Outside `||`, whose short circuit would leave the shuffle to some lanes only.
        let other_bad = subgroupShuffleXor(select(0u, 1u, bad), 1u);
        bad = bad || other_bad != 0u;",
            "    l += subgroupShuffleXor(l, 1u);",
        )
    } else {
        ("", "")
    };
    let p_at = if unit == 4 { "f32(sk[(prow + col) >> 2u][(prow + col) & 3u])" } else { "f32(sk[prow + col])" };
    render(
        SOURCE,
        &[
            ("PARAMS", &CoopAttnParams::wgsl()),
            ("ENABLE", &enable),
            ("DST", if c.pairs { "array<u32>" } else { "array<f32>" }),
            ("BUF", if c.bf16 { "vec2<u32>" } else { "vec4<f16>" }),
            ("MX_BINDING", if c.bf16 { "@group(0) @binding(4) var<storage, read> mx: array<u32>;" } else { "" }),
            (
                "SX_DECL",
                if c.bf16 { "// bf16: the key tile's line exponents.\nvar<workgroup> sx: array<i32, BK>;" } else { "" },
            ),
            ("STAGE_Q", &stage_q(c)),
            ("FETCH_DECL", &fetch_decl),
            ("FETCH", if c.ablate == Ablate::Stage { "" } else { &fetch }),
            ("PUT_KV", if c.ablate == Ablate::Stage { "" } else { &put_kv }),
            ("SCORES", &if c.ablate == Ablate::Scores { String::new() } else { scores(c) }),
            ("RESCALE", &rescale(c)),
            ("READ_S", &read_s),
            ("PASS_MAX", &pass_max),
            ("PASS_P", &pass_p),
            ("PV", &if c.ablate == Ablate::Pv { String::new() } else { products_pv(c) }),
            ("S_DECL", &decls(c, "s", c.bk / s)),
            ("O_DECL", &decls(c, "o", c.dv / s)),
            ("EPILOGUE", &epilogue(c)),
            ("P_AT", p_at),
            ("S", &num(s)),
            ("SG", &num(c.sg)),
            ("R", &num(c.r())),
            ("LPR", &num(c.lpr)),
            ("ROW_MAX", row_max),
            ("ROW_SUM", row_sum),
            ("MT", &num(c.mt())),
            ("NSG", &num(c.nsg)),
            ("WG", &num(c.nsg * c.sg)),
            ("BQ", &num(c.bq())),
            ("BK", &num(c.bk)),
            ("D", &num(c.d)),
            ("DV", &num(c.dv)),
            ("LQ", &num(lq)),
            ("LV", &num(lv)),
            ("LP", &num(lp)),
            ("LS", &num(c.ls())),
            ("SE", if unit == 4 { "vec4<f16>" } else { "f16" }),
            ("SSE", if unit == 4 { "vec4<f32>" } else { "f32" }),
            ("SQ_N", &num(u(c.bq() * lq))),
            ("SK_N", &num(u(c.sk_halves()))),
            ("SV_N", &num(u(c.bk * lv))),
            ("SS_N", &num(u(c.bq() * c.ls()))),
            ("PRELUDE", PRELUDE),
            ("MASK", MASK),
            ("EXTRA", &bf16_extra(c)),
            ("LOADERS", &loaders(c)),
            ("PUTS", &puts(c)),
            ("EQ", if c.bf16 { "line_exp(mx[xq + min(i, tq - 1u)])" } else { "0" }),
            ("PW", &num(c.dv.div_ceil(32))),
            ("ZERO", &zero),
            ("SG_PARAM", &sg_param),
            ("SG_LET", &sg_let),
            ("EMU", &if c.emulate { emulation::functions(c) } else { String::new() }),
        ],
    )
}

/// `var {name}_{m}_{n} = zero;` for this subgroup's `mt x cols` accumulators.
fn decls(c: &Config, name: &str, cols: u32) -> String {
    if c.emulate {
        return format!("    var {name}_acc: array<array<f32, {}>, {}>;\n", c.s * c.s / c.sg, c.mt() * cols);
    }
    let mut out = String::new();
    for m in 0..c.mt() {
        for n in 0..cols {
            out += &format!("    var {name}_{m}_{n} = zero;\n");
        }
    }
    out
}

/// The scores of this subgroup's rows against the key tile (`SCORES`), stored row-major at `slot` of
/// `ss`: every key fragment feeds all `mt` query fragments.
fn scores(c: &Config) -> String {
    let (s, mt, nk) = (c.s, c.mt(), c.bk / c.s);
    let (lq, _, _) = c.strides();
    if c.emulate {
        return format!(
            "        for (var f = 0u; f < {n}u; f++) {{
            s_acc[f] = zero;
        }}
        for (var ks = 0u; ks < {ksn}u; ks++) {{
            for (var f = 0u; f < {n}u; f++) {{
                let a = vec3<u32>(sg * {rl}u + (f / {nk}u) * {sl}u + ks * {s}u, {lq}u, 1u);
                let b = vec3<u32>((f % {nk}u) * {sl}u + ks * {s}u, {lq}u, 0u);
                s_acc[f] = emu_mma_qk(a, b, s_acc[f], lane);
            }}
        }}
        for (var f = 0u; f < {n}u; f++) {{
            emu_store(s_acc[f], slot + (f / {nk}u) * {ss}u + (f % {nk}u) * {s}u, {ls}u, lane);
        }}
",
            n = mt * nk,
            ksn = c.d / s,
            rl = c.r() * lq,
            sl = s * lq,
            ss = s * c.ls(),
            ls = c.ls(),
        );
    }
    let mut out = String::new();
    for m in 0..mt {
        for n in 0..nk {
            out += &format!("        s_{m}_{n} = zero;\n");
        }
    }
    for ks in 0..c.d / s {
        out += "        {\n";
        for m in 0..mt {
            let idx = format!("sg * {}u + {}u", c.r() * lq, m * s * lq + ks * s);
            out += &format!("        let qa{m} = {};\n", c.frag(true, "A", "sq", idx, lq));
        }
        for n in 0..nk {
            let kb = c.frag(false, "B", "sk", format!("{}u", n * s * lq + ks * s), lq);
            out += &format!("        {{\n        let kb = {kb};\n");
            for m in 0..mt {
                out += &format!("        {}\n", c.mma("qk", &format!("qa{m}"), "kb", &format!("s_{m}_{n}")));
            }
            out += "        }\n";
        }
        out += "        }\n";
    }
    for m in 0..mt {
        for n in 0..nk {
            out +=
                &format!("        {}\n", c.store(&format!("s_{m}_{n}"), format!("slot + {}u", m * s * c.ls() + n * s)));
        }
    }
    out
}

/// P v into the output accumulators (`PV`): P from this subgroup's rows of `sk`, every value
/// fragment feeding all `mt` probability fragments.
fn products_pv(c: &Config) -> String {
    let (s, mt) = (c.s, c.mt());
    let (_, lv, lp) = c.strides();
    if c.emulate {
        let nv = c.dv / s;
        return format!(
            "        for (var ks = 0u; ks < {ksn}u; ks++) {{
            for (var f = 0u; f < {n}u; f++) {{
                let a = vec3<u32>(sg * {rl}u + (f / {nv}u) * {pl}u + ks * {s}u, {lp}u, 1u);
                let b = vec3<u32>(ks * {vl}u + (f % {nv}u) * {s}u, {lv}u, 1u);
                o_acc[f] = emu_mma_pv(a, b, o_acc[f], lane);
            }}
        }}
",
            ksn = c.bk / s,
            n = mt * nv,
            rl = c.r() * lp,
            pl = s * lp,
            vl = s * lv,
        );
    }
    let mut out = String::new();
    for ks in 0..c.bk / s {
        out += "        {\n";
        for m in 0..mt {
            let idx = format!("sg * {}u + {}u", c.r() * lp, m * s * lp + ks * s);
            out += &format!("        let pa{m} = {};\n", c.frag(true, "A", "sk", idx, lp));
        }
        for n in 0..c.dv / s {
            let vb = c.frag(true, "B", "sv", format!("{}u", ks * s * lv + n * s), lv);
            out += &format!("        {{\n        let vb = {vb};\n");
            for m in 0..mt {
                out += &format!("        {}\n", c.mma("pv", &format!("pa{m}"), "vb", &format!("o_{m}_{n}")));
            }
            out += "        }\n";
        }
        out += "        }\n";
    }
    out
}

/// The lane's scores of a tile, read from `ss` into registers once (`READ_S`: `x0`, `x1`, ..., 4
/// each), the pass that scales and masks them (`s0`, ...: -Inf where a key is not visible) and takes
/// their maximum (`PASS_MAX`), and the one that writes the probabilities over the key tile
/// (`PASS_P`). Whole vectors, no element picked by a variable index (which can put a vector in
/// local memory). The `softmax` ablation keeps the reads and the probabilities' stores and leaves
/// out the arithmetic between them (scaling, masking, the maximum, the checks, `exp2`).
fn softmax(c: &Config) -> (String, String, String) {
    let (mut read, mut max, mut prob) = (String::new(), String::new(), String::new());
    for v in 0..c.bk / c.lpr / 4 {
        let col = format!("k0 + {}u", 4 * v);
        read += &format!("        let x{v} = ss_rd4(srow + {col});\n");
        if c.ablate == Ablate::Softmax {
            prob += &format!("        put_p(prow + {col}, vec4<f16>(x{v}));\n");
            continue;
        }
        let scaled = if c.bf16 {
            // 2^(eq + e_key) as one exact f32 where it is normal, else in two steps.
            format!(
                "var y{v} = vec4<f32>();
        {{
            let n = vec4<i32>(eq) + vec4<i32>(sx[{col}], sx[{col} + 1u], sx[{col} + 2u], sx[{col} + 3u]);
            if (all(abs(n) < vec4<i32>(126))) {{
                y{v} = x{v} * pow2_4(n);
            }} else {{
                y{v} = vec4<f32>(unscale(x{v}.x, n.x), unscale(x{v}.y, n.y), unscale(x{v}.z, n.z), unscale(x{v}.w, n.w));
            }}
        }}
        "
            )
        } else {
            format!("let y{v} = x{v};\n        ")
        };
        // Soft-capped (mask.wgsl; a no-op without a cap), then masked: keys from the row's first
        // (a sliding window) to its last.
        max += &format!(
            "        {scaled}let kk{v} = vec4<u32>(j0 + {col}) + vec4<u32>(0u, 1u, 2u, 3u);
        let s{v} = select(vec4<f32>(-inf_f32()), soft_cap(y{v} * cs, capc, icapc), (kk{v} < vec4<u32>(ivis)) & (kk{v} >= vec4<u32>(ilo)));
        bad = bad || any((bitcast<vec4<u32>>(s{v}) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u)) || any(s{v} == vec4<f32>(inf_f32()));
        mt = max(mt, max(max(s{v}.x, s{v}.y), max(s{v}.z, s{v}.w)));
"
        );
        prob += &format!(
            "        {{
            var pv = select(vec4<f32>(0.0), exp2(s{v} - vec4<f32>(m)), s{v} > vec4<f32>(-inf_f32()));
            if (bad) {{
                pv = vec4<f32>(0.0);
            }}
            l += pv.x + pv.y + pv.z + pv.w;
            put_p(prow + {col}, vec4<f16>(pv));
        }}
"
        );
    }
    (read, max, prob)
}

/// The output accumulators in rounds of `bk / s` column fragments through this subgroup's rows of
/// `ss`: `(first fragment, fragments)` per round.
fn rounds(c: &Config) -> Vec<(u32, u32)> {
    let (per, n) = (c.bk / c.s, c.dv / c.s);
    (0..n).step_by(per as usize).map(|n0| (n0, per.min(n - n0))).collect()
}

/// Stores (or loads) round `(n0, cnt)` of the output accumulators at this subgroup's rows of `ss`.
fn round_io(c: &Config, n0: u32, cnt: u32, load: bool) -> String {
    if c.emulate {
        let (nv, ls) = (c.dv / c.s, c.ls());
        let (s, m_stride) = (c.s, c.s * ls);
        let at = format!("slot + (f / {cnt}u) * {m_stride}u + (f % {cnt}u) * {s}u");
        let acc = format!("o_acc[(f / {cnt}u) * {nv}u + {n0}u + f % {cnt}u]");
        let op = if load {
            format!("{acc} = emu_load_c({at}, {ls}u, lane);")
        } else {
            format!("emu_store({acc}, {at}, {ls}u, lane);")
        };
        return format!(
            "            for (var f = 0u; f < {}u; f++) {{\n                {op}\n            }}\n",
            c.mt() * cnt
        );
    }
    let mut out = String::new();
    for m in 0..c.mt() {
        for n in n0..n0 + cnt {
            let off = format!("slot + {}u", m * c.s * c.ls() + (n - n0) * c.s);
            let acc = format!("o_{m}_{n}");
            out += &format!("            {}\n", if load { c.load_acc(&acc, off) } else { c.store(&acc, off) });
        }
    }
    out
}

/// Rows that moved their reference maximum scale their accumulators by `alpha` (`RESCALE`; every
/// other row by 1): through `ss`, a round of column fragments at a time.
fn rescale(c: &Config) -> String {
    let mut out = String::new();
    for (ri, &(n0, cnt)) in rounds(c).iter().enumerate() {
        if ri > 0 {
            out += "            workgroupBarrier();\n";
        }
        out += &round_io(c, n0, cnt, false);
        out += &format!(
            "            workgroupBarrier();
            for (var c4 = part * {w}u; c4 < (part + 1u) * {w}u; c4 += 4u) {{
                ss_wr4(srow + c4, ss_rd4(srow + c4) * alpha);
            }}
            workgroupBarrier();
",
            w = cnt * c.s / c.lpr
        );
        out += &round_io(c, n0, cnt, true);
    }
    out
}

/// The output (`EPILOGUE`): each round of accumulators through `ss`, then each lane writes its row,
/// divided by the row's sum, bf16 scaling undone, non-finite values applied.
fn epilogue(c: &Config) -> String {
    let unscale_v = if c.bf16 { "v = unscale(v, line_exp(mx[xv + q]));" } else { "" };
    let value = format!(
        "var v = ss_rd(srow + jj + u) * inv_l;
                    {unscale_v}
                    let wd = q >> 5u;
                    let bit = 1u << (q & 31u);
                    if (bad || (nanb[wd] & bit) != 0u || (pinf[wd] & ninf[wd] & bit) != 0u) {{
                        v = nan_f32();
                    }} else if ((pinf[wd] & bit) != 0u) {{
                        v = inf_f32();
                    }} else if ((ninf[wd] & bit) != 0u) {{
                        v = -inf_f32();
                    }}"
    );
    let write = if c.pairs {
        let pack = if c.bf16 { "bf16_bits(vals.x) | (bf16_bits(vals.y) << 16u)" } else { "pack2x16float(vals)" };
        format!(
            "for (var jj = part * W; jj < (part + 1u) * W; jj += 2u) {{
                let oc = n0 + jj;
                if (oc >= dv) {{ break; }}
                var vals = vec2<f32>();
                for (var u = 0u; u < 2u; u++) {{
                    let q = oc + u;
                    {value}
                    vals[u] = v;
                }}
                dst[(orow + oc) >> 1u] = {pack};
            }}"
        )
    } else {
        format!(
            "for (var jj = part * W; jj < (part + 1u) * W; jj++) {{
                let oc = n0 + jj;
                if (oc >= dv) {{ break; }}
                let u = 0u;
                let q = oc;
                {value}
                dst[orow + oc] = v;
            }}"
        )
    };
    let mut out = String::new();
    for (n0, cnt) in rounds(c) {
        out += "    workgroupBarrier();\n    {\n";
        out += &round_io(c, n0, cnt, false);
        out += &format!(
            "        workgroupBarrier();
        let n0 = {}u;
        // This lane's columns of the round.
        const W = {}u;
        if (i < tq) {{
            {write}
        }}
    }}
",
            n0 * c.s,
            cnt * c.s / c.lpr
        );
    }
    out
}

/// The element loaders (`LOADERS`): `raw4_{q,k,v}` reads 4 elements as stored (one vector read
/// where the view allows: f16 as `vec4<f16>`, bf16 as two words that `bf16x4` widens), `ld1_v` one
/// value as f32 (the accounting of values that are not finite).
fn loaders(c: &Config) -> String {
    let mut out = String::new();
    if c.bf16 {
        out += "// One element of q/k/v (bf16, two per word) at element index e.
fn word_of(x: vec2<u32>, e: u32) -> u32 {
    return select(x.x, x.y, (e & 2u) != 0u);
}
fn bf16x4(w: vec2<u32>) -> vec4<f32> {
    return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u), bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u));
}
";
    }
    for (buf, name) in [("qx", "q"), ("kx", "k"), ("vx", "v")] {
        if c.bf16 {
            out += &format!(
                "fn raw4_{name}(e: u32, se: u32, n: u32) -> vec2<u32> {{
    if (se == 1u && (e & 3u) == 0u && n >= 4u) {{
        return {buf}[e >> 2u];
    }}
    var v = vec2<u32>();
    for (var j = 0u; j < 4u; j++) {{
        if (j < n) {{
            let f = e + j * se;
            let h = (word_of({buf}[f >> 2u], f) >> ((f & 1u) * 16u)) & 0xffffu;
            v[j >> 1u] |= h << ((j & 1u) * 16u);
        }}
    }}
    return v;
}}
"
            );
        } else {
            out += &format!(
                "fn raw4_{name}(e: u32, se: u32, n: u32) -> vec4<f16> {{
    if (se == 1u && (e & 3u) == 0u && n >= 4u) {{
        return {buf}[e >> 2u];
    }}
    var x = vec4<f16>();
    for (var j = 0u; j < 4u; j++) {{
        if (j < n) {{
            let f = e + j * se;
            x[j] = {buf}[f >> 2u][f & 3u];
        }}
    }}
    return x;
}}
"
            );
        }
    }
    out += if c.bf16 {
        "fn ld1_v(e: u32) -> f32 {
    let w = word_of(vx[e >> 2u], e);
    return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (e & 1u) == 1u));
}
"
    } else {
        "fn ld1_v(e: u32) -> f32 {
    return f32(vx[e >> 2u][e & 3u]);
}
"
    };
    out
}

/// The staged-tile stores (`put_{q,k,v,p}`, 4 halves at a half index that is a multiple of 4) and
/// the accessors of `ss` by f32 index (`ss_rd`, `ss_wr`, and 4 at a time `ss_rd4`, `ss_wr4`).
fn puts(c: &Config) -> String {
    let mut out = String::new();
    for (name, arr) in [("q", "sq"), ("k", "sk"), ("v", "sv"), ("p", "sk")] {
        out += &if c.unit == 4 {
            format!("fn put_{name}(i: u32, v: vec4<f16>) {{ {arr}[i >> 2u] = v; }}\n")
        } else {
            format!("fn put_{name}(i: u32, v: vec4<f16>) {{ {arr}[i] = v.x; {arr}[i + 1u] = v.y; {arr}[i + 2u] = v.z; {arr}[i + 3u] = v.w; }}\n")
        };
    }
    out += if c.unit == 4 {
        "fn ss_rd(i: u32) -> f32 { return ss[i >> 2u][i & 3u]; }
fn ss_wr(i: u32, v: f32) { ss[i >> 2u][i & 3u] = v; }
fn ss_rd4(i: u32) -> vec4<f32> { return ss[i >> 2u]; }
fn ss_wr4(i: u32, v: vec4<f32>) { ss[i >> 2u] = v; }
"
    } else {
        "fn ss_rd(i: u32) -> f32 { return ss[i]; }
fn ss_wr(i: u32, v: f32) { ss[i] = v; }
fn ss_rd4(i: u32) -> vec4<f32> { return vec4<f32>(ss[i], ss[i + 1u], ss[i + 2u], ss[i + 3u]); }
fn ss_wr4(i: u32, v: vec4<f32>) { ss[i] = v.x; ss[i + 1u] = v.y; ss[i + 2u] = v.z; ss[i + 3u] = v.w; }
"
    };
    out
}

/// The query staging (`STAGE_Q`): `BQ x D` into `sq`, 4 values at a time, bf16 scaled per row.
fn stage_q(c: &Config) -> String {
    let load = if c.bf16 {
        "x = vec4<f16>(bf16x4(raw4_q(qbase + (q0 + row) * qst + c4 * qse, qse, d - c4)) \
         * pow2_4(vec4<i32>(-line_exp(mx[xq + q0 + row]))));"
    } else {
        "x = raw4_q(qbase + (q0 + row) * qst + c4 * qse, qse, d - c4);"
    };
    format!(
        "    for (var e = li; e < BQ * D / 4u; e += WG) {{
        let row = e / (D / 4u);
        let c4 = 4u * (e % (D / 4u));
        var x = vec4<f16>();
        if (q0 + row < tq && c4 < d) {{
            {load}
        }}
        put_q(row * LQ + c4, x);
    }}
"
    )
}

/// Chunks of 4 values of a `BK x width` tile each invocation moves.
fn chunks(c: &Config, width: u32) -> u32 {
    (c.bk * width / 4).div_ceil(c.nsg * c.sg)
}

/// The registers that hold a key and value tile between its reads and its staging (`FETCH_DECL`;
/// bf16: also each key row's line maximum, and the exponents of each value chunk's columns, the same
/// for every tile), the reads of tile `jn` into them (`FETCH`), and their staging into `sk` and `sv`
/// (`PUT_KV`; values that are not finite staged as 0 and flagged).
fn fetch_put(c: &Config) -> (String, String, String) {
    let reg = if c.bf16 { "vec2<u32>" } else { "vec4<f16>" };
    let (k, v) = (key_chunks(c, reg), value_chunks(c, reg));
    let mut decl = String::from(
        "    // Whole tiles of contiguous, aligned rows are read without per-chunk checks.
    let kfast = kse == 1u && (kbase & 3u) == 0u && (kst & 3u) == 0u && d == D;
    let vfast = vse == 1u && (vbase & 3u) == 0u && (vst & 3u) == 0u && dv == DV;
",
    );
    decl += &k.decl;
    decl += &v.decl;
    let mut put = k.put + &v.put;
    let mut fetch = String::new();
    fetch += &format!(
        "        if (kfast && jn + BK <= tk) {{\n{}        }} else {{\n{}        }}
        if (vfast && jn + BK <= tk) {{\n{}        }} else {{\n{}        }}\n",
        k.fast, k.generic, v.fast, v.generic
    );
    if c.bf16 {
        decl += "    var rsx = 0u;
";
        fetch += "        if (li < BK) {
            rsx = select(0u, mx[xk + min(jn + li, tk - 1u)], jn + li < tk);
        }
";
        put += "        if (li < BK) {
            sx[li] = line_exp(rsx);
        }
";
    }
    (decl, fetch, put)
}

/// One operand's part of [`fetch_put`]: its registers, its reads of a whole aligned tile (`fast`) and
/// of any tile (`generic`), and its staging.
#[derive(Default)]
struct Chunks {
    decl: String,
    fast: String,
    generic: String,
    put: String,
}

/// Where chunk `j` of this invocation lies in a tile `width` wide (`e`, `row`, `c4`).
fn chunk(c: &Config, j: u32, width: &str) -> String {
    format!(
        "            let e = li + {}u;
            let row = e / ({width} / 4u);
            let c4 = 4u * (e % ({width} / 4u));
",
        j * c.nsg * c.sg
    )
}

/// Whether the `n` chunks of every invocation cover a tile `width` wide exactly (no guard needed).
fn exact(c: &Config, width: u32, n: u32) -> bool {
    n * c.nsg * c.sg == c.bk * width / 4
}

/// The key tile's chunks (bf16: with each key row's line maximum).
fn key_chunks(c: &Config, reg: &str) -> Chunks {
    let nk = chunks(c, c.d);
    let mut p = Chunks::default();
    for j in 0..nk {
        p.decl += &format!(
            "    var rk{j} = {reg}();
"
        );
        let ex = if c.bf16 {
            p.decl += &format!(
                "    var ek{j} = 0u;
"
            );
            format!(
                "
                ek{j} = mx[xk + jn + row];"
            )
        } else {
            String::new()
        };
        p.generic += &format!(
            "        {{
{}            rk{j} = {reg}();
            if (e < BK * D / 4u && jn + row < tk && c4 < d) {{
                rk{j} = raw4_k(kbase + (jn + row) * kst + c4 * kse, kse, d - c4);{ex}
            }}
        }}
",
            chunk(c, j, "D")
        );
        let guard = if exact(c, c.d, nk) { "true" } else { "e < BK * D / 4u" };
        p.fast += &format!(
            "        {{
{}            if ({guard}) {{
                rk{j} = kx[(kbase + (jn + row) * kst + c4) >> 2u];{ex}
            }}
        }}
",
            chunk(c, j, "D")
        );
        let x = if c.bf16 {
            format!("vec4<f16>(bf16x4(rk{j}) * pow2_4(vec4<i32>(-line_exp(ek{j}))))")
        } else {
            format!("rk{j}")
        };
        p.put += &format!(
            "        {{
{}            if (e < BK * D / 4u) {{
                put_k(row * LQ + c4, {x});
            }}
        }}
",
            chunk(c, j, "D")
        );
    }
    p
}

/// The value tile's chunks (bf16: with the exponents of each chunk's columns, the same in every
/// tile); values that are not finite are staged as 0 and flagged.
fn value_chunks(c: &Config, reg: &str) -> Chunks {
    let nv = chunks(c, c.dv);
    let mut p = Chunks::default();
    for j in 0..nv {
        p.decl += &format!(
            "    var rv{j} = {reg}();
"
        );
        p.generic += &format!(
            "        {{
{}            rv{j} = {reg}();
            if (e < BK * DV / 4u && jn + row < tk && c4 < dv) {{
                rv{j} = raw4_v(vbase + (jn + row) * vst + c4 * vse, vse, dv - c4);
            }}
        }}
",
            chunk(c, j, "DV")
        );
        let guard = if exact(c, c.dv, nv) { "true" } else { "e < BK * DV / 4u" };
        p.fast += &format!(
            "        {{
{}            if ({guard}) {{
                rv{j} = vx[(vbase + (jn + row) * vst + c4) >> 2u];
            }}
        }}
",
            chunk(c, j, "DV")
        );
        let x = if c.bf16 {
            // The chunk's columns, and so their exponents, are the same in every tile.
            p.decl += &format!(
                "    var ve{j} = 0u;
    {{
{}            for (var q = 0u; q < 4u; q++) {{
                ve{j} |= u32(line_exp(mx[xv + min(c4 + q, dv - 1u)]) + 128) << (8u * q);
            }}
    }}
",
                chunk(c, j, "DV")
            );
            format!(
                "var y = bf16x4(rv{j}) * pow2_4(vec4<i32>(128) - vec4<i32>((vec4<u32>(ve{j}) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu)));
                let fin = (bitcast<vec4<u32>>(y) & vec4<u32>(0x7f800000u)) != vec4<u32>(0x7f800000u);
                if (!all(fin)) {{
                    atomicOr(&vbad[t & 1u], 1u);
                    y = select(vec4<f32>(0.0), y, fin);
                }}
                let x = vec4<f16>(y);"
            )
        } else {
            format!(
                "var x = rv{j};
                let fin = abs(x) <= vec4<f16>(65504.0h);
                if (!all(fin)) {{
                    atomicOr(&vbad[t & 1u], 1u);
                    x = select(vec4<f16>(), x, fin);
                }}"
            )
        };
        p.put += &format!(
            "        {{
{}            if (e < BK * DV / 4u) {{
                {x}
                put_v(row * LV + c4, x);
            }}
        }}
",
            chunk(c, j, "DV")
        );
    }
    p
}

/// bf16's helpers (`EXTRA`): the line exponents and the unscaling of a value.
fn bf16_extra(c: &Config) -> String {
    if c.bf16 {
        format!(
            "{LINE_EXP}
// 2^n, exact, for |n| < 127.
fn pow2_4(n: vec4<i32>) -> vec4<f32> {{
    return bitcast<vec4<f32>>(vec4<u32>(n + vec4<i32>(127)) << vec4<u32>(23u));
}}
// `v * 2^e` in two steps of the same sign: no intermediate overflows unless the result does.
fn unscale(v: f32, e: i32) -> f32 {{
    let h = e / 2;
    return ldexp(ldexp(v, h), e - h);
}}
"
        )
    } else {
        String::new()
    }
}

/// What differs between the cooperative kernel and its emulation: `ENABLE`, `ZERO`, `SG_PARAM` and
/// `SG_LET`.
fn flavour(c: &Config) -> (String, String, String, String) {
    if c.emulate {
        (
            String::new(),
            format!("array<f32, {}>()", c.s * c.s / c.sg),
            String::new(),
            format!("let sg = li / {}u;\n    let lane = li % {}u;", c.sg, c.sg),
        )
    } else {
        let (zero, ld) = c.unit_index("0u".into(), c.ls());
        (
            "enable wgpu_cooperative_matrix;".to_string(),
            // A copy of zeroed workgroup memory (a zero-valued coop_mat constructor has no
            // zero-fill guarantee in Metal's simdgroup_matrix).
            format!("coopLoadT<{}>(&ss[{zero}], {ld}u)", c.mat("f32", "C")),
            // The lane from the local index (a subgroup is 32 consecutive invocations on the
            // adapters that run this), as the emulated kernel does.
            "@builtin(subgroup_id) sg: u32,".to_string(),
            format!("let lane = li % {}u;", c.sg),
        )
    }
}
