//! The unary op table: one row per op, carrying everything a layer needs to know about it. Each
//! layer expands the rows it needs through [`for_each_unary_op!`](crate::for_each_unary_op):
//! - here: the [`UnaryOp`] enum, `ALL`, `name`, `method`, `params`, `input_dtype`;
//! - `ops/unary.rs`: the `Tensor` methods (`x.exp()`, `x.clamp(min, max)`), with the row's doc;
//! - `cpu/unary.rs`: the f32 kernel (also the compute path of f16 and bf16) and the f64 kernel;
//! - `gpu/elementwise/mod.rs`: the WGSL expression (unfused and fused kernels);
//! - `kiln-py/src/ops.rs`: the Python methods; the Python and Rust tests iterate `UnaryOp::ALL`.
//!
//! A new op is one row here, one line in the Python stub (`kiln-py/python/kiln/_kiln.pyi`) and its
//! f64 reference and error budget in `tests/conformance/unary.rs`. An op that keeps integer dtypes
//! (`ints`) also needs its integer form in `cpu/unary.rs`'s `int_unary`; float-only ops (`floats`)
//! cast integer and bool inputs to f32 first and need none.
//!
//! A row reads:
//! ```text
//! /// The doc of the variant and of the Tensor method.
//! Variant { param: f64 = value in ALL, ... } => "name", fn method, floats | ints | bools;
//!     cpu |x| f32 body, |x| f64 body;      (absent for bool-only ops)
//!     wgsl |t| WGSL expression of x;
//! ```
//! The bodies are expanded where they run: the CPU bodies inside `cpu/unary.rs` (with `math`, the
//! vectorisable f32 kernels, and `clamp` in scope), each as an `#[inline(always)]` closure over one
//! element; the WGSL expression inside `gpu/elementwise/mod.rs`, with `t` the compute type (`"f32"`,
//! `"i32"` or `"u32"`) and `x` the operand. A param is in scope in the CPU bodies by its name; the
//! GPU kernels receive it as a constant (see `clamp_expr`).

/// Calls `$cb! { rows }` with the table's rows (see the module doc for the row grammar).
#[doc(hidden)]
#[macro_export]
macro_rules! for_each_unary_op {
    ($cb:ident) => {
        $cb! {
            /// `-x` (wrapping for integers, so unsigned `neg` is `2^n - x`).
            Neg => "neg", fn neg, ints;
                cpu |x| -x, |x| -x;
                wgsl |t| if t == "u32" { "0u - x" } else { "-x" };
            /// `|x|` (for signed integers, `abs(MIN)` wraps to `MIN` like NumPy).
            Abs => "abs", fn abs, ints;
                cpu |x| f32::abs(x), |x| f64::abs(x);
                wgsl |t| if t == "u32" { "x" } else { "abs(x)" };
            /// -1, 0 or 1 by the sign of `x`; zeros keep their sign, NaN stays NaN.
            Sign => "sign", fn sign, ints;
                cpu |x| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x },
                    |x| if x > 0.0 { 1.0 } else if x < 0.0 { -1.0 } else { x };
                // sign(+-0) is +-0 (x itself), as on the CPU; WGSL's sign(-0) may be +0.
                wgsl |t| match t {
                    "f32" => "select(sign(x), x, is_nan(x) || x == 0.0)",
                    "u32" => "select(0u, 1u, x > 0u)",
                    _ => "sign(x)",
                };
            /// Square root (NaN for negative inputs).
            Sqrt => "sqrt", fn sqrt, floats;
                cpu |x| f32::sqrt(x), |x| f64::sqrt(x);
                wgsl |t| "sqrt_(x)";
            /// `1 / sqrt(x)`.
            Rsqrt => "rsqrt", fn rsqrt, floats;
                cpu |x| 1.0 / x.sqrt(), |x| 1.0 / x.sqrt();
                wgsl |t| "1.0 / sqrt_(x)";
            /// `e^x`.
            Exp => "exp", fn exp, floats;
                cpu |x| math::exp_f32(x), |x| f64::exp(x);
                wgsl |t| "exp(x)";
            /// Natural logarithm (`-inf` at 0, NaN below).
            Log => "log", fn log, floats;
                cpu |x| f32::ln(x), |x| f64::ln(x);
                wgsl |t| "log_(x)";
            /// Sine (radians).
            Sin => "sin", fn sin, floats;
                cpu |x| f32::sin(x), |x| f64::sin(x);
                wgsl |t| "sin_(x)";
            /// Cosine (radians).
            Cos => "cos", fn cos, floats;
                cpu |x| f32::cos(x), |x| f64::cos(x);
                wgsl |t| "cos_(x)";
            /// Hyperbolic tangent.
            Tanh => "tanh", fn tanh, floats;
                cpu |x| math::tanh_f32(x), |x| f64::tanh(x);
                wgsl |t| "tanh_(x)";
            /// `x * x` (wrapping for integers).
            Square => "square", fn square, ints;
                cpu |x| x * x, |x| x * x;
                wgsl |t| "x * x";
            /// `1 / x`.
            Recip => "recip", fn recip, floats;
                cpu |x| 1.0 / x, |x| 1.0 / x;
                wgsl |t| "div_(1.0, x)";
            /// Largest integer not above `x` (identity on integer dtypes).
            Floor => "floor", fn floor, ints;
                cpu |x| math::floor_f32(x), |x| f64::floor(x);
                wgsl |t| if t == "f32" { "floor(x)" } else { "x" };
            /// Smallest integer not below `x` (identity on integer dtypes).
            Ceil => "ceil", fn ceil, ints;
                cpu |x| math::ceil_f32(x), |x| f64::ceil(x);
                wgsl |t| if t == "f32" { "ceil(x)" } else { "x" };
            /// Rounds to the nearest integer, half to even like NumPy and PyTorch (identity on
            /// integer dtypes).
            Round => "round", fn round, ints;
                cpu |x| math::round_even_f32(x), |x| f64::round_ties_even(x);
                wgsl |t| if t == "f32" { "round(x)" } else { "x" };
            /// `max(x, 0)`; NaN stays NaN.
            Relu => "relu", fn relu, ints;
                cpu |x| if x < 0.0 { 0.0 } else { x }, |x| if x < 0.0 { 0.0 } else { x };
                wgsl |t| match t {
                    "f32" => "relu_(x)",
                    "u32" => "x",
                    _ => "max(x, 0)",
                };
            /// `1 / (1 + e^-x)`.
            Sigmoid => "sigmoid", fn sigmoid, floats;
                cpu |x| math::sigmoid_f32(x), |x| 1.0 / (1.0 + (-x).exp());
                wgsl |t| "div_(1.0, 1.0 + exp(-x))";
            /// `x * sigmoid(x)`; `silu(-inf)` is 0.
            Silu => "silu", fn silu, floats;
                cpu |x| math::silu_f32(x), |x| math::silu_f64(x);
                wgsl |t| "silu_(x)";
            /// GELU, tanh approximation; `gelu(-inf)` is 0.
            GeluTanh => "gelu_tanh", fn gelu, floats;
                cpu |x| math::gelu_tanh_f32(x), |x| math::gelu_tanh_f64(x);
                wgsl |t| "gelu_tanh_(x)";
            /// GELU with the exact erf: `0.5 x (1 + erf(x / sqrt 2))`; `gelu_erf(-inf)` is 0.
            GeluErf => "gelu_erf", fn gelu_erf, floats;
                cpu |x| math::gelu_erf_f32(x), |x| math::gelu_erf_f64(x);
                wgsl |t| "gelu_erf_(x)";
            /// Logical not of a bool tensor.
            Not => "logical_not", fn logical_not, bools;
                wgsl |t| "select(0u, 1u, x == 0u)";
            /// `min(max(x, min), max)`; NaN elements stay NaN. An error when `min > max` or a bound
            /// is NaN. On integer tensors the bounds are rounded inward (`ceil(min)`, `floor(max)`)
            /// and saturated to the dtype, and the result keeps the dtype.
            Clamp { min: f64 = -1.0, max: f64 = 1.0 } => "clamp", fn clamp, ints;
                cpu |x| clamp(x, min as f32, max as f32), |x| clamp(x, min, max);
                wgsl |t| clamp_expr(t);
            /// Base-2 logarithm (`-inf` at 0, NaN below).
            Log2 => "log2", fn log2, floats;
                cpu |x| f32::log2(x), |x| f64::log2(x);
                wgsl |t| "select(select(log2(x), nan_f32(), x < 0.0), -inf_f32(), x == 0.0)";
        }
    };
}

use crate::DType;

/// Which dtypes an op takes (the table's third column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inputs {
    /// Floats; integer and bool inputs are cast to f32 first.
    Floats,
    /// Every dtype but bool; integers stay integers.
    Ints,
    /// Bool only.
    Bools,
}

macro_rules! define_unary_op {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident $({ $($field:ident: $fty:ty = $def:expr),* })? => $name:literal, fn $method:ident, $inputs:ident;
        $(cpu |$a:ident| $f32:expr, |$b:ident| $f64:expr;)?
        wgsl |$t:ident| $wgsl:expr;
    )*) => {
        /// Elementwise ops of one operand (rows of the table in `ops/unary_table.rs`).
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum UnaryOp {
            $( $(#[doc = $doc])* $V $({ $($field: $fty),* })?, )*
        }

        impl UnaryOp {
            /// Every op (parametrised ones with one representative value), in table order.
            pub const ALL: [UnaryOp; [$(stringify!($V)),*].len()] = [ $( UnaryOp::$V $({ $($field: $def),* })? ),* ];

            /// The op's name, used in errors, kernel names and profiles.
            pub fn name(self) -> &'static str {
                match self { $( UnaryOp::$V $({ $($field: _),* })? => $name, )* }
            }

            /// The name of its `Tensor` method (and Python method).
            pub fn method(self) -> &'static str {
                match self { $( UnaryOp::$V $({ $($field: _),* })? => stringify!($method), )* }
            }

            /// The names of the op's parameters (the method's arguments), empty for most ops.
            pub fn params(self) -> &'static [&'static str] {
                match self { $( UnaryOp::$V $({ $($field: _),* })? => &[$($(stringify!($field)),*)?], )* }
            }

            fn inputs(self) -> Inputs {
                match self { $( UnaryOp::$V $({ $($field: _),* })? => define_unary_op!(@inputs $inputs), )* }
            }
        }
    };
    (@inputs floats) => { Inputs::Floats };
    (@inputs ints) => { Inputs::Ints };
    (@inputs bools) => { Inputs::Bools };
}
crate::for_each_unary_op!(define_unary_op);

impl UnaryOp {
    /// Ops that are only defined on floats: integer and bool inputs are cast to `f32` first.
    pub fn is_float_only(self) -> bool {
        self.inputs() == Inputs::Floats
    }

    /// The dtype the backend sees for an input of `dtype` (after the float cast), or `None` when the
    /// op does not accept it at all.
    pub fn input_dtype(self, dtype: DType) -> Option<DType> {
        match self.inputs() {
            Inputs::Bools => (dtype == DType::Bool).then_some(dtype),
            Inputs::Floats => Some(dtype.to_float()),
            Inputs::Ints if dtype == DType::Bool => None,
            Inputs::Ints => Some(dtype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names and methods are unique, so errors, kernels and Python methods cannot be confused.
    #[test]
    fn names_and_methods_are_unique() {
        let mut names: Vec<&str> = UnaryOp::ALL.iter().map(|o| o.name()).collect();
        let mut methods: Vec<&str> = UnaryOp::ALL.iter().map(|o| o.method()).collect();
        names.sort();
        methods.sort();
        let n = UnaryOp::ALL.len();
        names.dedup();
        methods.dedup();
        assert_eq!((names.len(), methods.len()), (n, n), "{names:?} {methods:?}");
        assert_eq!(UnaryOp::Clamp { min: 0.0, max: 1.0 }.params(), ["min", "max"]);
        assert!(UnaryOp::Exp.params().is_empty());
    }
}
