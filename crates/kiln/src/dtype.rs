//! Element types, their sizes and names, and the promotion rules of mixed binary ops.
//!
//! Promotion follows PyTorch's lattice (which agrees with NumPy where NumPy does not widen to f64):
//! - integers follow the array API standard's table: the wider of two signed or of two unsigned
//!   types; an unsigned type with a wider signed one gives the signed one, with a signed one of the
//!   same or fewer bits the signed type of twice its bits (`u8 + i8 = i16`, `u32 + i32 = i64`).
//!   `u64` with a signed type (which the standard leaves open and NumPy widens to f64) gives `i64`:
//!   kiln keeps integers integral, and values past `i64::MAX` wrap;
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
    I8,
    I16,
    U16,
    U64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    pub const ALL: [DType; 13] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::F64,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::U16,
        DType::U64,
    ];

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
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
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::U16 => "u16",
            DType::U64 => "u64",
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
        matches!(
            self,
            DType::U8 | DType::I32 | DType::U32 | DType::I64 | DType::I8 | DType::I16 | DType::U16 | DType::U64
        )
    }

    pub fn is_signed(self) -> bool {
        matches!(self, DType::I32 | DType::I64 | DType::I8 | DType::I16) || self.is_float()
    }

    /// Bits of an integer dtype (0 for the others).
    fn int_bits(self) -> usize {
        if self.is_int() {
            8 * self.size_in_bytes()
        } else {
            0
        }
    }

    /// The signed integer dtype of `bits` bits (64 for anything wider).
    fn signed_of(bits: usize) -> DType {
        match bits {
            8 => DType::I8,
            16 => DType::I16,
            32 => DType::I32,
            _ => DType::I64,
        }
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
            (a, b) if a.is_signed() == b.is_signed() => {
                if a.int_bits() >= b.int_bits() {
                    a
                } else {
                    b
                }
            }
            (a, b) => {
                let (s, u) = if a.is_signed() { (a, b) } else { (b, a) };
                if s.int_bits() > u.int_bits() {
                    s
                } else {
                    DType::signed_of(2 * u.int_bits())
                }
            }
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
with_dtype!(i8, I8, 0, 1, |v: i8| v as f64, |v: f64| v as i8);
with_dtype!(i16, I16, 0, 1, |v: i16| v as f64, |v: f64| v as i16);
with_dtype!(u16, U16, 0, 1, |v: u16| v as f64, |v: f64| v as u16);
with_dtype!(u64, U64, 0, 1, |v: u64| v as f64, |v: f64| v as u64);
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

    /// The array API standard's integer promotion table (2023.12), every pair it defines.
    #[test]
    fn promotion_table_array_api_integers() {
        use DType::*;
        let ints = [I8, I16, I32, I64, U8, U16, U32, U64];
        // Rows and columns in the order of `ints`; `_` (Bool here) marks pairs the standard leaves out.
        let table = [
            [I8, I16, I32, I64, I16, I32, I64, Bool],
            [I16, I16, I32, I64, I16, I32, I64, Bool],
            [I32, I32, I32, I64, I32, I32, I64, Bool],
            [I64, I64, I64, I64, I64, I64, I64, Bool],
            [I16, I16, I32, I64, U8, U16, U32, U64],
            [I32, I32, I32, I64, U16, U16, U32, U64],
            [I64, I64, I64, I64, U32, U32, U32, U64],
            [Bool, Bool, Bool, Bool, U64, U64, U64, U64],
        ];
        for (i, &a) in ints.iter().enumerate() {
            for (j, &b) in ints.iter().enumerate() {
                let want = if table[i][j] == Bool { I64 } else { table[i][j] };
                assert_eq!(a.promote(b), want, "{a} {b}");
            }
            assert_eq!(a.promote(Bool), a);
            assert_eq!(a.promote(F16), F16);
            assert_eq!(a.promote(BF16), BF16);
        }
    }
}
