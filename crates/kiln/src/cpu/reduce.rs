//! CPU reductions (sum, prod, max, min, argmax, argmin) and cumulative sums.
//!
//! Strategy: the reduced axes are ordered so that they form as few runs as possible, then one of
//! three plans runs:
//! - *rows*: the reduced elements of every output are one contiguous run. Each run is reduced with
//!   [`LANES`] independent accumulators per block of [`BLOCK`] elements and the blocks are combined
//!   pairwise (so f32 sums of many millions of elements stay accurate); outputs run in parallel, and a
//!   long single run splits its halves over threads;
//! - *columns*: the kept elements are one contiguous run (e.g. axis 0 of a matrix): whole rows are
//!   accumulated into a block of outputs at a time, with pairwise combination over groups of rows;
//! - otherwise the view is gathered into a contiguous copy with the reduced axes innermost, then *rows*.
//!
//! f16/bf16 are converted to f32 in small pieces (vectorised) and accumulate in f32; integers and bool
//! sum and multiply into i64 with wrapping arithmetic (u64 into u64).

use super::{strided, CpuStorage};
use crate::layout::collapse;
use crate::op::ReduceOp;
use crate::{Layout, Result, WithDType};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// Elements reduced with one set of lane accumulators before pairwise combination.
const BLOCK: usize = 4096;
/// Independent accumulators in the innermost loops (enough to fill the vector units).
const LANES: usize = 16;
/// Work (elements) above which the two halves of a pairwise step run in parallel.
const PAR_MIN: usize = 1 << 16;
/// Elements converted at a time from f16/bf16 (or small integers) into the accumulator type.
const PIECE: usize = 256;
/// Outputs handled together by the *columns* plan.
const COLS: usize = 2048;
/// Rows accumulated sequentially by the *columns* plan before pairwise combination.
const SEQ_ROWS: usize = 32;
/// Fewest contiguous outputs for which the *columns* plan beats gathering.
const MIN_COLS: usize = 16;

/// The arithmetic the reductions need from an accumulator type.
pub(crate) trait Num: Copy + Send + Sync + PartialOrd + 'static {
    const ZERO: Self;
    const ONE: Self;
    /// The identity of `max` (−inf for floats).
    const LOWEST: Self;
    /// The identity of `min` (+inf for floats).
    const HIGHEST: Self;
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn nan(self) -> bool;
}

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline(always)]
            fn add(self, o: Self) -> Self { self + o }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { self * o }
            #[inline(always)]
            fn nan(self) -> bool { self.is_nan() }
        }
    )*};
}
macro_rules! num_int {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            #[inline(always)]
            fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)]
            fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)]
            fn nan(self) -> bool { false }
        }
    )*};
}
num_float!(f32, f64);
num_int!(i64, i32, u32, u8, i8, i16, u16, u64);

impl Num for bool {
    const ZERO: Self = false;
    const ONE: Self = true;
    const LOWEST: Self = false;
    const HIGHEST: Self = true;
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self | o
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self & o
    }
    #[inline(always)]
    fn nan(self) -> bool {
        false
    }
}

/// A reduction: an identity and an associative, commutative combination.
pub(crate) trait Op<A: Num>: Send + Sync {
    fn ident() -> A;
    fn combine(acc: A, v: A) -> A;

    /// Reduces `x` with [`LANES`] independent accumulators (the form the compiler vectorises).
    #[inline(always)]
    fn lanes(x: &[A]) -> A {
        let mut acc = [Self::ident(); LANES];
        let mut it = x.chunks_exact(LANES);
        for c in &mut it {
            let c: &[A; LANES] = c.try_into().unwrap();
            for i in 0..LANES {
                acc[i] = Self::combine(acc[i], c[i]);
            }
        }
        let mut rest = Self::ident();
        for &v in it.remainder() {
            rest = Self::combine(rest, v);
        }
        let mut w = LANES;
        while w > 1 {
            w /= 2;
            for i in 0..w {
                acc[i] = Self::combine(acc[i], acc[i + w]);
            }
        }
        Self::combine(acc[0], rest)
    }
}

pub(crate) struct SumOp;
pub(crate) struct ProdOp;
pub(crate) struct MaxOp;
pub(crate) struct MinOp;

impl<A: Num> Op<A> for SumOp {
    #[inline(always)]
    fn ident() -> A {
        A::ZERO
    }
    #[inline(always)]
    fn combine(acc: A, v: A) -> A {
        acc.add(v)
    }
}
impl<A: Num> Op<A> for ProdOp {
    #[inline(always)]
    fn ident() -> A {
        A::ONE
    }
    #[inline(always)]
    fn combine(acc: A, v: A) -> A {
        acc.mul(v)
    }
}
impl<A: Num> Op<A> for MaxOp {
    #[inline(always)]
    fn ident() -> A {
        A::LOWEST
    }
    /// NaN-propagating: once `acc` is NaN it stays NaN, and a NaN `v` replaces it.
    #[inline(always)]
    fn combine(acc: A, v: A) -> A {
        // `|`, not `||`: branch-free, so the lane loops vectorise.
        if (v > acc) | v.nan() {
            v
        } else {
            acc
        }
    }
}
impl<A: Num> Op<A> for MinOp {
    #[inline(always)]
    fn ident() -> A {
        A::HIGHEST
    }
    #[inline(always)]
    fn combine(acc: A, v: A) -> A {
        if (v < acc) | v.nan() {
            v
        } else {
            acc
        }
    }
}

/// Element types readable as accumulator type `A`, a piece at a time. No closures: the hot loops
/// must inline completely into their AVX2 clones.
pub(crate) trait Conv<A: Num>: Copy + Send + Sync + bytemuck::Zeroable {
    /// Longest piece [`Conv::view`] takes (unlimited when no conversion is needed).
    const STEP: usize;
    /// `x` (at most [`Conv::STEP`] long) as `A`s: `x` itself, or converted into `buf`.
    fn view<'a>(x: &'a [Self], buf: &'a mut [A; PIECE]) -> &'a [A];
}

impl<T: Num + bytemuck::Zeroable> Conv<T> for T {
    const STEP: usize = usize::MAX;
    #[inline(always)]
    fn view<'a>(x: &'a [T], _buf: &'a mut [T; PIECE]) -> &'a [T] {
        x
    }
}

macro_rules! conv_half {
    ($($t:ty),*) => {$(
        impl Conv<f32> for $t {
            const STEP: usize = PIECE;
            #[inline(always)]
            fn view<'a>(x: &'a [$t], buf: &'a mut [f32; PIECE]) -> &'a [f32] {
                let b = &mut buf[..x.len()];
                x.convert_to_f32_slice(b);
                b
            }
        }
    )*};
}
conv_half!(f16, bf16);

macro_rules! conv_int {
    ($($t:ty),*) => {$(
        impl Conv<i64> for $t {
            const STEP: usize = PIECE;
            #[inline(always)]
            fn view<'a>(x: &'a [$t], buf: &'a mut [i64; PIECE]) -> &'a [i64] {
                let b = &mut buf[..x.len()];
                for (o, &v) in b.iter_mut().zip(x) {
                    *o = v as i64;
                }
                b
            }
        }
    )*};
}
conv_int!(i32, u32, u8, bool, i8, i16, u16);

/// Pieces of `x` for [`Conv::view`], with their start indices.
#[inline(always)]
fn pieces<T: Conv<A>, A: Num>(x: &[T]) -> impl Iterator<Item = (usize, &[T])> {
    let step = T::STEP.min(x.len()).max(1);
    x.chunks(step).enumerate().map(move |(i, c)| (i * step, c))
}

/// Output element types made from an accumulator of type `A`.
pub(crate) trait FromAcc<A>: WithDType {
    fn from_acc(a: A) -> Self;
}
impl<T: Num + WithDType> FromAcc<T> for T {
    #[inline(always)]
    fn from_acc(a: T) -> T {
        a
    }
}
impl FromAcc<f32> for f16 {
    #[inline(always)]
    fn from_acc(a: f32) -> f16 {
        f16::from_f32(a)
    }
}
impl FromAcc<f32> for bf16 {
    #[inline(always)]
    fn from_acc(a: f32) -> bf16 {
        bf16::from_f32(a)
    }
}

/// Defines `$name`, which runs `$base` compiled for AVX2 when the CPU has it (the build targets
/// baseline x86-64, so without this the inner loops would use 4-wide SSE2 only).
macro_rules! avx2_dispatch {
    ($name:ident, $avx:ident, $base:ident, <$($g:ident: $b:path),*>, ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        #[inline]
        fn $name<$($g: $b),*>($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                return unsafe { $avx::<$($g),*>($($arg),*) };
            }
            $base::<$($g),*>($($arg),*)
        }
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        fn $avx<$($g: $b),*>($($arg: $ty),*) -> $ret {
            $base::<$($g),*>($($arg),*)
        }
    };
}

avx2_dispatch!(block, block_avx2, block_base, <T: Conv<A>, A: Num, O: Op<A>>, (x: &[T]) -> A);
avx2_dispatch!(accumulate, accumulate_avx2, accumulate_base, <T: Conv<A>, A: Num, O: Op<A>>, (acc: &mut [A], x: &[T]) -> ());
avx2_dispatch!(find_first, find_first_avx2, find_first_base, <T: Conv<A>, A: Num>, (x: &[T], m: A) -> usize);

/// Reduces at most [`BLOCK`] elements.
#[inline(always)]
fn block_base<T: Conv<A>, A: Num, O: Op<A>>(x: &[T]) -> A {
    let mut buf = [A::ZERO; PIECE];
    let mut acc = O::ident();
    for (_, c) in pieces::<T, A>(x) {
        acc = O::combine(acc, O::lanes(T::view(c, &mut buf)));
    }
    acc
}

/// `acc[j] = combine(acc[j], x[j])`.
#[inline(always)]
fn accumulate_base<T: Conv<A>, A: Num, O: Op<A>>(acc: &mut [A], x: &[T]) {
    let mut buf = [A::ZERO; PIECE];
    for (s, c) in pieces::<T, A>(x) {
        for (a, &v) in acc[s..s + c.len()].iter_mut().zip(T::view(c, &mut buf)) {
            *a = O::combine(*a, v);
        }
    }
}

/// Index of the first element equal to `m` (of the first NaN if `m` is NaN); `x.len()` if none.
#[inline(always)]
fn find_first_base<T: Conv<A>, A: Num>(x: &[T], m: A) -> usize {
    const GROUP: usize = 64;
    let mut buf = [A::ZERO; PIECE];
    let is_nan = m.nan();
    for (s, c) in pieces::<T, A>(x) {
        let p = T::view(c, &mut buf);
        // Test whole groups with a branch-free fold (vectorised), then locate inside the hit group.
        for (gi, g) in p.chunks(GROUP).enumerate() {
            let any = if is_nan {
                g.iter().fold(false, |h, v| h | v.nan())
            } else {
                g.iter().fold(false, |h, &v| h | (v == m))
            };
            if any {
                let i = if is_nan { g.iter().position(|v| v.nan()) } else { g.iter().position(|&v| v == m) };
                return s + gi * GROUP + i.unwrap();
            }
        }
    }
    x.len()
}

/// Reduces a contiguous run: blocks of [`BLOCK`] combined pairwise, halves in parallel when large.
pub(crate) fn reduce_slice<T: Conv<A>, A: Num, O: Op<A>>(x: &[T]) -> A {
    if x.len() <= BLOCK {
        return block::<T, A, O>(x);
    }
    let mid = (x.len() / 2).div_ceil(BLOCK) * BLOCK;
    let (a, b) = x.split_at(mid);
    let (ra, rb) = if x.len() >= PAR_MIN {
        rayon::join(|| reduce_slice::<T, A, O>(a), || reduce_slice::<T, A, O>(b))
    } else {
        (reduce_slice::<T, A, O>(a), reduce_slice::<T, A, O>(b))
    };
    O::combine(ra, rb)
}

/// Storage offset of the `i`-th element (row-major) of the view `offset + dims·strides`.
#[inline]
fn offset_of(i: usize, dims: &[usize], strides: &[usize], offset: usize) -> usize {
    if dims.len() == 1 {
        return offset + i * strides[0];
    }
    let (mut rem, mut off) = (i, offset);
    for (&d, &s) in dims.iter().zip(strides).rev() {
        off += (rem % d) * s;
        rem /= d;
    }
    off
}

/// How the elements of one reduction are laid out.
struct Plan {
    kept_dims: Vec<usize>,
    kept_strides: Vec<usize>,
    red_dims: Vec<usize>,
    red_strides: Vec<usize>,
    n_out: usize,
    n_red: usize,
}

impl Plan {
    /// `order_free`: the reduction does not depend on the order of the reduced elements, so the
    /// reduced axes may be reordered to merge them.
    fn new(l: &Layout, axes: &[usize], order_free: bool) -> Plan {
        let (dims, strides) = (l.dims(), l.strides());
        let kept: Vec<usize> = (0..dims.len()).filter(|a| !axes.contains(a)).collect();
        let mut red = axes.to_vec();
        if order_free {
            // Largest stride first, so contiguous runs end up innermost and merge.
            red.sort_by_key(|&a| std::cmp::Reverse(strides[a]));
        }
        let pick = |ax: &[usize]| -> (Vec<usize>, Vec<usize>) {
            let d: Vec<usize> = ax.iter().map(|&a| dims[a]).collect();
            let s: Vec<usize> = ax.iter().map(|&a| strides[a]).collect();
            let (cd, mut cs) = collapse(&d, &[&s]);
            (cd, cs.pop().unwrap())
        };
        let (kept_dims, kept_strides) = pick(&kept);
        let (red_dims, red_strides) = pick(&red);
        let n_out = kept.iter().map(|&a| dims[a]).product();
        let n_red = axes.iter().map(|&a| dims[a]).product();
        Plan { kept_dims, kept_strides, red_dims, red_strides, n_out, n_red }
    }

    /// The reduced elements of each output form one contiguous run.
    fn rows(&self) -> bool {
        self.red_dims.len() == 1 && (self.red_strides[0] == 1 || self.red_dims[0] == 1)
    }

    /// The outputs map to one contiguous run of each reduced "row".
    fn columns(&self) -> bool {
        self.kept_dims.len() == 1 && self.kept_strides[0] == 1 && self.n_out >= MIN_COLS
    }
}

/// A contiguous copy of `l` with the axes not in `axes` first (in order), then `axes` (in order).
fn gather<T: Copy + Send + Sync + bytemuck::Zeroable>(data: &[T], l: &Layout, axes: &[usize]) -> (Vec<T>, Layout) {
    let mut perm: Vec<usize> = (0..l.rank()).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let pl = l.permute("reduce", &perm).expect("a permutation of the axes");
    let copy = strided::contiguous(data, &pl).into_owned();
    (copy, Layout::contiguous(pl.shape().clone()))
}

/// `O` over `axes` of the view `l` of `data`; the result is contiguous over the kept axes.
fn reduce_with<T, A, O, Out>(data: &[T], l: &Layout, axes: &[usize]) -> Vec<Out>
where
    T: Conv<A>,
    A: Num,
    O: Op<A>,
    Out: FromAcc<A>,
{
    let p = Plan::new(l, axes, true);
    if p.n_out == 0 {
        return Vec::new();
    }
    if p.n_red == 0 {
        return super::alloc::filled_or_unwind(p.n_out, Out::from_acc(O::ident()));
    }
    let offset = l.offset();
    if p.rows() {
        let len = p.n_red;
        let mut out: Vec<Out> = strided::zeroed(p.n_out);
        let per = (strided::CHUNK / len).max(1);
        out.par_chunks_mut(per).enumerate().for_each(|(ci, chunk)| {
            for (j, o) in chunk.iter_mut().enumerate() {
                let b = offset_of(ci * per + j, &p.kept_dims, &p.kept_strides, offset);
                *o = Out::from_acc(reduce_slice::<T, A, O>(&data[b..b + len]));
            }
        });
        out
    } else if p.columns() {
        let row_off = |r: usize| offset_of(r, &p.red_dims, &p.red_strides, offset);
        let mut out: Vec<Out> = strided::zeroed(p.n_out);
        out.par_chunks_mut(COLS).enumerate().for_each(|(ci, chunk)| {
            let mut acc = vec![O::ident(); chunk.len()];
            column_rows::<T, A, O>(data, &row_off, ci * COLS, 0, p.n_red, &mut acc);
            for (o, a) in chunk.iter_mut().zip(acc) {
                *o = Out::from_acc(a);
            }
        });
        out
    } else {
        let (copy, cl) = gather(data, l, axes);
        let rank = cl.rank();
        let red: Vec<usize> = (rank - axes.len()..rank).collect();
        reduce_with::<T, A, O, Out>(&copy, &cl, &red)
    }
}

/// Accumulates reduced rows `r0..r1` (columns `c0..c0 + acc.len()`) into `acc`, pairwise over
/// groups of [`SEQ_ROWS`] rows.
fn column_rows<T: Conv<A>, A: Num, O: Op<A>>(
    data: &[T],
    row_off: &(impl Fn(usize) -> usize + Sync),
    c0: usize,
    r0: usize,
    r1: usize,
    acc: &mut [A],
) {
    let len = acc.len();
    if r1 - r0 <= SEQ_ROWS {
        for r in r0..r1 {
            let b = row_off(r) + c0;
            accumulate::<T, A, O>(acc, &data[b..b + len]);
        }
        return;
    }
    let mid = r0 + (r1 - r0) / 2;
    let mut other = vec![O::ident(); len];
    if (r1 - r0) * len >= PAR_MIN {
        rayon::join(
            || column_rows::<T, A, O>(data, row_off, c0, r0, mid, acc),
            || column_rows::<T, A, O>(data, row_off, c0, mid, r1, &mut other),
        );
    } else {
        column_rows::<T, A, O>(data, row_off, c0, r0, mid, acc);
        column_rows::<T, A, O>(data, row_off, c0, mid, r1, &mut other);
    }
    for (a, &b) in acc.iter_mut().zip(&other) {
        *a = O::combine(*a, b);
    }
}

/// Index of the first extreme (per `O`, max or min) of a run; NaN counts as the extreme.
fn arg_slice<T: Conv<A>, A: Num, O: Op<A>>(x: &[T]) -> i64 {
    find_first::<T, A>(x, reduce_slice::<T, A, O>(x)) as i64
}

/// Argmax/argmin along `axis` of the view `l`.
fn arg_with<T: Conv<A>, A: Num, O: Op<A>>(data: &[T], l: &Layout, axis: usize) -> Vec<i64> {
    let p = Plan::new(l, &[axis], false);
    if p.n_out == 0 || p.n_red == 0 {
        return super::alloc::filled_or_unwind(p.n_out, 0);
    }
    if !p.rows() {
        let (copy, cl) = gather(data, l, &[axis]);
        return arg_with::<T, A, O>(&copy, &cl, cl.rank() - 1);
    }
    let (len, offset) = (p.n_red, l.offset());
    let mut out: Vec<i64> = strided::zeroed(p.n_out);
    let per = (strided::CHUNK / len).max(1);
    out.par_chunks_mut(per).enumerate().for_each(|(ci, chunk)| {
        for (j, o) in chunk.iter_mut().enumerate() {
            let b = offset_of(ci * per + j, &p.kept_dims, &p.kept_strides, offset);
            *o = arg_slice::<T, A, O>(&data[b..b + len]);
        }
    });
    out
}

macro_rules! arith {
    ($s:expr, $l:expr, $axes:expr, $op:ty) => {
        match $s {
            CpuStorage::F32(v) => CpuStorage::F32(reduce_with::<f32, f32, $op, f32>(v, $l, $axes)),
            CpuStorage::F64(v) => CpuStorage::F64(reduce_with::<f64, f64, $op, f64>(v, $l, $axes)),
            CpuStorage::F16(v) => CpuStorage::F16(reduce_with::<f16, f32, $op, f16>(v, $l, $axes)),
            CpuStorage::BF16(v) => CpuStorage::BF16(reduce_with::<bf16, f32, $op, bf16>(v, $l, $axes)),
            CpuStorage::I32(v) => CpuStorage::I64(reduce_with::<i32, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::U32(v) => CpuStorage::I64(reduce_with::<u32, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::I64(v) => CpuStorage::I64(reduce_with::<i64, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::U8(v) => CpuStorage::I64(reduce_with::<u8, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::Bool(v) => CpuStorage::I64(reduce_with::<bool, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::I8(v) => CpuStorage::I64(reduce_with::<i8, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::I16(v) => CpuStorage::I64(reduce_with::<i16, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::U16(v) => CpuStorage::I64(reduce_with::<u16, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::U64(v) => CpuStorage::U64(reduce_with::<u64, u64, $op, u64>(v, $l, $axes)),
        }
    };
}

macro_rules! extreme {
    ($s:expr, $l:expr, $axes:expr, $op:ty) => {
        match $s {
            CpuStorage::F32(v) => CpuStorage::F32(reduce_with::<f32, f32, $op, f32>(v, $l, $axes)),
            CpuStorage::F64(v) => CpuStorage::F64(reduce_with::<f64, f64, $op, f64>(v, $l, $axes)),
            CpuStorage::F16(v) => CpuStorage::F16(reduce_with::<f16, f32, $op, f16>(v, $l, $axes)),
            CpuStorage::BF16(v) => CpuStorage::BF16(reduce_with::<bf16, f32, $op, bf16>(v, $l, $axes)),
            CpuStorage::I32(v) => CpuStorage::I32(reduce_with::<i32, i32, $op, i32>(v, $l, $axes)),
            CpuStorage::U32(v) => CpuStorage::U32(reduce_with::<u32, u32, $op, u32>(v, $l, $axes)),
            CpuStorage::I64(v) => CpuStorage::I64(reduce_with::<i64, i64, $op, i64>(v, $l, $axes)),
            CpuStorage::U8(v) => CpuStorage::U8(reduce_with::<u8, u8, $op, u8>(v, $l, $axes)),
            CpuStorage::Bool(v) => CpuStorage::Bool(reduce_with::<bool, bool, $op, bool>(v, $l, $axes)),
            CpuStorage::I8(v) => CpuStorage::I8(reduce_with::<i8, i8, $op, i8>(v, $l, $axes)),
            CpuStorage::I16(v) => CpuStorage::I16(reduce_with::<i16, i16, $op, i16>(v, $l, $axes)),
            CpuStorage::U16(v) => CpuStorage::U16(reduce_with::<u16, u16, $op, u16>(v, $l, $axes)),
            CpuStorage::U64(v) => CpuStorage::U64(reduce_with::<u64, u64, $op, u64>(v, $l, $axes)),
        }
    };
}

macro_rules! arg {
    ($s:expr, $l:expr, $axis:expr, $op:ty) => {
        CpuStorage::I64(match $s {
            CpuStorage::F32(v) => arg_with::<f32, f32, $op>(v, $l, $axis),
            CpuStorage::F64(v) => arg_with::<f64, f64, $op>(v, $l, $axis),
            CpuStorage::F16(v) => arg_with::<f16, f32, $op>(v, $l, $axis),
            CpuStorage::BF16(v) => arg_with::<bf16, f32, $op>(v, $l, $axis),
            CpuStorage::I32(v) => arg_with::<i32, i32, $op>(v, $l, $axis),
            CpuStorage::U32(v) => arg_with::<u32, u32, $op>(v, $l, $axis),
            CpuStorage::I64(v) => arg_with::<i64, i64, $op>(v, $l, $axis),
            CpuStorage::U8(v) => arg_with::<u8, u8, $op>(v, $l, $axis),
            CpuStorage::Bool(v) => arg_with::<bool, bool, $op>(v, $l, $axis),
            CpuStorage::I8(v) => arg_with::<i8, i8, $op>(v, $l, $axis),
            CpuStorage::I16(v) => arg_with::<i16, i16, $op>(v, $l, $axis),
            CpuStorage::U16(v) => arg_with::<u16, u16, $op>(v, $l, $axis),
            CpuStorage::U64(v) => arg_with::<u64, u64, $op>(v, $l, $axis),
        })
    };
}

/// See [`crate::backend::BackendStorage::reduce`]: the result has the input's rank with every reduced
/// axis of size 1.
pub(crate) fn reduce(s: &CpuStorage, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<CpuStorage> {
    Ok(match op {
        ReduceOp::Sum => arith!(s, l, axes, SumOp),
        ReduceOp::Prod => arith!(s, l, axes, ProdOp),
        ReduceOp::Max => extreme!(s, l, axes, MaxOp),
        ReduceOp::Min => extreme!(s, l, axes, MinOp),
        ReduceOp::ArgMax => arg!(s, l, axes[0], MaxOp),
        ReduceOp::ArgMin => arg!(s, l, axes[0], MinOp),
    })
}

/// Inclusive prefix sums along `axis`, viewed as a contiguous `(outer, len, inner)` array, accumulated
/// in `A`. Slabs (one `outer` index) run in parallel; within one, whole rows of `inner` elements are
/// added at a time (vectorised).
fn cumsum_with<T: Conv<A>, A: Num, Out: FromAcc<A>>(data: &[T], l: &Layout, axis: usize) -> Vec<Out> {
    let n = l.elem_count();
    let mut out: Vec<Out> = strided::zeroed(n);
    if n == 0 {
        return out;
    }
    let x = strided::contiguous(data, l);
    let dims = l.dims();
    let len = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    let slab = len * inner;
    if inner == 1 {
        // Along the last axis: one running sum per row.
        let rows = (strided::CHUNK / len).max(1);
        out.par_chunks_mut(len).zip(x.par_chunks(len)).with_min_len(rows).for_each(|(o, x)| {
            let mut acc = A::ZERO;
            let mut buf = [A::ZERO; PIECE];
            for (s, c) in pieces::<T, A>(x) {
                for (o, &v) in o[s..s + c.len()].iter_mut().zip(T::view(c, &mut buf)) {
                    acc = acc.add(v);
                    *o = Out::from_acc(acc);
                }
            }
        });
        return out;
    }
    out.par_chunks_mut(slab).zip(x.par_chunks(slab)).for_each(|(o, x)| {
        for c0 in (0..inner).step_by(COLS) {
            let w = COLS.min(inner - c0);
            let mut acc = vec![A::ZERO; w];
            for r in 0..len {
                let b = r * inner + c0;
                accumulate::<T, A, SumOp>(&mut acc, &x[b..b + w]);
                for (o, &a) in o[b..b + w].iter_mut().zip(&acc) {
                    *o = Out::from_acc(a);
                }
            }
        }
    });
    out
}

/// See [`crate::backend::BackendStorage::cumsum`].
pub(crate) fn cumsum(s: &CpuStorage, l: &Layout, axis: usize) -> Result<CpuStorage> {
    Ok(match s {
        CpuStorage::F32(v) => CpuStorage::F32(cumsum_with::<f32, f32, f32>(v, l, axis)),
        CpuStorage::F64(v) => CpuStorage::F64(cumsum_with::<f64, f64, f64>(v, l, axis)),
        CpuStorage::F16(v) => CpuStorage::F16(cumsum_with::<f16, f32, f16>(v, l, axis)),
        CpuStorage::BF16(v) => CpuStorage::BF16(cumsum_with::<bf16, f32, bf16>(v, l, axis)),
        CpuStorage::I32(v) => CpuStorage::I64(cumsum_with::<i32, i64, i64>(v, l, axis)),
        CpuStorage::U32(v) => CpuStorage::I64(cumsum_with::<u32, i64, i64>(v, l, axis)),
        CpuStorage::I64(v) => CpuStorage::I64(cumsum_with::<i64, i64, i64>(v, l, axis)),
        CpuStorage::U8(v) => CpuStorage::I64(cumsum_with::<u8, i64, i64>(v, l, axis)),
        CpuStorage::Bool(v) => CpuStorage::I64(cumsum_with::<bool, i64, i64>(v, l, axis)),
        CpuStorage::I8(v) => CpuStorage::I64(cumsum_with::<i8, i64, i64>(v, l, axis)),
        CpuStorage::I16(v) => CpuStorage::I64(cumsum_with::<i16, i64, i64>(v, l, axis)),
        CpuStorage::U16(v) => CpuStorage::I64(cumsum_with::<u16, i64, i64>(v, l, axis)),
        CpuStorage::U64(v) => CpuStorage::U64(cumsum_with::<u64, u64, u64>(v, l, axis)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairwise_sum_is_accurate() {
        let n = (1 << 24) + 3;
        let x: Vec<f32> = (0..n).map(|i| 0.1 + (i % 7) as f32 * 0.01).collect();
        let exact: f64 = x.iter().map(|&v| v as f64).sum();
        let got = reduce_slice::<f32, f32, SumOp>(&x) as f64;
        assert!((got - exact).abs() / exact < 1e-6, "{got} vs {exact}");
    }

    #[test]
    fn plans() {
        let l = Layout::contiguous([4, 5, 6]);
        assert!(Plan::new(&l, &[2], true).rows());
        assert!(Plan::new(&l, &[1, 2], true).rows());
        let p = Plan::new(&l, &[0], true);
        assert!(!p.rows() && p.columns());
        let t = l.permute("t", &[2, 1, 0]).unwrap();
        assert!(Plan::new(&t, &[0, 1, 2], true).rows());
    }
}
