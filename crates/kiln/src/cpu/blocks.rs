//! The block engine the elementwise kernels share: a view is walked as contiguous slices (borrowed
//! when the view is contiguous along its inner dim, gathered into a small stack buffer otherwise), so
//! every kernel is a plain loop over slices; outputs are fresh zeroed pages (huge pages when large).

use super::strided;
use crate::Layout;

/// Elements per stack buffer of the block engine (4 KiB of f64).
pub(crate) const BLOCK: usize = 512;
/// Buffer size used for short segments, so that many tiny rows do not each initialise a full block.
pub(crate) const SMALL: usize = 32;

/// Outputs at least this large ask the kernel for transparent huge pages (NumPy does the same).
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// A zeroed output vector of `n` elements, like `strided::zeroed` (fresh pages from the OS, no memset
/// pass), and for large outputs advised to use transparent huge pages. Without that advice the kernel
/// faults in 4 KiB pages one at a time, which costs more than the elementwise op itself: a 32M f32
/// add spends ~3/4 of its time in page faults.
pub(crate) fn alloc_out<T: bytemuck::Zeroable>(n: usize) -> Vec<T> {
    let v: Vec<T> = strided::zeroed(n);
    let bytes = n * std::mem::size_of::<T>();
    if bytes >= HUGE_PAGE_MIN_BYTES {
        advise_huge_pages(v.as_ptr() as usize, bytes);
    }
    v
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(addr: usize, len: usize) {
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    const PAGE: usize = 4096;
    let start = addr.div_ceil(PAGE) * PAGE;
    let end = (addr + len) / PAGE * PAGE;
    if end > start {
        // SAFETY: the range lies inside one live allocation that we own; MADV_HUGEPAGE only changes
        // how the kernel backs it, never its contents. Failure (e.g. THP disabled) is harmless.
        unsafe {
            madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_addr: usize, _len: usize) {}

/// Runs `f(src, dst)` over the view `l` of `data`, in parallel, and returns the contiguous output.
/// `src` and `dst` always have the same length; `src` is a contiguous slice of the input (borrowed
/// when the view's inner stride is 1, else gathered into a stack buffer of at most [`BLOCK`]).
pub(crate) fn map_blocks<T, U, F>(data: &[T], l: &Layout, f: F) -> Vec<U>
where
    T: Copy + Send + Sync,
    U: Send + bytemuck::Zeroable,
    F: Fn(&[T], &mut [U]) + Sync,
{
    let mut out = alloc_out(l.elem_count());
    if out.is_empty() {
        return out;
    }
    strided::for_each_segment(strided::CHUNK, l.dims(), [l.strides()], [l.offset()], &mut out, |o, [a], [sa]| {
        if sa == 1 {
            f(&data[a..a + o.len()], o);
        } else if o.len() <= SMALL {
            gathered::<T, U, SMALL>(data, a, sa, o, &f);
        } else {
            gathered::<T, U, BLOCK>(data, a, sa, o, &f);
        }
    });
    out
}

/// The strided case of [`map_blocks`]: gather blocks of `N` into a stack buffer, then run `f`.
#[inline(always)]
fn gathered<T: Copy, U, const N: usize>(data: &[T], a: usize, sa: usize, o: &mut [U], f: impl Fn(&[T], &mut [U])) {
    let mut buf = [data[a]; N];
    for (k, ob) in o.chunks_mut(N).enumerate() {
        let b = &mut buf[..ob.len()];
        gather(data, a + k * N * sa, sa, b);
        f(b, ob);
    }
}

/// `dst[j] = data[start + j * stride]` (stride 0 fills).
#[inline]
pub(crate) fn gather<T: Copy>(data: &[T], start: usize, stride: usize, dst: &mut [T]) {
    if stride == 0 {
        dst.fill(data[start]);
        return;
    }
    let n = dst.len();
    if n == 0 {
        return;
    }
    // One bounds check for the whole run, then unchecked-free indexing the optimiser can hoist.
    let src = &data[start..=start + (n - 1) * stride];
    for (j, d) in dst.iter_mut().enumerate() {
        *d = src[j * stride];
    }
}

/// Runs `f(src_block, dst_block, scratch)` over `src`/`dst` in blocks, with a zeroed stack scratch
/// of `W` sized to the input (a short input gets a short scratch).
#[inline(always)]
pub(crate) fn with_scratch<S, D, W: Copy + Default>(src: &[S], dst: &mut [D], f: impl Fn(&[S], &mut [D], &mut [W])) {
    #[inline(always)]
    fn run<S, D, W: Copy + Default, const N: usize>(src: &[S], dst: &mut [D], f: impl Fn(&[S], &mut [D], &mut [W])) {
        let mut buf = [W::default(); N];
        for (s, d) in src.chunks(N).zip(dst.chunks_mut(N)) {
            f(s, d, &mut buf[..s.len()]);
        }
    }
    if src.len() <= SMALL {
        run::<S, D, W, SMALL>(src, dst, f)
    } else {
        run::<S, D, W, BLOCK>(src, dst, f)
    }
}
