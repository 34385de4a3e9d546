//! Element types, their sizes and names, and the promotion rules of mixed binary ops.
//!
//! Promotion follows PyTorch's lattice (which agrees with NumPy where NumPy does not widen to f64):
//! - `bool < u8 < i32 < i64` and `u32` with a signed integer goes to `i64` (`u32 + u8` stays `u32`);
//! - any integer with a float gives that float;
//! - `f16 < f32 < f64`, `bf16 < f32 < f64`, and `f16` with `bf16` gives `f32`.
//!
//! Ops that only make sense on floats (`exp`, `sqrt`, `div`, `mean`, ...) cast integer and bool inputs
//! to `f32` first, like PyTorch's default float type.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    I32,
    U32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 9] =
        [DType::F32, DType::F16, DType::BF16, DType::F64, DType::I32, DType::U32, DType::I64, DType::U8, DType::Bool];

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// The lower-case name used in messages and in the CLI (`f32`, `bf16`, `bool`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    pub fn is_int(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::U32 | DType::I64)
    }

    pub fn is_signed(self) -> bool {
        matches!(self, DType::I32 | DType::I64) || self.is_float()
    }

    /// The float type a float-only op computes in for this dtype: floats stay, the rest become `f32`.
    pub fn to_float(self) -> DType {
        if self.is_float() {
            self
        } else {
            DType::F32
        }
    }

    /// The dtype of a binary op's result over `self` and `other` (see the module docs).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match (self, other) {
            (Bool, x) | (x, Bool) => x,
            (F64, _) | (_, F64) => F64,
            (F16, BF16) | (BF16, F16) => F32,
            (F32, _) | (_, F32) => F32,
            (F16, _) | (_, F16) => F16,
            (BF16, _) | (_, BF16) => BF16,
            // Both integers from here on.
            (I64, _) | (_, I64) => I64,
            (U32, I32) | (I32, U32) => I64,
            (U32, U8) | (U8, U32) => U32,
            (I32, U8) | (U8, I32) => I32,
            _ => unreachable!("all dtype pairs are covered"),
        }
    }

    /// Parse a dtype name as printed by [`DType::as_str`].
    pub fn parse(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Rust type that is the element of a kiln dtype.
pub trait WithDType:
    Copy + Send + Sync + 'static + PartialOrd + PartialEq + fmt::Debug + fmt::Display + Default + bytemuck::Zeroable
{
    const DTYPE: DType;
    const ZERO: Self;
    const ONE: Self;
    /// Exact for every type but i64/u64 beyond 2^53.
    fn to_f64(self) -> f64;
    /// Rounds to nearest for floats; for integers truncates toward zero and saturates (NaN gives 0),
    /// like Rust's `as`.
    fn from_f64(v: f64) -> Self;
    fn into_storage(v: Vec<Self>) -> crate::cpu::CpuStorage;
    fn storage_slice(s: &crate::cpu::CpuStorage) -> Option<&[Self]>;
}

macro_rules! with_dtype {
    ($t:ty, $dt:ident, $zero:expr, $one:expr, $to:expr, $from:expr) => {
        impl WithDType for $t {
            const DTYPE: DType = DType::$dt;
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                $to(self)
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
            fn into_storage(v: Vec<Self>) -> crate::cpu::CpuStorage {
                crate::cpu::CpuStorage::$dt(v)
            }
            fn storage_slice(s: &crate::cpu::CpuStorage) -> Option<&[Self]> {
                match s {
                    crate::cpu::CpuStorage::$dt(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

with_dtype!(f32, F32, 0.0, 1.0, |v: f32| v as f64, |v: f64| v as f32);
with_dtype!(f64, F64, 0.0, 1.0, |v: f64| v, |v: f64| v);
with_dtype!(f16, F16, f16::ZERO, f16::ONE, |v: f16| v.to_f64(), f16::from_f64);
with_dtype!(bf16, BF16, bf16::ZERO, bf16::ONE, |v: bf16| v.to_f64(), bf16::from_f64);
with_dtype!(i32, I32, 0, 1, |v: i32| v as f64, |v: f64| v as i32);
with_dtype!(u32, U32, 0, 1, |v: u32| v as f64, |v: f64| v as u32);
with_dtype!(i64, I64, 0, 1, |v: i64| v as f64, |v: f64| v as i64);
with_dtype!(u8, U8, 0, 1, |v: u8| v as f64, |v: f64| v as u8);
with_dtype!(bool, Bool, false, true, |v: bool| v as u8 as f64, |v: f64| v != 0.0);

/// Float element types; the CPU backend computes f16 and bf16 in f32.
pub trait FloatDType: WithDType {
    fn to_f32(self) -> f32;
    fn from_f32(v: f32) -> Self;
}

impl FloatDType for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v
    }
}
impl FloatDType for f64 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self as f32
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        v as f64
    }
}
impl FloatDType for f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl FloatDType for bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_is_symmetric_and_idempotent() {
        for a in DType::ALL {
            assert_eq!(a.promote(a), a);
            for b in DType::ALL {
                assert_eq!(a.promote(b), b.promote(a), "{a} {b}");
            }
        }
    }

    #[test]
    fn promotion_table() {
        use DType::*;
        assert_eq!(Bool.promote(U8), U8);
        assert_eq!(I32.promote(F16), F16);
        assert_eq!(F16.promote(BF16), F32);
        assert_eq!(U32.promote(I32), I64);
        assert_eq!(U8.promote(I32), I32);
        assert_eq!(I64.promote(F32), F32);
        assert_eq!(F32.promote(F64), F64);
    }
}
