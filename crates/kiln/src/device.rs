//! Devices: where a tensor's storage lives and where its ops run.

use crate::backend::BackendDevice;
use crate::cpu::{CpuDevice, CpuStorage};
use crate::gpu::{self, AdapterSummary, GpuContext, GpuStorage, KernelTime, MemoryStats, VramInfo};
use crate::storage::Storage;
use crate::{DType, Error, Result};
use std::fmt;
use std::sync::Arc;
use std::sync::OnceLock;

/// A compute device. Cheap to clone; two handles to one device compare equal.
#[derive(Clone)]
pub struct Device(DeviceKind);

#[derive(Clone)]
enum DeviceKind {
    Cpu,
    Gpu(Arc<GpuContext>),
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        match (&self.0, &other.0) {
            (DeviceKind::Cpu, DeviceKind::Cpu) => true,
            (DeviceKind::Gpu(a), DeviceKind::Gpu(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}
impl Eq for Device {}

// A device's mutable state sits behind mutexes that recover from poisoning, and wgpu objects stay
// valid after a panic unwinds through kiln code, so observing a device after a caught panic is sound.
impl std::panic::UnwindSafe for Device {}
impl std::panic::RefUnwindSafe for Device {}

/// What `KILN_DEVICE` (or a CLI flag) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRequest {
    Cpu,
    /// The best GPU; a software adapter only if nothing else exists.
    Gpu,
    /// The n-th GPU adapter.
    GpuNth(usize),
    /// The best hardware GPU, else the CPU.
    Auto,
}

impl DeviceRequest {
    /// Parses `cpu`, `gpu`, `gpu:N` or `auto`.
    pub fn parse(s: &str) -> Option<DeviceRequest> {
        match s.trim() {
            "cpu" => Some(DeviceRequest::Cpu),
            "gpu" => Some(DeviceRequest::Gpu),
            "auto" | "" => Some(DeviceRequest::Auto),
            s => s.strip_prefix("gpu:")?.parse().ok().map(DeviceRequest::GpuNth),
        }
    }

    /// The request in `KILN_DEVICE`, `Auto` when unset.
    pub fn from_env() -> Result<DeviceRequest> {
        match crate::settings::DEVICE.get() {
            Err(_) => Ok(DeviceRequest::Auto),
            Ok(v) => DeviceRequest::parse(&v).ok_or_else(|| Error::BadEnv {
                var: "KILN_DEVICE",
                value: v.clone(),
                msg: "expected cpu, gpu, gpu:N or auto".into(),
            }),
        }
    }

    pub fn open(self) -> Result<Device> {
        match self {
            DeviceRequest::Cpu => Ok(Device::cpu()),
            DeviceRequest::Gpu => Device::gpu(),
            DeviceRequest::GpuNth(i) => Device::gpu_nth(i),
            DeviceRequest::Auto => Ok(Device::auto()),
        }
    }
}

/// The spelling [`DeviceRequest::parse`] reads: `cpu`, `gpu`, `gpu:N`, `auto`.
impl fmt::Display for DeviceRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceRequest::Cpu => f.write_str("cpu"),
            DeviceRequest::Gpu => f.write_str("gpu"),
            DeviceRequest::GpuNth(i) => write!(f, "gpu:{i}"),
            DeviceRequest::Auto => f.write_str("auto"),
        }
    }
}

/// [`DeviceRequest::parse`] with an error that says what is accepted.
impl std::str::FromStr for DeviceRequest {
    type Err = Error;
    fn from_str(s: &str) -> Result<DeviceRequest> {
        DeviceRequest::parse(s)
            .ok_or_else(|| Error::arg("device", format!("unknown device '{s}': expected cpu, gpu, gpu:N or auto")))
    }
}

impl Device {
    /// The CPU backend: multi-threaded (rayon) and SIMD.
    pub fn cpu() -> Device {
        Device(DeviceKind::Cpu)
    }

    /// The best GPU adapter: discrete, then integrated, then others; a software adapter (lavapipe,
    /// WARP) only when nothing else exists.
    pub fn gpu() -> Result<Device> {
        let i = gpu::best_index().ok_or_else(|| Error::BackendUnavailable {
            backend: "gpu",
            msg: "no GPU adapter found (Vulkan, Metal or DX12)".into(),
        })?;
        Self::gpu_nth(i)
    }

    /// The GPU adapter with index `i` in `kiln info`'s list (hardware first, software last).
    pub fn gpu_nth(i: usize) -> Result<Device> {
        Ok(Device(DeviceKind::Gpu(GpuContext::open(i)?)))
    }

    /// A new device on GPU adapter `i`, separate from [`Device::gpu_nth`]'s (its own queue, memory
    /// pool and kernels; it compares unequal to every other handle): a test aid, to run work split
    /// over two devices on a machine with one adapter (e.g. lavapipe in CI).
    #[doc(hidden)]
    pub fn gpu_nth_separate(i: usize) -> Result<Device> {
        Ok(Device(DeviceKind::Gpu(GpuContext::open_separate(i)?)))
    }

    /// The best hardware GPU if there is one, else the CPU (a software GPU is slower than the CPU
    /// backend, so `auto` never picks one).
    pub fn auto() -> Device {
        gpu::best_hardware_index().and_then(|i| Device::gpu_nth(i).ok()).unwrap_or_else(Device::cpu)
    }

    /// The device `KILN_DEVICE` names (`cpu`, `gpu`, `gpu:N`, `auto`; `auto` when unset), opened once
    /// per process.
    pub fn from_env() -> Result<Device> {
        static DEFAULT: OnceLock<Result<Device>> = OnceLock::new();
        DEFAULT.get_or_init(|| DeviceRequest::from_env()?.open()).clone()
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self.0, DeviceKind::Cpu)
    }

    pub fn is_gpu(&self) -> bool {
        !self.is_cpu()
    }

    /// Whether tensors of `dtype` can live on this device. The CPU holds every dtype; a GPU every
    /// dtype but `f64` (Metal has no f64, and Vulkan's SHADER_F64 lacks `exp`/`log`/`sin`), which is
    /// refused there on every path (creation, casts, `to_device`) with an error suggesting `f32`.
    pub fn supports_dtype(&self, dtype: DType) -> bool {
        self.is_cpu() || dtype != DType::F64
    }

    /// The dtypes this device supports ([`Device::supports_dtype`]), in [`DType::ALL`]'s order.
    pub fn dtypes(&self) -> Vec<DType> {
        DType::ALL.into_iter().filter(|&d| self.supports_dtype(d)).collect()
    }

    /// Short name used in messages: `cpu`, `gpu:0`.
    pub fn name(&self) -> String {
        match &self.0 {
            DeviceKind::Cpu => "cpu".into(),
            DeviceKind::Gpu(c) => format!("gpu:{}", c.index),
        }
    }

    pub(crate) fn gpu_context(&self) -> Option<&Arc<GpuContext>> {
        match &self.0 {
            DeviceKind::Gpu(c) => Some(c),
            DeviceKind::Cpu => None,
        }
    }

    /// The adapter behind a GPU device.
    pub fn gpu_info(&self) -> Option<AdapterSummary> {
        self.gpu_context().map(|c| c.summary.clone())
    }

    /// A GPU's device memory, which wgpu does not report: the size of its largest device-local heap
    /// and what this process may still allocate there (Vulkan, with `free` from
    /// `VK_EXT_memory_budget`; `None` on the CPU and on backends that do not say).
    pub fn vram(&self) -> Option<VramInfo> {
        let c = self.gpu_context()?;
        crate::gpu::runtime::vram::query(crate::gpu::runtime::adapters::adapters().get(c.index)?)
    }

    /// Memory statistics of a GPU device's pool (`None` on the CPU).
    pub fn memory_stats(&self) -> Option<MemoryStats> {
        self.gpu_context().map(|c| c.pool.stats())
    }

    /// Releases every cached (unused) GPU buffer.
    pub fn clear_cache(&self) {
        if let Some(c) = self.gpu_context() {
            c.exec.lock().unwrap_or_else(|e| e.into_inner()).clear_bind_groups();
            c.pool.clear_cache();
        }
    }

    /// Caps the bytes the GPU pool keeps cached (default 4 GiB or `KILN_GPU_CACHE_LIMIT`).
    pub fn set_cache_limit(&self, bytes: u64) {
        if let Some(c) = self.gpu_context() {
            c.pool.set_cache_limit(bytes);
        }
    }

    /// Caps the bytes the GPU pool may hold (active + cached); past it allocations fail with
    /// `Error::OutOfMemory` after dropping the cache.
    pub fn set_memory_limit(&self, bytes: u64) {
        if let Some(c) = self.gpu_context() {
            c.pool.set_memory_limit(bytes);
        }
    }

    /// How long a wait for a GPU (a readback, `synchronize`) may take before the device is declared
    /// lost (default 600 s or `KILN_GPU_TIMEOUT` seconds). wgpu has no per-dispatch timeout, so this
    /// is what stops a kernel that runs too long from hanging the caller: the wait returns
    /// `Error::DeviceLost`, every later op on this device does too, and `Device::gpu()` opens a fresh
    /// device. A no-op on the CPU.
    pub fn set_wait_timeout(&self, limit: std::time::Duration) {
        if let Some(c) = self.gpu_context() {
            let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX).max(1);
            c.wait_timeout_ms.store(ms, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Whether this GPU device is lost (its ops fail with `Error::DeviceLost`); false on the CPU.
    pub fn is_lost(&self) -> bool {
        self.gpu_context().is_some_and(|c| c.is_lost())
    }

    /// Destroys this GPU device for real (wgpu's `Device::destroy`), to test how a program copes with
    /// a device loss, which cannot be caused on demand otherwise: every later op on it, and on its
    /// tensors, fails with `Error::DeviceLost`, and `Device::gpu()` then opens a fresh device. A no-op
    /// on the CPU.
    pub fn simulate_device_lost(&self) {
        if let Some(c) = self.gpu_context() {
            c.destroy("Device::simulate_device_lost");
        }
    }

    /// Resets the peak of `memory_stats`.
    pub fn reset_peak_memory(&self) {
        if let Some(c) = self.gpu_context() {
            c.pool.reset_peak();
        }
    }

    /// Fill every GPU op's output with all-ones bits (NaN for floats) before the op runs, so that
    /// elements a kernel fails to write show up in tests. Also set by `KILN_GPU_POISON=1`.
    pub fn set_poison(&self, on: bool) {
        if let Some(c) = self.gpu_context() {
            c.poison.store(on, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Turns autotuning on or off for this GPU (default: `KILN_AUTOTUNE=1`): ops with several kernel
    /// configurations time them once per shape bucket and cache the winner on disk
    /// (`$KILN_CACHE_DIR` or `~/.cache/kiln`). Off, they take a fixed heuristic. A no-op on the CPU.
    pub fn set_autotune(&self, on: bool) {
        if let Some(c) = self.gpu_context() {
            gpu::autotune::set_enabled(c, on);
        }
    }

    /// Turns per-kernel GPU timing on or off (also `KILN_PROFILE=1`).
    pub fn set_profiling(&self, on: bool) -> Result<()> {
        if let Some(c) = self.gpu_context() {
            let mut e = c.exec.lock().unwrap_or_else(|e| e.into_inner());
            e.flush(c)?;
            e.profiler.set_enabled(on);
        }
        Ok(())
    }

    /// Per-kernel times gathered while profiling, slowest first.
    pub fn profile(&self) -> Vec<KernelTime> {
        self.gpu_context()
            .map(|c| c.exec.lock().unwrap_or_else(|e| e.into_inner()).profiler.report())
            .unwrap_or_default()
    }

    /// Clears the profile table.
    pub fn reset_profile(&self) {
        if let Some(c) = self.gpu_context() {
            c.exec.lock().unwrap_or_else(|e| e.into_inner()).profiler.reset();
        }
    }

    /// (dispatches recorded, batches submitted) since the device was opened; `None` on the CPU.
    pub fn gpu_counters(&self) -> Option<(u64, u64)> {
        self.gpu_context().map(|c| {
            let e = c.exec.lock().unwrap_or_else(|e| e.into_inner());
            (e.total_dispatches, e.submits)
        })
    }

    /// Number of compiled GPU kernels in the pipeline cache.
    pub fn compiled_kernels(&self) -> usize {
        self.gpu_context().map(|c| c.pipelines.len()).unwrap_or(0)
    }

    /// Runs the compute entry point `entry` of the WGSL `source` over `workgroups` on this GPU device
    /// and returns the `outputs` (shape, dtype) it wrote. The pipeline is compiled once per source and
    /// cached. `crates/kiln/examples/custom_kernel.rs` is a complete program (two outputs, a strided
    /// input, float parameters, checked against kiln's ops).
    ///
    /// Binding layout (what the shader must declare):
    /// - `@group(0)`: the outputs at bindings `0..outputs.len()`, as `var<storage, read_write>`, then
    ///   the inputs at the next bindings, as `var<storage, read>`, in the order given;
    /// - each buffer holds the tensor's elements contiguously in row-major order (a strided view is
    ///   copied first): declare it `array<f32>`, `array<i32>`, `array<u32>`, ... to match the dtype;
    ///   16- and 8-bit dtypes (f16, bf16, u8, bool) arrive packed in `array<u32>`;
    /// - `@group(1) @binding(0)`: `var<storage, read> params: array<u32, 64>` receives `params` (at
    ///   most 64 words; the rest are zero); floats go in as `f32::to_bits` and come back with
    ///   `bitcast<f32>`. A kernel without parameters may leave group 1 out.
    ///
    /// Output elements the kernel does not write are unspecified. Errors: a CPU device, more than
    /// 64 parameter words, inputs on another device, and a shader that does not compile (the
    /// compiler's message) or does not match the layout are `Err`.
    ///
    /// # Example
    ///
    /// `out = alpha * a + b` with `n` and `alpha` as parameters:
    ///
    /// ```
    /// # fn main() -> kiln::Result<()> {
    /// use kiln::{DType, Device, Shape, Tensor};
    /// const AXPY: &str = "
    /// @group(0) @binding(0) var<storage, read_write> out: array<f32>;
    /// @group(0) @binding(1) var<storage, read> a: array<f32>;
    /// @group(0) @binding(2) var<storage, read> b: array<f32>;
    /// @group(1) @binding(0) var<storage, read> params: array<u32, 64>;
    ///
    /// @compute @workgroup_size(64)
    /// fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    ///     if (id.x < params[0]) { out[id.x] = bitcast<f32>(params[1]) * a[id.x] + b[id.x]; }
    /// }";
    /// let Ok(gpu) = Device::gpu() else { return Ok(()) }; // no GPU adapter here
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], 3, &gpu)?;
    /// let b = Tensor::from_vec(vec![10.0f32, 20.0, 30.0], 3, &gpu)?;
    /// let params = [3, 2.0f32.to_bits()]; // n, alpha
    /// let out = gpu.custom_kernel(AXPY, "main", &[&a, &b], &[(Shape::from(3), DType::F32)], [1, 1, 1], &params)?;
    /// assert_eq!(out[0].to_vec::<f32>()?, [12.0, 24.0, 36.0]);
    /// # Ok(()) }
    /// ```
    pub fn custom_kernel(
        &self,
        source: &str,
        entry: &str,
        inputs: &[&crate::Tensor],
        outputs: &[(crate::Shape, crate::DType)],
        workgroups: [u32; 3],
        params: &[u32],
    ) -> Result<Vec<crate::Tensor>> {
        use crate::Tensor;
        const OP: &str = "custom_kernel";
        let ctx = self.gpu_context().ok_or_else(|| Error::arg(OP, "custom kernels need a GPU device"))?;
        let kernel = gpu::compile_custom(ctx, source, entry, (outputs.len(), inputs.len()), params.len())?;
        let ins: Vec<Tensor> = inputs
            .iter()
            .map(|t| {
                if t.is_contiguous() && t.layout().offset() == 0 {
                    Ok((*t).clone())
                } else {
                    let s = t.storage().copy_contiguous(t.layout())?;
                    Ok(Tensor::from_storage(s, t.shape().clone(), t.device()))
                }
            })
            .collect::<Result<_>>()?;
        let sizes = outputs
            .iter()
            .map(|(shape, dt)| Ok((*dt, Tensor::check_size(OP, shape, *dt)?)))
            .collect::<Result<Vec<_>>>()?;
        let outs = {
            let guards: Vec<_> = ins.iter().map(|t| t.storage()).collect();
            let mut bufs = Vec::with_capacity(ins.len());
            for (g, t) in guards.iter().zip(&ins) {
                match &**g {
                    Storage::Gpu(s) if Arc::ptr_eq(&s.ctx, ctx) => bufs.push(s),
                    _ => return Err(Error::DeviceMismatch { op: OP, lhs: self.name(), rhs: t.device().name() }),
                }
            }
            gpu::run_custom(ctx, &kernel, &bufs, &sizes, workgroups, params)?
        };
        Ok(outs
            .into_iter()
            .zip(outputs)
            .map(|(s, (shape, _))| Tensor::from_storage(Storage::Gpu(s), shape.clone(), self))
            .collect())
    }

    /// Storage of `shape` filled with `value` on this device.
    pub(crate) fn full_storage(&self, shape: &crate::Shape, dtype: crate::DType, value: f64) -> Result<Storage> {
        match &self.0 {
            DeviceKind::Cpu => Ok(Storage::Cpu(CpuDevice.full(shape, dtype, value)?)),
            DeviceKind::Gpu(c) => Ok(Storage::Gpu(GpuStorage::full(c, dtype, shape.elem_count(), value)?)),
        }
    }

    /// Storage of `shape` whose contents are unspecified (the caller writes every element): no fill
    /// on the GPU (poisoned when poisoning is on), zeros on the CPU.
    pub(crate) fn uninit_storage(&self, shape: &crate::Shape, dtype: crate::DType) -> Result<Storage> {
        match &self.0 {
            DeviceKind::Cpu => Ok(Storage::Cpu(CpuDevice.full(shape, dtype, 0.0)?)),
            DeviceKind::Gpu(c) => Ok(Storage::Gpu(GpuStorage::alloc(c, dtype, shape.elem_count())?)),
        }
    }

    /// Little-endian bytes of elements of `dtype` onto this device: a GPU uploads them as they are
    /// (bool and the CPU take a typed copy).
    pub(crate) fn storage_from_le_bytes(&self, bytes: &[u8], dtype: crate::DType) -> Result<Storage> {
        match &self.0 {
            DeviceKind::Gpu(c) if dtype != crate::DType::Bool => {
                Ok(Storage::Gpu(GpuStorage::from_le_bytes(c, dtype, bytes)?))
            }
            _ => self.storage_from_cpu(CpuStorage::from_le_bytes(bytes, dtype)),
        }
    }

    /// Host data moved onto this device.
    pub(crate) fn storage_from_cpu(&self, data: CpuStorage) -> Result<Storage> {
        match &self.0 {
            DeviceKind::Cpu => Ok(Storage::Cpu(data)),
            DeviceKind::Gpu(c) => Ok(Storage::Gpu(GpuStorage::from_cpu(c, &data)?)),
        }
    }

    /// Runs `f` and measures the time this device spends on the work it queues: on a GPU with timestamp
    /// queries, from the start of its first compute pass to the end of its last (pending work is
    /// submitted first and not counted); otherwise the wall-clock time of `f` plus a `synchronize`.
    /// Returns after the work has finished. Use it for benchmarks, not inside hot paths.
    pub fn measure<T>(&self, f: impl FnOnce() -> Result<T>) -> Result<Measured<T>> {
        let Some(c) = self.gpu_context() else {
            let t0 = std::time::Instant::now();
            let value = f()?;
            return Ok(Measured { value, seconds: t0.elapsed().as_secs_f64(), gpu_timestamps: false });
        };
        c.exec.lock().unwrap_or_else(|e| e.into_inner()).begin_span(c)?;
        let t0 = std::time::Instant::now();
        let value = f();
        let gpu = c.exec.lock().unwrap_or_else(|e| e.into_inner()).end_span(c);
        let value = value?;
        match gpu? {
            Some(seconds) => Ok(Measured { value, seconds, gpu_timestamps: true }),
            None => {
                self.synchronize()?;
                Ok(Measured { value, seconds: t0.elapsed().as_secs_f64(), gpu_timestamps: false })
            }
        }
    }

    /// Runs `f` over and over for `seconds` of wall time, then waits for the device: on a GPU the runs
    /// are queued back to back (a wait every 16 bounds the queue), so that the GPU leaves its idle
    /// clocks before anything is timed. `kiln bench` does this before timing each GPU case.
    pub fn keep_busy<T>(&self, seconds: f64, mut f: impl FnMut() -> Result<T>) -> Result<()> {
        match self.gpu_context() {
            Some(c) => gpu::keep_busy(c, seconds, || f().map(drop)),
            None => {
                let start = std::time::Instant::now();
                while start.elapsed().as_secs_f64() < seconds {
                    drop(f()?);
                }
                Ok(())
            }
        }
    }

    /// Waits until all work queued on this device has finished. A no-op on the CPU.
    pub fn synchronize(&self) -> Result<()> {
        match &self.0 {
            DeviceKind::Cpu => Ok(()),
            DeviceKind::Gpu(c) => gpu::synchronize(c),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_requests() {
        assert_eq!(DeviceRequest::parse("gpu:2"), Some(DeviceRequest::GpuNth(2)));
        assert_eq!(DeviceRequest::parse("cpu"), Some(DeviceRequest::Cpu));
        assert_eq!(DeviceRequest::parse("tpu"), None);
        for s in ["cpu", "gpu", "gpu:7", "auto"] {
            let r: DeviceRequest = s.parse().unwrap();
            assert_eq!(r.to_string(), s);
        }
        let e = "gpu:x".parse::<DeviceRequest>().unwrap_err().to_string();
        assert!(e.contains("gpu:x") && e.contains("gpu:N"), "{e}");
    }
}

/// The result of [`Device::measure`]: the value and how long the device worked on it.
#[derive(Debug, Clone)]
pub struct Measured<T> {
    /// What the measured closure returned.
    pub value: T,
    /// Seconds the device spent.
    pub seconds: f64,
    /// True when timed with GPU timestamps, false for the wall clock.
    pub gpu_timestamps: bool,
}
