//! Unary elementwise kernels. Each op is one tight loop over contiguous slices (see
//! [`map_blocks`]); f32 uses the branch-free kernels of `math.rs` so the loops vectorise, f16/bf16
//! are widened to f32 in stack blocks with `half`'s bulk conversions and narrowed back, f64 uses
//! `std`, and integers stay integers (wrapping where NumPy wraps).
// Element kernels are passed as closures on purpose: a closure is inlined into the vectorised loop,
// while a function passed by name can stay out of line (gelu_erf ran 9x slower that way).
#![allow(clippy::redundant_closure)]

use super::blocks::{map_blocks, with_scratch};
use super::cast::HalfFloat;
use super::{math, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::UnaryOp;
use crate::{Layout, Result};

/// `dst[i] = f(src[i])`, written so it vectorises once `f` is inlined (pass `#[inline(always)]`
/// closures: a large element kernel passed by name can stay behind an out-of-line `Fn::call`).
#[inline(always)]
fn zip_map<T: Copy, U>(src: &[T], dst: &mut [U], f: impl Fn(T) -> U) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f(s);
    }
}

/// [`zip_map`] vectorised for the widest ISA the CPU has.
#[inline(always)]
fn vzip_map<T: Copy, U>(src: &[T], dst: &mut [U], f: impl Fn(T) -> U) {
    math::vectorized(
        #[inline(always)]
        || zip_map(src, dst, f),
    )
}

/// `min(max(x, lo), hi)` with NaN passing through.
#[inline(always)]
fn clamp<T: PartialOrd + Copy>(x: T, lo: T, hi: T) -> T {
    let y = if x < lo { lo } else { x };
    if y > hi {
        hi
    } else {
        y
    }
}

/// The f32 kernel (also the compute path of f16 and bf16) and the f64 kernel of each row of the
/// unary table (`ops/unary_table.rs`): one vectorised loop over a slice with the row's body inlined.
macro_rules! float_kernels {
    ($(
        $(#[doc = $doc:literal])*
        $V:ident $({ $($field:ident: $fty:ty = $def:expr),* })? => $name:literal, fn $method:ident, $inputs:ident;
        $(cpu |$a:ident| $f32:expr, |$b:ident| $f64:expr;)?
        wgsl |$t:ident| $wgsl:expr;
    )*) => {
        /// The f32 kernel of `op` over a slice, vectorised for the widest ISA the CPU has.
        fn apply_f32(op: UnaryOp, s: &[f32], d: &mut [f32]) {
            match op {
                $( UnaryOp::$V $({ $($field),* })? => float_kernels!(@body s, d $(, |$a| $f32)?), )*
            }
        }

        /// The f64 kernel of `op` over a slice.
        fn apply_f64(op: UnaryOp, s: &[f64], d: &mut [f64]) {
            match op {
                $( UnaryOp::$V $({ $($field),* })? => float_kernels!(@body s, d $(, |$b| $f64)?), )*
            }
        }
    };
    (@body $s:ident, $d:ident, |$x:ident| $e:expr) => {
        vzip_map($s, $d, #[inline(always)] |$x| $e)
    };
    // An op without float bodies (logical_not) is refused before dispatch.
    (@body $s:ident, $d:ident) => {
        unreachable!("refused before dispatch")
    };
}
crate::for_each_unary_op!(float_kernels);

/// f16/bf16: widen a block to f32, run the f32 kernel, narrow back.
fn apply_half<H: HalfFloat>(op: UnaryOp, s: &[H], d: &mut [H]) {
    with_scratch(s, d, |s, d, w: &mut [[f32; 2]]| {
        // One scratch of pairs would interleave; split it into two f32 halves instead.
        let w: &mut [f32] = bytemuck::cast_slice_mut(w);
        let (a, b) = w.split_at_mut(s.len());
        H::slice_to_f32(s, a);
        apply_f32(op, a, b);
        H::slice_from_f32(b, d);
    })
}

/// Integer element types: the integer forms of the unary ops.
trait IntUnary: crate::WithDType + Ord {
    const MIN_F: f64;
    const MAX_F: f64;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    fn sign(self) -> Self;
    fn wsquare(self) -> Self;
    fn from_sat(v: f64) -> Self;
}

macro_rules! int_unary {
    ($t:ty, signed) => {
        int_unary!(@impl $t, |x: $t| x.wrapping_neg(), |x: $t| x.wrapping_abs(), |x: $t| x.signum());
    };
    ($t:ty, unsigned) => {
        int_unary!(@impl $t, |x: $t| x.wrapping_neg(), |x: $t| x, |x: $t| (x != 0) as $t);
    };
    (@impl $t:ty, $neg:expr, $abs:expr, $sign:expr) => {
        impl IntUnary for $t {
            const MIN_F: f64 = <$t>::MIN as f64;
            const MAX_F: f64 = <$t>::MAX as f64;
            #[inline(always)]
            fn wneg(self) -> Self {
                ($neg)(self)
            }
            #[inline(always)]
            fn wabs(self) -> Self {
                ($abs)(self)
            }
            #[inline(always)]
            fn sign(self) -> Self {
                ($sign)(self)
            }
            #[inline(always)]
            fn wsquare(self) -> Self {
                self.wrapping_mul(self)
            }
            #[inline(always)]
            fn from_sat(v: f64) -> Self {
                v as $t
            }
        }
    };
}
int_unary!(i32, signed);
int_unary!(i64, signed);
int_unary!(u32, unsigned);
int_unary!(u8, unsigned);
int_unary!(i8, signed);
int_unary!(i16, signed);
int_unary!(u16, unsigned);
int_unary!(u64, unsigned);

/// The integer kernel of `op`; float-only ops never get here (the API casts to f32 first).
fn int_unary<T: IntUnary>(v: &[T], l: &Layout, op: UnaryOp) -> Result<Vec<T>> {
    Ok(match op {
        UnaryOp::Neg => map_blocks(v, l, |s, d| {
            vzip_map(
                s,
                d,
                #[inline(always)]
                |x| T::wneg(x),
            )
        }),
        UnaryOp::Abs => map_blocks(v, l, |s, d| {
            vzip_map(
                s,
                d,
                #[inline(always)]
                |x| T::wabs(x),
            )
        }),
        UnaryOp::Sign => map_blocks(v, l, |s, d| {
            vzip_map(
                s,
                d,
                #[inline(always)]
                |x| T::sign(x),
            )
        }),
        UnaryOp::Square => map_blocks(v, l, |s, d| {
            vzip_map(
                s,
                d,
                #[inline(always)]
                |x| T::wsquare(x),
            )
        }),
        UnaryOp::Relu => map_blocks(v, l, |s, d| {
            vzip_map(
                s,
                d,
                #[inline(always)]
                |x| x.max(T::ZERO),
            )
        }),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => map_blocks(v, l, |s, d| d.copy_from_slice(s)),
        UnaryOp::Clamp { min, max } => {
            // Integer bounds: round inward, saturate to the type (the API has checked min <= max).
            let lo = T::from_sat(min.ceil().clamp(T::MIN_F, T::MAX_F));
            let hi = T::from_sat(max.floor().clamp(T::MIN_F, T::MAX_F));
            map_blocks(v, l, |s, d| {
                vzip_map(
                    s,
                    d,
                    #[inline(always)]
                    |x| x.max(lo).min(hi),
                )
            })
        }
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    })
}

/// Applies `op` to the view `l` of `s`; the dtype is already the one `op.input_dtype` asks for.
pub(crate) fn unary(s: &CpuStorage, l: &Layout, op: UnaryOp) -> Result<CpuStorage> {
    if op == UnaryOp::Not {
        return match s {
            CpuStorage::Bool(v) => Ok(CpuStorage::Bool(map_blocks(v, l, |s, d| vzip_map(s, d, |x: bool| !x)))),
            _ => Err(unsupported(op.name(), s.dtype())),
        };
    }
    Ok(match s {
        CpuStorage::F32(v) => CpuStorage::F32(map_blocks(v, l, |s, d| apply_f32(op, s, d))),
        CpuStorage::F64(v) => CpuStorage::F64(map_blocks(v, l, |s, d| apply_f64(op, s, d))),
        CpuStorage::F16(v) => CpuStorage::F16(map_blocks(v, l, |s, d| apply_half(op, s, d))),
        CpuStorage::BF16(v) => CpuStorage::BF16(map_blocks(v, l, |s, d| apply_half(op, s, d))),
        CpuStorage::I32(v) => CpuStorage::I32(int_unary(v, l, op)?),
        CpuStorage::U32(v) => CpuStorage::U32(int_unary(v, l, op)?),
        CpuStorage::I64(v) => CpuStorage::I64(int_unary(v, l, op)?),
        CpuStorage::U8(v) => CpuStorage::U8(int_unary(v, l, op)?),
        CpuStorage::I8(v) => CpuStorage::I8(int_unary(v, l, op)?),
        CpuStorage::I16(v) => CpuStorage::I16(int_unary(v, l, op)?),
        CpuStorage::U16(v) => CpuStorage::U16(int_unary(v, l, op)?),
        CpuStorage::U64(v) => CpuStorage::U64(int_unary(v, l, op)?),
        CpuStorage::Bool(_) => return Err(unsupported(op.name(), s.dtype())),
    })
}
