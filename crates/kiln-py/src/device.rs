//! `kiln.Device`: a CPU or GPU device, its memory statistics, cache, synchronisation, timing and
//! custom WGSL kernels. The Python-side `kiln.Backend` builds the GPU-backend-style API on this.

use crate::dtype::to_dtype;
use crate::errors::{run, value_err};
use crate::tensor::PyTensor;
use kiln::{Device, DeviceRequest};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// A compute device: `Device("cpu")`, `Device("gpu")` (the best adapter), `Device("gpu:N")`,
/// `Device("auto")` (the best hardware GPU, else the CPU). `Device()` is the default device, set by
/// `KILN_DEVICE` (`auto` when unset). Opening the same device twice gives equal handles.
#[pyclass(name = "Device", module = "kiln", frozen, eq)]
#[derive(Clone, PartialEq)]
pub struct PyDevice(pub Device);

/// A device from a `Device`, a name, or `None` (the default device).
pub fn to_device(py: Python<'_>, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Device> {
    match obj {
        None => run(py, "device", Device::from_env),
        Some(o) if o.is_none() => run(py, "device", Device::from_env),
        Some(o) => {
            if let Ok(d) = o.cast::<PyDevice>() {
                return Ok(d.get().0.clone());
            }
            let name: String = o.str()?.extract()?;
            open(py, &name)
        }
    }
}

fn open(py: Python<'_>, name: &str) -> PyResult<Device> {
    let req = DeviceRequest::parse(name)
        .ok_or_else(|| value_err("device", format!("unknown device {name:?}: expected cpu, gpu, gpu:N or auto")))?;
    run(py, "device", move || req.open())
}

#[pymethods]
impl PyDevice {
    #[new]
    #[pyo3(signature = (name = None))]
    fn new(py: Python<'_>, name: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyDevice(to_device(py, name)?))
    }

    /// Short name used in messages: `cpu`, `gpu:0`.
    #[getter]
    fn name(&self) -> String {
        self.0.name()
    }
    #[getter]
    fn is_cpu(&self) -> bool {
        self.0.is_cpu()
    }
    #[getter]
    fn is_gpu(&self) -> bool {
        self.0.is_gpu()
    }

    /// The dtypes tensors on this device may have (kiln's `Device::dtypes`): every kiln dtype on the
    /// CPU, all but float64 on a GPU (asking for float64 there raises TypeError on every path).
    fn dtypes(&self) -> Vec<crate::dtype::PyDType> {
        self.0.dtypes().into_iter().map(crate::dtype::PyDType).collect()
    }

    /// Whether tensors of `dtype` may live on this device.
    fn supports_dtype(&self, dtype: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.0.supports_dtype(crate::dtype::to_dtype(dtype)?))
    }

    /// The adapter behind a GPU device as a dict (name, backend, device_type, driver, software,
    /// unified_memory, features, limits); `None` on the CPU.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(a) = self.0.gpu_info() else { return Ok(None) };
        let d = PyDict::new(py);
        d.set_item("index", a.index)?;
        d.set_item("name", a.name)?;
        d.set_item("backend", a.backend)?;
        d.set_item("device_type", a.device_type)?;
        d.set_item("driver", a.driver)?;
        d.set_item("software", a.software)?;
        d.set_item("unified_memory", a.unified_memory)?;
        d.set_item("features", a.features)?;
        d.set_item("max_buffer_size", a.max_buffer_size)?;
        d.set_item("max_storage_binding", a.max_storage_binding)?;
        d.set_item("workgroup_memory", a.workgroup_memory)?;
        d.set_item("max_workgroup_invocations", a.max_workgroup_invocations)?;
        d.set_item("subgroup_size", a.subgroup_size)?;
        Ok(Some(d))
    }

    /// Calls `f()` (Python code queuing kiln work on this device) and measures the time the device
    /// spends on the work it queues: GPU timestamps where the adapter has them, else the wall clock
    /// up to a `synchronize`. Returns `(f's result, seconds, gpu_timestamps)` after the work finished.
    fn measure<'py>(&self, py: Python<'py>, f: &Bound<'py, PyAny>) -> PyResult<(Bound<'py, PyAny>, f64, bool)> {
        let mut raised = None;
        let m = self
            .0
            .measure(|| {
                Ok(f.call0().unwrap_or_else(|e| {
                    raised = Some(e);
                    py.None().into_bound(py)
                }))
            })
            .map_err(crate::errors::to_py)?;
        match raised {
            Some(e) => Err(e),
            None => Ok((m.value, m.seconds, m.gpu_timestamps)),
        }
    }

    /// The GPU adapters wgpu finds, in `gpu:N` order (hardware first, then software), as
    /// `(name, backend, device_type, software)` tuples. Enumerates without opening a device.
    #[staticmethod]
    fn adapters(py: Python<'_>) -> Vec<(String, String, String, bool)> {
        py.detach(|| {
            kiln::gpu::list_adapters().into_iter().map(|a| (a.name, a.backend, a.device_type, a.software)).collect()
        })
    }

    /// Memory statistics of a GPU device's buffer pool as a dict: active_bytes (held by live tensors
    /// and in-flight work), cached_bytes (kept for reuse), peak_bytes, live_buffers, cache_hits,
    /// device_allocations. `None` on the CPU.
    fn memory_stats<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(s) = self.0.memory_stats() else { return Ok(None) };
        let d = PyDict::new(py);
        d.set_item("active_bytes", s.active_bytes)?;
        d.set_item("cached_bytes", s.cached_bytes)?;
        d.set_item("peak_bytes", s.peak_bytes)?;
        d.set_item("live_buffers", s.live_buffers)?;
        d.set_item("cache_hits", s.cache_hits)?;
        d.set_item("device_allocations", s.device_allocations)?;
        Ok(Some(d))
    }

    /// Releases every cached (unused) GPU buffer. A no-op on the CPU.
    fn clear_cache(&self) {
        self.0.clear_cache()
    }

    /// Resets the peak of `memory_stats()` to the active bytes.
    fn reset_peak_memory(&self) {
        self.0.reset_peak_memory()
    }

    /// Caps the bytes the GPU pool may hold (active + cached; None: no limit); past it ops raise
    /// MemoryError after dropping the cache.
    #[pyo3(signature = (bytes = None))]
    fn set_memory_limit(&self, bytes: Option<u64>) {
        self.0.set_memory_limit(bytes.unwrap_or(u64::MAX))
    }

    /// Fills GPU outputs with NaN bits before each op (tests use it, so unwritten elements show).
    fn set_poison(&self, on: bool) {
        self.0.set_poison(on)
    }

    /// Waits until all work queued on this device has finished (GIL released). A no-op on the CPU.
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        let d = self.0.clone();
        run(py, "synchronize", move || d.synchronize())
    }

    /// Runs the compute entry point `entry` of the WGSL `source` over `workgroups` (x, y, z) and
    /// returns `(outputs, seconds, gpu_timestamps)`: the new output tensors, the device time the
    /// kernel took, and whether that time comes from GPU timestamp queries (else the wall clock).
    ///
    /// Binding convention: `@group(0)` holds the outputs at bindings `0..len(outputs)` (read-write
    /// storage) followed by the inputs (read-only storage), each a contiguous copy of the tensor's
    /// elements (declare them `array<f32>`, `array<u32>`, ... to match the dtype; 16- and 8-bit dtypes
    /// as packed `array<u32>`). `@group(1) @binding(0)` may declare `var<storage, read> p:
    /// array<u32, 64>` to receive `params` (at most 64 words). `outputs` is a list of (shape, dtype).
    /// Output elements the kernel does not write are unspecified. A shader that fails to compile
    /// raises RuntimeError with the compiler's message. The GIL is released while the GPU works.
    #[pyo3(signature = (source, entry, inputs, outputs, workgroups, params = Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn custom_kernel(
        &self,
        py: Python<'_>,
        source: String,
        entry: String,
        inputs: Vec<PyRef<'_, PyTensor>>,
        outputs: Vec<(Vec<usize>, Bound<'_, PyAny>)>,
        workgroups: (i64, i64, i64),
        params: Vec<u32>,
    ) -> PyResult<(Vec<PyTensor>, f64, bool)> {
        let wg = [workgroups.0, workgroups.1, workgroups.2];
        if wg.iter().any(|&n| !(0..=u32::MAX as i64).contains(&n)) {
            return Err(value_err("custom_kernel", format!("workgroup counts must lie in 0..2^32, got {wg:?}")));
        }
        let wg = wg.map(|n| n as u32);
        let ins: Vec<kiln::Tensor> = inputs.iter().map(|t| t.t.clone()).collect();
        let outs = outputs
            .iter()
            .map(|(s, d)| Ok((kiln::Shape::new(s.clone()), to_dtype(d)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let d = self.0.clone();
        let m = run(py, "custom_kernel", move || {
            let refs: Vec<&kiln::Tensor> = ins.iter().collect();
            d.measure(|| d.custom_kernel(&source, &entry, &refs, &outs, wg, &params))
        })?;
        Ok((m.value.into_iter().map(PyTensor::from).collect(), m.seconds, m.gpu_timestamps))
    }

    /// Number of compiled GPU pipelines (kiln's and custom ones).
    fn compiled_kernels(&self) -> usize {
        self.0.compiled_kernels()
    }

    fn __repr__(&self) -> String {
        match self.0.gpu_info() {
            Some(a) => format!("kiln.Device('{}')  # {} ({})", self.0.name(), a.name, a.backend),
            None => format!("kiln.Device('{}')", self.0.name()),
        }
    }
    fn __str__(&self) -> String {
        self.0.name()
    }
    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.0.name().hash(&mut h);
        h.finish()
    }
}
