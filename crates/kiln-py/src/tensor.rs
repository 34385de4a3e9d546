//! `kiln.Tensor`: the wrapper class, its properties, conversions to Python values, and `repr`.
//! Ops live in `ops.rs`, operators in `operators.rs`, indexing in `indexing.rs`.

use crate::device::{to_device, PyDevice};
use crate::dtype::{np_name, to_dtype, PyDType};
use crate::errors::{run, type_err, value_err, IntoPyResult};
use kiln::{DType, Device, Tensor};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyTuple};

/// An n-dimensional array on a device (CPU or GPU), with NumPy-style operators, indexing and
/// printing. Views (`reshape`, `T`, slicing with steps) share storage with their source; ops return
/// new tensors. `t[key] = value` is copy-on-write: `t` gets new storage holding the update, and
/// views taken earlier keep the old values. Convert with `numpy.asarray(t)` (zero-copy for CPU
/// tensors) and `kiln.asarray(x)`.
#[pyclass(name = "Tensor", module = "kiln", sequence)]
#[derive(Clone)]
pub struct PyTensor {
    pub t: Tensor,
}

impl From<Tensor> for PyTensor {
    fn from(t: Tensor) -> Self {
        PyTensor { t }
    }
}

/// A Python scalar operand: its value and whether it was written as a float.
pub enum Scalar {
    Bool(bool),
    Int(f64),
    Float(f64),
}

impl Scalar {
    pub fn value(&self) -> f64 {
        match *self {
            Scalar::Bool(b) => b as u8 as f64,
            Scalar::Int(v) | Scalar::Float(v) => v,
        }
    }

    /// Python scalars (and NumPy scalars) as operands; `None` for anything else.
    pub fn extract(obj: &Bound<'_, PyAny>) -> Option<Scalar> {
        if obj.is_instance_of::<PyBool>() {
            return obj.extract::<bool>().ok().map(Scalar::Bool);
        }
        if obj.is_instance_of::<PyInt>() {
            // Exact up to 2^53; larger integers still convert (rounded) and kiln checks ranges.
            return obj.extract::<f64>().ok().map(Scalar::Int);
        }
        if obj.is_instance_of::<PyFloat>() {
            return obj.extract::<f64>().ok().map(Scalar::Float);
        }
        // NumPy scalars: np.float32(1), np.int64(2), np.bool_(True).
        let kind: String = obj.getattr("dtype").ok()?.getattr("kind").ok()?.extract().ok()?;
        if obj.getattr("ndim").ok()?.extract::<usize>().ok()? != 0 {
            return None;
        }
        match kind.as_str() {
            "b" => obj.call_method0("item").ok()?.extract::<bool>().ok().map(Scalar::Bool),
            "i" | "u" => obj.call_method0("item").ok()?.extract::<f64>().ok().map(Scalar::Int),
            "f" => obj.call_method0("item").ok()?.extract::<f64>().ok().map(Scalar::Float),
            _ => None,
        }
    }

    /// The dtype a scalar takes next to a tensor of `dtype` (the array API's rule: Python scalars
    /// are weak, so the tensor's dtype wins unless the scalar's kind is wider: a float with an
    /// integer or bool tensor gives f32, an int with a bool tensor gives i64).
    pub fn dtype_with(&self, dtype: DType) -> DType {
        match self {
            Scalar::Float(_) if !dtype.is_float() => DType::F32,
            Scalar::Int(_) if dtype == DType::Bool => DType::I64,
            _ => dtype,
        }
    }
}

impl PyTensor {
    /// A tensor operand: a Tensor as is, a scalar as a rank-0 tensor of the dtype it takes next to
    /// `like`, anything else through `kiln.asarray` on `like`'s device.
    pub fn operand(like: &Tensor, obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        if let Ok(t) = obj.cast::<PyTensor>() {
            return Ok(t.borrow().t.clone());
        }
        if let Some(s) = Scalar::extract(obj) {
            let dtype = s.dtype_with(like.dtype());
            return Tensor::scalar(s.value(), dtype, like.device()).py();
        }
        crate::interop::asarray_impl(obj.py(), obj, None, Some(like.device().clone()), None)
    }

    /// Axes argument: None (all), an int, or a sequence of ints.
    pub fn axes(&self, axis: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<isize>> {
        match axis {
            None => Ok((0..self.t.rank() as isize).collect()),
            Some(a) if a.is_none() => Ok((0..self.t.rank() as isize).collect()),
            Some(a) => match a.extract::<isize>() {
                Ok(i) => Ok(vec![i]),
                Err(_) => a.extract::<Vec<isize>>(),
            },
        }
    }

    /// The host values as a nested Python list (bools, ints or floats).
    fn to_list<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.t.clone();
        let dtype = t.dtype();
        let values = run(py, "tolist", move || {
            if dtype == DType::I64 {
                // Exact beyond 2^53.
                Ok(t.to_vec::<i64>()?.into_iter().map(|v| (v as f64, v)).collect::<Vec<_>>())
            } else if dtype == DType::U64 {
                // The bits, exact; `nest` reads them back as u64.
                Ok(t.to_vec::<u64>()?.into_iter().map(|v| (v as f64, v as i64)).collect::<Vec<_>>())
            } else {
                Ok(t.to_f64_vec()?.into_iter().map(|v| (v, v as i64)).collect())
            }
        })?;
        let dims = self.t.dims().to_vec();
        nest(py, &values, &dims, dtype)
    }
}

/// What `__reduce__` returns: a callable and its arguments.
type Reduced<'py> = (Bound<'py, PyAny>, (Bound<'py, PyAny>, PyDType));

/// Builds a nested list of Python scalars from row-major `values` (f64 and exact i64 for each).
fn nest<'py>(py: Python<'py>, values: &[(f64, i64)], dims: &[usize], dtype: DType) -> PyResult<Bound<'py, PyAny>> {
    let item = |(f, i): (f64, i64)| -> PyResult<Bound<'py, PyAny>> {
        Ok(if dtype == DType::Bool {
            PyBool::new(py, f != 0.0).to_owned().into_any()
        } else if dtype.is_float() {
            PyFloat::new(py, f).into_any()
        } else if dtype == DType::U64 {
            (i as u64).into_pyobject(py)?.into_any()
        } else {
            i.into_pyobject(py)?.into_any()
        })
    };
    if dims.is_empty() {
        return item(values[0]);
    }
    let inner: usize = dims[1..].iter().product();
    let list = PyList::empty(py);
    for k in 0..dims[0] {
        list.append(nest(py, &values[k * inner..(k + 1) * inner], &dims[1..], dtype)?)?;
    }
    Ok(list.into_any())
}

#[pymethods]
impl PyTensor {
    /// The dimensions as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.dims())
    }
    /// The element type (`kiln.float32`, ...).
    #[getter]
    fn dtype(&self) -> PyDType {
        PyDType(self.t.dtype())
    }
    /// The device the storage lives on.
    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice(self.t.device().clone())
    }
    /// Number of dimensions.
    #[getter]
    fn ndim(&self) -> usize {
        self.t.rank()
    }
    /// Number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.t.elem_count()
    }
    /// Bytes of the elements (`size * itemsize`).
    #[getter]
    fn nbytes(&self) -> usize {
        self.t.elem_count() * self.t.dtype().size_in_bytes()
    }
    #[getter]
    fn itemsize(&self) -> usize {
        self.t.dtype().size_in_bytes()
    }
    /// Strides in elements (not bytes, unlike NumPy).
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.strides())
    }
    /// Whether the elements are contiguous in row-major order.
    #[getter]
    fn is_contiguous(&self) -> bool {
        self.t.is_contiguous()
    }
    /// The transpose: axes reversed (a view, like NumPy's `.T`).
    #[getter(T)]
    fn transposed(&self) -> PyResult<PyTensor> {
        let perm: Vec<usize> = (0..self.t.rank()).rev().collect();
        Ok(self.t.permute(&perm).py()?.into())
    }
    /// The transpose of the last two axes (array API `mT`).
    #[getter(mT)]
    fn matrix_transposed(&self) -> PyResult<PyTensor> {
        if self.t.rank() < 2 {
            return Err(value_err("mT", format!("needs rank >= 2, got shape {}", self.t.shape())));
        }
        Ok(self.t.transpose(-2, -1).py()?.into())
    }

    /// True when both tensors view the same storage.
    fn shares_storage_with(&self, other: &PyTensor) -> bool {
        self.t.shares_storage_with(&other.t)
    }

    /// A copy converted to `dtype` (the same tensor when it already has it).
    #[pyo3(signature = (dtype, copy = true))]
    fn astype(&self, py: Python<'_>, dtype: &Bound<'_, PyAny>, copy: bool) -> PyResult<PyTensor> {
        let _ = copy; // Tensors are immutable: sharing is indistinguishable from a copy.
        let d = to_dtype(dtype)?;
        let t = self.t.clone();
        Ok(run(py, "astype", move || t.to_dtype(d))?.into())
    }

    /// A copy on `device` ("cpu", "gpu", "gpu:N" or a Device); the same tensor when already there.
    /// `stream` (array API) must be None: kiln has one queue per device, and the copy is ordered
    /// after all work queued before it.
    #[pyo3(signature = (device, /, *, stream = None))]
    fn to_device(
        &self,
        py: Python<'_>,
        device: &Bound<'_, PyAny>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        if stream.is_some_and(|s| !s.is_none()) {
            return Err(value_err("to_device", "stream must be None: kiln has one queue per device"));
        }
        let d = to_device(py, Some(device))?;
        let t = self.t.clone();
        Ok(run(py, "to_device", move || t.to_device(&d))?.into())
    }

    /// Shorthand for `to_device("cpu")`.
    fn cpu(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "to_device", move || t.to_device(&Device::cpu()))?.into())
    }

    /// A contiguous tensor with the same elements (itself when already contiguous).
    fn contiguous(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "contiguous", move || t.contiguous())?.into())
    }

    /// The elements as nested Python lists.
    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.to_list(py)
    }

    /// The single element as a Python scalar.
    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if self.t.elem_count() != 1 {
            return Err(value_err(
                "item",
                format!("only a tensor with one element converts to a scalar, got shape {}", self.t.shape()),
            ));
        }
        let one = PyTensor::from(self.t.reshape(()).py()?);
        one.to_list(py)
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        self.item(py)?.extract()
    }
    /// `complex(t)` of a one-element tensor (kiln has no complex dtypes: the imaginary part is 0).
    fn __complex__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyComplex>> {
        Ok(pyo3::types::PyComplex::from_doubles(py, self.__float__(py)?, 0.0))
    }
    /// `int(t)` of a one-element tensor: Python's `int` of its value (exact for every integer dtype,
    /// uint64 above 2**63 too; floats truncate, NaN raises ValueError and inf OverflowError).
    fn __int__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.item(py)?.call_method0("__int__")
    }
    fn __index__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if !self.t.dtype().is_int() {
            return Err(type_err("__index__", format!("only integer tensors are indices, got {}", self.t.dtype())));
        }
        self.__int__(py)
    }
    fn __bool__(&self, py: Python<'_>) -> PyResult<bool> {
        self.item(py)?.is_truthy()
    }
    fn __len__(&self) -> PyResult<usize> {
        self.t.dims().first().copied().ok_or_else(|| type_err("len", "len() of a 0-d tensor"))
    }
    fn __iter__(slf: PyRef<'_, Self>) -> PyResult<Bound<'_, PyAny>> {
        let py = slf.py();
        let n = slf.__len__()?;
        let items = (0..n).map(|i| Ok(PyTensor::from(slf.t.select(0, i).py()?))).collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, items)?.call_method0("__iter__")
    }

    /// Printed like NumPy's repr: `tensor([[1., 2.],\n        [3., 4.]], dtype=float32, device=cpu)`
    /// (large tensors summarised; bfloat16 values printed through float32).
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let host = crate::interop::to_numpy(py, &self.t, None)?;
        let np = py.import("numpy")?;
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("separator", ", ")?;
        kwargs.set_item("prefix", "tensor(")?;
        let body: String = np.getattr("array2string")?.call((host,), Some(&kwargs))?.extract()?;
        Ok(format!("tensor({body}, dtype={}, device={})", np_name(self.t.dtype()), self.t.device().name()))
    }
    /// Printed like NumPy's `str`: `[[1. 2.]\n [3. 4.]]` (through NumPy, so int64 and uint64 values
    /// print exactly).
    fn __str__(&self, py: Python<'_>) -> PyResult<String> {
        let host = crate::interop::to_numpy(py, &self.t, None)?;
        py.import("numpy")?.getattr("array2string")?.call1((host,))?.extract()
    }

    /// Tensors pickle as their host values, a NumPy array (dtype and shape kept; pickle protocol 5
    /// sends its buffer without a copy, as Dask's workers do), unpickled on the default device.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduced<'py>> {
        let asarray = py.import("kiln")?.getattr("asarray")?;
        Ok((asarray, (crate::interop::to_numpy(py, &self.t, None)?, PyDType(self.t.dtype()))))
    }
}
