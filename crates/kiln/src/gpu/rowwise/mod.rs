//! Softmax, log-softmax, RMSNorm and LayerNorm over the rows of a contiguous view
//! (`softmax.wgsl`, `norm.wgsl`): one workgroup per row.
//!
//! Variants, chosen per call from the row length `k`, the alignment and the adapter's limits:
//! - how a row is read (`Mode`): 16-byte packs when the rows and the offset are whole packs, else
//!   four whole words per pack (outputs still written in the input dtype), else four elements
//!   (odd-length f16/bf16 rows: f32 results, then a cast);
//! - `np` packs per invocation held in registers (1, 2, 4 or 8; at most 8 vec4 registers), with a
//!   workgroup of `w` = 64 to 1024 invocations sized to the row: the row is read once. Rows that do
//!   not fit (`np` = 0) are read twice with per-invocation running statistics;
//! - `sg`: workgroup reductions through subgroup operations (devices with `SUBGROUP`) or through
//!   workgroup memory.

use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::subgroups::use_subgroups;
use crate::gpu::runtime::wgsl::expand;
use crate::gpu::runtime::wgsl::{self, loader, PRELUDE};
use crate::gpu::runtime::{GpuContext, GpuStorage};
use crate::{DType, Layout, Result};

const SOFTMAX: &str = include_str!("softmax.wgsl");
const NORM: &str = include_str!("norm.wgsl");

/// Register budget: vec4 values each invocation keeps of its row.
const MAX_SLOTS: usize = 8;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Family {
    Softmax,
    Norm,
}

/// How a row is read: 16-byte packs, four whole words, or four elements (f32 results).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    Pack,
    Word,
    Elem,
}

/// One kernel variant: `np` packs per invocation in registers (0: rows read twice), `w`
/// invocations per workgroup, `sg` subgroup reductions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Variant {
    pub fam: Family,
    pub dt: DType,
    pub mode: Mode,
    pub np: usize,
    pub w: usize,
    pub sg: bool,
}

impl Variant {
    fn key(&self) -> String {
        format!("{:?}:{}:{:?}:np{}:w{}:sg{}", self.fam, self.dt, self.mode, self.np, self.w, self.sg as u8)
    }

    /// vec4 values per pack.
    fn nv(&self) -> usize {
        if self.mode == Mode::Elem {
            1
        } else {
            wgsl::per_word(self.dt)
        }
    }

    /// Elements per pack.
    fn pe(&self) -> usize {
        4 * self.nv()
    }

    /// `, lid, ...`: the ids a reducer call passes.
    fn ids(&self) -> &'static str {
        if self.sg {
            ", lid, sgi, sgs, sid"
        } else {
            ", lid"
        }
    }

    /// A workgroup-wide reduction `name(x: ty) -> ty` combining with `comb` (`add`: subgroupAdd).
    fn reducer(&self, name: &str, ty: &str, comb: &str, add: bool) -> String {
        let w = self.w;
        if self.sg {
            let sub = if add {
                "    v = subgroupAdd(v);\n".to_string()
            } else {
                format!("    for (var o = 1u; o < sgs; o = o << 1u) {{ v = {comb}(v, subgroupShuffleXor(v, o)); }}\n")
            };
            format!(
                "var<workgroup> {name}_s: array<{ty}, {}>;\n\
                 fn {name}(x: {ty}, lid: u32, sgi: u32, sgs: u32, sid: u32) -> {ty} {{\n    var v = x;\n{sub}\
                 \x20   if (sgi == 0u) {{ {name}_s[sid] = v; }}\n    workgroupBarrier();\n    var r = {name}_s[0];\n\
                 \x20   for (var i = 1u; i < ({w}u + sgs - 1u) / sgs; i++) {{ r = {comb}(r, {name}_s[i]); }}\n\
                 \x20   workgroupBarrier();\n    return r;\n}}\n",
                (w / 4).max(1)
            )
        } else {
            format!(
                "var<workgroup> {name}_s: array<{ty}, {w}>;\n\
                 fn {name}(x: {ty}, lid: u32) -> {ty} {{\n    {name}_s[lid] = x;\n    workgroupBarrier();\n\
                 \x20   for (var s = {}u; s > 0u; s = s >> 1u) {{\n\
                 \x20       if (lid < s) {{ {name}_s[lid] = {comb}({name}_s[lid], {name}_s[lid + s]); }}\n\
                 \x20       workgroupBarrier();\n    }}\n    let r = {name}_s[0];\n    workgroupBarrier();\n    return r;\n}}\n",
                w / 2
            )
        }
    }

    /// Statements binding `w{i}` (if needed) and the vec4 expressions of pack `q` of input `i`
    /// (0 the row, 1 the weight, 2 the bias).
    fn load(&self, i: usize, q: &str) -> (String, Vec<String>) {
        let base = match i {
            0 => "xb".to_string(),
            1 => "p.w_off".to_string(),
            _ => "p.b_off".to_string(),
        };
        let w = format!("w{i}");
        match self.mode {
            Mode::Pack => (format!("let {w} = in{i}[{base} + {q}];"), expand(self.dt, &w)),
            Mode::Word => (format!("let {w} = fetch{i}({base} + {q} * 4u);"), expand(self.dt, &w)),
            Mode::Elem => {
                let at = |c: usize| match i {
                    0 => format!("ld0(xb + {q} * 4u + {c}u)"),
                    1 => format!("ld1(p.w_off + ({q} * 4u + {c}u) * p.w_stride)"),
                    _ => format!("ld2(p.b_off + ({q} * 4u + {c}u) * p.b_stride)"),
                };
                (String::new(), vec![format!("vec4<f32>({}, {}, {}, {})", at(0), at(1), at(2), at(3))])
            }
        }
    }

    /// Statements storing the vec4 values `ys` as pack `q` of the output row.
    fn store(&self, q: &str, ys: &[String], indent: &str) -> String {
        let words = match self.dt {
            DType::F32 => format!("bitcast<vec4<u32>>({})", ys[0]),
            DType::F16 => format!(
                "vec4<u32>(pack2x16float({a}.xy), pack2x16float({a}.zw), pack2x16float({b}.xy), pack2x16float({b}.zw))",
                a = ys[0],
                b = ys.get(1).unwrap_or(&ys[0])
            ),
            _ => {
                let pair = |y: &str, a: &str, b: &str| format!("bf16_bits({y}.{a}) | (bf16_bits({y}.{b}) << 16u)");
                let b = ys.get(1).unwrap_or(&ys[0]);
                format!(
                    "vec4<u32>({}, {}, {}, {})",
                    pair(&ys[0], "x", "y"),
                    pair(&ys[0], "z", "w"),
                    pair(b, "x", "y"),
                    pair(b, "z", "w")
                )
            }
        };
        match self.mode {
            Mode::Pack => format!("{indent}dst[ob + {q}] = {words};\n"),
            Mode::Word => {
                let mut s = format!("{indent}let wd = {words};\n");
                for c in 0..4 {
                    s += &format!("{indent}if ({q} * 4u + {c}u < kw) {{ dst[ob + {q} * 4u + {c}u] = wd[{c}]; }}\n");
                }
                s
            }
            Mode::Elem => (0..4)
                .map(|c| {
                    let comp = ["x", "y", "z", "w"][c];
                    format!(
                        "{indent}if ({q} * 4u + {c}u < k) {{ dst[ob + {q} * 4u + {c}u] = bitcast<u32>({}.{comp}); }}\n",
                        ys[0]
                    )
                })
                .collect(),
        }
    }

    /// Helper functions: pack fetches, loaders, NaN-aware max, masks, reducers.
    fn helpers(&self) -> String {
        let inputs = if self.fam == Family::Norm { 3 } else { 1 };
        let mut h = String::from(
            "fn is_nan4(x: vec4<f32>) -> vec4<bool> { \
             return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }\n\
             fn maxn(a: f32, b: f32) -> f32 { return select(max(a, b), a + b, is_nan(a) || is_nan(b)); }\n\
             fn maxn4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> { return select(max(a, b), a + b, is_nan4(a) | is_nan4(b)); }\n\
             fn hmax(v: vec4<f32>) -> f32 { return maxn(maxn(v.x, v.y), maxn(v.z, v.w)); }\n\
             fn hsum(v: vec4<f32>) -> f32 { return (v.x + v.y) + (v.z + v.w); }\n\
             fn addf(a: f32, b: f32) -> f32 { return a + b; }\n",
        );
        h += &format!(
            "// Which elements of vec4 `s` of pack `q` lie inside the row.\n\
             fn lanes(q: u32, s: u32, k: u32) -> vec4<bool> {{ \
             return (vec4<u32>(q * {}u + 4u * s) + vec4<u32>(0u, 1u, 2u, 3u)) < vec4<u32>(k); }}\n",
            self.pe()
        );
        for i in 0..inputs {
            match self.mode {
                Mode::Word => {
                    h += &format!(
                        "fn fetch{i}(b: u32) -> vec4<u32> {{ return vec4<u32>(in{i}[b], in{i}[b + 1u], in{i}[b + 2u], in{i}[b + 3u]); }}\n"
                    )
                }
                Mode::Elem => h += &loader(&format!("ld{i}"), &format!("in{i}"), self.dt),
                Mode::Pack => {}
            }
        }
        match (self.fam, self.np) {
            (Family::Softmax, 0) => {
                h += "// exp(a - m) with exp(-inf - -inf) taken as 1: rescales a running sum to the max m.\n\
                      fn scl(a: f32, m: f32) -> f32 { return select(exp(a - m), 1.0, a == m); }\n\
                      fn comb_ms(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {\n    let m = maxn(a.x, b.x);\n    \
                      return vec2<f32>(m, a.y * scl(a.x, m) + b.y * scl(b.x, m));\n}\n";
                h += &self.reducer("red_ms", "vec2<f32>", "comb_ms", false);
            }
            (Family::Softmax, _) => {
                h += &self.reducer("red_max", "f32", "maxn", false);
                h += &self.reducer("red_sum", "f32", "addf", true);
            }
            (Family::Norm, 0) => {
                h += "// Merges (count, mean, sum of squared deviations) of two parts (Chan et al.).\n\
                      fn comb_w(a: vec3<f32>, b: vec3<f32>) -> vec3<f32> {\n    let n = a.x + b.x;\n    \
                      if (n == 0.0) { return a; }\n    let d = b.y - a.y;\n    let f = b.x / n;\n    \
                      return vec3<f32>(n, a.y + d * f, a.z + b.z + d * d * a.x * f);\n}\n";
                h += &self.reducer("red_w", "vec3<f32>", "comb_w", false);
                h += &self.reducer("red_sum", "f32", "addf", true);
            }
            (Family::Norm, _) => h += &self.reducer("red_sum", "f32", "addf", true),
        }
        h
    }

    /// Row bases: `xb` (input), `ob` (output), `kw` (output words per row), `np` (packs per row).
    fn bases(&self) -> String {
        let pe = self.pe();
        let pw = wgsl::per_word(self.dt);
        match self.mode {
            Mode::Pack => format!("    let np = k / {pe}u;\n    let xb = p.off + row * np;\n    let ob = row * np;\n"),
            Mode::Word => format!(
                "    let np = (k + {pe}u - 1u) / {pe}u;\n    let kw = k / {pw}u;\n    let xb = p.off + row * kw;\n    let ob = row * kw;\n"
            ),
            Mode::Elem => "    let np = (k + 3u) / 4u;\n    let xb = p.off + row * k;\n    let ob = row * k;\n".to_string(),
        }
    }

    /// Every (pack slot, vector) pair of the row held in registers, as `load_row` names them.
    fn slots(&self) -> Vec<(usize, usize)> {
        let nv = self.nv();
        (0..self.np).flat_map(|u| (0..nv).map(move |s| (u, s))).collect()
    }

    /// The row held in registers: pack slot `u` of this invocation is `q{u}`, its vectors `x{u}_{s}`
    /// with lane masks `k{u}_{s}`; lanes past the row (and slots past its packs) hold `fill`.
    fn load_row(&self, fill: &str) -> String {
        let mut b = String::new();
        for u in 0..self.np {
            b += &format!("    let q{u} = lid + {}u;\n", u * self.w);
            for s in 0..self.nv() {
                b += &format!("    var x{u}_{s} = {fill};\n");
            }
            let (pre, ex) = self.load(0, &format!("q{u}"));
            b += &format!("    if (q{u} < np) {{\n        {pre}\n");
            for (s, e) in ex.iter().enumerate() {
                b += &format!("        x{u}_{s} = {e};\n");
            }
            b += "    }\n";
            for s in 0..self.nv() {
                b += &format!(
                    "    let k{u}_{s} = lanes(q{u}, {s}u, k);\n    x{u}_{s} = select({fill}, x{u}_{s}, k{u}_{s});\n"
                );
            }
        }
        b
    }

    fn softmax_body(&self) -> String {
        let (nv, w, ids) = (self.nv(), self.w, self.ids());
        let mut b = self.bases();
        let slots = self.slots();
        if self.np > 0 {
            b += &self.load_row("vec4<f32>(-inf_f32())");
            b += "    var mx = vec4<f32>(-inf_f32());\n";
            for (u, s) in &slots {
                b += &format!("    mx = maxn4(mx, x{u}_{s});\n");
            }
            b += &format!("    let m = red_max(hmax(mx){ids});\n    var sm = vec4<f32>(0.0);\n");
            for (u, s) in &slots {
                b += &format!("    sm += select(vec4<f32>(0.0), exp(x{u}_{s} - m), k{u}_{s});\n");
            }
            b += &format!("    let sum = red_sum(hsum(sm){ids});\n    let ls = log(sum);\n");
            for u in 0..self.np {
                b += &format!("    if (q{u} < np) {{\n");
                let ys: Vec<String> = (0..nv).map(|s| format!("y{s}")).collect();
                for s in 0..nv {
                    b += &format!(
                        "        var y{s} = x{u}_{s} - m - ls;\n        if (!log_out) {{ y{s} = exp(x{u}_{s} - m) / sum; }}\n"
                    );
                }
                b += &self.store(&format!("q{u}"), &ys, "        ");
                b += "    }\n";
            }
        } else {
            let (pre, ex) = self.load(0, "q");
            let xs: Vec<String> = (0..nv).map(|s| format!("x{s}")).collect();
            let mut ld = format!("        {pre}\n");
            for (s, e) in ex.iter().enumerate() {
                ld += &format!("        let x{s} = select(vec4<f32>(-inf_f32()), {e}, lanes(q, {s}u, k));\n");
            }
            let top = xs.iter().skip(1).fold(xs[0].clone(), |a, x| format!("maxn4({a}, {x})"));
            b += &format!(
                "    var m = -inf_f32();\n    var sum = 0.0;\n    for (var q = lid; q < np; q += {w}u) {{\n{ld}\
                 \x20       let mn = maxn(m, hmax({top}));\n        var t = vec4<f32>(0.0);\n"
            );
            for x in &xs {
                b += &format!("        t += select(vec4<f32>(0.0), exp({x} - mn), {x} != vec4<f32>(-inf_f32()));\n");
            }
            b += &format!(
                "        sum = sum * scl(m, mn) + hsum(t);\n        m = mn;\n    }}\n    let ms = red_ms(vec2<f32>(m, sum){ids});\n\
                 \x20   let ls = log(ms.y);\n    for (var q = lid; q < np; q += {w}u) {{\n{ld}"
            );
            let ys: Vec<String> = (0..nv).map(|s| format!("y{s}")).collect();
            for s in 0..nv {
                b += &format!(
                    "        var y{s} = x{s} - ms.x - ls;\n        if (!log_out) {{ y{s} = exp(x{s} - ms.x) / ms.y; }}\n"
                );
            }
            b += &self.store("q", &ys, "        ");
            b += "    }\n";
        }
        b
    }

    /// Statements computing `y{s}` from `x{s}` (vec4 values of pack `q`), `mean` and `r`.
    fn norm_out(&self, x: &dyn Fn(usize) -> String, q: &str) -> String {
        let (pw_, wx) = self.load(1, q);
        let (pb, bx) = self.load(2, q);
        let mut s = format!("        {pw_}\n");
        for (i, e) in wx.iter().enumerate() {
            s += &format!("        var y{i} = ({} - mean) * r * {e};\n", x(i));
        }
        s += &format!("        if (p.has_bias == 1u) {{\n            {pb}\n");
        for (i, e) in bx.iter().enumerate() {
            s += &format!("            y{i} += {e};\n");
        }
        s + "        }\n"
    }

    fn norm_body(&self) -> String {
        let (nv, w, ids) = (self.nv(), self.w, self.ids());
        let mut b = self.bases();
        let ys: Vec<String> = (0..nv).map(|s| format!("y{s}")).collect();
        // The row's first element, the shift of the sums below (LayerNorm).
        let (pre0, ex0) = self.load(0, "0u");
        let shift = format!(
            "    var shift = 0.0;\n    if (!rms && k > 0u) {{\n        {pre0}\n        shift = ({}).x;\n    }}\n",
            ex0[0]
        );
        if self.np > 0 {
            let slots = self.slots();
            b += &self.load_row("vec4<f32>(0.0)");
            b += &shift;
            b += "    var mean = 0.0;\n    if (!rms) {\n        var sv = vec4<f32>(0.0);\n";
            for (u, s) in &slots {
                b += &format!("        sv += select(vec4<f32>(0.0), x{u}_{s} - shift, k{u}_{s});\n");
            }
            // The mean of the values shifted by the row's first one, corrected by the mean of the
            // residuals: a row of equal values gets its value exactly, whatever the division's
            // rounding (NVIDIA's left the plain sum / k of equal 1e10s an ulp off, and x - mean
            // 1024 instead of 0), and a rounded sum leaves other rows closer.
            b += &format!("        mean = shift + red_sum(hsum(sv){ids}) / kf;\n        var sr = vec4<f32>(0.0);\n");
            for (u, s) in &slots {
                b += &format!("        sr += select(vec4<f32>(0.0), x{u}_{s} - mean, k{u}_{s});\n");
            }
            b += &format!("        mean += red_sum(hsum(sr){ids}) / kf;\n    }}\n    var ss = vec4<f32>(0.0);\n");
            for (u, s) in &slots {
                b += &format!(
                    "    let d{u}_{s} = select(vec4<f32>(0.0), x{u}_{s} - mean, k{u}_{s});\n    ss += d{u}_{s} * d{u}_{s};\n"
                );
            }
            b += &format!("    let r = 1.0 / sqrt(red_sum(hsum(ss){ids}) / kf + eps);\n");
            for u in 0..self.np {
                b += &format!("    if (q{u} < np) {{\n");
                b += &self.norm_out(&|s| format!("x{u}_{s}"), &format!("q{u}"));
                b += &self.store(&format!("q{u}"), &ys, "        ");
                b += "    }\n";
            }
        } else {
            let (pre, ex) = self.load(0, "q");
            let mut ld = format!("        {pre}\n");
            for (s, e) in ex.iter().enumerate() {
                ld += &format!(
                    "        let k{s} = lanes(q, {s}u, k);\n        let x{s} = select(vec4<f32>(0.0), {e}, k{s});\n"
                );
            }
            b += &shift;
            b += &format!(
                "    var mean = 0.0;\n    var r = 0.0;\n    if (rms) {{\n        var ss = vec4<f32>(0.0);\n\
                 \x20       for (var q = lid; q < np; q += {w}u) {{\n{}",
                ld.replace("\n        ", "\n            ").replacen("        ", "            ", 1)
            );
            for s in 0..nv {
                b += &format!("            ss += x{s} * x{s};\n");
            }
            b += &format!(
                "        }}\n        r = 1.0 / sqrt(red_sum(hsum(ss){ids}) / kf + eps);\n    }} else {{\n\
                 \x20       var st = vec3<f32>(0.0);\n        for (var q = lid; q < np; q += {w}u) {{\n{}\
                 \x20           var cn = 0.0;\n            var cs = 0.0;\n",
                ld.replace("\n        ", "\n            ").replacen("        ", "            ", 1)
            );
            for s in 0..nv {
                b += &format!(
                    "            cn += hsum(select(vec4<f32>(0.0), vec4<f32>(1.0), k{s}));\n            cs += hsum(select(vec4<f32>(0.0), x{s} - shift, k{s}));\n"
                );
            }
            // The chunk mean, corrected by its residuals (see the register path above).
            b += "            var cm = shift + cs / cn;\n            var cr = 0.0;\n";
            for s in 0..nv {
                b += &format!("            cr += hsum(select(vec4<f32>(0.0), x{s} - cm, k{s}));\n");
            }
            b += "            cm += cr / cn;\n            var c2 = 0.0;\n";
            for s in 0..nv {
                b += &format!(
                    "            let d{s} = select(vec4<f32>(0.0), x{s} - cm, k{s});\n            c2 += hsum(d{s} * d{s});\n"
                );
            }
            b += &format!(
                "            st = comb_w(st, vec3<f32>(cn, cm, c2));\n        }}\n        let tot = red_w(st{ids});\n\
                 \x20       mean = tot.y;\n        r = 1.0 / sqrt(tot.z / kf + eps);\n    }}\n\
                 \x20   for (var q = lid; q < np; q += {w}u) {{\n{ld}"
            );
            b += &self.norm_out(&|s| format!("x{s}"), "q");
            b += &self.store("q", &ys, "        ");
            b += "    }\n";
        }
        b
    }

    pub(crate) fn source(&self) -> String {
        let (src, dst) = if self.mode == Mode::Pack { ("vec4<u32>", "vec4<u32>") } else { ("u32", "u32") };
        let sg_args = if self.sg {
            ",\n        @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_size) sgs: u32,\n        @builtin(subgroup_id) sid: u32"
        } else {
            ""
        };
        let (template, body, params) = match self.fam {
            Family::Softmax => (SOFTMAX, self.softmax_body(), SoftmaxParams::wgsl()),
            Family::Norm => (NORM, self.norm_body(), NormParams::wgsl()),
        };
        render(
            template,
            &[
                ("PARAMS", &params),
                ("W", &self.w.to_string()),
                ("SRC", src),
                ("DST", dst),
                ("PRELUDE", PRELUDE),
                ("HELPERS", &self.helpers()),
                ("SG_ARGS", sg_args),
                ("BODY", &body),
            ],
        )
    }
}

/// Every (name, WGSL) variant of `fam` over `dt`, for the catalog.
pub(crate) fn catalog(fam: Family, dt: DType, push: &mut dyn FnMut(String, String)) {
    for mode in [Mode::Pack, Mode::Word, Mode::Elem] {
        for np in [0, 1, 2, 4, 8] {
            for w in [64, 128, 256, 512, 1024] {
                for sg in [false, true] {
                    let v = Variant { fam, dt, mode, np, w, sg };
                    // 4-byte rows always read at least whole words.
                    let reachable = mode != Mode::Elem || wgsl::per_word(dt) > 1;
                    if reachable && np * v.nv() <= MAX_SLOTS {
                        push(v.key(), v.source());
                    }
                }
            }
        }
    }
}

/// Largest power of two <= `n` (n >= 1).
fn pow2_floor(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// The variant for rows of `k` elements of `dt` starting at element `off` of a buffer of
/// `buf_bytes` bytes.
fn plan(ctx: &GpuContext, fam: Family, dt: DType, off: usize, k: usize, buf_bytes: u64) -> Variant {
    let pw = wgsl::per_word(dt);
    let mode = if off.is_multiple_of(4 * pw) && k.is_multiple_of(4 * pw) && buf_bytes.is_multiple_of(16) {
        Mode::Pack
    } else if off.is_multiple_of(pw) && k.is_multiple_of(pw) {
        Mode::Word
    } else {
        Mode::Elem
    };
    let lim = &ctx.limits;
    // Up to 32 bytes of workgroup memory per invocation (the reducers' buffers). Metal may refuse
    // 1024-invocation threadgroups for register-heavy pipelines: 512 there.
    let cap = if ctx.summary.backend == "Metal" { 512 } else { 1024 };
    let wmax = pow2_floor(
        cap.min(lim.max_compute_invocations_per_workgroup as usize)
            .min(lim.max_compute_workgroup_size_x as usize)
            .min(lim.max_compute_workgroup_storage_size as usize / 32),
    );
    let sg_max = ctx.summary.subgroup_size.1.max(1) as usize;
    let wmin = sg_max.next_power_of_two().max(64).min(wmax);
    let mut v = Variant { fam, dt, mode, np: 0, w: wmax, sg: false };
    let packs = k.div_ceil(v.pe());
    let w = packs.div_ceil(4).next_power_of_two().clamp(wmin, wmax);
    let np = packs.div_ceil(w).next_power_of_two();
    if np * v.nv() <= MAX_SLOTS {
        v.np = np;
        v.w = w;
    }
    v.sg = use_subgroups(ctx) && v.w >= sg_max;
    v
}

/// `s` viewed by `l` as contiguous rows: (copy if one was needed, offset, rows, k).
pub(crate) fn rows(s: &GpuStorage, l: &Layout) -> Result<(Option<GpuStorage>, usize, usize, usize)> {
    let k = *l.dims().last().unwrap_or(&1);
    let rows = l.elem_count().checked_div(k).unwrap_or(0);
    if l.is_contiguous() {
        Ok((None, l.offset(), rows, k))
    } else {
        Ok((Some(s.copy_contiguous(l)?), 0, rows, k))
    }
}

/// An offset in the units the variant's mode reads (packs, words or elements).
fn units(v: &Variant, off: usize) -> usize {
    match v.mode {
        Mode::Pack => off / v.pe(),
        Mode::Word => off / wgsl::per_word(v.dt),
        Mode::Elem => off,
    }
}

params! {
    /// Softmax over rows: rows, k, the input offset (in packs, words or elements by mode), 1 for
    /// log-softmax.
    struct SoftmaxParams { rows: u32, k: u32, off: u32, log: u32 }
}

params! {
    /// RMSNorm (`rms` 1) or LayerNorm over rows: rows, k, the input offset (as for softmax), eps,
    /// the weight's and the bias's offset and stride, 1 if there is a bias.
    struct NormParams {
        rows: u32,
        k: u32,
        off: u32,
        rms: u32,
        eps: f32,
        w_off: u32,
        w_stride: u32,
        b_off: u32,
        b_stride: u32,
        has_bias: u32,
    }
}

fn launch(ctx: &GpuContext, v: Variant, bufs: &[&wgpu::Buffer], params: &[u32], rows: usize) -> Result<()> {
    let kernel = ctx.pipelines.get(ctx, &v.key(), bufs.len() - 1, || v.source())?;
    let grid = wgsl::grid(rows, 1, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, bufs, params, grid)
}

/// The output of a variant: the input dtype, or f32 (then cast) in the element mode.
fn output(ctx: &std::sync::Arc<GpuContext>, v: &Variant, n: usize) -> Result<GpuStorage> {
    GpuStorage::alloc(ctx, if v.mode == Mode::Elem { DType::F32 } else { v.dt }, n)
}

pub(crate) fn softmax_last(s: &GpuStorage, l: &Layout, log: bool) -> Result<GpuStorage> {
    let (copy, off, rows, k) = rows(s, l)?;
    if rows * k == 0 {
        return GpuStorage::alloc(&s.ctx, s.dtype, 0);
    }
    let src = copy.as_ref().unwrap_or(s);
    let v = plan(&s.ctx, Family::Softmax, s.dtype, off, k, src.buffer.size());
    let out = output(&s.ctx, &v, rows * k)?;
    let params = SoftmaxParams { rows: rows as u32, k: k as u32, off: units(&v, off) as u32, log: log as u32 };
    launch(&s.ctx, v, &[out.buffer.raw(), src.buffer.raw()], &params.words(), rows)?;
    out.finish(s.dtype)
}

pub(crate) fn norm(
    s: &GpuStorage,
    l: &Layout,
    w: &GpuStorage,
    wl: &Layout,
    b: Option<(&GpuStorage, &Layout)>,
    eps: f64,
    rms: bool,
) -> Result<GpuStorage> {
    let (copy, off, rows, k) = rows(s, l)?;
    if rows * k == 0 {
        return GpuStorage::alloc(&s.ctx, s.dtype, 0);
    }
    let src = copy.as_ref().unwrap_or(s);
    let v = plan(&s.ctx, Family::Norm, s.dtype, off, k, src.buffer.size());
    // Weight and bias: offset and stride in the mode's units, copied where packs or words of them
    // would not line up.
    let param = |t: &GpuStorage, tl: &Layout| -> Result<(Option<GpuStorage>, usize, usize)> {
        let stride = tl.strides().first().copied().unwrap_or(0);
        let fits = tl.is_contiguous()
            && match v.mode {
                Mode::Pack => tl.offset().is_multiple_of(v.pe()) && t.buffer.size().is_multiple_of(16),
                Mode::Word => tl.offset().is_multiple_of(wgsl::per_word(v.dt)),
                Mode::Elem => true,
            };
        if v.mode == Mode::Elem {
            Ok((None, tl.offset(), stride))
        } else if fits {
            Ok((None, units(&v, tl.offset()), 1))
        } else {
            Ok((Some(t.copy_contiguous(tl)?), 0, 1))
        }
    };
    let (wc, woff, wst) = param(w, wl)?;
    let (bc, boff, bst) = match b {
        Some((bs, bl)) => param(bs, bl)?,
        None => (None, 0, 0),
    };
    let ws = wc.as_ref().unwrap_or(w);
    let bs = bc.as_ref().or(b.map(|(bs, _)| bs)).unwrap_or(ws);
    let out = output(&s.ctx, &v, rows * k)?;
    let params = NormParams {
        rows: rows as u32,
        k: k as u32,
        off: units(&v, off) as u32,
        rms: rms as u32,
        eps: eps as f32,
        w_off: woff as u32,
        w_stride: wst as u32,
        b_off: boff as u32,
        b_stride: bst as u32,
        has_bias: b.is_some() as u32,
    };
    let bufs = [out.buffer.raw(), src.buffer.raw(), ws.buffer.raw(), bs.buffer.raw()];
    launch(&s.ctx, v, &bufs, &params.words(), rows)?;
    out.finish(s.dtype)
}
