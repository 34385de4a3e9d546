//! Binary elementwise kernels, comparisons and `where`. Operands arrive as views of one shape
//! (broadcast dims have stride 0). Each output segment sees each operand either as a contiguous slice
//! (inner stride 1, or gathered into a stack buffer) or as one repeated value (inner stride 0), and
//! the op runs as one of three zip loops over slices, which the compiler vectorises: that covers the
//! same-shape contiguous case (one long zip per parallel chunk), row and column vectors and scalars.
//! f16/bf16 are widened to f32 in stack blocks and narrowed back.
// Closures instead of function names keep element kernels inlined into the vectorised loops.
#![allow(clippy::redundant_closure)]

use super::blocks::{alloc_out, gather, BLOCK, SMALL};
use super::cast::HalfFloat;
use super::divmod::{divmod_f32, divmod_f64, IntDivMod};
use super::{math, strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::{BinaryOp, CmpOp};
use crate::{Layout, Result, WithDType};
use half::{bf16, f16};

/// One operand of a segment: a contiguous run or a single repeated value.
#[derive(Clone, Copy)]
enum Arg<'a, T> {
    Slice(&'a [T]),
    Scalar(T),
}

/// `o[i] = f(a[i], b[i])` over the three shapes of operands, each a loop the compiler vectorises
/// (for the widest ISA the CPU has, see [`math::vectorized`]).
#[inline(always)]
fn zip_apply<T: Copy, U: Copy>(a: Arg<T>, b: Arg<T>, o: &mut [U], f: impl Fn(T, T) -> U) {
    math::vectorized(
        #[inline(always)]
        || zip_apply_loops(a, b, o, f),
    )
}

#[inline(always)]
fn zip_apply_loops<T: Copy, U: Copy>(a: Arg<T>, b: Arg<T>, o: &mut [U], f: impl Fn(T, T) -> U) {
    match (a, b) {
        (Arg::Slice(a), Arg::Slice(b)) => {
            for ((o, &x), &y) in o.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
        (Arg::Slice(a), Arg::Scalar(y)) => {
            for (o, &x) in o.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        (Arg::Scalar(x), Arg::Slice(b)) => {
            for (o, &y) in o.iter_mut().zip(b) {
                *o = f(x, y);
            }
        }
        (Arg::Scalar(x), Arg::Scalar(y)) => o.fill(f(x, y)),
    }
}

/// Runs `k(a, b, out)` over two views of one shape, in parallel, and returns the contiguous output.
/// Operands with inner stride 1 are passed as slices of the input, stride 0 as a scalar, anything
/// else is gathered into stack blocks.
fn zip_blocks<T, U, K>(a: &[T], al: &Layout, b: &[T], bl: &Layout, k: K) -> Vec<U>
where
    T: Copy + Send + Sync,
    U: Send + bytemuck::Zeroable,
    K: Fn(Arg<T>, Arg<T>, &mut [U]) + Sync,
{
    debug_assert_eq!(al.dims(), bl.dims());
    if let Some((x, y)) = serial_slices(a, al, b, bl) {
        // The kernel on the inputs' own slices, with no segment walk (most of a 16-element add's
        // kernel time).
        let mut out = alloc_out(x.len());
        k(Arg::Slice(x), Arg::Slice(y), &mut out);
        return out;
    }
    let mut out = alloc_out(al.elem_count());
    if out.is_empty() {
        return out;
    }
    strided::for_each_segment(
        strided::SERIAL_MAX,
        al.dims(),
        [al.strides(), bl.strides()],
        [al.offset(), bl.offset()],
        &mut out,
        |o, [x, y], [sx, sy]| {
            let n = o.len();
            let (da, db) = (direct(a, x, sx, n), direct(b, y, sy, n));
            match (da, db) {
                (Some(da), Some(db)) => k(da, db, o),
                _ if n <= SMALL => strided_pair::<T, U, SMALL>((a, x, sx, da), (b, y, sy, db), o, &k),
                _ => strided_pair::<T, U, BLOCK>((a, x, sx, da), (b, y, sy, db), o, &k),
            }
        },
    );
    out
}

/// `o[i] = f(a[i], b[i])` over two views of one shape: [`zip_blocks`], or, for two contiguous
/// views small enough for this thread, one vectorised loop that writes the output as it makes it
/// (collected, so the output is not zeroed first: that pass was a seventh of a 100k-element add).
#[inline(always)]
fn zip_map<T, U, F>(a: &[T], al: &Layout, b: &[T], bl: &Layout, f: F) -> Vec<U>
where
    T: Copy + Send + Sync,
    U: Copy + Send + bytemuck::Zeroable,
    F: Fn(T, T) -> U + Copy + Sync,
{
    if let Some((x, y)) = serial_slices(a, al, b, bl) {
        return math::vectorized(
            #[inline(always)]
            || x.iter().zip(y).map(|(&p, &q)| f(p, q)).collect(),
        );
    }
    zip_blocks(a, al, b, bl, |x, y, o: &mut [U]| zip_apply(x, y, o, f))
}

/// Both operands as slices of their storage when both views are contiguous and small enough to run
/// on this thread ([`strided::SERIAL_MAX`]): the fast case of [`zip_blocks`] and [`zip_map`].
#[inline(always)]
fn serial_slices<'a, T>(a: &'a [T], al: &Layout, b: &'a [T], bl: &Layout) -> Option<(&'a [T], &'a [T])> {
    let n = al.elem_count();
    (n <= strided::SERIAL_MAX && al.is_contiguous() && bl.is_contiguous())
        .then(|| (&a[al.offset()..al.offset() + n], &b[bl.offset()..bl.offset() + n]))
}

/// The operand of a segment of `n` elements from `off` with inner stride `s` as a slice of the input
/// (stride 1) or a scalar (stride 0); `None` when it must be gathered.
#[inline(always)]
fn direct<T: Copy>(data: &[T], off: usize, s: usize, n: usize) -> Option<Arg<'_, T>> {
    match s {
        1 => Some(Arg::Slice(&data[off..off + n])),
        0 => Some(Arg::Scalar(data[off])),
        _ => None,
    }
}

/// An operand of a segment: its data, start, inner stride, and its direct form when it has one.
type Operand<'a, T> = (&'a [T], usize, usize, Option<Arg<'a, T>>);

/// The segment of [`zip_blocks`] where an operand is strided: walk it in blocks of `N`, gathering
/// what is strided into stack buffers.
#[inline(always)]
fn strided_pair<T: Copy, U, const N: usize>(
    (a, x, sx, da): Operand<T>,
    (b, y, sy, db): Operand<T>,
    o: &mut [U],
    k: impl Fn(Arg<T>, Arg<T>, &mut [U]),
) {
    let (mut ba, mut bb) = ([a[x]; N], [b[y]; N]);
    for (c, ob) in o.chunks_mut(N).enumerate() {
        let (start, len) = (c * N, ob.len());
        let pa = match da {
            Some(d) => sub(d, start, len),
            None => {
                gather(a, x + start * sx, sx, &mut ba[..len]);
                Arg::Slice(&ba[..len])
            }
        };
        let pb = match db {
            Some(d) => sub(d, start, len),
            None => {
                gather(b, y + start * sy, sy, &mut bb[..len]);
                Arg::Slice(&bb[..len])
            }
        };
        k(pa, pb, ob);
    }
}

/// Widens an operand block of a half type into `buf` (a scalar stays a scalar).
#[inline(always)]
fn widen<'b, H: HalfFloat>(a: Arg<H>, buf: &'b mut [f32]) -> Arg<'b, f32> {
    match a {
        Arg::Slice(s) => {
            let b = &mut buf[..s.len()];
            H::slice_to_f32(s, b);
            Arg::Slice(b)
        }
        Arg::Scalar(v) => Arg::Scalar(v.to_f32()),
    }
}

/// The sub-block `start..start+len` of an operand.
#[inline(always)]
fn sub<T: Copy>(a: Arg<T>, start: usize, len: usize) -> Arg<T> {
    match a {
        Arg::Slice(s) => Arg::Slice(&s[start..start + len]),
        s => s,
    }
}

/// Runs an f32 kernel `k(a, b, out, scratch)` over half-typed operands widened in stack blocks;
/// `scratch` has the length of `out` (for kernels that narrow their result back).
fn half_blocks<H: HalfFloat, U: Send + bytemuck::Zeroable>(
    a: &[H],
    al: &Layout,
    b: &[H],
    bl: &Layout,
    k: impl Fn(Arg<f32>, Arg<f32>, &mut [U], &mut [f32]) + Sync,
) -> Vec<U> {
    #[inline(always)]
    fn run<H: HalfFloat, U, const N: usize>(
        x: Arg<H>,
        y: Arg<H>,
        o: &mut [U],
        k: impl Fn(Arg<f32>, Arg<f32>, &mut [U], &mut [f32]),
    ) {
        let (mut ba, mut bb, mut br) = ([0f32; N], [0f32; N], [0f32; N]);
        for (c, ob) in o.chunks_mut(N).enumerate() {
            let (start, len) = (c * N, ob.len());
            let pa = widen(sub(x, start, len), &mut ba);
            let pb = widen(sub(y, start, len), &mut bb);
            k(pa, pb, ob, &mut br[..len]);
        }
    }
    zip_blocks(a, al, b, bl, |x: Arg<H>, y: Arg<H>, o: &mut [U]| {
        if o.len() <= SMALL {
            run::<H, U, SMALL>(x, y, o, &k)
        } else {
            run::<H, U, BLOCK>(x, y, o, &k)
        }
    })
}

/// A half-typed binary op computed in f32 by `f`.
fn half_binary<H: HalfFloat>(
    a: &[H],
    al: &Layout,
    b: &[H],
    bl: &Layout,
    f: impl Fn(f32, f32) -> f32 + Sync + Copy,
) -> Vec<H> {
    half_blocks(a, al, b, bl, |x, y, o: &mut [H], r| {
        zip_apply(x, y, r, f);
        H::slice_from_f32(r, o);
    })
}

/// NaN-propagating maximum (NumPy `maximum`); for integers and bool the plain maximum.
#[inline(always)]
#[allow(clippy::eq_op)]
fn maximum<T: PartialOrd + Copy>(x: T, y: T) -> T {
    let m = if x > y { x } else { y };
    // `x != x` only for NaN; on integers the optimiser drops it.
    if x != x {
        x
    } else {
        m
    }
}

/// NaN-propagating minimum.
#[inline(always)]
#[allow(clippy::eq_op)]
fn minimum<T: PartialOrd + Copy>(x: T, y: T) -> T {
    let m = if x < y { x } else { y };
    if x != x {
        x
    } else {
        m
    }
}

/// Arithmetic of the non-half numeric types: IEEE for floats, wrapping for integers.
trait Arith: WithDType {
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn pow(self, o: Self) -> Self;
    /// NumPy's `floor_divide` and `remainder` (`divmod.rs`).
    fn floor_div(self, o: Self) -> Self;
    fn floor_rem(self, o: Self) -> Self;
}

macro_rules! float_arith {
    ($t:ty, $divmod:ident) => {
        impl Arith for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                self.powf(o)
            }
            #[inline(always)]
            fn floor_div(self, o: Self) -> Self {
                $divmod(self, o).0
            }
            #[inline(always)]
            fn floor_rem(self, o: Self) -> Self {
                $divmod(self, o).1
            }
        }
    };
}
float_arith!(f32, divmod_f32);
float_arith!(f64, divmod_f64);

macro_rules! int_arith {
    ($t:ty, $signed:expr) => {
        impl Arith for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            /// Integer power by squaring, wrapping. A negative exponent gives 0, except for bases 1
            /// (always 1) and -1 (+-1 by the exponent's parity).
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn pow(self, o: Self) -> Self {
                if $signed && o < 0 {
                    return match self as i64 {
                        1 => 1,
                        -1 => (if o % 2 == 0 { 1 } else { -1i64 }) as $t,
                        _ => 0,
                    };
                }
                let (mut acc, mut base, mut e) = (1 as $t, self, o as u64);
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[inline(always)]
            fn floor_div(self, o: Self) -> Self {
                IntDivMod::floor_div(self, o)
            }
            #[inline(always)]
            fn floor_rem(self, o: Self) -> Self {
                IntDivMod::floor_rem(self, o)
            }
        }
    };
}
int_arith!(i32, true);
int_arith!(i64, true);
int_arith!(u32, false);
int_arith!(u8, false);
int_arith!(i8, true);
int_arith!(i16, true);
int_arith!(u16, false);
int_arith!(u64, false);

/// Binary ops of f32, f64 and the integers.
fn num_binary<T: Arith>(a: &[T], al: &Layout, b: &[T], bl: &Layout, op: BinaryOp) -> Result<Vec<T>> {
    macro_rules! run {
        ($f:expr) => {
            zip_map(
                a,
                al,
                b,
                bl,
                #[inline(always)]
                |p, q| $f(p, q),
            )
        };
    }
    Ok(match op {
        BinaryOp::Add => run!(T::add),
        BinaryOp::Sub => run!(T::sub),
        BinaryOp::Mul => run!(T::mul),
        BinaryOp::Pow => run!(T::pow),
        BinaryOp::Maximum => run!(maximum::<T>),
        BinaryOp::Minimum => run!(minimum::<T>),
        BinaryOp::FloorDiv => run!(T::floor_div),
        BinaryOp::Remainder => run!(T::floor_rem),
        BinaryOp::Div | BinaryOp::And | BinaryOp::Or => return Err(unsupported(op.name(), T::DTYPE)),
    })
}

/// Division exists for floats only (integer division is true division in f32, cast by the API).
fn float_div<T: WithDType + std::ops::Div<Output = T>>(a: &[T], al: &Layout, b: &[T], bl: &Layout) -> Vec<T> {
    zip_map(
        a,
        al,
        b,
        bl,
        #[inline(always)]
        |p, q| p / q,
    )
}

fn f32_binary(a: &[f32], al: &Layout, b: &[f32], bl: &Layout, op: BinaryOp) -> Result<Vec<f32>> {
    match op {
        BinaryOp::Div => Ok(float_div(a, al, b, bl)),
        _ => num_binary(a, al, b, bl, op),
    }
}

fn f64_binary(a: &[f64], al: &Layout, b: &[f64], bl: &Layout, op: BinaryOp) -> Result<Vec<f64>> {
    match op {
        BinaryOp::Div => Ok(float_div(a, al, b, bl)),
        _ => num_binary(a, al, b, bl, op),
    }
}

fn half_op<H: HalfFloat>(a: &[H], al: &Layout, b: &[H], bl: &Layout, op: BinaryOp) -> Result<Vec<H>> {
    Ok(match op {
        BinaryOp::Add => half_binary(
            a,
            al,
            b,
            bl,
            #[inline(always)]
            |x, y| x + y,
        ),
        BinaryOp::Sub => half_binary(
            a,
            al,
            b,
            bl,
            #[inline(always)]
            |x, y| x - y,
        ),
        BinaryOp::Mul => half_binary(
            a,
            al,
            b,
            bl,
            #[inline(always)]
            |x, y| x * y,
        ),
        BinaryOp::Div => half_binary(
            a,
            al,
            b,
            bl,
            #[inline(always)]
            |x, y| x / y,
        ),
        BinaryOp::Pow => half_binary(a, al, b, bl, f32::powf),
        BinaryOp::FloorDiv => half_binary(a, al, b, bl, |x, y| divmod_f32(x, y).0),
        BinaryOp::Remainder => half_binary(a, al, b, bl, |x, y| divmod_f32(x, y).1),
        BinaryOp::Maximum => half_binary(
            a,
            al,
            b,
            bl,
            #[inline(always)]
            |x, y| maximum(x, y),
        ),
        BinaryOp::Minimum => half_binary(
            a,
            al,
            b,
            bl,
            #[inline(always)]
            |x, y| minimum(x, y),
        ),
        BinaryOp::And | BinaryOp::Or => return Err(unsupported(op.name(), H::DTYPE)),
    })
}

fn bool_binary(a: &[bool], al: &Layout, b: &[bool], bl: &Layout, op: BinaryOp) -> Result<Vec<bool>> {
    macro_rules! run {
        ($f:expr) => {
            zip_blocks(a, al, b, bl, |x, y, o: &mut [bool]| {
                zip_apply(
                    x,
                    y,
                    o,
                    #[inline(always)]
                    |p, q| $f(p, q),
                )
            })
        };
    }
    Ok(match op {
        BinaryOp::And | BinaryOp::Minimum => run!(|p: bool, q: bool| p & q),
        BinaryOp::Or | BinaryOp::Maximum => run!(|p: bool, q: bool| p | q),
        _ => return Err(unsupported(op.name(), crate::DType::Bool)),
    })
}

/// `op` on two views of one shape and dtype.
pub(crate) fn binary(a: &CpuStorage, al: &Layout, b: &CpuStorage, bl: &Layout, op: BinaryOp) -> Result<CpuStorage> {
    use CpuStorage as S;
    Ok(match (a, b) {
        (S::F32(x), S::F32(y)) => S::F32(f32_binary(x, al, y, bl, op)?),
        (S::F64(x), S::F64(y)) => S::F64(f64_binary(x, al, y, bl, op)?),
        (S::F16(x), S::F16(y)) => S::F16(half_op::<f16>(x, al, y, bl, op)?),
        (S::BF16(x), S::BF16(y)) => S::BF16(half_op::<bf16>(x, al, y, bl, op)?),
        (S::I32(x), S::I32(y)) => S::I32(num_binary(x, al, y, bl, op)?),
        (S::U32(x), S::U32(y)) => S::U32(num_binary(x, al, y, bl, op)?),
        (S::I64(x), S::I64(y)) => S::I64(num_binary(x, al, y, bl, op)?),
        (S::U8(x), S::U8(y)) => S::U8(num_binary(x, al, y, bl, op)?),
        (S::I8(x), S::I8(y)) => S::I8(num_binary(x, al, y, bl, op)?),
        (S::I16(x), S::I16(y)) => S::I16(num_binary(x, al, y, bl, op)?),
        (S::U16(x), S::U16(y)) => S::U16(num_binary(x, al, y, bl, op)?),
        (S::U64(x), S::U64(y)) => S::U64(num_binary(x, al, y, bl, op)?),
        (S::Bool(x), S::Bool(y)) => S::Bool(bool_binary(x, al, y, bl, op)?),
        _ => return Err(a.not_same_dtype(op.name(), b)),
    })
}

/// The predicate of a comparison; NaN is unequal to everything (so `ne` is true for it).
#[inline(always)]
fn cmp_with<T: PartialOrd + Copy>(x: Arg<T>, y: Arg<T>, o: &mut [bool], op: CmpOp) {
    match op {
        CmpOp::Eq => zip_apply(
            x,
            y,
            o,
            #[inline(always)]
            |p, q| p == q,
        ),
        CmpOp::Ne => zip_apply(
            x,
            y,
            o,
            #[inline(always)]
            |p, q| p != q,
        ),
        CmpOp::Lt => zip_apply(
            x,
            y,
            o,
            #[inline(always)]
            |p, q| p < q,
        ),
        CmpOp::Le => zip_apply(
            x,
            y,
            o,
            #[inline(always)]
            |p, q| p <= q,
        ),
        CmpOp::Gt => zip_apply(
            x,
            y,
            o,
            #[inline(always)]
            |p, q| p > q,
        ),
        CmpOp::Ge => zip_apply(
            x,
            y,
            o,
            #[inline(always)]
            |p, q| p >= q,
        ),
    }
}

fn plain_cmp<T: WithDType>(a: &[T], al: &Layout, b: &[T], bl: &Layout, op: CmpOp) -> Vec<bool> {
    zip_blocks(a, al, b, bl, |x, y, o: &mut [bool]| cmp_with(x, y, o, op))
}

fn half_cmp<H: HalfFloat>(a: &[H], al: &Layout, b: &[H], bl: &Layout, op: CmpOp) -> Vec<bool> {
    half_blocks(a, al, b, bl, |x, y, o: &mut [bool], _| cmp_with(x, y, o, op))
}

/// Comparison of two views of one shape and dtype; bool result.
pub(crate) fn cmp(a: &CpuStorage, al: &Layout, b: &CpuStorage, bl: &Layout, op: CmpOp) -> Result<CpuStorage> {
    use CpuStorage as S;
    Ok(S::Bool(match (a, b) {
        (S::F32(x), S::F32(y)) => plain_cmp(x, al, y, bl, op),
        (S::F64(x), S::F64(y)) => plain_cmp(x, al, y, bl, op),
        (S::F16(x), S::F16(y)) => half_cmp(x, al, y, bl, op),
        (S::BF16(x), S::BF16(y)) => half_cmp(x, al, y, bl, op),
        (S::I32(x), S::I32(y)) => plain_cmp(x, al, y, bl, op),
        (S::U32(x), S::U32(y)) => plain_cmp(x, al, y, bl, op),
        (S::I64(x), S::I64(y)) => plain_cmp(x, al, y, bl, op),
        (S::U8(x), S::U8(y)) => plain_cmp(x, al, y, bl, op),
        (S::I8(x), S::I8(y)) => plain_cmp(x, al, y, bl, op),
        (S::I16(x), S::I16(y)) => plain_cmp(x, al, y, bl, op),
        (S::U16(x), S::U16(y)) => plain_cmp(x, al, y, bl, op),
        (S::U64(x), S::U64(y)) => plain_cmp(x, al, y, bl, op),
        (S::Bool(x), S::Bool(y)) => plain_cmp(x, al, y, bl, op),
        _ => return Err(a.not_same_dtype(op.name(), b)),
    }))
}

/// `m ? t : f` over three views of one shape; each operand is a slice of the input (inner stride 1) or
/// gathered/filled into a stack block, so the select is one zip loop.
fn select<T: Copy + Send + Sync + bytemuck::Zeroable>(
    m: &[bool],
    ml: &Layout,
    t: &[T],
    tl: &Layout,
    f: &[T],
    fl: &Layout,
) -> Vec<T> {
    let mut out = alloc_out(ml.elem_count());
    if out.is_empty() {
        return out;
    }
    strided::for_each_segment(
        strided::SERIAL_MAX,
        ml.dims(),
        [ml.strides(), tl.strides(), fl.strides()],
        [ml.offset(), tl.offset(), fl.offset()],
        &mut out,
        |o, [x, y, z], [sx, sy, sz]| {
            let ops = ((m, x, sx), (t, y, sy), (f, z, sz));
            if (sx, sy, sz) == (1, 1, 1) {
                let n = o.len();
                select_zip(o, &m[x..x + n], &t[y..y + n], &f[z..z + n]);
            } else if o.len() <= SMALL {
                select_strided::<T, SMALL>(ops, o);
            } else {
                select_strided::<T, BLOCK>(ops, o);
            }
        },
    );
    out
}

#[inline(always)]
fn select_zip<T: Copy>(o: &mut [T], m: &[bool], t: &[T], f: &[T]) {
    math::vectorized(
        #[inline(always)]
        || select_loop(o, m, t, f),
    )
}

#[inline(always)]
fn select_loop<T: Copy>(o: &mut [T], m: &[bool], t: &[T], f: &[T]) {
    for (((o, &c), &p), &q) in o.iter_mut().zip(m).zip(t).zip(f) {
        *o = if c { p } else { q };
    }
}

/// The segment of [`select`] where some operand is not contiguous: blocks of `N`, gathered.
#[inline(always)]
#[allow(clippy::type_complexity)]
fn select_strided<T: Copy, const N: usize>(
    ((m, x, sx), (t, y, sy), (f, z, sz)): ((&[bool], usize, usize), (&[T], usize, usize), (&[T], usize, usize)),
    o: &mut [T],
) {
    fn part<'a, V: Copy>(d: &'a [V], off: usize, s: usize, buf: &'a mut [V]) -> &'a [V] {
        if s == 1 {
            &d[off..off + buf.len()]
        } else {
            gather(d, off, s, buf);
            buf
        }
    }
    let (mut bm, mut bt, mut bf) = ([false; N], [t[y]; N], [f[z]; N]);
    for (c, ob) in o.chunks_mut(N).enumerate() {
        let (start, len) = (c * N, ob.len());
        let pm = part(m, x + start * sx, sx, &mut bm[..len]);
        let pt = part(t, y + start * sy, sy, &mut bt[..len]);
        let pf = part(f, z + start * sz, sz, &mut bf[..len]);
        select_zip(ob, pm, pt, pf);
    }
}

/// `c` is a bool mask; picks from `t` where true, else `f`. All three views share one shape.
pub(crate) fn where_cond(
    c: &CpuStorage,
    cl: &Layout,
    t: &CpuStorage,
    tl: &Layout,
    f: &CpuStorage,
    fl: &Layout,
) -> Result<CpuStorage> {
    use CpuStorage as S;
    let S::Bool(m) = c else {
        return Err(crate::Error::dtype("where", c.dtype(), "the mask must be bool"));
    };
    Ok(match (t, f) {
        (S::F32(x), S::F32(y)) => S::F32(select(m, cl, x, tl, y, fl)),
        (S::F64(x), S::F64(y)) => S::F64(select(m, cl, x, tl, y, fl)),
        (S::F16(x), S::F16(y)) => S::F16(select(m, cl, x, tl, y, fl)),
        (S::BF16(x), S::BF16(y)) => S::BF16(select(m, cl, x, tl, y, fl)),
        (S::I32(x), S::I32(y)) => S::I32(select(m, cl, x, tl, y, fl)),
        (S::U32(x), S::U32(y)) => S::U32(select(m, cl, x, tl, y, fl)),
        (S::I64(x), S::I64(y)) => S::I64(select(m, cl, x, tl, y, fl)),
        (S::U8(x), S::U8(y)) => S::U8(select(m, cl, x, tl, y, fl)),
        (S::I8(x), S::I8(y)) => S::I8(select(m, cl, x, tl, y, fl)),
        (S::I16(x), S::I16(y)) => S::I16(select(m, cl, x, tl, y, fl)),
        (S::U16(x), S::U16(y)) => S::U16(select(m, cl, x, tl, y, fl)),
        (S::U64(x), S::U64(y)) => S::U64(select(m, cl, x, tl, y, fl)),
        (S::Bool(x), S::Bool(y)) => S::Bool(select(m, cl, x, tl, y, fl)),
        _ => return Err(t.not_same_dtype("where", f)),
    })
}
