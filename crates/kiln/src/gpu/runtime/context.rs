//! The device context: an opened [`Gpu`] with kiln's runtime around it (buffer pool, pipeline cache,
//! batched execution, readback staging). One context per adapter per process.

use super::adapters::{adapters, summarize, WANTED};
use super::device::Gpu;
use super::exec::Exec;
use super::kernels::Pipelines;
use super::pool::{GpuBuffer, Pool};
use super::transfer::{self, Staging};
use crate::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// One opened GPU: the wgpu device and queue with kiln's runtime around them. Dereferences to the
/// [`Gpu`] (device, queue, features, limits, error state).
pub struct GpuContext {
    gpu: Gpu,
    pub(crate) pool: Pool,
    pub(crate) pipelines: Pipelines,
    pub(crate) exec: Mutex<Exec>,
    pub(crate) staging: Staging,
    /// Counter buffers by name (`GpuContext::counters`).
    counters: Mutex<HashMap<&'static str, wgpu::Buffer>>,
}

impl std::ops::Deref for GpuContext {
    type Target = Gpu;
    fn deref(&self) -> &Gpu {
        &self.gpu
    }
}

impl GpuContext {
    /// Opens adapter `index` (cached: one context per adapter per process, replaced by a fresh one
    /// once the cached device is lost, so that `Device::gpu()` works again after a device loss).
    pub(crate) fn open(index: usize) -> Result<Arc<GpuContext>> {
        static OPEN: OnceLock<Mutex<Vec<Option<Arc<GpuContext>>>>> = OnceLock::new();
        let list = adapters();
        let adapter = list.get(index).ok_or_else(|| Error::BackendUnavailable {
            backend: "gpu",
            msg: format!("no GPU adapter with index {index} ({} found)", list.len()),
        })?;
        let open = OPEN.get_or_init(|| Mutex::new(vec![None; list.len()]));
        let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(ctx) = open[index].as_ref().filter(|c| !c.is_lost()) {
            return Ok(ctx.clone());
        }
        let ctx = Arc::new(Self::create(index, adapter)?);
        open[index] = Some(ctx.clone());
        Ok(ctx)
    }

    /// A new context on adapter `index`, not cached and not shared with [`GpuContext::open`]'s: a
    /// second, separate device on one adapter (tests of work split over several devices).
    pub(crate) fn open_separate(index: usize) -> Result<Arc<GpuContext>> {
        let list = adapters();
        let adapter = list.get(index).ok_or_else(|| Error::BackendUnavailable {
            backend: "gpu",
            msg: format!("no GPU adapter with index {index} ({} found)", list.len()),
        })?;
        Ok(Arc::new(Self::create(index, adapter)?))
    }

    fn create(index: usize, adapter: &wgpu::Adapter) -> Result<GpuContext> {
        let summary = summarize(index, adapter);
        let wanted = WANTED.iter().fold(wgpu::Features::empty(), |acc, (f, _)| acc | *f);
        let mut features = adapter.features() & wanted;
        // Mappable storage buffers are only worth it where memory is shared.
        if !summary.unified_memory {
            features.remove(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        }
        let experimental = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            // SAFETY: kiln only uses cooperative matrices through naga-validated WGSL on the
            // configurations the adapter reports.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let limits = adapter.limits();
        let coop_matrix = if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
            adapter.cooperative_matrix_properties()
        } else {
            Vec::new()
        };
        let pair = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("kiln"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| Error::BackendUnavailable { backend: "gpu", msg: format!("{}: {e}", summary.name) })?;
        let gpu = Gpu::new(index, summary, pair, features, limits, coop_matrix);
        let pipelines = Pipelines::new(&gpu.device);
        let exec = Exec::new(&gpu.device, &gpu.limits, &pipelines);
        let usage = if features.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS) {
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE
        } else {
            wgpu::BufferUsages::empty()
        };
        Ok(GpuContext {
            gpu,
            pool: Pool::new(usage),
            pipelines,
            exec: Mutex::new(exec),
            staging: Staging::new(),
            counters: Mutex::new(HashMap::new()),
        })
    }

    /// The counter buffer `name` of at least `words` u32 words: created zeroed (wgpu zeroes new
    /// buffers), kept for the life of the context, and left zeroed by the kernels that use it (each
    /// dispatch sets the counters it raised back to 0 before it ends; wgpu orders dispatches that
    /// write one buffer). A request for more words replaces it by a larger fresh one.
    pub(crate) fn counters(&self, name: &'static str, words: usize) -> wgpu::Buffer {
        let bytes = (4 * words as u64).next_power_of_two().max(256);
        let mut map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = map.get(name).filter(|b| b.size() >= bytes) {
            return b.clone();
        }
        let b = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(name),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        map.insert(name, b.clone());
        b
    }

    /// Writes `bytes` at the start of `dst` (after the pending batch).
    pub(crate) fn upload(&self, dst: &GpuBuffer, bytes: &[u8]) -> Result<()> {
        transfer::upload(&self.gpu, &self.exec, dst, bytes)
    }

    /// The first `bytes` bytes of `src`, once the work writing it is done.
    pub(crate) fn download(&self, src: &GpuBuffer, bytes: u64) -> Result<Vec<u8>> {
        transfer::download(&self.gpu, &self.exec, &self.staging, src, bytes)
    }

    /// Starts reading the first `bytes` bytes of `src` behind the work recorded so far; the returned
    /// read's `finish` (through [`GpuContext::finish_download`]) waits for that work only.
    pub(crate) fn download_later(&self, src: &GpuBuffer, bytes: u64) -> Result<transfer::Download> {
        transfer::download_later(&self.gpu, &self.exec, &self.staging, src, bytes)
    }

    /// The bytes of a read started by [`GpuContext::download_later`].
    pub(crate) fn finish_download(&self, d: transfer::Download) -> Result<Vec<u8>> {
        d.finish(&self.gpu, &self.staging)
    }
}

/// Submits pending work and waits for the device to finish it.
pub(crate) fn synchronize(ctx: &GpuContext) -> Result<()> {
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).synchronize(ctx)
}

/// Runs `record` (which queues GPU work) over and over for `seconds` of wall time without waiting
/// between runs (a `synchronize` every 16 bounds the queue), then waits. An idle GPU runs at low
/// clocks and needs about half a second of load to reach full speed (H200 through Vulkan: a 1 GiB
/// read takes 575 us cold, 243 us after ~0.6 s; docs/PERFORMANCE.md), so timing starts after this.
pub(crate) fn keep_busy(ctx: &GpuContext, seconds: f64, mut record: impl FnMut() -> Result<()>) -> Result<()> {
    let start = std::time::Instant::now();
    let mut runs = 0usize;
    while start.elapsed().as_secs_f64() < seconds {
        record()?;
        runs += 1;
        if runs.is_multiple_of(16) {
            synchronize(ctx)?;
        }
    }
    synchronize(ctx)
}
