//! Adapters and the device context: which GPUs exist, how kiln picks one, and the wgpu device with
//! the limits and features kiln asks for. Errors that wgpu reports outside an error scope land in an
//! error sink that the next op turns into an `Err`; a lost device marks the context dead.

use super::exec::Exec;
use super::kernels::Pipelines;
use super::pool::Pool;
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What kiln knows about one adapter, for `kiln info` and for choosing.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub software: bool,
    /// Integrated GPUs, software adapters and Apple GPUs share memory with the host.
    pub unified_memory: bool,
    pub features: Vec<&'static str>,
    pub max_buffer_size: u64,
    pub max_storage_binding: u64,
    pub workgroup_memory: u32,
    pub max_workgroup_invocations: u32,
    pub subgroup_size: (u32, u32),
}

/// The features kiln uses when an adapter has them.
const WANTED: [(wgpu::Features, &str); 7] = [
    (wgpu::Features::SHADER_F16, "SHADER_F16"),
    (wgpu::Features::SUBGROUP, "SUBGROUP"),
    (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
    (wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS, "TIMESTAMP_QUERY_INSIDE_ENCODERS"),
    (wgpu::Features::MAPPABLE_PRIMARY_BUFFERS, "MAPPABLE_PRIMARY_BUFFERS"),
    (wgpu::Features::SHADER_F64, "SHADER_F64"),
    (wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX, "EXPERIMENTAL_COOPERATIVE_MATRIX"),
];

fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12,
            flags: wgpu::InstanceFlags::empty(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        })
    })
}

/// Every adapter wgpu finds, in a stable order: hardware first (discrete, integrated, other), then
/// software. The index is what `Device::gpu_nth` and `KILN_DEVICE=gpu:N` take.
pub(crate) fn adapters() -> &'static [wgpu::Adapter] {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let mut list = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()));
        list.sort_by_key(|a| rank(&a.get_info()));
        list
    })
}

fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let n = info.name.to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || n.contains("llvmpipe")
        || n.contains("lavapipe")
        || n.contains("swiftshader")
        || n.contains("warp")
}

fn rank(info: &wgpu::AdapterInfo) -> u8 {
    if is_software(info) {
        return 4;
    }
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        _ => 2,
    }
}

/// Summaries of all adapters for `kiln info`.
pub fn list_adapters() -> Vec<AdapterSummary> {
    adapters().iter().enumerate().map(|(i, a)| summarize(i, a)).collect()
}

fn summarize(index: usize, a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    let limits = a.limits();
    let feats = a.features();
    let software = is_software(&info);
    AdapterSummary {
        index,
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        software,
        unified_memory: software
            || info.device_type == wgpu::DeviceType::IntegratedGpu
            || info.backend == wgpu::Backend::Metal,
        features: WANTED.iter().filter(|(f, _)| feats.contains(*f)).map(|(_, n)| *n).collect(),
        max_buffer_size: limits.max_buffer_size,
        max_storage_binding: limits.max_storage_buffer_binding_size,
        workgroup_memory: limits.max_compute_workgroup_storage_size,
        max_workgroup_invocations: limits.max_compute_invocations_per_workgroup,
        subgroup_size: (info.subgroup_min_size, info.subgroup_max_size),
    }
}

/// Index of the adapter `Device::gpu()` uses: the best hardware adapter, else a software one.
pub(crate) fn best_index() -> Option<usize> {
    (!adapters().is_empty()).then_some(0)
}

/// Index of the best hardware adapter, for `Device::auto()` (which prefers the CPU to software GPUs).
pub(crate) fn best_hardware_index() -> Option<usize> {
    adapters().first().filter(|a| !is_software(&a.get_info())).map(|_| 0)
}

/// One opened GPU: the wgpu device and queue with kiln's runtime around them.
pub struct GpuContext {
    pub(crate) index: usize,
    pub(crate) summary: AdapterSummary,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) features: wgpu::Features,
    pub(crate) limits: wgpu::Limits,
    /// The adapter's cooperative matrix configurations (empty without EXPERIMENTAL_COOPERATIVE_MATRIX).
    pub(crate) coop_matrix: Vec<wgpu::CooperativeMatrixProperties>,
    pub(crate) pool: Pool,
    pub(crate) pipelines: Pipelines,
    pub(crate) exec: Mutex<Exec>,
    pub(crate) staging: super::transfer::Staging,
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
    std::env::var("KILN_GPU_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(600_000, |s| (s * 1000.0).ceil() as u64)
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
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("kiln"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| Error::BackendUnavailable { backend: "gpu", msg: format!("{}: {e}", summary.name) })?;

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
        let pipelines = Pipelines::new(&device);
        let exec = Exec::new(&device, &limits, &pipelines);
        Ok(GpuContext {
            index,
            summary,
            pool: Pool::new(if features.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS) {
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::MAP_WRITE
            } else {
                wgpu::BufferUsages::empty()
            }),
            pipelines,
            exec: Mutex::new(exec),
            staging: super::transfer::Staging::new(),
            device,
            queue,
            features,
            limits,
            coop_matrix,
            lost,
            lost_reason,
            errors,
            poison: AtomicBool::new(std::env::var("KILN_GPU_POISON").is_ok_and(|v| v == "1")),
            wait_timeout_ms: AtomicU64::new(default_wait_timeout_ms()),
        })
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
