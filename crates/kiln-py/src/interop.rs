//! NumPy interop. Out: `numpy.asarray(t)` goes through `__array__`, which for a CPU tensor hands
//! NumPy a read-only view of kiln's memory (no copy) and for a GPU tensor a host copy. In:
//! `kiln.asarray(x)` copies, always: kiln's CPU storage owns its memory, so it cannot wrap NumPy's.

use crate::device::to_device;
use crate::dtype::{np_name, to_dtype};
use crate::errors::{run, type_err, value_err};
use crate::tensor::PyTensor;
use half::f16;
use kiln::{DType, Device, Tensor, WithDType};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// A CPU tensor exposed through NumPy's array interface; NumPy arrays made from it keep it (and so
/// kiln's memory) alive as their `base`.
#[pyclass(module = "kiln", frozen)]
pub struct HostView {
    t: Tensor,
    /// True for a host copy made for this view alone (nothing else sees its memory).
    writable: bool,
}

/// NumPy's type string of a dtype (`<f4`); bf16 has none.
fn typestr(d: DType) -> Option<&'static str> {
    Some(match d {
        DType::Bool => "|b1",
        DType::U8 => "|u1",
        DType::I32 => "<i4",
        DType::U32 => "<u4",
        DType::I64 => "<i8",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::U16 => "<u2",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        // The bits; the array is then viewed as `ml_dtypes.bfloat16`.
        DType::BF16 => "<u2",
    })
}

/// `ml_dtypes.bfloat16` (the NumPy bfloat16 of JAX and others), when that package is installed.
pub fn ml_bfloat16(py: Python<'_>) -> Option<Bound<'_, PyAny>> {
    py.import("ml_dtypes").ok()?.getattr("bfloat16").ok()
}

#[pymethods]
impl HostView {
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let t = &self.t;
        let ptr = t.cpu_storage_ptr().ok_or_else(|| value_err("__array__", "not a CPU tensor"))?;
        let size = t.dtype().size_in_bytes();
        // An empty view may sit past the end of its storage: point it at the start instead.
        let offset = if t.elem_count() == 0 { 0 } else { t.layout().offset() * size };
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", PyTuple::new(py, t.dims())?)?;
        d.set_item("typestr", typestr(t.dtype()).ok_or_else(|| type_err("__array__", "no NumPy dtype"))?)?;
        d.set_item("data", (ptr as usize + offset, !self.writable))?;
        let strides: Vec<usize> = t.strides().iter().map(|s| s * size).collect();
        d.set_item("strides", PyTuple::new(py, strides)?)?;
        Ok(d)
    }
}

/// A NumPy array of `t`: a zero-copy read-only view for CPU tensors with a NumPy dtype, else a host
/// copy (GPU tensors). bf16 becomes `ml_dtypes.bfloat16` when ml_dtypes is installed, else a float32
/// copy. `copy`: `Some(true)` always copies (a writable array), `Some(false)` raises if a copy is
/// needed.
pub fn to_numpy<'py>(py: Python<'py>, t: &Tensor, copy: Option<bool>) -> PyResult<Bound<'py, PyAny>> {
    let bf16 = if t.dtype() == DType::BF16 { ml_bfloat16(py) } else { None };
    let widen_bf16 = t.dtype() == DType::BF16 && bf16.is_none();
    let needs_copy = t.device().is_gpu() || widen_bf16;
    if needs_copy && copy == Some(false) {
        return Err(value_err(
            "__array__",
            format!("a {} tensor on {} cannot be viewed by NumPy without a copy", t.dtype(), t.device().name()),
        ));
    }
    let t = t.clone();
    let host = run(py, "__array__", move || {
        let h = t.to_device(&Device::cpu())?;
        if widen_bf16 {
            h.to_dtype(DType::F32)
        } else {
            Ok(h)
        }
    })?;
    let view = Bound::new(py, HostView { t: host, writable: needs_copy })?;
    let np = py.import("numpy")?;
    let a = if copy == Some(true) && !needs_copy {
        np.getattr("array")?.call1((view,))?
    } else {
        np.getattr("asarray")?.call1((view,))?
    };
    match bf16 {
        Some(bf) => a.call_method1("view", (bf,)),
        None => Ok(a),
    }
}

/// Copies `n` elements of type `T` from `addr` into a vector.
///
/// # Safety
/// `addr` must point to `n` initialised, aligned-or-not `T`s that stay alive during the call.
unsafe fn copy_from<T: WithDType>(addr: usize, n: usize) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    // SAFETY: the caller guarantees `n` readable elements at `addr`; `v` has room for `n`.
    unsafe {
        std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr() as *mut u8, n * std::mem::size_of::<T>());
        v.set_len(n);
    }
    v
}

/// Copies a C-contiguous host buffer of `dtype` at `addr` into a tensor on `device`.
///
/// # Safety
/// `addr` must hold `shape`'s element count of `dtype` and stay alive during the call.
pub unsafe fn tensor_from_raw(addr: usize, dtype: DType, shape: Vec<usize>, device: &Device) -> kiln::Result<Tensor> {
    let n: usize = shape.iter().product();
    // SAFETY: forwarded from the caller.
    unsafe {
        match dtype {
            DType::F32 => Tensor::from_vec(copy_from::<f32>(addr, n), shape, device),
            DType::F64 => Tensor::from_vec(copy_from::<f64>(addr, n), shape, device),
            DType::F16 => Tensor::from_vec(copy_from::<f16>(addr, n), shape, device),
            DType::BF16 => Tensor::from_vec(copy_from::<half::bf16>(addr, n), shape, device),
            DType::I32 => Tensor::from_vec(copy_from::<i32>(addr, n), shape, device),
            DType::U32 => Tensor::from_vec(copy_from::<u32>(addr, n), shape, device),
            DType::I64 => Tensor::from_vec(copy_from::<i64>(addr, n), shape, device),
            DType::U8 => Tensor::from_vec(copy_from::<u8>(addr, n), shape, device),
            DType::I8 => Tensor::from_vec(copy_from::<i8>(addr, n), shape, device),
            DType::I16 => Tensor::from_vec(copy_from::<i16>(addr, n), shape, device),
            DType::U16 => Tensor::from_vec(copy_from::<u16>(addr, n), shape, device),
            DType::U64 => Tensor::from_vec(copy_from::<u64>(addr, n), shape, device),
            // Any nonzero byte is true (a Rust bool must be 0 or 1).
            DType::Bool => {
                let bytes = copy_from::<u8>(addr, n);
                Tensor::from_vec(bytes.into_iter().map(|b| b != 0).collect::<Vec<bool>>(), shape, device)
            }
        }
    }
}

/// `dtype` if `device` supports it ([`Device::supports_dtype`]); else the one `TypeError` every path
/// gives (creation, `asarray` of NumPy data, DLPack imports, casts): kiln's GPU backend has no f64
/// (Metal has none, Vulkan's lacks the transcendental functions), and data is never narrowed
/// silently.
pub fn gpu_dtype(op: &str, dtype: DType, device: &Device) -> PyResult<DType> {
    if !device.supports_dtype(dtype) {
        return Err(type_err(
            op,
            format!(
                "{} ({dtype}) is not supported on {} (kiln's GPU backend has no float64; \
                 kiln.supported_dtypes(device) lists what is): convert the data to float32 first \
                 (x.astype(numpy.float32)) or pass dtype=kiln.float32",
                crate::dtype::np_name(dtype),
                device.name()
            ),
        ));
    }
    Ok(dtype)
}

/// `kiln.asarray`: a Tensor from a Tensor, a NumPy array, anything NumPy converts (lists, scalars,
/// objects with `__array__`), converted to `dtype` on `device`.
pub fn asarray_impl(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    dtype: Option<DType>,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<Tensor> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        let t = t.borrow().t.clone();
        let device = device.unwrap_or_else(|| t.device().clone());
        let dtype = dtype.unwrap_or(t.dtype());
        if copy == Some(false) && (dtype != t.dtype() || &device != t.device()) {
            return Err(value_err("asarray", "copy=False, but a dtype or device change needs a copy"));
        }
        let dtype = gpu_dtype("asarray", dtype, &device)?;
        return run(py, "asarray", move || t.to_device(&device)?.to_dtype(dtype));
    }
    if copy == Some(false) {
        return Err(value_err(
            "asarray",
            "copy=False is impossible: kiln's storage owns its memory, so data from NumPy or Python is always copied",
        ));
    }
    let device = match device {
        Some(d) => d,
        None => to_device(py, None)?,
    };
    let np = py.import("numpy")?;
    let is_array = obj.hasattr("__array_interface__")? || obj.hasattr("__array__")?;
    let mut a = np.getattr("asarray")?.call1((obj,))?;
    let mut name: String = a.getattr("dtype")?.getattr("name")?.extract()?;
    if !is_array && name == "float64" {
        // Python floats (lists, scalars) take kiln's default float dtype, as in PyTorch.
        name = "float32".into();
    }
    let src = crate::dtype::from_name(&name)
        .ok_or_else(|| type_err("asarray", format!("NumPy dtype {name} has no kiln equivalent")))?;
    let target = gpu_dtype("asarray", dtype.unwrap_or(src), &device)?;
    // Convert on the host when the target has a NumPy dtype (saves a device cast and f64 uploads).
    let host_dtype = if target != DType::BF16 && !(target == DType::F64 && device.is_gpu()) { target } else { src };
    // `asarray(order="C")` keeps 0-d arrays 0-d (`ascontiguousarray` makes them 1-d).
    let kwargs = PyDict::new(py);
    if host_dtype == DType::BF16 {
        // An `ml_dtypes.bfloat16` array: copied as it is (its bits are kiln's bf16).
        kwargs.set_item("dtype", a.getattr("dtype")?)?;
    } else {
        kwargs.set_item("dtype", np_name(host_dtype))?;
    }
    kwargs.set_item("order", "C")?;
    a = np.getattr("asarray")?.call((a,), Some(&kwargs))?;
    let shape: Vec<usize> = a.getattr("shape")?.extract()?;
    let iface = a.getattr("__array_interface__")?;
    let (addr, _ro): (usize, bool) = iface.get_item("data")?.extract()?;
    let t = run(py, "asarray", move || {
        // SAFETY: `a` is a C-contiguous array of `host_dtype` and `shape`, alive in this frame.
        let t = unsafe { tensor_from_raw(addr, host_dtype, shape, &device)? };
        t.to_dtype(target)
    })?;
    drop(a);
    Ok(t)
}

/// kiln.asarray(obj, dtype=None, device=None, copy=None)
///
/// A Tensor from a Tensor, a NumPy array or anything NumPy converts (nested lists, scalars,
/// objects with `__array__`). Data from NumPy and Python is always copied (kiln's storage owns its
/// memory), so `copy=False` raises ValueError for it; a Tensor is returned as is when dtype and
/// device match. Python floats give float32 (kiln's default float), NumPy arrays keep their dtype.
/// float64 data headed for a GPU raises TypeError
/// (the GPU backend has no float64): convert it first or pass `dtype`.
#[pyfunction]
#[pyo3(signature = (obj, /, dtype = None, device = None, copy = None))]
pub fn asarray(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    device: Option<&Bound<'_, PyAny>>,
    copy: Option<bool>,
) -> PyResult<PyTensor> {
    let dtype = dtype.filter(|d| !d.is_none()).map(to_dtype).transpose()?;
    let device = match device.filter(|d| !d.is_none()) {
        Some(d) => Some(to_device(py, Some(d))?),
        None => None,
    };
    Ok(asarray_impl(py, obj, dtype, device, copy)?.into())
}

#[pymethods]
impl PyTensor {
    /// `kiln.Tensor(obj, dtype=None, device=None)`: the same as `kiln.asarray(obj, dtype, device)`
    /// (also spelled `kiln.array`, as in MLX: `mx.array([1, 2, 3])`).
    #[new]
    #[pyo3(signature = (obj, /, dtype = None, device = None))]
    fn new(
        py: Python<'_>,
        obj: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        asarray(py, obj, dtype, device, None)
    }

    /// NumPy's array protocol: `numpy.asarray(t)` is a read-only view of a CPU tensor's memory (no
    /// copy; it keeps the tensor alive), and a host copy of a GPU tensor. bfloat16 gives
    /// `ml_dtypes.bfloat16` when ml_dtypes is installed, else a float32 copy. `copy=True` gives a
    /// writable copy; `copy=False` raises ValueError when a copy cannot be avoided.
    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let a = to_numpy(py, &self.t, copy)?;
        match dtype.filter(|d| !d.is_none()) {
            Some(d) => a.call_method1("astype", (d,)),
            None => Ok(a),
        }
    }

    /// The tensor as a NumPy array (see `__array__`: zero-copy and read-only for CPU tensors).
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_numpy(py, &self.t, None)
    }

    /// Array API: the namespace of the functions that work on this tensor (the `kiln` module).
    #[pyo3(signature = (api_version = None))]
    fn __array_namespace__<'py>(&self, py: Python<'py>, api_version: Option<&str>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(v) = api_version {
            if !matches!(v, "2021.12" | "2022.12" | "2023.12") {
                return Err(value_err("__array_namespace__", format!("unsupported API version {v}")));
            }
        }
        Ok(py.import("kiln")?.into_any())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(asarray, m)?)?;
    Ok(())
}
