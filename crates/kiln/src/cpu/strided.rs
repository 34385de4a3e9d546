//! The CPU backend's iteration engine. Operands are views (layouts) of one logical shape; dims are
//! collapsed first, so contiguous data becomes one long row and a broadcast operand becomes a row with
//! stride 0. The output (always contiguous) is split into chunks that rayon runs in parallel, and each
//! chunk is handed to a row kernel as segments of the innermost dim with constant strides, which is
//! the form the compiler vectorises.

use crate::layout::collapse;
use crate::Layout;
use rayon::prelude::*;
use std::borrow::Cow;

/// Elements per parallel task. Large enough to amortise scheduling, small enough to split 1M elements.
pub(crate) const CHUNK: usize = 1 << 15;

/// Outputs of cheap elementwise ops (binary arithmetic, comparisons, `where`) of at most this many
/// elements are computed on the calling thread. Below it, handing chunks to rayon's workers (a
/// wake-up and a wait per op, from a caller outside the pool) costs more than splitting saves: a
/// 100k-element f32 add from Python took 2.3x NumPy's time in chunks (`crates/kiln-py/bench/percall.py`).
/// Unary maps (`exp`, `tanh`, casts) and gathers keep [`CHUNK`]: their work per element is larger.
pub(crate) const SERIAL_MAX: usize = 1 << 17;

/// A zero-initialised vector (an allocation failure unwinds to `alloc::guard`); for large `n` the pages come straight from the OS (no memset pass), and
/// on Linux they are asked to be transparent huge pages (as NumPy does): faulting in 2 MiB pages
/// instead of 4 KiB ones is what lets a bandwidth-bound op reach memory speed on fresh output.
pub(crate) fn zeroed<T: bytemuck::Zeroable>(n: usize) -> Vec<T> {
    let v = super::alloc::zeroed_or_unwind(n);
    #[cfg(target_os = "linux")]
    advise_huge_pages(&v);
    v
}

#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(v: &[T]) {
    const MIN: usize = 4 << 20;
    const PAGE: usize = 4096;
    let bytes = std::mem::size_of_val(v);
    if bytes < MIN {
        return;
    }
    let start = v.as_ptr() as usize;
    let aligned = start.next_multiple_of(PAGE);
    // SAFETY: the range lies inside the vector's allocation; MADV_HUGEPAGE is advice that changes
    // neither the contents nor the validity of the memory.
    unsafe {
        libc::madvise(aligned as *mut libc::c_void, start + bytes - aligned, libc::MADV_HUGEPAGE);
    }
}

/// Runs `row(out_segment, operand_offsets, operand_inner_strides)` over the output (in parallel above
/// `serial_max` elements: [`SERIAL_MAX`] or [`CHUNK`]). The
/// output is row-major over `dims`; operand `i` is described by `strides[i]` and `offsets[i]`.
pub(crate) fn for_each_segment<U: Send, const N: usize>(
    serial_max: usize,
    dims: &[usize],
    strides: [&[usize]; N],
    offsets: [usize; N],
    out: &mut [U],
    row: impl Fn(&mut [U], [usize; N], [usize; N]) + Sync,
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let (cd, cs) = collapse(dims, &strides);
    let inner = *cd.last().unwrap();
    let outer_dims = &cd[..cd.len() - 1];
    let inner_strides: [usize; N] = std::array::from_fn(|i| *cs[i].last().unwrap());
    let run = |start: usize, chunk: &mut [U]| {
        let mut pos = start;
        let end = start + chunk.len();
        while pos < end {
            let (r, c) = (pos / inner, pos % inner);
            let len = (inner - c).min(end - pos);
            let mut offs = offsets;
            let mut rem = r;
            for d in (0..outer_dims.len()).rev() {
                let idx = rem % outer_dims[d];
                rem /= outer_dims[d];
                for i in 0..N {
                    offs[i] += idx * cs[i][d];
                }
            }
            for i in 0..N {
                offs[i] += c * inner_strides[i];
            }
            row(&mut chunk[pos - start..pos - start + len], offs, inner_strides);
            pos += len;
        }
    };
    if n <= serial_max {
        run(0, out);
    } else {
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(i, chunk)| run(i * CHUNK, chunk));
    }
}

/// The view's elements in row-major order: borrowed when contiguous, else gathered.
pub(crate) fn contiguous<'a, T: Copy + Send + Sync + bytemuck::Zeroable>(data: &'a [T], l: &Layout) -> Cow<'a, [T]> {
    match l.contiguous_range() {
        Some(r) => Cow::Borrowed(&data[r]),
        None => Cow::Owned(unary_map(data, l, |x| x)),
    }
}

/// `f` applied to every element of the view, into a new contiguous vector.
pub(crate) fn unary_map<T, U, F>(data: &[T], l: &Layout, f: F) -> Vec<U>
where
    T: Copy + Sync,
    U: Send + bytemuck::Zeroable,
    F: Fn(T) -> U + Sync,
{
    let mut out = zeroed(l.elem_count());
    for_each_segment(CHUNK, l.dims(), [l.strides()], [l.offset()], &mut out, |o, [a], [sa]| {
        if sa == 1 {
            let n = o.len();
            for (o, &x) in o.iter_mut().zip(&data[a..a + n]) {
                *o = f(x);
            }
        } else {
            for (j, o) in o.iter_mut().enumerate() {
                *o = f(data[a + j * sa]);
            }
        }
    });
    out
}

/// Writes the view `l` of `src` into the view `dl` of `dst` (one shape). Dims are collapsed and rows of
/// the innermost dim are copied in parallel (`copy_from_slice` where both rows are contiguous).
pub(crate) fn copy_into<T: Copy + Send + Sync>(src: &[T], l: &Layout, dst: &mut [T], dl: &Layout) {
    if let (Some(s), Some(d)) = (l.contiguous_range(), dl.contiguous_range()) {
        dst[d].copy_from_slice(&src[s]);
        return;
    }
    let (dims, strides) = collapse(l.dims(), &[l.strides(), dl.strides()]);
    let inner = *dims.last().unwrap();
    let (ss, ds) = (strides[0][dims.len() - 1], strides[1][dims.len() - 1]);
    let rows: usize = dims[..dims.len() - 1].iter().product();
    // A destination that repeats elements (stride 0 over a dim > 1) must be written in order.
    let aliasing = dims.iter().zip(&strides[1]).any(|(&d, &s)| d > 1 && s == 0);
    let row_start = |r: usize| {
        let (mut so, mut dof, mut rem) = (l.offset(), dl.offset(), r);
        for k in (0..dims.len() - 1).rev() {
            let i = rem % dims[k];
            rem /= dims[k];
            so += i * strides[0][k];
            dof += i * strides[1][k];
        }
        (so, dof)
    };
    let len = dst.len();
    let ptr = SendPtr(dst.as_mut_ptr());
    let copy_row = |r: usize| {
        let (so, dof) = row_start(r);
        let p = ptr;
        if ss == 1 && ds == 1 {
            assert!(dof + inner <= len);
            // SAFETY: in bounds (checked); distinct rows of a non-aliasing view are disjoint.
            let d = unsafe { std::slice::from_raw_parts_mut(p.0.add(dof), inner) };
            d.copy_from_slice(&src[so..so + inner]);
        } else {
            for j in 0..inner {
                let di = dof + j * ds;
                assert!(di < len);
                // SAFETY: in bounds (checked); no other row writes element `di`.
                unsafe { *p.0.add(di) = src[so + j * ss] };
            }
        }
    };
    if aliasing || rows * inner < CHUNK {
        (0..rows).for_each(copy_row);
    } else {
        (0..rows).into_par_iter().with_min_len((CHUNK / inner.max(1)).max(1)).for_each(copy_row);
    }
}

/// A raw pointer that may cross threads; users guarantee disjoint writes.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
unsafe impl<T: Send> Send for SendPtr<T> {}
unsafe impl<T: Send> Sync for SendPtr<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_chunks_cover_odd_sizes() {
        let n = 3 * CHUNK + 17;
        let a: Vec<u32> = (0..n as u32).collect();
        let l = Layout::contiguous([n / 7 + 1, 7]).narrow("t", 0, 0, n / 7).unwrap();
        let out = unary_map(&a, &l, |x| x * 2);
        assert_eq!(out.len(), (n / 7) * 7);
        assert!(out.iter().enumerate().all(|(i, &v)| v == 2 * i as u32));
        let t = Layout::contiguous([7, n / 7]).permute("t", &[1, 0]).unwrap();
        let out = unary_map(&a, &t, |x| x);
        assert_eq!(out[1], (n / 7) as u32);
    }
}
