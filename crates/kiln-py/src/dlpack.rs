//! DLPack: `t.__dlpack__()` exports a CPU tensor without a copy (the capsule keeps the tensor alive),
//! so `numpy.from_dlpack(t)` and `torch.from_dlpack(t)` view kiln's memory; GPU tensors are exported
//! as a host copy. `kiln.from_dlpack(x)` imports any CPU DLPack producer (NumPy, PyTorch) by copying,
//! since kiln's storage owns its memory.

use crate::device::to_device;
use crate::errors::{run, type_err, value_err};
use crate::interop::{gpu_dtype, tensor_from_raw};
use crate::tensor::PyTensor;
use kiln::{DType, Device, Tensor};
use pyo3::ffi;
use pyo3::prelude::*;
use std::ffi::{c_char, c_void, CStr};

const KDL_CPU: i32 = 1;
const KDL_INT: u8 = 0;
const KDL_UINT: u8 = 1;
const KDL_FLOAT: u8 = 2;
const KDL_BFLOAT: u8 = 4;
const KDL_BOOL: u8 = 6;

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What an exported capsule owns: the tensor (keeping its storage alive) and the shape and strides
/// arrays the DLTensor points into.
struct Export {
    _tensor: Tensor,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

const NAME: &CStr = c"dltensor";
const USED: &CStr = c"used_dltensor";

fn dl_dtype(d: DType) -> DLDataType {
    let (code, bits) = match d {
        DType::Bool => (KDL_BOOL, 8),
        DType::U8 => (KDL_UINT, 8),
        DType::U32 => (KDL_UINT, 32),
        DType::I32 => (KDL_INT, 32),
        DType::I64 => (KDL_INT, 64),
        DType::I8 => (KDL_INT, 8),
        DType::I16 => (KDL_INT, 16),
        DType::U16 => (KDL_UINT, 16),
        DType::U64 => (KDL_UINT, 64),
        DType::F16 => (KDL_FLOAT, 16),
        DType::F32 => (KDL_FLOAT, 32),
        DType::F64 => (KDL_FLOAT, 64),
        DType::BF16 => (KDL_BFLOAT, 16),
    };
    DLDataType { code, bits, lanes: 1 }
}

fn from_dl_dtype(d: DLDataType) -> Option<DType> {
    Some(match (d.code, d.bits, d.lanes) {
        (KDL_BOOL, 8, 1) => DType::Bool,
        (KDL_UINT, 8, 1) => DType::U8,
        (KDL_UINT, 32, 1) => DType::U32,
        (KDL_INT, 32, 1) => DType::I32,
        (KDL_INT, 64, 1) => DType::I64,
        (KDL_INT, 8, 1) => DType::I8,
        (KDL_INT, 16, 1) => DType::I16,
        (KDL_UINT, 16, 1) => DType::U16,
        (KDL_UINT, 64, 1) => DType::U64,
        (KDL_FLOAT, 16, 1) => DType::F16,
        (KDL_FLOAT, 32, 1) => DType::F32,
        (KDL_FLOAT, 64, 1) => DType::F64,
        (KDL_BFLOAT, 16, 1) => DType::BF16,
        _ => return None,
    })
}

unsafe extern "C" fn delete_managed(m: *mut DLManagedTensor) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` and its context were made by `Box::into_raw` in `export` and are freed once.
    unsafe {
        let m = Box::from_raw(m);
        drop(Box::from_raw(m.manager_ctx as *mut Export));
    }
}

/// Frees an exported capsule nobody consumed (a consumer renames it to `used_dltensor`).
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with our capsule; the name check tells whether it was consumed.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, NAME.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, NAME.as_ptr()) as *mut DLManagedTensor;
            if let Some(del) = (*m).deleter {
                del(m);
            }
        } else {
            ffi::PyErr_Clear();
        }
    }
}

fn export(py: Python<'_>, t: Tensor) -> PyResult<Py<PyAny>> {
    let ptr = t.cpu_storage_ptr().ok_or_else(|| value_err("__dlpack__", "only CPU tensors export"))?;
    let size = t.dtype().size_in_bytes();
    let offset = if t.elem_count() == 0 { 0 } else { t.layout().offset() * size };
    let mut ctx = Box::new(Export {
        shape: t.dims().iter().map(|&d| d as i64).collect(),
        strides: t.strides().iter().map(|&s| s as i64).collect(),
        _tensor: t.clone(),
    });
    let managed = Box::new(DLManagedTensor {
        dl_tensor: DLTensor {
            data: (ptr as usize + offset) as *mut c_void,
            device: DLDevice { device_type: KDL_CPU, device_id: 0 },
            ndim: t.rank() as i32,
            dtype: dl_dtype(t.dtype()),
            shape: ctx.shape.as_mut_ptr(),
            strides: ctx.strides.as_mut_ptr(),
            byte_offset: 0,
        },
        manager_ctx: std::ptr::null_mut(),
        deleter: Some(delete_managed),
    });
    let m = Box::into_raw(managed);
    // SAFETY: `m` is a valid, owned DLManagedTensor; the capsule takes it over (freed by the consumer
    // through the deleter, or by `capsule_destructor`).
    unsafe {
        (*m).manager_ctx = Box::into_raw(ctx) as *mut c_void;
        let cap = ffi::PyCapsule_New(m as *mut c_void, NAME.as_ptr(), Some(capsule_destructor));
        if cap.is_null() {
            delete_managed(m);
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap).unbind())
    }
}

/// Copies the (possibly strided) DLTensor into a kiln tensor on `device` and consumes the capsule.
fn import(py: Python<'_>, capsule: &Bound<'_, PyAny>, device: Device, op: &str) -> PyResult<Tensor> {
    let cap = capsule.as_ptr();
    // SAFETY: PyCapsule_IsValid checks the object is a capsule with that name.
    if unsafe { ffi::PyCapsule_IsValid(cap, NAME.as_ptr()) } != 1 {
        return Err(type_err(op, "expected an unconsumed 'dltensor' capsule from __dlpack__()"));
    }
    // SAFETY: the capsule is valid; its pointer is a DLManagedTensor by the DLPack protocol.
    let m = unsafe { ffi::PyCapsule_GetPointer(cap, NAME.as_ptr()) as *mut DLManagedTensor };
    let dl = unsafe { &(*m).dl_tensor };
    if dl.device.device_type != KDL_CPU {
        return Err(type_err(op, format!("only CPU DLPack tensors import (device type {})", dl.device.device_type)));
    }
    let dtype = from_dl_dtype(dl.dtype).ok_or_else(|| {
        type_err(
            op,
            format!(
                "DLPack dtype (code {}, {} bits, {} lanes) has no kiln equivalent",
                dl.dtype.code, dl.dtype.bits, dl.dtype.lanes
            ),
        )
    })?;
    let rank = dl.ndim as usize;
    // SAFETY: shape (and strides, when not null) point to `ndim` entries by the protocol.
    let shape: Vec<usize> = (0..rank).map(|i| unsafe { *dl.shape.add(i) } as usize).collect();
    let strides: Option<Vec<i64>> =
        (!dl.strides.is_null()).then(|| (0..rank).map(|i| unsafe { *dl.strides.add(i) }).collect());
    let size = dtype.size_in_bytes();
    let n: usize = shape.iter().product();
    let base = dl.data as usize + dl.byte_offset as usize;
    // Gather into a contiguous host buffer (strides are in elements and may be negative).
    let mut bytes = vec![0u8; n * size];
    let mut idx = vec![0usize; rank];
    for k in 0..n {
        let off: i64 = match &strides {
            Some(s) => idx.iter().zip(s).map(|(&i, &s)| i as i64 * s).sum(),
            None => k as i64,
        };
        // SAFETY: the producer guarantees every strided element lies inside its allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (base as i64 + off * size as i64) as *const u8,
                bytes.as_mut_ptr().add(k * size),
                size,
            );
        }
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    // Consumed: rename so the producer's destructor leaves it alone, and release it.
    // SAFETY: `m` is the capsule's DLManagedTensor, released exactly once here.
    unsafe {
        ffi::PyCapsule_SetName(cap, USED.as_ptr() as *const c_char);
        if let Some(del) = (*m).deleter {
            del(m);
        }
    }
    let target = gpu_dtype("from_dlpack", dtype, &device)?;
    let addr = bytes.as_ptr() as usize;
    run(py, "from_dlpack", move || {
        // SAFETY: `bytes` holds `n` elements of `dtype` and lives until the closure returns.
        let t = unsafe { tensor_from_raw(addr, dtype, shape, &Device::cpu())? };
        let t = t.to_dtype(target)?.to_device(&device);
        drop(bytes);
        t
    })
}

#[pymethods]
impl PyTensor {
    /// DLPack export: a capsule viewing this CPU tensor's memory (no copy; it keeps the tensor
    /// alive). GPU tensors export a host copy (their memory is not addressable by the host).
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = (stream, max_version);
        if let Some((ty, _)) = dl_device {
            if ty != KDL_CPU {
                return Err(value_err("__dlpack__", format!("kiln exports to the CPU only (device type {ty} asked)")));
            }
        }
        if self.t.device().is_gpu() && copy == Some(false) {
            return Err(value_err("__dlpack__", "a GPU tensor exports only as a host copy"));
        }
        let t = self.t.clone();
        let host = run(py, "__dlpack__", move || t.to_device(&Device::cpu()))?;
        export(py, host)
    }

    /// `(device_type, device_id)`: `(1, 0)` (CPU), what `__dlpack__` exports for every tensor.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (KDL_CPU, 0)
    }
}

/// kiln.from_dlpack(x, /, *, device=None)
///
/// A Tensor from any object with `__dlpack__` (NumPy >= 1.22, PyTorch CPU tensors, kiln) or a raw
/// 'dltensor' capsule. The data is copied (kiln's storage owns its memory), onto `device`
/// (default: the CPU). float64 headed for a GPU raises TypeError (the GPU backend has no float64).
#[pyfunction]
#[pyo3(signature = (x, /, *, device = None))]
fn from_dlpack(py: Python<'_>, x: &Bound<'_, PyAny>, device: Option<&Bound<'_, PyAny>>) -> PyResult<PyTensor> {
    let dev = match device.filter(|d| !d.is_none()) {
        Some(d) => to_device(py, Some(d))?,
        None => Device::cpu(),
    };
    let capsule = if x.hasattr("__dlpack__")? { x.call_method0("__dlpack__")? } else { x.clone() };
    Ok(import(py, &capsule, dev, "from_dlpack")?.into())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(from_dlpack, m)?)?;
    Ok(())
}
