//! Fallible host allocation: every CPU buffer whose size comes from a user's shape is made here, so an
//! allocation that cannot be made is an `Err` naming the op and the bytes, never an abort.
//!
//! Constructors call the `try_*` functions and return their `Err`. Kernels allocate their outputs deep
//! inside infallible (often parallel) code through [`zeroed_or_unwind`] / [`filled_or_unwind`]: a
//! failed allocation there unwinds with an [`AllocFailure`] payload (`resume_unwind`, so no panic
//! message is printed), which crosses rayon's workers and is turned into `Error::HostOutOfMemory` by
//! [`guard`] where `Storage` hands the op to the CPU backend. Nothing else is caught: a real panic
//! still propagates.

use crate::{Error, Result};
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest single host allocation, in bytes; 0 until first read.
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// The largest single host buffer kiln will try to allocate: a request above it is
/// `Error::HostOutOfMemory` before the allocator is asked. By default the machine's physical memory
/// (Linux `MemTotal`; no limit where it cannot be read), since a larger request cannot succeed, and
/// asking for it makes some allocators (sanitizers, libFuzzer's malloc limit, overcommitting
/// kernels) abort or kill the process instead of failing. `KILN_HOST_ALLOC_LIMIT` (bytes) or
/// [`set_host_allocation_limit`] set a lower one.
pub fn host_allocation_limit() -> u64 {
    match LIMIT.load(Ordering::Relaxed) {
        0 => {
            let from_env = crate::settings::HOST_ALLOC_LIMIT.get().ok().and_then(|v| v.trim().parse::<u64>().ok());
            let limit = from_env.filter(|&b| b > 0).or_else(physical_memory).unwrap_or(u64::MAX);
            // A limit set meanwhile by `set_host_allocation_limit` wins.
            match LIMIT.compare_exchange(0, limit, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => limit,
                Err(set) => set,
            }
        }
        l => l,
    }
}

/// Sets [`host_allocation_limit`] for the whole process (at least 1 byte).
pub fn set_host_allocation_limit(bytes: u64) {
    LIMIT.store(bytes.max(1), Ordering::Relaxed);
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()?.saturating_mul(1024))
}

/// The bytes of `n` elements of `T`: `TooLarge` when that overflows `isize`, `HostOutOfMemory` when
/// it exceeds [`host_allocation_limit`].
fn bytes_of<T>(op: &'static str, n: usize) -> Result<usize> {
    let bytes = n.checked_mul(std::mem::size_of::<T>()).filter(|&b| b <= isize::MAX as usize).ok_or_else(|| {
        Error::TooLarge {
            op,
            msg: format!("{n} elements of {} bytes each do not fit in memory", std::mem::size_of::<T>()),
        }
    })?;
    if bytes as u64 > host_allocation_limit() {
        return Err(Error::HostOutOfMemory { op, bytes: bytes as u64 });
    }
    Ok(bytes)
}

fn oom<T>(op: &'static str, n: usize) -> Error {
    Error::HostOutOfMemory { op, bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64) }
}

/// An empty vector with room for exactly `n` elements.
pub(crate) fn try_with_capacity<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    bytes_of::<T>(op, n)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| oom::<T>(op, n))?;
    Ok(v)
}

/// `[f(0), f(1), ..., f(n - 1)]`.
pub(crate) fn try_collect<T>(op: &'static str, n: usize, f: impl FnMut(usize) -> T) -> Result<Vec<T>> {
    let mut v = try_with_capacity(op, n)?;
    v.extend((0..n).map(f));
    Ok(v)
}

/// `n` copies of `value`.
pub(crate) fn try_filled<T: Clone>(op: &'static str, n: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_with_capacity(op, n)?;
    v.resize(n, value);
    Ok(v)
}

/// `n` zeroed elements, straight from the allocator's zeroed pages (no memset pass for large `n`).
pub(crate) fn try_zeroed<T: bytemuck::Zeroable>(op: &'static str, n: usize) -> Result<Vec<T>> {
    bytes_of::<T>(op, n)?;
    if n == 0 || std::mem::size_of::<T>() == 0 {
        return Ok(bytemuck::zeroed_vec(n));
    }
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| oom::<T>(op, n))?;
    // SAFETY: `layout` has a nonzero size (n > 0, T not zero-sized).
    let ptr = unsafe { std::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(oom::<T>(op, n));
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of `[T; n]`, all its bytes are
    // zero, and all-zero bytes are a valid `T` (`Zeroable`).
    Ok(unsafe { Vec::from_raw_parts(ptr, n, n) })
}

/// The unwind payload of a kernel allocation that failed.
struct AllocFailure {
    bytes: u64,
}

fn unwind(e: Error) -> ! {
    let bytes = match e {
        Error::HostOutOfMemory { bytes, .. } => bytes,
        _ => u64::MAX,
    };
    std::panic::resume_unwind(Box::new(AllocFailure { bytes }))
}

/// [`try_zeroed`] for kernels: a failure unwinds to the [`guard`] around the op.
pub(crate) fn zeroed_or_unwind<T: bytemuck::Zeroable>(n: usize) -> Vec<T> {
    try_zeroed("cpu", n).unwrap_or_else(|e| unwind(e))
}

/// [`try_filled`] for kernels: a failure unwinds to the [`guard`] around the op.
pub(crate) fn filled_or_unwind<T: Clone>(n: usize, value: T) -> Vec<T> {
    try_filled("cpu", n, value).unwrap_or_else(|e| unwind(e))
}

/// Runs the CPU op `f`, turning an allocation failure inside it into `Error::HostOutOfMemory` naming
/// `op`.
pub(crate) fn guard<R>(op: &'static str, f: impl FnOnce() -> Result<R>) -> Result<R> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => match payload.downcast::<AllocFailure>() {
            Ok(a) => Err(Error::HostOutOfMemory { op, bytes: a.bytes }),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_requests_are_errors() {
        let e = try_zeroed::<f32>("t", 1 << 40).unwrap_err();
        assert!(matches!(e, Error::HostOutOfMemory { op: "t", bytes } if bytes == 4 << 40), "{e}");
        let e = try_filled::<u8>("t", 1 << 42, 1).unwrap_err();
        assert!(matches!(e, Error::HostOutOfMemory { .. }), "{e}");
        assert!(matches!(try_collect::<f64>("t", usize::MAX / 4, |_| 0.0), Err(Error::TooLarge { .. })));
        assert_eq!(try_zeroed::<u16>("t", 5).unwrap(), vec![0; 5]);
        assert_eq!(try_collect("t", 3, |i| i * 2).unwrap(), vec![0, 2, 4]);
    }

    #[test]
    fn guard_turns_kernel_allocation_failures_into_errors() {
        use rayon::prelude::*;
        let r: Result<Vec<Vec<u64>>> = guard("k", || {
            Ok((0..4).into_par_iter().map(|i| zeroed_or_unwind::<u64>(if i == 2 { 1 << 46 } else { 8 })).collect())
        });
        assert!(matches!(r, Err(Error::HostOutOfMemory { op: "k", bytes }) if bytes == 8 << 46), "{r:?}");
        assert_eq!(guard("k", || Ok(filled_or_unwind(3, 7u8))).unwrap(), vec![7, 7, 7]);
    }
}
