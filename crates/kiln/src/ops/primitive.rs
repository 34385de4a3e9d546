//! The primitive op families a backend implements. Each op carries its name (used in errors, kernel
//! names and profiles) and its dtype rule. The unary ops are rows of one table
//! (`ops/unary_table.rs`) that every layer expands.

use crate::DType;

pub use super::unary_table::UnaryOp;

/// Elementwise ops of two operands of one dtype; the output has that dtype.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    /// True division; integer inputs are cast to `f32` first.
    Div,
    /// `x^y`; integer inputs give integer powers (negative exponents give 0 except for bases 1, -1).
    Pow,
    /// NaN-propagating maximum (NumPy `maximum`).
    Maximum,
    /// NaN-propagating minimum.
    Minimum,
    /// Bool only.
    And,
    /// Bool only.
    Or,
    /// Floor division (NumPy `floor_divide`, Python `//`): exact for integers (division by zero gives
    /// 0, as in NumPy), `floor` of the true quotient for floats by NumPy's `fmod`-based formula.
    FloorDiv,
    /// Remainder with the sign of the divisor (NumPy `remainder`, Python `%`): exact (`fmod`-based
    /// for floats); integer remainder by zero gives 0, as in NumPy.
    Remainder,
}

impl BinaryOp {
    pub const ALL: [BinaryOp; 11] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Maximum,
        BinaryOp::Minimum,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::FloorDiv,
        BinaryOp::Remainder,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Pow => "pow",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::And => "logical_and",
            BinaryOp::Or => "logical_or",
            BinaryOp::FloorDiv => "floor_divide",
            BinaryOp::Remainder => "remainder",
        }
    }

    /// The common dtype both operands are cast to before the backend sees them, or `None` if the op
    /// refuses the (promoted) dtype.
    pub fn compute_dtype(self, promoted: DType) -> Option<DType> {
        match self {
            BinaryOp::And | BinaryOp::Or => (promoted == DType::Bool).then_some(promoted),
            BinaryOp::Div => Some(promoted.to_float()),
            // Arithmetic on bool goes through u8 like NumPy would through int.
            _ if promoted == DType::Bool => match self {
                BinaryOp::Maximum | BinaryOp::Minimum => Some(DType::Bool),
                _ => Some(DType::U8),
            },
            _ => Some(promoted),
        }
    }
}

/// Comparisons of two operands of one dtype; the output is bool. NaN compares unequal to everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    pub const ALL: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }
}

/// Reductions over a set of axes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Floats sum in their dtype (f16/bf16 accumulate in f32); integers and bool sum into i64, u64
    /// into u64 (both wrapping).
    Sum,
    /// Like `Sum` for dtypes.
    Prod,
    /// NaN-propagating.
    Max,
    Min,
    /// Index (i64) of the first maximum; NaN counts as the maximum. One axis only.
    ArgMax,
    ArgMin,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 6] =
        [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::ArgMax, ReduceOp::ArgMin];
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
    /// The output dtype for an input of `dtype`.
    pub fn output_dtype(self, dtype: DType) -> DType {
        match self {
            ReduceOp::Sum | ReduceOp::Prod if dtype == DType::U64 => DType::U64,
            ReduceOp::Sum | ReduceOp::Prod if !dtype.is_float() => DType::I64,
            ReduceOp::ArgMax | ReduceOp::ArgMin => DType::I64,
            _ => dtype,
        }
    }
}

/// Parameters of scaled dot-product attention as the backend receives them. Shapes:
/// q `(b, hq, tq, d)`, k `(b, hkv, tk, dk=d)`, v `(b, hkv, tk, dv)`, output `(b, hq, tq, dv)`;
/// `hq` is a multiple of `hkv` (grouped-query attention). With `causal`, query `i` sees keys
/// `j <= i + (tk - tq)` (queries are the last `tq` positions of the `tk` keys, as in a KV cache).
/// Scores are `scale * q.k`, then with `softcap` (Gemma 2) `cap * tanh(score / cap)`. With `window`
/// (only with `causal`, and only below `tk`), query `i` at position `p = i + tk - tq` sees keys `j`
/// with `p - window < j <= p`: itself and the `window - 1` before it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionParams {
    pub scale: f64,
    pub causal: bool,
    pub softcap: Option<f64>,
    pub window: Option<usize>,
}
