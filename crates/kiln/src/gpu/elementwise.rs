//! Launching the elementwise kernels of `elementwise.wgsl`.

use super::wgsl::{self, ct, loader, store_word, PRELUDE};
use super::GpuStorage;
use crate::layout::collapse;
use crate::op::{BinaryOp, CmpOp, UnaryOp};
use crate::{DType, Error, Layout, Result};

const TEMPLATE: &str = include_str!("elementwise.wgsl");
const MAX_RANK: usize = 8;

/// How an input is indexed.
fn variant(dims: &[usize], strides: &[usize]) -> char {
    if strides.iter().all(|&s| s == 0) {
        's'
    } else if dims.len() == 1 && strides[0] == 1 {
        'c'
    } else {
        'g'
    }
}

fn indexer(i: usize, v: char) -> String {
    match v {
        'c' => format!("fn at{i}(e: u32) -> u32 {{ return p[{}u] + e; }}\n", 34 + i),
        's' => format!("fn at{i}(e: u32) -> u32 {{ return p[{}u]; }}\n", 34 + i),
        _ => format!(
            "fn at{i}(e: u32) -> u32 {{\n    var rem = e;\n    var off = p[{o}u];\n    for (var d = p[1]; d > 0u; d--) {{\n        let k = d - 1u;\n        off += (rem % p[2u + k]) * p[{s}u + k];\n        rem /= p[2u + k];\n    }}\n    return off;\n}}\n",
            o = 34 + i,
            s = 10 + 8 * i
        ),
    }
}

/// An elementwise kernel: `body` computes `value(e)` from `ld{i}(at{i}(e))`.
pub(crate) struct Elementwise<'a> {
    pub name: String,
    pub inputs: Vec<(&'a GpuStorage, &'a Layout)>,
    pub out: DType,
    pub body: String,
    pub funcs: &'static str,
    pub consts: Vec<u32>,
    /// `Some(n)`: the output has `n` elements and inputs are only offset (`at{i}(e)` returns the
    /// input's offset; the body indexes itself). `None`: inputs are views of the output's shape.
    pub raw: Option<usize>,
}

impl Elementwise<'_> {
    pub(crate) fn run(self) -> Result<GpuStorage> {
        let first = self.inputs[0].0;
        let ctx = first.ctx.clone();
        let (n, dims, cstrides) = match self.raw {
            Some(n) => (n, vec![n], vec![vec![0]; self.inputs.len()]),
            None => {
                let strides: Vec<&[usize]> = self.inputs.iter().map(|(_, l)| l.strides()).collect();
                let (dims, cstrides) = collapse(self.inputs[0].1.dims(), &strides);
                (self.inputs[0].1.elem_count(), dims, cstrides)
            }
        };
        if dims.len() > MAX_RANK {
            return Err(Error::Gpu {
                op: "elementwise",
                msg: format!("views of rank {} after merging dims are not supported (max {MAX_RANK})", dims.len()),
            });
        }
        if n > u32::MAX as usize {
            return Err(Error::Gpu { op: "elementwise", msg: format!("{n} elements exceed the 32-bit index range") });
        }
        let out = self.out;
        let inputs = &self.inputs;
        let dtypes: Vec<DType> = inputs.iter().map(|(s, _)| s.dtype).collect();
        let dst = GpuStorage::alloc(&ctx, out, n)?;
        let vec_plan = match self.raw {
            None if dst.buffer.raw().size().is_multiple_of(16) && super::elementwise_vec::enabled() => {
                let described: Vec<(DType, usize, &[usize], u64)> = inputs
                    .iter()
                    .zip(&cstrides)
                    .map(|((s, l), st)| (s.dtype, l.offset(), st.as_slice(), s.buffer.raw().size()))
                    .collect();
                super::elementwise_vec::plan(out, &dims, &described)
            }
            _ => None,
        };
        let (kernel, threads) = match &vec_plan {
            Some(variants) => {
                let key = format!("ewv:{}:{variants}:{}->{out}", self.name, dtype_list(&dtypes));
                let src = || super::elementwise_vec::source(variants, &dtypes, out, &self.body, self.funcs);
                (ctx.pipelines.get(&ctx, &key, inputs.len(), src)?, n.div_ceil(super::elementwise_vec::lanes(out)))
            }
            None => {
                let variants: String = cstrides.iter().map(|s| variant(&dims, s)).collect();
                let key = format!("ew:{}:{variants}:{}->{out}", self.name, dtype_list(&dtypes));
                let src = || source(&variants, &dtypes, out, &self.body, self.funcs);
                (ctx.pipelines.get(&ctx, &key, inputs.len(), src)?, n.div_ceil(wgsl::per_word(out)))
            }
        };
        let mut params = vec![0u32; 37];
        params[0] = if vec_plan.is_some() { threads as u32 } else { n as u32 };
        params[1] = dims.len() as u32;
        for (k, &d) in dims.iter().enumerate() {
            params[2 + k] = d as u32;
        }
        for (i, s) in cstrides.iter().enumerate() {
            for (k, &st) in s.iter().enumerate() {
                params[10 + 8 * i + k] = st as u32;
            }
            params[34 + i] = inputs[i].1.offset() as u32;
        }
        params.extend_from_slice(&self.consts);
        let bufs: Vec<&wgpu::Buffer> =
            std::iter::once(dst.buffer.raw()).chain(inputs.iter().map(|(s, _)| s.buffer.raw())).collect();
        let groups = wgsl::grid(threads, 256, ctx.limits.max_compute_workgroups_per_dimension);
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params, groups)?;
        Ok(dst)
    }
}

/// `f32,f16` for a list of dtypes (part of a kernel key).
fn dtype_list(dtypes: &[DType]) -> String {
    dtypes.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(",")
}

/// The WGSL of an elementwise kernel: input `i` has dtype `inputs[i]` and indexing variant
/// `variants[i]` (`c` contiguous, `s` scalar/raw offset, `g` general strided).
pub(crate) fn source(variants: &str, inputs: &[DType], out: DType, body: &str, funcs: &str) -> String {
    // An i64 output is written from `wide(e)`: both words of an i64 input when the op only moves
    // or converts data, else the i32 `value(e)` sign-extended.
    let wide = match (out, inputs) {
        (DType::I64, [DType::I64]) if body == COPY_BODY || body == cast_body(DType::I64, DType::I64) => {
            "fn wide(e: u32) -> vec2<u32> { let o = at0(e); return vec2<u32>(in0[2u * o], in0[2u * o + 1u]); }".into()
        }
        (DType::I64, [DType::Bool, DType::I64, DType::I64]) if body == WHERE_BODY => {
            "fn wide(e: u32) -> vec2<u32> { let o1 = at1(e); let o2 = at2(e); \
             return select(vec2<u32>(in2[2u * o2], in2[2u * o2 + 1u]), vec2<u32>(in1[2u * o1], in1[2u * o1 + 1u]), \
             ld0(at0(e)) != 0u); }"
                .into()
        }
        (DType::I64, [from]) if body == cast_body(*from, DType::I64) => wide_cast(*from),
        (DType::I64, _) => wgsl::WIDE_SIGN_EXTEND.to_string(),
        _ => String::new(),
    };
    let decls: String = (0..inputs.len())
        .map(|i| format!("@group(0) @binding({}) var<storage, read> in{i}: array<u32>;\n", i + 1))
        .collect();
    let loaders: String =
        inputs.iter().enumerate().map(|(i, &dt)| loader(&format!("ld{i}"), &format!("in{i}"), dt)).collect();
    let indexers: String = variants.chars().enumerate().map(|(i, v)| indexer(i, v)).collect();
    let (store, _) = store_word(out, 0);
    super::kernels::render(
        TEMPLATE,
        &[
            ("INPUTS", &decls),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loaders),
            ("INDEXERS", &indexers),
            ("FUNCS", funcs),
            ("OUT_CT", ct(out)),
            ("BODY", body),
            ("WIDE", &wide),
            ("STORE", &store),
        ],
    )
}

pub(crate) fn unary_body(op: UnaryOp, dt: DType) -> String {
    format!("let x = ld0(at0(e)); return {};", unary_expr(op, ct(dt)))
}

pub(crate) fn binary_body(op: BinaryOp, dt: DType) -> String {
    format!("let a = ld0(at0(e)); let b = ld1(at1(e)); return {};", binary_expr(op, ct(dt)))
}

pub(crate) fn cmp_body(op: CmpOp) -> String {
    format!("let a = ld0(at0(e)); let b = ld1(at1(e)); return select(0u, 1u, {});", cmp_expr(op))
}

pub(crate) const WHERE_BODY: &str = "return select(ld2(at2(e)), ld1(at1(e)), ld0(at0(e)) != 0u);";
pub(crate) const COPY_BODY: &str = "return ld0(at0(e));";
pub(crate) const SILU_MUL_BODY: &str = "let a = ld0(at0(e)); let b = ld1(at1(e)); return silu_(a) * b;";

pub(crate) fn cast_body(from: DType, to: DType) -> String {
    match (from, to) {
        // Read both words of an i64 so values beyond 32 bits convert exactly.
        (DType::I64, t) if t.is_float() => {
            "let o = at0(e); let lo = in0[2u * o]; let hi = bitcast<i32>(in0[2u * o + 1u]); \
             if (hi == select(0, -1, lo >= 0x80000000u)) { return f32(bitcast<i32>(lo)); } \
             return f32(hi) * 4294967296.0 + f32(lo);"
                .into()
        }
        (DType::I64, DType::Bool) => {
            "let o = at0(e); return select(0u, 1u, (in0[2u * o] | in0[2u * o + 1u]) != 0u);".into()
        }
        _ => format!("let x = ld0(at0(e)); return {};", cast_expr(from, to)),
    }
}

/// `wide(e)` of a cast into i64 from `from`, with the CPU's saturating semantics for floats.
fn wide_cast(from: DType) -> String {
    match ct(from) {
        "f32" => "fn wide(e: u32) -> vec2<u32> {
    let x = ld0(at0(e));
    if (is_nan(x)) { return vec2<u32>(0u, 0u); }
    if (x >= 9223372036854775808.0) { return vec2<u32>(0xffffffffu, 0x7fffffffu); }
    if (x <= -9223372036854775808.0) { return vec2<u32>(0u, 0x80000000u); }
    let t = trunc(x);
    if (abs(t) < 2147483648.0) { let v = i32(t); return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0)); }
    let hi = floor(t / 4294967296.0);
    return vec2<u32>(u32(t - hi * 4294967296.0), bitcast<u32>(i32(hi)));
}"
        .into(),
        "u32" => "fn wide(e: u32) -> vec2<u32> { return vec2<u32>(ld0(at0(e)), 0u); }".into(),
        _ => wgsl::WIDE_SIGN_EXTEND.to_string(),
    }
}

/// Scalar functions used by op expressions.
pub(crate) const FUNCS: &str = r#"
// tanh, silu, gelu and erfc are the CPU's formulas (cpu/math.rs), so both backends round alike: tanh as
// 1 - 2 / (e^2|x| + 1) (not (1 - t) / (1 + t), which reaches +-1 an ulp early and turns a float-to-int
// cast of tanh(9) into 1 where the CPU gives 0); gelu as x * sigmoid(2u) and 0.5 x erfc(-x / sqrt 2),
// which keep the tiny negative tail that 1 + tanh / 1 + erf cancel to 0; and f(-inf) = -0 for silu and
// both gelus (the limit, where the plain formula gives -inf / inf = NaN).
fn is_neg_inf(x: f32) -> bool { return bitcast<u32>(x) == 0xff800000u; }
fn tanh_(x: f32) -> f32 {
    let a = abs(x);
    let z = x * x;
    let small = ((((-5.7049887e-3 * z + 2.0639089e-2) * z - 5.3739716e-2) * z + 1.3331442e-1) * z - 3.3333282e-1) * z * x + x;
    let large = 1.0 - 2.0 / (exp(2.0 * a) + 1.0);
    if (is_nan(x)) { return x; }
    // small with the sign of x (copysign): for x = -0 the polynomial sum is +0, tanh(-0) is -0.
    let small_s = bitcast<f32>((bitcast<u32>(small) & 0x7fffffffu) | (bitcast<u32>(x) & 0x80000000u));
    return select(select(-large, large, x >= 0.0), small_s, a < 0.625);
}
fn erfc_abs_(a: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.5 * a);
    let p = -1.2655122 + t * (1.0000237 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807
        + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))));
    return t * exp(-a * a + p);
}
fn erf_small_(x: f32) -> f32 {
    let z = x * x;
    let p = ((((-1.0 / 1320.0 * z + 1.0 / 216.0) * z - 1.0 / 42.0) * z + 0.1) * z - 1.0 / 3.0) * z + 1.0;
    return x * p * 1.1283791670955126;
}
fn erfc_(x: f32) -> f32 {
    let e = erfc_abs_(abs(x));
    return select(select(e, 2.0 - e, x < 0.0), 1.0 - erf_small_(x), abs(x) < 0.5);
}
// sin and cos after a Cody-Waite reduction by 2 pi (6.28125 + 1.9353072e-3, the first part exact in a
// product with k < 2^16): Vulkan and Metal promise sin/cos accuracy only inside [-pi, pi], and NVIDIA's
// sin(1e5) is 0.0429 where the CPU's is 0.0357. Accurate to ~1e-6 for |x| <= 1e5; +-inf and NaN give NaN.
fn reduce_2pi_(x: f32) -> f32 { let k = round(x * 0.15915494309189535); return (x - k * 6.28125) - k * 1.9353071795864769e-3; }
// sin(+-0) is x itself (the reduction turns -0 into +0).
fn sin_(x: f32) -> f32 { return select(sin(reduce_2pi_(x)), x, x == 0.0); }
fn cos_(x: f32) -> f32 { return cos(reduce_2pi_(x)); }
// relu on the bits: NVIDIA's compiler turns select(x, 0, x < 0) into max(x, 0), which drops NaN
// (relu(NaN) gave 0 on the H100, NaN on the CPU). Negative means sign bit set, not -0, not NaN.
fn relu_(x: f32) -> f32 { let b = bitcast<u32>(x); return select(x, 0.0, b > 0x80000000u && b <= 0xff800000u); }
fn silu_(x: f32) -> f32 { return select(x / (1.0 + exp(-x)), -0.0, is_neg_inf(x)); }
fn gelu_tanh_(x: f32) -> f32 {
    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return select(x / (1.0 + exp(-2.0 * u)), -0.0, is_neg_inf(x));
}
fn gelu_erf_(x: f32) -> f32 { return select(0.5 * x * erfc_(-x * 0.7071067811865476), -0.0, is_neg_inf(x)); }
fn powf_(a: f32, b: f32) -> f32 {
    if (b == 0.0 || a == 1.0) { return 1.0; }
    if (is_nan(a) || is_nan(b)) { return nan_f32(); }
    if (a == 0.0) {
        // C's pow: +-0 to a positive power is 0, to a negative one inf, the sign kept for odd integer
        // powers (log2(0) is not -inf on every driver: lavapipe gave pow(0, -1) = 0).
        let mag = select(0.0, inf_f32(), b < 0.0);
        let odd = floor(b) == b && floor(b * 0.5) != b * 0.5;
        return select(mag, -mag, odd && (bitcast<u32>(a) >> 31u) == 1u);
    }
    let r = exp2(b * log2(abs(a)));
    if (a < 0.0) {
        if (floor(b) != b) { return nan_f32(); }
        if (floor(b * 0.5) != b * 0.5) { return -r; }
    }
    return r;
}
fn powi_(a: i32, b: i32) -> i32 {
    if (b < 0) { if (a == 1) { return 1; } if (a == -1) { return select(1, -1, (b & 1) == 1); } return 0; }
    var r = 1; var base = a; var k = b;
    while (k > 0) { if ((k & 1) == 1) { r *= base; } base *= base; k = k >> 1u; }
    return r;
}
fn powu_(a: u32, b: u32) -> u32 {
    var r = 1u; var base = a; var k = b;
    while (k > 0u) { if ((k & 1u) == 1u) { r *= base; } base *= base; k = k >> 1u; }
    return r;
}
fn maxf_(a: f32, b: f32) -> f32 { if (is_nan(a)) { return a; } if (is_nan(b)) { return b; } return max(a, b); }
fn minf_(a: f32, b: f32) -> f32 { if (is_nan(a)) { return a; } if (is_nan(b)) { return b; } return min(a, b); }
fn log_(x: f32) -> f32 { if (x == 0.0) { return -inf_f32(); } if (x < 0.0) { return nan_f32(); } return log(x); }
fn sqrt_(x: f32) -> f32 { if (x < 0.0) { return nan_f32(); } return sqrt(x); }
"#;

/// The WGSL expression of a unary op on `x` of compute type `t`; `c0`, `c1` are the op constants.
pub(crate) fn unary_expr(op: UnaryOp, t: &str) -> String {
    let f = t == "f32";
    let u = t == "u32";
    match op {
        UnaryOp::Neg => if u { "0u - x" } else { "-x" }.into(),
        UnaryOp::Abs => if u { "x" } else { "abs(x)" }.into(),
        UnaryOp::Sign => {
            if f {
                // sign(+-0) is +-0 (x itself), as on the CPU; WGSL's sign(-0) may be +0.
                "select(sign(x), x, is_nan(x) || x == 0.0)"
            } else if u {
                "select(0u, 1u, x > 0u)"
            } else {
                "sign(x)"
            }
        }
        .into(),
        UnaryOp::Sqrt => "sqrt_(x)".into(),
        UnaryOp::Rsqrt => "1.0 / sqrt_(x)".into(),
        UnaryOp::Exp => "exp(x)".into(),
        UnaryOp::Log => "log_(x)".into(),
        UnaryOp::Sin => "sin_(x)".into(),
        UnaryOp::Cos => "cos_(x)".into(),
        UnaryOp::Tanh => "tanh_(x)".into(),
        UnaryOp::Square => "x * x".into(),
        UnaryOp::Recip => "1.0 / x".into(),
        UnaryOp::Floor => if f { "floor(x)" } else { "x" }.into(),
        UnaryOp::Ceil => if f { "ceil(x)" } else { "x" }.into(),
        UnaryOp::Round => if f { "round(x)" } else { "x" }.into(),
        UnaryOp::Relu => {
            if f {
                "relu_(x)"
            } else if u {
                "x"
            } else {
                "max(x, 0)"
            }
        }
        .into(),
        UnaryOp::Sigmoid => "1.0 / (1.0 + exp(-x))".into(),
        UnaryOp::Silu => "silu_(x)".into(),
        UnaryOp::GeluTanh => "gelu_tanh_(x)".into(),
        UnaryOp::GeluErf => "gelu_erf_(x)".into(),
        UnaryOp::Not => "select(0u, 1u, x == 0u)".into(),
        UnaryOp::Clamp { .. } => {
            let lo = format!("bitcast<{t}>(p[37])");
            let hi = format!("bitcast<{t}>(p[38])");
            if f {
                format!("select(min(max(x, {lo}), {hi}), x, is_nan(x))")
            } else {
                format!("min(max(x, {lo}), {hi})")
            }
        }
    }
}

/// The WGSL expression of a binary op on `a`, `b` of compute type `t`.
pub(crate) fn binary_expr(op: BinaryOp, t: &str) -> String {
    match op {
        BinaryOp::Add => "a + b".into(),
        BinaryOp::Sub => "a - b".into(),
        BinaryOp::Mul => "a * b".into(),
        BinaryOp::Div => "a / b".into(),
        BinaryOp::Pow => match t {
            "f32" => "powf_(a, b)",
            "i32" => "powi_(a, b)",
            _ => "powu_(a, b)",
        }
        .into(),
        BinaryOp::Maximum => if t == "f32" { "maxf_(a, b)" } else { "max(a, b)" }.into(),
        BinaryOp::Minimum => if t == "f32" { "minf_(a, b)" } else { "min(a, b)" }.into(),
        BinaryOp::And => "a & b".into(),
        BinaryOp::Or => "a | b".into(),
    }
}

pub(crate) fn cmp_expr(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "a == b",
        // Written as !(a == b): NaN is unequal to everything on every backend, whatever ordered or
        // unordered comparison a shader compiler picks for `!=`.
        CmpOp::Ne => "!(a == b)",
        CmpOp::Lt => "a < b",
        CmpOp::Le => "a <= b",
        CmpOp::Gt => "a > b",
        CmpOp::Ge => "a >= b",
    }
}

/// The WGSL expression converting `x` (compute type of `from`) to the compute type of `to`, with the
/// CPU's semantics: floats to integers truncate toward zero and saturate, NaN gives 0; integers to
/// narrower integers wrap; anything nonzero is `true`.
pub(crate) fn cast_expr(from: DType, to: DType) -> String {
    let (fi, ti) = (ct(from), ct(to));
    match (fi, to) {
        (_, DType::Bool) => match fi {
            "f32" => "select(0u, 1u, x != 0.0 || is_nan(x))".into(),
            "i32" => "select(0u, 1u, x != 0)".into(),
            _ => "select(0u, 1u, x != 0u)".into(),
        },
        ("f32", DType::U8) => "select(u32(clamp(x, 0.0, 255.0)), 0u, is_nan(x))".into(),
        ("f32", DType::U32) => {
            "select(select(u32(clamp(x, 0.0, 4294967040.0)), 0xffffffffu, x >= 4294967296.0), 0u, is_nan(x))".into()
        }
        ("f32", DType::I32 | DType::I64) => {
            "select(select(i32(clamp(x, -2147483648.0, 2147483520.0)), 2147483647, x >= 2147483648.0), 0, is_nan(x))"
                .into()
        }
        (_, DType::U8) => format!("{}(x) & 0xffu", if fi == "i32" { "bitcast<u32>" } else { "" }),
        _ if fi == ti => "x".into(),
        ("i32", _) if ti == "u32" => "bitcast<u32>(x)".into(),
        ("u32", _) if ti == "i32" => "bitcast<i32>(x)".into(),
        (_, _) => format!("{ti}(x)"),
    }
}
