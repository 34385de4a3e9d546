//! CPU matrix products. f32 and f64 go through the `gemm` crate, which takes row and column strides,
//! so transposed operands are never copied. f16 and bf16 convert the storage span each operand
//! touches to f32 (keeping its strides, so broadcast batches stay unmaterialised), multiply in f32
//! and round back, like every other f16/bf16 op: `gemm`'s own f16 product accumulates in f16 on some
//! shapes (a 1 x 4096 @ 4096 x 64 product came out 83% off). Integers use a plain parallel loop with
//! wrapping arithmetic.
//!
//! Batches: the batch dims are collapsed per operand, broadcast batch dims keep stride 0 (never
//! copied). Products big enough to split run one after another, each over all threads; small ones run
//! in parallel over the batch.

use super::reduce::Num;
use super::{strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::layout::collapse;
use crate::{Layout, Result, WithDType};
use gemm::Parallelism;
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use rayon::prelude::*;

/// Multiply-adds (`m * n * k`) from which one product is split over threads.
const PAR_FLOPS: usize = 1 << 18;

/// The geometry of a batched product `(batch.., m, k) @ (batch.., k, n)`.
struct Geometry {
    m: usize,
    n: usize,
    k: usize,
    batch_dims: Vec<usize>,
    a_batch: Vec<usize>,
    b_batch: Vec<usize>,
    n_batch: usize,
    /// Row and column strides of the matrices.
    a_rs: usize,
    a_cs: usize,
    b_rs: usize,
    b_cs: usize,
    a_off: usize,
    b_off: usize,
}

impl Geometry {
    fn new(al: &Layout, bl: &Layout) -> Geometry {
        let r = al.rank();
        let (m, k, n) = (al.dims()[r - 2], al.dims()[r - 1], bl.dims()[r - 1]);
        let batch = &al.dims()[..r - 2];
        let (batch_dims, mut bs) = collapse(batch, &[&al.strides()[..r - 2], &bl.strides()[..r - 2]]);
        let b_batch = bs.pop().unwrap();
        let a_batch = bs.pop().unwrap();
        Geometry {
            m,
            n,
            k,
            n_batch: batch.iter().product(),
            batch_dims,
            a_batch,
            b_batch,
            a_rs: al.strides()[r - 2],
            a_cs: al.strides()[r - 1],
            b_rs: bl.strides()[r - 2],
            b_cs: bl.strides()[r - 1],
            a_off: al.offset(),
            b_off: bl.offset(),
        }
    }

    /// Storage offsets of the two matrices of batch `i`.
    fn offsets(&self, i: usize) -> (usize, usize) {
        let (mut rem, mut oa, mut ob) = (i, self.a_off, self.b_off);
        for d in (0..self.batch_dims.len()).rev() {
            let idx = rem % self.batch_dims[d];
            rem /= self.batch_dims[d];
            oa += idx * self.a_batch[d];
            ob += idx * self.b_batch[d];
        }
        (oa, ob)
    }
}

/// `a @ b` through `gemm` for `T` in f32, f64.
fn gemm_batched<T: WithDType>(a: &[T], al: &Layout, b: &[T], bl: &Layout) -> Vec<T> {
    let g = Geometry::new(al, bl);
    let mn = g.m * g.n;
    let mut out: Vec<T> = strided::zeroed(g.n_batch * mn);
    if mn == 0 || g.k == 0 {
        return out;
    }
    let big = g.m * g.n * g.k >= PAR_FLOPS;
    let run = |i: usize, dst: &mut [T], par: Parallelism| {
        let (oa, ob) = g.offsets(i);
        debug_assert!(oa < a.len() && ob < b.len() && dst.len() == mn);
        // SAFETY: the layouts are valid views of `a` and `b` (every index `off + i * rs + j * cs` they
        // describe is in bounds), `dst` holds exactly `m * n` elements written row-major, and `T` is one
        // of the types `gemm` supports (f32, f64; see `matmul`).
        unsafe {
            gemm::gemm(
                g.m,
                g.n,
                g.k,
                dst.as_mut_ptr(),
                1,
                g.n as isize,
                false,
                a.as_ptr().add(oa),
                g.a_cs as isize,
                g.a_rs as isize,
                b.as_ptr().add(ob),
                g.b_cs as isize,
                g.b_rs as isize,
                T::ZERO,
                T::ONE,
                false,
                false,
                false,
                par,
            )
        }
    };
    if big || g.n_batch == 1 {
        let par = if big { Parallelism::Rayon(rayon::current_num_threads()) } else { Parallelism::None };
        for (i, dst) in out.chunks_mut(mn).enumerate() {
            run(i, dst, par);
        }
    } else {
        out.par_chunks_mut(mn).enumerate().for_each(|(i, dst)| run(i, dst, Parallelism::None));
    }
    out
}

/// The storage span a f16/bf16 view touches, converted to f32, with the view's layout rebased onto it.
fn span_to_f32<H>(data: &[H], l: &Layout) -> (Vec<f32>, Layout)
where
    H: WithDType,
    [H]: HalfFloatSliceExt,
{
    let span = &data[l.offset()..l.storage_extent()];
    let mut f: Vec<f32> = strided::zeroed(span.len());
    f.par_chunks_mut(strided::CHUNK).zip(span.par_chunks(strided::CHUNK)).for_each(|(o, s)| s.convert_to_f32_slice(o));
    (f, Layout::new(l.shape().clone(), l.strides().to_vec(), 0))
}

/// `a @ b` for f16/bf16: multiplied in f32, rounded once at the end.
fn half_batched<H>(a: &[H], al: &Layout, b: &[H], bl: &Layout) -> Vec<H>
where
    H: WithDType,
    [H]: HalfFloatSliceExt,
{
    if al.elem_count() == 0 || bl.elem_count() == 0 {
        let g = Geometry::new(al, bl);
        return strided::zeroed(g.n_batch * g.m * g.n);
    }
    let (fa, fal) = span_to_f32(a, al);
    let (fb, fbl) = span_to_f32(b, bl);
    let c = gemm_batched(&fa, &fal, &fb, &fbl);
    let mut out: Vec<H> = strided::zeroed(c.len());
    out.par_chunks_mut(strided::CHUNK).zip(c.par_chunks(strided::CHUNK)).for_each(|(o, s)| o.convert_from_f32_slice(s));
    out
}

/// Integer `a @ b` with wrapping arithmetic, parallel over output rows.
fn int_batched<T: Num + WithDType>(a: &[T], al: &Layout, b: &[T], bl: &Layout) -> Vec<T> {
    let g = Geometry::new(al, bl);
    let mut out: Vec<T> = strided::zeroed(g.n_batch * g.m * g.n);
    if out.is_empty() || g.k == 0 {
        return out;
    }
    let rows_per_task = (strided::CHUNK / (g.n * g.k).max(1)).max(1);
    out.par_chunks_mut(g.n).with_min_len(rows_per_task).enumerate().for_each(|(r, row)| {
        let (bi, i) = (r / g.m, r % g.m);
        let (oa, ob) = g.offsets(bi);
        let a_row = oa + i * g.a_rs;
        if g.b_cs == 1 {
            // out[i, :] += a[i, p] * b[p, :], rows of b contiguous.
            for p in 0..g.k {
                let av = a[a_row + p * g.a_cs];
                let br = &b[ob + p * g.b_rs..ob + p * g.b_rs + g.n];
                for (o, &bv) in row.iter_mut().zip(br) {
                    *o = o.add(av.mul(bv));
                }
            }
        } else {
            // Dot products along k (b transposed or strided).
            for (j, o) in row.iter_mut().enumerate() {
                let bc = ob + j * g.b_cs;
                let mut acc = <T as Num>::ZERO;
                for p in 0..g.k {
                    acc = acc.add(a[a_row + p * g.a_cs].mul(b[bc + p * g.b_rs]));
                }
                *o = acc;
            }
        }
    });
    out
}

/// See [`crate::backend::BackendStorage::matmul`].
pub(crate) fn matmul(a: &CpuStorage, al: &Layout, b: &CpuStorage, bl: &Layout) -> Result<CpuStorage> {
    use CpuStorage as S;
    Ok(match (a, b) {
        (S::F32(x), S::F32(y)) => S::F32(gemm_batched(x, al, y, bl)),
        (S::F64(x), S::F64(y)) => S::F64(gemm_batched(x, al, y, bl)),
        (S::F16(x), S::F16(y)) => S::F16(half_batched::<f16>(x, al, y, bl)),
        (S::BF16(x), S::BF16(y)) => S::BF16(half_batched::<bf16>(x, al, y, bl)),
        (S::I32(x), S::I32(y)) => S::I32(int_batched(x, al, y, bl)),
        (S::U32(x), S::U32(y)) => S::U32(int_batched(x, al, y, bl)),
        (S::I64(x), S::I64(y)) => S::I64(int_batched(x, al, y, bl)),
        (S::U8(x), S::U8(y)) => S::U8(int_batched(x, al, y, bl)),
        (S::I8(x), S::I8(y)) => S::I8(int_batched(x, al, y, bl)),
        (S::I16(x), S::I16(y)) => S::I16(int_batched(x, al, y, bl)),
        (S::U16(x), S::U16(y)) => S::U16(int_batched(x, al, y, bl)),
        (S::U64(x), S::U64(y)) => S::U64(int_batched(x, al, y, bl)),
        (S::Bool(_), S::Bool(_)) => return Err(unsupported("matmul", a.dtype())),
        _ => return Err(a.not_same_dtype("matmul", b)),
    })
}
