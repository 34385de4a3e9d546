//! One opened wgpu device: the device and queue with the adapter's limits and kiln's features, an
//! error sink for what wgpu reports outside an error scope (the next op turns it into an `Err`), the
//! device-lost flag, and waiting for the queue. Everything else in the runtime sits on top of this.

use super::adapters::AdapterSummary;
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The wgpu device of one adapter and what kiln tracks about it.
pub struct Gpu {
    pub(crate) index: usize,
    pub(crate) summary: AdapterSummary,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) features: wgpu::Features,
    pub(crate) limits: wgpu::Limits,
    /// The adapter's cooperative matrix configurations (empty without EXPERIMENTAL_COOPERATIVE_MATRIX).
    pub(crate) coop_matrix: Vec<wgpu::CooperativeMatrixProperties>,
    lost: Arc<AtomicBool>,
    lost_reason: Arc<Mutex<String>>,
    errors: Arc<Mutex<Vec<String>>>,
    /// Fill every op output with all-ones bits before the op runs, so unwritten elements show up.
    pub(crate) poison: AtomicBool,
    /// How long a wait for the GPU (readback, synchronize) may take, in milliseconds, before the
    /// device is declared lost: wgpu has no per-dispatch timeout, so a kernel that runs too long
    /// is caught here.
    pub(crate) wait_timeout_ms: AtomicU64,
}

/// The default wait limit: `KILN_GPU_TIMEOUT` seconds, else 600.
fn default_wait_timeout_ms() -> u64 {
    crate::settings::GPU_TIMEOUT
        .get()
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(600_000, |s| (s * 1000.0).ceil() as u64)
}

impl Gpu {
    /// Wraps a freshly requested device: installs the error sink and the device-lost callback.
    pub(crate) fn new(
        index: usize,
        summary: AdapterSummary,
        (device, queue): (wgpu::Device, wgpu::Queue),
        features: wgpu::Features,
        limits: wgpu::Limits,
        coop_matrix: Vec<wgpu::CooperativeMatrixProperties>,
    ) -> Gpu {
        let errors = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock().unwrap_or_else(|e| e.into_inner()).push(e.to_string());
        }));
        let lost = Arc::new(AtomicBool::new(false));
        let lost_reason = Arc::new(Mutex::new(String::new()));
        let (l, r) = (lost.clone(), lost_reason.clone());
        device.set_device_lost_callback(move |reason, msg| {
            *r.lock().unwrap_or_else(|e| e.into_inner()) = format!("{reason:?}: {msg}");
            l.store(true, Ordering::SeqCst);
        });
        Gpu {
            index,
            summary,
            device,
            queue,
            features,
            limits,
            coop_matrix,
            lost,
            lost_reason,
            errors,
            poison: AtomicBool::new(crate::settings::GPU_POISON.is_one()),
            wait_timeout_ms: AtomicU64::new(default_wait_timeout_ms()),
        }
    }

    /// `Err(DeviceLost)` once the device is gone, or the first error wgpu reported out of scope.
    pub(crate) fn check(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(Error::DeviceLost(self.lost_reason.lock().unwrap_or_else(|e| e.into_inner()).clone()));
        }
        let mut errs = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if !errs.is_empty() {
            let msg = errs.join("; ");
            errs.clear();
            return Err(Error::Gpu { op: "gpu", msg });
        }
        Ok(())
    }

    /// Marks the device lost (used when wgpu reports it through a failed wait). The first reason
    /// is kept.
    pub(crate) fn mark_lost(&self, why: String) {
        let mut reason = self.lost_reason.lock().unwrap_or_else(|e| e.into_inner());
        if !self.lost.load(Ordering::SeqCst) || reason.is_empty() {
            *reason = why;
        }
        self.lost.store(true, Ordering::SeqCst);
    }

    /// Whether the device is lost (every op fails with `DeviceLost`).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Really loses the device (wgpu's `Device::destroy`): for testing how kiln behaves on a device
    /// loss, which cannot be caused on demand otherwise.
    pub(crate) fn destroy(&self, why: &str) {
        self.mark_lost(format!("destroyed: {why}"));
        self.device.destroy();
    }

    /// The wait limit.
    pub(crate) fn wait_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.wait_timeout_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn has(&self, f: wgpu::Features) -> bool {
        self.features.contains(f)
    }

    /// The largest buffer one binding can see.
    pub(crate) fn max_binding(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size.min(self.limits.max_buffer_size)
    }
}

/// Blocks until the queue has finished `index` (or everything), at most the device's wait limit
/// (`Device::set_wait_timeout`, `KILN_GPU_TIMEOUT`). Past it the device is declared lost: work that
/// runs that long is a hung kernel, the state of the queue is unknown, and on real GPUs the driver
/// resets the device anyway. Every later op fails with `DeviceLost`; `Device::gpu()` opens a fresh one.
pub(crate) fn wait(gpu: &Gpu, index: Option<wgpu::SubmissionIndex>) -> Result<()> {
    gpu.check()?;
    let start = Instant::now();
    let limit = gpu.wait_timeout();
    let r = gpu.device.poll(wgpu::PollType::Wait { submission_index: index, timeout: Some(limit) });
    if let Err(e) = r {
        let why = match e {
            wgpu::PollError::Timeout => {
                format!(
                    "the GPU did not finish its work within the wait limit of {limit:?} (a kernel that runs too long?)"
                )
            }
            e => format!("waiting for the GPU failed after {:?}: {e}", start.elapsed()),
        };
        gpu.mark_lost(why);
    }
    gpu.check()
}

/// Maps a MAP_WRITE buffer, waits until the device is done with it, and writes `bytes` at its start
/// (zero-padded to whole words).
pub(crate) fn write_mapped(ctx: &Gpu, buf: &wgpu::Buffer, bytes: &[u8]) -> Result<()> {
    let padded = bytes.len().div_ceil(4) as u64 * 4;
    if padded == 0 {
        return Ok(());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    buf.map_async(wgpu::MapMode::Write, 0..padded, move |r| {
        let _ = tx.send(r);
    });
    wait(ctx, None)?;
    let err = |e: String| Error::Gpu { op: "upload", msg: e };
    rx.recv().map_err(|e| err(e.to_string()))?.map_err(|e| err(e.to_string()))?;
    {
        let mut view = buf.get_mapped_range_mut(0..padded).map_err(|e| err(e.to_string()))?;
        if bytes.len() as u64 == padded {
            view.copy_from_slice(bytes);
        } else {
            let mut words = bytes.to_vec();
            words.resize(padded as usize, 0);
            view.copy_from_slice(&words);
        }
    }
    buf.unmap();
    Ok(())
}

/// Maps a MAP_READ buffer whose copy has been submitted, waits, and copies `bytes` out.
pub(crate) fn read_mapped(ctx: &Gpu, buf: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    buf.map_async(wgpu::MapMode::Read, 0..bytes, move |r| {
        let _ = tx.send(r);
    });
    wait(ctx, None)?;
    rx.recv()
        .map_err(|e| Error::Gpu { op: "readback", msg: e.to_string() })?
        .map_err(|e| Error::Gpu { op: "readback", msg: e.to_string() })?;
    let out = {
        let view = buf.get_mapped_range(0..bytes).map_err(|e| Error::Gpu { op: "readback", msg: e.to_string() })?;
        view.to_vec()
    };
    buf.unmap();
    Ok(out)
}
