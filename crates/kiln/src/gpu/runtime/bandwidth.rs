//! The device's memory-bandwidth limit, measured with a copy kernel (`bandwidth.wgsl`): what
//! benchmarks compare memory-bound kernels against.

use super::kernels::render;
use super::params::params;
use super::{wgsl, GpuStorage};
use crate::{DType, Device, Error, Result};

const SOURCE: &str = include_str!("bandwidth.wgsl");

params! {
    /// The copy kernel's parameters: 16-byte vectors to copy.
    struct CopyParams { len: u32 }
}

/// The copy kernel's source.
pub(crate) fn source() -> String {
    render(SOURCE, &[("PARAMS", &CopyParams::wgsl())])
}

/// The device's copy bandwidth in bytes read plus written per second: the best of `runs` copies of
/// `bytes` bytes (capped at one binding) by a kernel that moves 16 bytes per invocation, each timed with
/// GPU timestamps where the device has them (else from submit to completion on the host).
pub fn copy_bandwidth(device: &Device, bytes: u64, runs: usize) -> Result<f64> {
    let ctx = device.gpu_context().ok_or_else(|| Error::arg("copy_bandwidth", "needs a GPU device"))?;
    let vecs = (bytes.min(ctx.max_binding()) / 16) as usize;
    if vecs == 0 || vecs > u32::MAX as usize {
        return Err(Error::arg("copy_bandwidth", format!("cannot copy {bytes} bytes")));
    }
    let src = GpuStorage::full(ctx, DType::U32, 4 * vecs, 1.0)?;
    let dst = GpuStorage::alloc(ctx, DType::U32, 4 * vecs)?;
    let kernel = ctx.pipelines.get(ctx, "bandwidth:copy", 1, source)?;
    let groups = wgsl::grid(vecs, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let record = || {
        let mut exec = ctx.exec.lock().unwrap_or_else(|e| e.into_inner());
        exec.dispatch(
            ctx,
            &kernel,
            &[dst.buffer.raw(), src.buffer.raw()],
            &CopyParams { len: vecs as u32 }.words(),
            groups,
        )
    };
    // A second of copies first, so the GPU reaches its working clocks before anything is timed.
    super::context::keep_busy(ctx, 1.0, record)?;
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        best = best.min(device.measure(record)?.seconds);
    }
    Ok(2.0 * (16 * vecs) as f64 / best)
}
