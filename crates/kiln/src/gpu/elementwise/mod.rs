//! The elementwise ops: the bodies and WGSL expressions of unary, binary and comparison ops (and
//! `silu_mul`), launched through the shared pointwise launcher; RoPE in `rotary.rs`.

pub(crate) mod rotary;
/// The old path of `rotary` (the face calls `rope::rope`).
pub(crate) use rotary as rope;

use crate::gpu::runtime::params::{params, Block};
use crate::gpu::runtime::wgsl::{self, ct};
use crate::op::{BinaryOp, CmpOp, UnaryOp};
use crate::DType;

params! {
    /// A clamp's bounds, as bits of the compute type (the op constants `p.op` of its kernel).
    pub(crate) struct ClampParams { lo: u32, hi: u32 }
}

/// The bounds of a clamp of `dt` values as bits of its compute type: integer bounds round inward,
/// as on the CPU (clamp of u8 to [0.5, 2.5] is [1, 2]).
pub(crate) fn clamp_bits(min: f64, max: f64, dt: DType) -> (u32, u32) {
    let t = ct(dt);
    let (min, max) = if t == "f32" { (min, max) } else { (min.ceil(), max.floor()) };
    (wgsl::param_bits(t, min), wgsl::param_bits(t, max))
}

/// The op constants of a unary op's kernel (`Elementwise::op`): a clamp's bounds, else none.
pub(crate) fn unary_params(op: UnaryOp, dt: DType) -> Option<Block> {
    match op {
        UnaryOp::Clamp { min, max } => {
            let (lo, hi) = clamp_bits(min, max, dt);
            Some(ClampParams { lo, hi }.block())
        }
        _ => None,
    }
}

pub(crate) fn unary_body(op: UnaryOp, dt: DType) -> String {
    let t = ct(dt);
    // A clamp's expression reads its bounds as `lo` and `hi`; here they are the kernel's op constants.
    let bounds = match op {
        UnaryOp::Clamp { .. } => format!("let lo = bitcast<{t}>(p.op.lo); let hi = bitcast<{t}>(p.op.hi); "),
        _ => String::new(),
    };
    format!("let x = ld0(at0(e)); {bounds}return {};", unary_expr(op, t))
}

pub(crate) fn binary_body(op: BinaryOp, dt: DType) -> String {
    format!("let a = ld0(at0(e)); let b = ld1(at1(e)); return {};", binary_expr(op, ct(dt)))
}

/// The sign bit of each element: the top bit of the f32 value (bf16 widens with its sign, NaNs
/// included), of the raw half for f16 (NVIDIA's `unpack2x16float` gave -NaN a clear sign bit),
/// `x < 0` for i32; unsigned types and bool have none.
pub(crate) fn signbit_body(dt: DType) -> String {
    if dt == DType::F16 {
        return "return bits0(at0(e)) >> 15u;".into();
    }
    match ct(dt) {
        "f32" => "return bitcast<u32>(ld0(at0(e))) >> 31u;".into(),
        "i32" => "return select(0u, 1u, ld0(at0(e)) < 0);".into(),
        _ => "let x = ld0(at0(e)); return 0u;".into(),
    }
}

pub(crate) fn cmp_body(op: CmpOp) -> String {
    format!("let a = ld0(at0(e)); let b = ld1(at1(e)); return select(0u, 1u, {});", cmp_expr(op))
}

pub(crate) const SILU_MUL_BODY: &str = "let a = ld0(at0(e)); let b = ld1(at1(e)); return silu_(a) * b;";

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
// sin and cos after a reduction by 2 pi: Vulkan and Metal promise sin/cos accuracy only inside
// [-pi, pi] (NVIDIA's sin(1e5) is 0.0429 where the CPU's is 0.0357; lavapipe's sin(-2^31) 0.598
// against 0.971). Below 2^16 a Cody-Waite reduction (6.28125 + 1.9353072e-3, the first part exact
// in a product with k < 2^16); from 2^16 on an exact one (Payne-Hanek, `reduce_turns_`). Accurate to
// ~1e-6 for every finite x; +-inf and NaN give NaN.
fn mul_24x32_(m: u32, w: u32) -> vec2<u32> {
    // m * w (m < 2^24) as (low, high) words, from 16-bit halves.
    let ml = m & 0xffffu; let mh = m >> 16u; let wl = w & 0xffffu; let wh = w >> 16u;
    let a = mh * wl; let mid = a + ml * wh; let c = select(0u, 1u, mid < a);
    let ll = ml * wl; let lo = ll + (mid << 16u); let c2 = select(0u, 1u, lo < ll);
    return vec2<u32>(lo, mh * wh + (mid >> 16u) + (c << 16u) + c2);
}
// 32 bits of the 4-word integer p from bit b on (b < 96).
fn bits_at_(p: array<u32, 4>, b: u32) -> u32 {
    var q = p;
    let i = b >> 5u; let s = b & 31u;
    return select((q[i] >> s) | (q[i + 1u] << (32u - s)), q[i], s == 0u);
}
// x (|x| >= 2^16, finite) as an angle in [-pi, pi] with the same sin and cos: |x| = m 2^e times the
// bits of 1 / (2 pi), three words of them from the first that can reach the fraction; the 64 bits
// of the product below the binary point are |x|'s fraction of a turn, taken as the nearest of [-1/2, 1/2).
fn reduce_turns_(x: f32) -> f32 {
    var t = array<u32, 6>(0x28be60dbu, 0x9391054au, 0x7f09d5f4u, 0x7d4d3770u, 0x36d8a566u, 0x4f10e410u);
    let bits = bitcast<u32>(x);
    let e = i32((bits >> 23u) & 0xffu) - 150;
    let m = (bits & 0x7fffffu) | 0x800000u;
    let j = u32(max(e, 0)) >> 5u;
    let ep = e - i32(j << 5u);
    let q2 = mul_24x32_(m, t[j + 2u]); let q1 = mul_24x32_(m, t[j + 1u]); let q0 = mul_24x32_(m, t[j]);
    let p1 = q2.y + q1.x; let c = select(0u, 1u, p1 < q2.y);
    let s = q1.y + q0.x; let c1 = select(0u, 1u, s < q1.y);
    let p2 = s + c; let c2 = select(0u, 1u, p2 < s);
    let p = array<u32, 4>(q2.x, p1, p2, q0.y + c1 + c2);
    let point = u32(96 - ep);
    var f = bits_at_(p, point - 32u);
    var g = bits_at_(p, point - 64u);
    var sign = 1.0;
    if (f >= 0x80000000u) {
        // 1 - fraction, as 64 bits.
        g = ~g + 1u; f = ~f + select(0u, 1u, g == 0u); sign = -1.0;
    }
    let r = sign * (f32(f) * 2.3283064365386963e-10 + f32(g) * 5.421010862427522e-20);
    return select(r, -r, (bits >> 31u) == 1u) * 6.283185307179586;
}
fn reduce_2pi_(x: f32) -> f32 {
    if (abs(x) >= 65536.0 && abs(x) < inf_f32()) { return reduce_turns_(x); }
    let k = round(x * 0.15915494309189535); return (x - k * 6.28125) - k * 1.9353071795864769e-3;
}
// sin(+-0) is x itself (the reduction turns -0 into +0).
fn sin_(x: f32) -> f32 { return select(sin(reduce_2pi_(x)), x, x == 0.0); }
fn cos_(x: f32) -> f32 { return cos(reduce_2pi_(x)); }
// relu on the bits: NVIDIA's compiler turns select(x, 0, x < 0) into max(x, 0), which drops NaN
// (relu(NaN) gave 0 on the H100, NaN on the CPU). Negative means sign bit set, not -0, not NaN.
fn relu_(x: f32) -> f32 { let b = bitcast<u32>(x); return select(x, 0.0, b > 0x80000000u && b <= 0xff800000u); }
fn silu_(x: f32) -> f32 { return select(div_(x, 1.0 + exp(-x)), -0.0, is_neg_inf(x)); }
fn gelu_tanh_(x: f32) -> f32 {
    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return select(div_(x, 1.0 + exp(-2.0 * u)), -0.0, is_neg_inf(x));
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
    // C's pow for the rest: (-1)^+-inf is 1 (exp2(inf * 0) would be NaN); a negative base needs an
    // integer power (+-inf count as even) except -inf, whose powers are +-0 or +-inf.
    if (a == -1.0 && abs(b) == inf_f32()) { return 1.0; }
    let r = exp2(b * log2(abs(a)));
    if (a < 0.0) {
        if (floor(b) != b && a != -inf_f32()) { return nan_f32(); }
        if (floor(b) == b && floor(b * 0.5) != b * 0.5) { return -r; }
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
// Floor division and remainder as NumPy (cpu/divmod.rs): integers exactly, a zero divisor giving 0
// and MIN // -1 giving MIN; floats from the exact fmod by long division (each step subtracts b
// scaled to the running remainder's binade, exact by Sterbenz's lemma; at most ~280 steps).
fn fmod_(a: f32, b: f32) -> f32 {
    let y = abs(b);
    var r = abs(a);
    if (is_nan(a) || is_nan(b) || r == inf_f32() || y == 0.0) { return nan_f32(); }
    if (r < y) { return a; }
    let ey = frexp(y).exp;
    // Each step halves r at least; the bound only guards against a driver flushing subnormals.
    for (var i = 0u; i < 300u && r >= y; i++) {
        var t = ldexp(y, frexp(r).exp - ey);
        if (t > r) { t = t * 0.5; }
        r = r - t;
    }
    return select(r, -r, a < 0.0);
}
// a / b over the whole f32 range. GPUs divide as a * (1 / b), and the reciprocal of a divisor above
// 2^126 flushes to zero (WGSL promises 2.5 ulp only for divisors in [2^-126, 2^126]; NVIDIA's
// -1e30 / 3e38 gave -0): such a divisor and the dividend are first scaled by 1/4, which is exact for
// the divisor and loses nothing of a quotient that is not itself far below the subnormals.
fn div_(a: f32, b: f32) -> f32 {
    let s = select(1.0, 0.25, abs(b) > 8.507059e37);
    return (a * s) / (b * s);
}
fn sign_xor_(a: f32, b: f32) -> u32 { return (bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u; }
fn divmod_(a: f32, b: f32) -> vec2<f32> {
    var m = fmod_(a, b);
    if (b == 0.0) {
        // a / 0 written out (IEEE: +-inf, NaN for 0 / 0 and NaN / 0).
        let q = select(bitcast<f32>(0x7f800000u | sign_xor_(a, b)), nan_f32(), a == 0.0 || is_nan(a));
        return vec2<f32>(q, m);
    }
    // `!(x == 0.0)`, not `x != 0.0`: a NaN must take the nonzero branch whatever comparison the
    // shader compiler picks (lavapipe's `NaN != 0` was false).
    var div = div_(a - m, b);
    if (!(m == 0.0)) {
        if ((b < 0.0) != (m < 0.0)) { m += b; div -= 1.0; }
    } else {
        // The divisor's sign on a zero remainder, copied from its bits. Not a select of two zeros,
        // not even as bits: NVIDIA's compiler (no signed-zero preservation in naga's SPIR-V) turned
        // `bitcast<f32>(select(0u, 0x80000000u, b < 0.0))` into -0 for every b (0 % 3 gave -0).
        m = bitcast<f32>(bitcast<u32>(b) & 0x80000000u);
    }
    var fd = bitcast<f32>(sign_xor_(a, b));
    if (!(div == 0.0)) {
        fd = floor(div);
        if (div - fd > 0.5) { fd += 1.0; }
    }
    return vec2<f32>(fd, m);
}
fn floordiv_i_(a: i32, b: i32) -> i32 {
    if (b == 0) { return 0; }
    if (b == -1) { return -a; }
    let q = a / b;
    return select(q, q - 1, a - q * b != 0 && ((a - q * b < 0) != (b < 0)));
}
fn rem_i_(a: i32, b: i32) -> i32 {
    if (b == 0 || b == -1) { return 0; }
    let r = a - (a / b) * b;
    return select(r, r + b, r != 0 && ((r < 0) != (b < 0)));
}
fn floordiv_u_(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } return a / b; }
fn rem_u_(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } return a - (a / b) * b; }
fn maxf_(a: f32, b: f32) -> f32 { if (is_nan(a)) { return a; } if (is_nan(b)) { return b; } return max(a, b); }
fn minf_(a: f32, b: f32) -> f32 { if (is_nan(a)) { return a; } if (is_nan(b)) { return b; } return min(a, b); }
fn log_(x: f32) -> f32 { if (x == 0.0) { return -inf_f32(); } if (x < 0.0) { return nan_f32(); } return log(x); }
fn sqrt_(x: f32) -> f32 { if (x < 0.0) { return nan_f32(); } return sqrt(x); }
"#;

/// The WGSL expression of each row of the unary table (`ops/unary_table.rs`): `unary_expr(op, t)`
/// is the expression of `op` on `x` of compute type `t`.
macro_rules! wgsl_exprs {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident $({ $($field:ident: $fty:ty = $def:expr),* })? => $name:literal, fn $method:ident, $inputs:ident;
        $(cpu |$a:ident| $f32:expr, |$b:ident| $f64:expr;)?
        wgsl |$t:ident| $wgsl:expr;
    )*) => {
        /// The WGSL expression of a unary op on `x` of compute type `t`.
        pub(crate) fn unary_expr(op: UnaryOp, t: &str) -> String {
            match op {
                $( UnaryOp::$V $({ $($field: _),* })? => {
                    let $t = t;
                    let _ = $t;
                    String::from($wgsl)
                } )*
            }
        }
    };
}
crate::for_each_unary_op!(wgsl_exprs);

/// clamp's expression.
fn clamp_expr(t: &str) -> String {
    // The bounds are `lo` and `hi` (of type `t`), which the caller binds (`unary_body`: the kernel's
    // op constants; fused kernels: literals).
    if t == "f32" {
        "select(min(max(x, lo), hi), x, is_nan(x))".into()
    } else {
        "min(max(x, lo), hi)".into()
    }
}

/// The WGSL expression of a binary op on `a`, `b` of compute type `t`.
pub(crate) fn binary_expr(op: BinaryOp, t: &str) -> String {
    match op {
        BinaryOp::Add => "a + b".into(),
        BinaryOp::Sub => "a - b".into(),
        BinaryOp::Mul => "a * b".into(),
        BinaryOp::Div => if t == "f32" { "div_(a, b)" } else { "a / b" }.into(),
        BinaryOp::Pow => match t {
            "f32" => "powf_(a, b)",
            "i32" => "powi_(a, b)",
            _ => "powu_(a, b)",
        }
        .into(),
        BinaryOp::FloorDiv => match t {
            "f32" => "divmod_(a, b).x",
            "i32" => "floordiv_i_(a, b)",
            _ => "floordiv_u_(a, b)",
        }
        .into(),
        BinaryOp::Remainder => match t {
            "f32" => "divmod_(a, b).y",
            "i32" => "rem_i_(a, b)",
            _ => "rem_u_(a, b)",
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
