//! Prefill attention on cooperative matrices (`flash_coop.wgsl`, issue 22): f16 and bf16 queries,
//! keys and values with head sizes up to 128, where the adapter has f16 cooperative matrices. The
//! kernel's layout and passes are described in the `.wgsl`. `emulate` builds the same kernel with
//! plain WGSL in place of the cooperative ops (same workgroup-memory layouts), which the
//! conformance tests run on adapters without cooperative matrices.

use super::params::AttnParams;
use crate::gpu::pointwise::line_maxima::{self, Lines, LINE_EXP};
use crate::gpu::runtime::coop::support;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::{self, PRELUDE};
use crate::gpu::runtime::{GpuContext, GpuStorage};
use crate::op::AttentionParams;
use crate::{DType, Layout, Result};

const SOURCE: &str = include_str!("flash_coop.wgsl");
/// Subgroups per workgroup and keys per tile: 4 and 32, or 2 and 16 where workgroup memory is
/// short (32 KiB: lavapipe's emulated head-128 kernel; the fragments and their loops are the same).
const NSG: u32 = 4;
const BK: u32 = 32;
const SHORT: (u32, u32) = (2, 16);
/// Largest head size (q/k and v).
pub(crate) const MAX_HEAD: usize = 128;
/// Below this many workgroups the plain flash kernel, which also splits the keys, is used.
const MIN_GROUPS: usize = 64;

/// One specialisation of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Cooperative matrix size (16 or 8) and subgroup size.
    pub(crate) s: u32,
    pub(crate) sg: u32,
    /// Halves per workgroup-memory element: 4 (`vec4<f16>`, Vulkan) or 1 (Metal).
    pub(crate) unit: u32,
    /// Head sizes rounded up to a multiple of `s`.
    pub(crate) d: u32,
    pub(crate) dv: u32,
    /// bf16 inputs (scaled per line into f16), else f16.
    pub(crate) bf16: bool,
    /// Output: the input dtype in pairs (even dv), else f32.
    pub(crate) pairs: bool,
    /// Subgroups per workgroup (each owns `s` query rows) and keys per tile.
    pub(crate) nsg: u32,
    pub(crate) bk: u32,
    /// Padded row stride of the f32 score tile: `bk + 4`, or `bk` where memory is short.
    pub(crate) ls: u32,
    pub(crate) emulate: bool,
}

impl Config {
    fn bq(&self) -> u32 {
        self.nsg * self.s
    }
    fn pad(&self) -> u32 {
        if self.unit == 4 {
            8
        } else {
            4
        }
    }
    fn strides(&self) -> (u32, u32, u32) {
        (self.d + self.pad(), self.dv + self.pad(), self.bk + self.pad())
    }
    /// Bytes of workgroup memory.
    pub(crate) fn workgroup_bytes(&self) -> u32 {
        let (lq, lv, lp) = self.strides();
        2 * (self.bq() * lq + self.bk * lq + self.bk * lv + self.nsg * self.s * lp)
            + 4 * self.nsg * self.s * self.ls
            + 16
    }
    pub(crate) fn key(&self) -> String {
        format!(
            "attention_flash_coop{}:{}x{}:sg{}:u{}:d{}:dv{}:{}:{}:ls{}:nsg{}:bk{}",
            if self.emulate { "_emulated" } else { "" },
            self.s,
            self.s,
            self.sg,
            self.unit,
            self.d,
            self.dv,
            if self.bf16 { "bf16" } else { "f16" },
            if self.pairs { "pairs" } else { "f32" },
            self.ls,
            self.nsg,
            self.bk
        )
    }
}

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
            let (idx, ld) = if self.unit == 1 { (idx, ld) } else { (format!("({idx}) >> 2u"), ld / 4) };
            format!("{}<{}>(&{arr}[{idx}], {ld}u)", if t { "coopLoadT" } else { "coopLoad" }, self.mat("f16", role))
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
    /// Stores accumulator `acc` row-major at `off` of `ss`.
    fn store(&self, acc: &str, off: &str) -> String {
        if self.emulate {
            format!("emu_store({acc}, {off}, {}u, lane);", self.ls)
        } else {
            format!("coopStoreT({acc}, &ss[{off}], {}u);", self.ls)
        }
    }
}

/// The kernel source for `c`.
pub(crate) fn source(c: &Config) -> String {
    let (s, unit) = (c.s, c.unit);
    let (lq, lv, lp) = c.strides();
    let ls = c.ls;
    let se = if unit == 4 { "vec4<f16>" } else { "f16" };
    let (s_decl, scores) = scores(c);
    let (o_decl, pv) = products_pv(c);
    let epilogue = epilogue(c);
    let (loaders, puts, p_at) = loaders(c);
    let (stage_k, stage_v) = staging(c);
    let score = if c.bf16 {
        "unscale(ss[slot + r * LS + col], eq + line_exp(mx[xk + key])) * scale"
    } else {
        "ss[slot + r * LS + col] * scale"
    };
    let extra = bf16_extra(c);
    let (enable, zero, sg_param, sg_let, emu) = flavour(c);
    let num = |v: u32| v.to_string();
    let u = |v: u32| v / unit;
    let dst = if c.pairs { "array<u32>" } else { "array<f32>" };
    let mx = if c.bf16 { "@group(0) @binding(4) var<storage, read> mx: array<u32>;" } else { "" };
    render(
        SOURCE,
        &[
            ("PARAMS", &CoopAttnParams::wgsl()),
            ("STAGE_K", &stage_k),
            ("STAGE_V", &stage_v),
            ("SCORES", &scores),
            ("SCORE", score),
            ("PV", &pv),
            ("O_DECL", &o_decl),
            ("S_DECL", &s_decl),
            ("EPILOGUE", &epilogue),
            ("P_AT", &p_at),
            ("ENABLE", &enable),
            ("DST", dst),
            ("MX_BINDING", mx),
            ("S", &num(s)),
            ("SG", &num(c.sg)),
            ("NSG", &num(c.nsg)),
            ("WG", &num(c.nsg * c.sg)),
            ("BQ", &num(c.bq())),
            ("BK", &num(c.bk)),
            ("D", &num(c.d)),
            ("DV", &num(c.dv)),
            ("LQ", &num(lq)),
            ("LV", &num(lv)),
            ("LP", &num(lp)),
            ("LS", &num(ls)),
            ("SE", se),
            ("SQ_N", &num(u(c.bq() * lq))),
            ("SK_N", &num(u(c.bk * lq))),
            ("SV_N", &num(u(c.bk * lv))),
            ("SP_N", &num(u(c.nsg * s * lp))),
            ("SS_N", &num(c.nsg * s * ls)),
            ("PRELUDE", PRELUDE),
            ("EXTRA", &extra),
            ("LOADERS", &loaders),
            ("PUTS", &puts),
            ("SCALE_Q", if c.bf16 { "x = ldexp(x, vec4<i32>(-line_exp(mx[xq + q0 + row])));" } else { "" }),
            ("EQ", if c.bf16 { "line_exp(mx[xq + min(i, tq - 1u)])" } else { "0" }),
            ("PW", &num((c.dv / (c.sg / s)).div_ceil(32).max(1))),
            ("ZERO", &zero),
            ("SG_PARAM", &sg_param),
            ("SG_LET", &sg_let),
            ("EMU", &emu),
        ],
    )
}

/// The scores of a tile (`SCORES`) and their accumulators' declarations (`S_DECL`).
fn scores(c: &Config) -> (String, String) {
    let s = c.s;
    let (lq, _, _) = c.strides();
    // The scores of this subgroup's rows against the key tile, stored row-major at `slot` of `ss`.
    let nsf = c.bk / s;
    // The score accumulators are declared once (`S_DECL`, outside the loops) and reset per tile.
    let mut s_decl = String::new();
    let mut scores = String::new();
    for j in 0..nsf {
        s_decl += &format!("    var s_{j} = zero;\n");
        scores += &format!("        s_{j} = zero;\n");
    }
    for ks in 0..c.d / s {
        scores += &format!(
            "        {{\n        let qa = {};\n",
            c.frag(true, "A", "sq", format!("sg * {}u + {}u", s * lq, ks * s), lq)
        );
        for j in 0..nsf {
            scores += &format!(
                "        let kb{j} = {};\n",
                c.frag(false, "B", "sk", format!("{}u", j * s * lq + ks * s), lq)
            );
        }
        for j in 0..nsf {
            scores += &format!("        {}\n", c.mma("qk", "qa", &format!("kb{j}"), &format!("s_{j}")));
        }
        scores += "        }\n";
    }
    for j in 0..nsf {
        scores += &format!("        {}\n", c.store(&format!("s_{j}"), &format!("slot + {}u", j * s)));
    }

    (s_decl, scores)
}

/// P v into the output accumulators (`PV`) and their declarations (`O_DECL`).
fn products_pv(c: &Config) -> (String, String) {
    let s = c.s;
    let (_, lv, lp) = c.strides();
    // P v into the output accumulators.
    let nov = c.dv / s;
    let mut o_decl = String::new();
    for j in 0..nov {
        o_decl += &format!("    var o_{j} = zero;\n");
    }
    let mut pv = String::new();
    for ks in 0..c.bk / s {
        pv += &format!(
            "        {{\n        let pa = {};\n",
            c.frag(true, "A", "sp", format!("sg * {}u + {}u", s * lp, ks * s), lp)
        );
        for j in 0..nov {
            pv +=
                &format!("        let vb{j} = {};\n", c.frag(true, "B", "sv", format!("{}u", ks * s * lv + j * s), lv));
            pv += &format!("        {}\n", c.mma("pv", "pa", &format!("vb{j}"), &format!("o_{j}")));
        }
        pv += "        }\n";
    }

    (o_decl, pv)
}

/// Each output accumulator through this subgroup's slot of `ss`, then written by the lanes.
fn epilogue(c: &Config) -> String {
    let s = c.s;
    let write = if c.pairs {
        let pack = if c.bf16 {
            "bf16_bits(vals[cc]) | (bf16_bits(vals[cc + 1u]) << 16u)"
        } else {
            "pack2x16float(vec2<f32>(vals[cc], vals[cc + 1u]))"
        };
        format!("for (var cc = 0u; cc < OPL; cc += 2u) {{ let oc = c0 + cc; if (oc < dv) {{ dst[(orow + oc) >> 1u] = {pack}; }} }}")
    } else {
        "for (var cc = 0u; cc < OPL; cc++) { let oc = c0 + cc; if (oc < dv) { dst[orow + oc] = vals[cc]; } }"
            .to_string()
    };
    let unscale_v = if c.bf16 { "v = unscale(v, line_exp(mx[xv + oc]));" } else { "" };
    let mut epilogue = String::new();
    for j in 0..c.dv / s {
        epilogue += &format!(
            "    workgroupBarrier();
    {}
    workgroupBarrier();
    if (i < tq) {{
        let c0 = {}u + part * OPL;
        var vals = array<f32, {}>();
        for (var cc = 0u; cc < OPL; cc++) {{
            let oc = c0 + cc;
            let q = {}u + cc;
            let wd = q >> 5u;
            let bit = 1u << (q & 31u);
            var v = ss[slot + r * LS + part * OPL + cc];
            if (oc < dv) {{
                {unscale_v}
            }}
            if (bad || (nanb[wd] & bit) != 0u || (pinf[wd] & ninf[wd] & bit) != 0u) {{
                v = nan_f32();
            }} else if ((pinf[wd] & bit) != 0u) {{
                v = inf_f32();
            }} else if ((ninf[wd] & bit) != 0u) {{
                v = -inf_f32();
            }}
            vals[cc] = v;
        }}
        {write}
    }}
",
            c.store(&format!("o_{j}"), "slot"),
            j * s,
            s / (c.sg / s),
            j * (s / (c.sg / s)),
        );
    }

    epilogue
}

/// The q/k/v element loaders (`LOADERS`), the staged-tile stores (`PUTS`) and the read of one
/// staged probability (`P_AT`).
fn loaders(c: &Config) -> (String, String, String) {
    let s = c.s;
    let (_, _, lp) = c.strides();
    let conv = |buf: &str, name: &str| {
        let (one, four) = if c.bf16 {
            (
                "return bitcast<f32>(select(w << 16u, w & 0xffff0000u, (e & 1u) == 1u));",
                "return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u), bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u));",
            )
        } else {
            ("return unpack2x16float(w)[e & 1u];", "return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));")
        };
        format!(
            "fn ld1_{name}(e: u32) -> f32 {{
    let w = word_of({buf}[e >> 2u], e);
    {one}
}}
fn ld4_{name}(e: u32, se: u32, n: u32) -> vec4<f32> {{
    if (se == 1u && (e & 3u) == 0u && n >= 4u) {{
        let w = {buf}[e >> 2u];
        {four}
    }}
    var x = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {{
        if (j < n) {{
            x[j] = ld1_{name}(e + j * se);
        }}
    }}
    return x;
}}
"
        )
    };
    let loaders = conv("qx", "q") + &conv("kx", "k") + &conv("vx", "v");
    let put = |name: &str, arr: &str| {
        if c.unit == 4 {
            format!("fn put_{name}(i: u32, v: vec4<f16>) {{ {arr}[i >> 2u] = v; }}\n")
        } else {
            format!("fn put_{name}(i: u32, v: vec4<f16>) {{ {arr}[i] = v.x; {arr}[i + 1u] = v.y; {arr}[i + 2u] = v.z; {arr}[i + 3u] = v.w; }}\n")
        }
    };
    let puts = put("q", "sq") + &put("k", "sk") + &put("v", "sv") + &put("p", "sp");
    let p_at = if c.unit == 4 {
        format!("f32(sp[(sg * {}u + r * LP + col) >> 2u][(r * LP + col) & 3u])", s * lp)
    } else {
        format!("f32(sp[sg * {}u + r * LP + col])", s * lp)
    };

    (loaders, puts, p_at)
}

/// The loops that stage a key tile (`STAGE_K`) and a value tile (`STAGE_V`) into workgroup memory.
fn staging(c: &Config) -> (String, String) {
    let scale_k = if c.bf16 { "x = ldexp(x, vec4<i32>(-line_exp(mx[xk + j0 + row])));" } else { "" };
    let stage_k = format!(
        "        for (var e = li; e < BK * D / 4u; e += WG) {{
            let row = e / (D / 4u);
            let c = 4u * (e % (D / 4u));
            var x = vec4<f32>(0.0);
            if (j0 + row < tk && c < d) {{
                x = ld4_k(kbase + (j0 + row) * kst + c * kse, kse, d - c);
                {scale_k}
            }}
            put_k(row * LQ + c, vec4<f16>(x));
        }}"
    );
    let scale_v = if c.bf16 {
        "x = ldexp(x, -vec4<i32>(line_exp(mx[xv + min(c, dv - 1u)]), line_exp(mx[xv + min(c + 1u, dv - 1u)]), \
         line_exp(mx[xv + min(c + 2u, dv - 1u)]), line_exp(mx[xv + min(c + 3u, dv - 1u)])));"
    } else {
        ""
    };
    let stage_v = format!(
        "        for (var e = li; e < BK * DV / 4u; e += WG) {{
            let row = e / (DV / 4u);
            let c = 4u * (e % (DV / 4u));
            var x = vec4<f32>(0.0);
            if (j0 + row < tk && c < dv) {{
                x = ld4_v(vbase + (j0 + row) * vst + c * vse, vse, dv - c);
                {scale_v}
                let fin = (bitcast<vec4<u32>>(x) & vec4<u32>(0x7f800000u)) != vec4<u32>(0x7f800000u);
                if (!all(fin)) {{
                    atomicOr(&vbad[t & 1u], 1u);
                    x = select(vec4<f32>(0.0), x, fin);
                }}
            }}
            put_v(row * LV + c, vec4<f16>(x));
        }}"
    );
    (stage_k, stage_v)
}

/// bf16's helpers (`EXTRA`): the line exponents and the unscaling of a value.
fn bf16_extra(c: &Config) -> String {
    if c.bf16 {
        format!(
            "{LINE_EXP}
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

/// What differs between the cooperative kernel and its emulation: `ENABLE`, `ZERO`, `SG_PARAM`,
/// `SG_LET` and `EMU`.
fn flavour(c: &Config) -> (String, String, String, String, String) {
    if c.emulate {
        (
            String::new(),
            format!("array<f32, {}>()", c.s * c.s / c.sg),
            String::new(),
            format!("let sg = li / {}u;\n    let lane = li % {}u;", c.sg, c.sg),
            emulation(c),
        )
    } else {
        (
            "enable wgpu_cooperative_matrix;".to_string(),
            format!("coopLoadT<{}>(&ss[0], {}u)", c.mat("f32", "C"), c.ls),
            // The lane from the local index (a subgroup is 32 consecutive invocations on the
            // adapters that run this), as the emulated kernel does.
            "@builtin(subgroup_id) sg: u32,".to_string(),
            format!("let lane = li % {}u;", c.sg),
            String::new(),
        )
    }
}

/// Plain-WGSL stand-ins for the cooperative ops (as in the matmul's emulation): a fragment is
/// `(half index, row stride, row-major)` into a staged tile; an accumulator is the `s*s/sg` elements
/// `lane + sg*q` (row-major) of its tile that this invocation owns.
fn emulation(c: &Config) -> String {
    let (s, sg) = (c.s, c.sg);
    let e = s * s / sg;
    let rd = |arr: &str| {
        if c.unit == 4 {
            format!("fn emu_{arr}(i: u32) -> f32 {{ return f32({arr}[i >> 2u][i & 3u]); }}\n")
        } else {
            format!("fn emu_{arr}(i: u32) -> f32 {{ return f32({arr}[i]); }}\n")
        }
    };
    let mma = |name: &str, a: &str, b: &str| {
        format!(
            "fn emu_mma_{name}(a: vec3<u32>, b: vec3<u32>, c: array<f32, {e}>, lane: u32) -> array<f32, {e}> {{
    var r = c;
    // Trip counts from parameters (p.lane_elems = {e}, p.frag = {s}): software adapters would unroll
    // constant ones at every call site and take long to compile.
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        let row = x / {s}u;
        let col = x % {s}u;
        var acc = r[q];
        for (var k = 0u; k < p.frag; k++) {{
            acc += emu_{a}(emu_at(a, row, k)) * emu_{b}(emu_at(b, k, col));
        }}
        r[q] = acc;
    }}
    return r;
}}
"
        )
    };
    format!(
        "{}{}{}{}
fn emu_at(d: vec3<u32>, r: u32, c: u32) -> u32 {{
    return select(d.x + c * d.y + r, d.x + r * d.y + c, d.z == 1u);
}}

{}{}
fn emu_store(c: array<f32, {e}>, off: u32, ld: u32, lane: u32) {{
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        ss[off + (x / {s}u) * ld + x % {s}u] = c[q];
    }}
}}
",
        rd("sq"),
        rd("sk"),
        rd("sp"),
        rd("sv"),
        mma("qk", "sq", "sk"),
        mma("pv", "sp", "sv"),
    )
}

/// The configuration for these head sizes on `ctx` (`emulate: Some(s)` on any adapter with
/// SHADER_F16), or `None` when the kernel does not apply.
pub(crate) fn config(ctx: &GpuContext, bf16: bool, d: usize, dv: usize, emulate: Option<u32>) -> Option<Config> {
    let (s, sg) = match emulate {
        Some(s) => (ctx.has(wgpu::Features::SHADER_F16) && matches!(s, 8 | 16)).then_some((s, 32))?,
        None => support(ctx)?,
    };
    if d == 0
        || dv == 0
        || d > MAX_HEAD
        || dv > MAX_HEAD
        || !sg.is_multiple_of(s)
        || !(SHORT.1 / (sg / s)).is_multiple_of(4)
    {
        return None;
    }
    let vulkan = ctx.summary.backend == "Vulkan" || emulate.is_some();
    let round = |x: usize| (x.div_ceil(s as usize) * s as usize) as u32;
    let base = Config {
        s,
        sg,
        unit: if vulkan { 4 } else { 1 },
        d: round(d).max(4),
        dv: round(dv),
        bf16,
        pairs: dv.is_multiple_of(2),
        nsg: NSG,
        bk: BK,
        ls: BK + 4,
        emulate: emulate.is_some(),
    };
    let (nsg, bk) = SHORT;
    let short = Config { nsg, bk, ls: bk + 4, ..base };
    let limit = ctx.limits.max_compute_workgroup_storage_size;
    [base, Config { ls: BK, ..base }, short, Config { ls: bk, ..short }]
        .into_iter()
        .find(|c| c.workgroup_bytes() <= limit && c.nsg * c.sg <= ctx.limits.max_compute_invocations_per_workgroup)
}

/// The automatic path takes this kernel only with `KILN_COOP_ATTN=1`: it is right on an H100 since
/// its workgroup variables are 16-byte multiples (`flash_coop.wgsl`), but no faster there than the
/// plain flash kernel (0.95-1.2x; docs/PERFORMANCE.md).
fn disabled_by_env() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| !crate::settings::COOP_ATTN.is_one())
}

/// Attention through the cooperative kernel, or `None` where it does not apply (dtype, head sizes,
/// adapter, too few workgroups without `force`, views whose indices do not fit in u32).
#[allow(clippy::too_many_arguments)]
pub(crate) fn try_flash_coop(
    q: &GpuStorage,
    ql: &Layout,
    k: &GpuStorage,
    kl: &Layout,
    v: &GpuStorage,
    vl: &Layout,
    p: AttentionParams,
    emulate: Option<u32>,
    force: bool,
) -> Option<Result<GpuStorage>> {
    if !force && emulate.is_none() && disabled_by_env() {
        return None;
    }
    let dt = q.dtype;
    if !matches!(dt, DType::F16 | DType::BF16) || k.dtype != dt || v.dtype != dt {
        return None;
    }
    let (b, hq, tq, d) = (ql.dims()[0], ql.dims()[1], ql.dims()[2], ql.dims()[3]);
    let (hkv, tk, dv) = (kl.dims()[1], kl.dims()[2], vl.dims()[3]);
    if b * hq * tq * tk == 0 || hkv == 0 || hq % hkv != 0 {
        return None;
    }
    let ctx = &q.ctx;
    let c = config(ctx, dt == DType::BF16, d, dv, emulate)?;
    let nqb = tq.div_ceil(c.bq() as usize);
    let groups = b * hq * nqb;
    if !force && groups < MIN_GROUPS {
        return None;
    }
    let fits = wgsl::indexable;
    let aligned = [q, k, v].iter().all(|s| s.buffer.size().is_multiple_of(8));
    if !fits(ql) || !fits(kl) || !fits(vl) || !aligned || (b * hq * tq * dv) as u64 >= u32::MAX as u64 {
        return None;
    }
    Some(run(q, ql, k, kl, v, vl, p, &c, groups))
}

#[allow(clippy::too_many_arguments)]
fn run(
    q: &GpuStorage,
    ql: &Layout,
    k: &GpuStorage,
    kl: &Layout,
    v: &GpuStorage,
    vl: &Layout,
    p: AttentionParams,
    c: &Config,
    groups: usize,
) -> Result<GpuStorage> {
    let ctx = &q.ctx;
    let dt = q.dtype;
    let (b, hq, tq, d) = (ql.dims()[0], ql.dims()[1], ql.dims()[2], ql.dims()[3]);
    let (hkv, tk, dv) = (kl.dims()[1], kl.dims()[2], vl.dims()[3]);
    let out_dt = if c.pairs { dt } else { DType::F32 };
    let out = GpuStorage::alloc(ctx, out_dt, b * hq * tq * dv)?;
    let (xq, xk, xv) = (0, b * hq * tq, b * hq * tq + b * hkv * tk);
    let [q_off, q_sb, q_sh, q_st, q_se] = wgsl::view_words(ql);
    let [k_off, k_sb, k_sh, k_st, k_se] = wgsl::view_words(kl);
    let [v_off, v_sb, v_sh, v_st, v_se] = wgsl::view_words(vl);
    #[rustfmt::skip]
    let base = AttnParams {
        b: b as u32, hq: hq as u32, hkv: hkv as u32, tq: tq as u32, tk: tk as u32, d: d as u32, dv: dv as u32,
        scale: p.scale as f32,
        causal: p.causal as u32,
        blocks: tq.div_ceil(c.bq() as usize) as u32,
        groups: groups as u32,
        q_off, q_sb, q_sh, q_st, q_se,
        k_off, k_sb, k_sh, k_st, k_se,
        v_off, v_sb, v_sh, v_st, v_se,
        ..AttnParams::default()
    };
    let params =
        CoopAttnParams { base, xq: xq as u32, xk: xk as u32, xv: xv as u32, lane_elems: c.s * c.s / c.sg, frag: c.s }
            .words();
    // bf16: the largest magnitude of every query row, key row and value column.
    let mx = if c.bf16 {
        let mx = line_maxima::maxima_buffer(ctx, xv + b * hkv * dv)?;
        let (sq, sk, sv) = (ql.strides(), kl.strides(), vl.strides());
        let (qd, kd) = ([b, hq], [b, hkv]);
        let (qs, ks, vs) = ([sq[0], sq[1]], [sk[0], sk[1]], [sv[0], sv[1]]);
        let lq = Lines {
            lines: tq,
            k: d,
            offset: ql.offset(),
            line_stride: sq[2],
            k_stride: sq[3],
            batch: b * hq,
            dims: &qd,
            strides: &qs,
        };
        let lk = Lines {
            lines: tk,
            k: d,
            offset: kl.offset(),
            line_stride: sk[2],
            k_stride: sk[3],
            batch: b * hkv,
            dims: &kd,
            strides: &ks,
        };
        let lv = Lines {
            lines: dv,
            k: tk,
            offset: vl.offset(),
            line_stride: sv[3],
            k_stride: sv[2],
            batch: b * hkv,
            dims: &kd,
            strides: &vs,
        };
        line_maxima::line_maxima(q, &lq, &mx, xq)?;
        line_maxima::line_maxima(k, &lk, &mx, xk)?;
        line_maxima::line_maxima(v, &lv, &mx, xv)?;
        Some(mx)
    } else {
        None
    };
    let kernel = ctx.pipelines.get(ctx, &c.key(), if c.bf16 { 4 } else { 3 }, || source(c))?;
    let mut bufs = vec![out.buffer.raw(), q.buffer.raw(), k.buffer.raw(), v.buffer.raw()];
    bufs.extend(mx.as_ref().map(|m| m.buffer.raw()));
    let wg = (c.nsg * c.sg) as usize;
    let grid = wgsl::grid(groups * wg, wg, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params, grid)?;
    out.finish(dt)
}

params! {
    /// The coop flash kernel's parameters: those of the flash kernel (`blocks` the query blocks; no
    /// splits), where the q, k and v line maxima start in `mx` (bf16), and the emulated kernel's
    /// loop bounds (elements per lane, fragment size).
    struct CoopAttnParams: AttnParams {
        xq: u32,
        xk: u32,
        xv: u32,
        lane_elems: u32,
        frag: u32,
    }
}

/// Every variant, for the translation test.
pub(crate) fn catalog() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (s, unit, emulate) in [(16, 4, false), (8, 1, false), (16, 4, true)] {
        for bf16 in [false, true] {
            for (d, dv, pairs) in [(128, 128, true), (64, 64, true), (80, 48, false)] {
                let c = Config { s, sg: 32, unit, d, dv, bf16, pairs, nsg: NSG, bk: BK, ls: BK + 4, emulate };
                out.push((c.key(), source(&c)));
                let (nsg, bk) = SHORT;
                let c = Config { nsg, bk, ls: bk + 4, ..c };
                out.push((c.key(), source(&c)));
            }
        }
    }
    out
}
