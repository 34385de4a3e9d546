//! Dtype conversion on the CPU for all 13x13 pairs, on the block engine (`blocks.rs`).
//!
//! Conversion rules (those of Rust's `as`, which match NumPy/PyTorch): float to int truncates toward
//! zero and saturates, NaN gives 0; int to int wraps; anything to bool is `x != 0` (NaN is true); bool
//! to anything is 0/1. f16/bf16 go through f32 with `half`'s bulk slice conversions (F16C where the
//! CPU has it); sources that f32 cannot hold exactly (f64, i32, u32, i64, u64) go to f16/bf16 through f64
//! so they are rounded once.

use super::blocks::{map_blocks, with_scratch};
use super::CpuStorage;
use crate::backend::BackendStorage;
use crate::{DType, Layout, Result};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// f16 and bf16: bulk conversions between slices of the half type and f32/f64.
pub(crate) trait HalfFloat: crate::FloatDType {
    /// `dst[i] = src[i] as f32` (exact).
    fn slice_to_f32(src: &[Self], dst: &mut [f32]);
    /// `dst[i] = src[i]` rounded to nearest even.
    fn slice_from_f32(src: &[f32], dst: &mut [Self]);
    /// `dst[i] = src[i]` rounded to nearest even (one rounding from f64).
    fn slice_from_f64(src: &[f64], dst: &mut [Self]);
}

macro_rules! half_float {
    ($t:ty) => {
        impl HalfFloat for $t {
            #[inline]
            fn slice_to_f32(src: &[Self], dst: &mut [f32]) {
                src.convert_to_f32_slice(dst)
            }
            #[inline]
            fn slice_from_f32(src: &[f32], dst: &mut [Self]) {
                dst.convert_from_f32_slice(src)
            }
            #[inline]
            fn slice_from_f64(src: &[f64], dst: &mut [Self]) {
                dst.convert_from_f64_slice(src)
            }
        }
    };
}
half_float!(f16);
half_float!(bf16);

/// Conversions of the plain (non-half) element types with Rust's `as` semantics.
trait Plain: Copy + Send + Sync {
    /// Whether every value converts to f32 exactly (so f16/bf16 targets can go through f32).
    const EXACT_IN_F32: bool;
    fn c_f32(self) -> f32;
    fn c_f64(self) -> f64;
    fn c_i32(self) -> i32;
    fn c_u32(self) -> u32;
    fn c_i64(self) -> i64;
    fn c_u8(self) -> u8;
    fn c_i8(self) -> i8;
    fn c_i16(self) -> i16;
    fn c_u16(self) -> u16;
    fn c_u64(self) -> u64;
    fn c_bool(self) -> bool;
}

macro_rules! plain_num {
    ($t:ty, $exact:expr) => {
        impl Plain for $t {
            const EXACT_IN_F32: bool = $exact;
            #[inline(always)]
            fn c_f32(self) -> f32 {
                self as f32
            }
            #[inline(always)]
            fn c_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn c_i32(self) -> i32 {
                self as i32
            }
            #[inline(always)]
            fn c_u32(self) -> u32 {
                self as u32
            }
            #[inline(always)]
            fn c_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn c_u8(self) -> u8 {
                self as u8
            }
            #[inline(always)]
            fn c_i8(self) -> i8 {
                self as i8
            }
            #[inline(always)]
            fn c_i16(self) -> i16 {
                self as i16
            }
            #[inline(always)]
            fn c_u16(self) -> u16 {
                self as u16
            }
            #[inline(always)]
            fn c_u64(self) -> u64 {
                self as u64
            }
            #[inline(always)]
            #[allow(clippy::float_cmp)]
            fn c_bool(self) -> bool {
                self != (0 as $t)
            }
        }
    };
}
plain_num!(f32, true);
plain_num!(f64, false);
plain_num!(i32, false);
plain_num!(u32, false);
plain_num!(i64, false);
plain_num!(u8, true);
plain_num!(i8, true);
plain_num!(i16, true);
plain_num!(u16, true);
plain_num!(u64, false);

impl Plain for bool {
    const EXACT_IN_F32: bool = true;
    #[inline(always)]
    fn c_f32(self) -> f32 {
        self as u8 as f32
    }
    #[inline(always)]
    fn c_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn c_i32(self) -> i32 {
        self as i32
    }
    #[inline(always)]
    fn c_u32(self) -> u32 {
        self as u32
    }
    #[inline(always)]
    fn c_i64(self) -> i64 {
        self as i64
    }
    #[inline(always)]
    fn c_u8(self) -> u8 {
        self as u8
    }
    #[inline(always)]
    fn c_i8(self) -> i8 {
        self as i8
    }
    #[inline(always)]
    fn c_i16(self) -> i16 {
        self as i16
    }
    #[inline(always)]
    fn c_u16(self) -> u16 {
        self as u16
    }
    #[inline(always)]
    fn c_u64(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn c_bool(self) -> bool {
        self
    }
}

/// Elementwise map of a contiguous slice into another of the same length, vectorised for the widest
/// ISA the CPU has.
#[inline(always)]
fn zip_map<T: Copy, U>(src: &[T], dst: &mut [U], f: impl Fn(T) -> U) {
    super::math::vectorized(
        #[inline(always)]
        || {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = f(s);
            }
        },
    )
}

/// Converts the view `l` of `s` into a new contiguous storage of `dtype`.
pub(crate) fn cast(s: &CpuStorage, l: &Layout, dtype: DType) -> Result<CpuStorage> {
    if s.dtype() == dtype {
        return Ok(crate::cpu::map_vec!(s, v => map_blocks(v, l, |s, d| zip_map(s, d, |x| x))));
    }
    Ok(match s {
        CpuStorage::F16(v) => from_half(v, l, dtype),
        CpuStorage::BF16(v) => from_half(v, l, dtype),
        CpuStorage::F32(v) => from_plain(v, l, dtype),
        CpuStorage::F64(v) => from_plain(v, l, dtype),
        CpuStorage::I32(v) => from_plain(v, l, dtype),
        CpuStorage::U32(v) => from_plain(v, l, dtype),
        CpuStorage::I64(v) => from_plain(v, l, dtype),
        CpuStorage::U8(v) => from_plain(v, l, dtype),
        CpuStorage::Bool(v) => from_plain(v, l, dtype),
        CpuStorage::I8(v) => from_plain(v, l, dtype),
        CpuStorage::I16(v) => from_plain(v, l, dtype),
        CpuStorage::U16(v) => from_plain(v, l, dtype),
        CpuStorage::U64(v) => from_plain(v, l, dtype),
    })
}

fn from_plain<S: Plain>(v: &[S], l: &Layout, dtype: DType) -> CpuStorage {
    match dtype {
        DType::F32 => CpuStorage::F32(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_f32(x),
            )
        })),
        DType::F64 => CpuStorage::F64(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_f64(x),
            )
        })),
        DType::I32 => CpuStorage::I32(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_i32(x),
            )
        })),
        DType::U32 => CpuStorage::U32(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_u32(x),
            )
        })),
        DType::I64 => CpuStorage::I64(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_i64(x),
            )
        })),
        DType::U8 => CpuStorage::U8(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_u8(x),
            )
        })),
        DType::Bool => CpuStorage::Bool(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_bool(x),
            )
        })),
        DType::I8 => CpuStorage::I8(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_i8(x),
            )
        })),
        DType::I16 => CpuStorage::I16(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_i16(x),
            )
        })),
        DType::U16 => CpuStorage::U16(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_u16(x),
            )
        })),
        DType::U64 => CpuStorage::U64(map_blocks(v, l, |s, d| {
            zip_map(
                s,
                d,
                #[inline(always)]
                |x| S::c_u64(x),
            )
        })),
        DType::F16 => CpuStorage::F16(plain_to_half(v, l)),
        DType::BF16 => CpuStorage::BF16(plain_to_half(v, l)),
    }
}

fn plain_to_half<S: Plain, H: HalfFloat>(v: &[S], l: &Layout) -> Vec<H> {
    map_blocks(v, l, |src: &[S], dst: &mut [H]| {
        if S::EXACT_IN_F32 {
            with_scratch(src, dst, |s, d, b: &mut [f32]| {
                zip_map(
                    s,
                    b,
                    #[inline(always)]
                    |x| S::c_f32(x),
                );
                H::slice_from_f32(b, d);
            })
        } else {
            with_scratch(src, dst, |s, d, b: &mut [f64]| {
                zip_map(
                    s,
                    b,
                    #[inline(always)]
                    |x| S::c_f64(x),
                );
                H::slice_from_f64(b, d);
            })
        }
    })
}

fn from_half<H: HalfFloat>(v: &[H], l: &Layout, dtype: DType) -> CpuStorage {
    match dtype {
        DType::F32 => CpuStorage::F32(map_blocks(v, l, |s, d| H::slice_to_f32(s, d))),
        DType::F64 => CpuStorage::F64(half_via_f32(v, l, f32::c_f64)),
        DType::I32 => CpuStorage::I32(half_via_f32(v, l, f32::c_i32)),
        DType::U32 => CpuStorage::U32(half_via_f32(v, l, f32::c_u32)),
        DType::I64 => CpuStorage::I64(half_via_f32(v, l, f32::c_i64)),
        DType::U8 => CpuStorage::U8(half_via_f32(v, l, f32::c_u8)),
        DType::Bool => CpuStorage::Bool(half_via_f32(v, l, f32::c_bool)),
        DType::I8 => CpuStorage::I8(half_via_f32(v, l, f32::c_i8)),
        DType::I16 => CpuStorage::I16(half_via_f32(v, l, f32::c_i16)),
        DType::U16 => CpuStorage::U16(half_via_f32(v, l, f32::c_u16)),
        DType::U64 => CpuStorage::U64(half_via_f32(v, l, f32::c_u64)),
        DType::F16 => CpuStorage::F16(half_to_half(v, l)),
        DType::BF16 => CpuStorage::BF16(half_to_half(v, l)),
    }
}

/// Half to f32 in stack blocks, then `f` per element.
fn half_via_f32<H: HalfFloat, U>(v: &[H], l: &Layout, f: impl Fn(f32) -> U + Sync + Copy) -> Vec<U>
where
    U: Send + bytemuck::Zeroable,
{
    map_blocks(v, l, |src: &[H], dst: &mut [U]| {
        with_scratch(src, dst, |s, d, b: &mut [f32]| {
            H::slice_to_f32(s, b);
            zip_map(b, d, f);
        })
    })
}

/// One half type to the other through f32 (exact widening, one rounding).
fn half_to_half<H: HalfFloat, G: HalfFloat>(v: &[H], l: &Layout) -> Vec<G> {
    map_blocks(v, l, |src: &[H], dst: &mut [G]| {
        with_scratch(src, dst, |s, d, b: &mut [f32]| {
            H::slice_to_f32(s, b);
            G::slice_from_f32(b, d);
        })
    })
}
