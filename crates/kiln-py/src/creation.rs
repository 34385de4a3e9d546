//! Creation functions: `zeros`, `ones`, `full`, `empty`, `arange`, `linspace`, `eye`, the `*_like`
//! forms and seeded random tensors. `dtype` defaults to float32 (arange: int64 for integer
//! arguments), `device` to the default device (`KILN_DEVICE`, else `auto`).

use crate::device::to_device;
use crate::dtype::to_dtype;
use crate::errors::{run, value_err};
use crate::interop::gpu_dtype;
use crate::tensor::PyTensor;
use kiln::{DType, Tensor};
use pyo3::prelude::*;

type Any<'a, 'py> = Option<&'a Bound<'py, PyAny>>;

/// A shape from an int or a sequence of ints.
pub fn shape_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    if let Ok(n) = obj.extract::<isize>() {
        return dims(vec![n]);
    }
    dims(obj.extract::<Vec<isize>>()?)
}

fn dims(d: Vec<isize>) -> PyResult<Vec<usize>> {
    if let Some(n) = d.iter().find(|&&n| n < 0) {
        return Err(value_err("shape", format!("negative dimension {n} in {d:?}")));
    }
    Ok(d.into_iter().map(|n| n as usize).collect())
}

/// `dtype` (else `default`) if `device` supports it, else the TypeError naming `op`.
fn dtype_or(op: &str, dtype: Any<'_, '_>, default: DType, device: &kiln::Device) -> PyResult<DType> {
    let dt = match dtype.filter(|d| !d.is_none()) {
        Some(d) => to_dtype(d)?,
        None => default,
    };
    gpu_dtype(op, dt, device)
}

/// A tensor of `shape` filled with `fill_value`.
#[pyfunction]
#[pyo3(signature = (shape, fill_value, *, dtype = None, device = None))]
fn full(
    py: Python<'_>,
    shape: &Bound<'_, PyAny>,
    fill_value: &Bound<'_, PyAny>,
    dtype: Any,
    device: Any,
) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let default = if fill_value.is_instance_of::<pyo3::types::PyBool>() {
        DType::Bool
    } else if fill_value.is_instance_of::<pyo3::types::PyInt>() {
        DType::I64
    } else {
        DType::F32
    };
    let dt = dtype_or("full", dtype, default, &dev)?;
    let v: f64 = fill_value.extract()?;
    let s = shape_arg(shape)?;
    Ok(run(py, "full", move || Tensor::full(v, s, dt, &dev))?.into())
}

/// A tensor of `shape` filled with zeros (float32 unless `dtype` is given).
#[pyfunction]
#[pyo3(signature = (shape, *, dtype = None, device = None))]
fn zeros(py: Python<'_>, shape: &Bound<'_, PyAny>, dtype: Any, device: Any) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let dt = dtype_or("zeros", dtype, DType::F32, &dev)?;
    let s = shape_arg(shape)?;
    Ok(run(py, "zeros", move || Tensor::zeros(s, dt, &dev))?.into())
}

/// A tensor of `shape` filled with ones (float32 unless `dtype` is given).
#[pyfunction]
#[pyo3(signature = (shape, *, dtype = None, device = None))]
fn ones(py: Python<'_>, shape: &Bound<'_, PyAny>, dtype: Any, device: Any) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let dt = dtype_or("ones", dtype, DType::F32, &dev)?;
    let s = shape_arg(shape)?;
    Ok(run(py, "ones", move || Tensor::ones(s, dt, &dev))?.into())
}

/// Like `zeros` (kiln has no uninitialised tensors: memory is always defined).
#[pyfunction]
#[pyo3(signature = (shape, *, dtype = None, device = None))]
fn empty(py: Python<'_>, shape: &Bound<'_, PyAny>, dtype: Any, device: Any) -> PyResult<PyTensor> {
    zeros(py, shape, dtype, device)
}

fn like(py: Python<'_>, x: &PyTensor, dtype: Any, device: Any) -> PyResult<(Vec<usize>, DType, kiln::Device)> {
    let dev = match device.filter(|d| !d.is_none()) {
        Some(d) => to_device(py, Some(d))?,
        None => x.t.device().clone(),
    };
    let dt = match dtype.filter(|d| !d.is_none()) {
        Some(d) => to_dtype(d)?,
        None => x.t.dtype(),
    };
    Ok((x.t.dims().to_vec(), gpu_dtype("like", dt, &dev)?, dev))
}

/// A tensor with `x`'s shape (and dtype and device unless given) filled with `fill_value`.
#[pyfunction]
#[pyo3(signature = (x, /, fill_value, *, dtype = None, device = None))]
fn full_like(py: Python<'_>, x: &PyTensor, fill_value: f64, dtype: Any, device: Any) -> PyResult<PyTensor> {
    let (s, dt, dev) = like(py, x, dtype, device)?;
    Ok(run(py, "full_like", move || Tensor::full(fill_value, s, dt, &dev))?.into())
}

/// Zeros with `x`'s shape (and dtype and device unless given).
#[pyfunction]
#[pyo3(signature = (x, /, *, dtype = None, device = None))]
fn zeros_like(py: Python<'_>, x: &PyTensor, dtype: Any, device: Any) -> PyResult<PyTensor> {
    full_like(py, x, 0.0, dtype, device)
}

/// Ones with `x`'s shape (and dtype and device unless given).
#[pyfunction]
#[pyo3(signature = (x, /, *, dtype = None, device = None))]
fn ones_like(py: Python<'_>, x: &PyTensor, dtype: Any, device: Any) -> PyResult<PyTensor> {
    full_like(py, x, 1.0, dtype, device)
}

/// Like `zeros_like`.
#[pyfunction]
#[pyo3(signature = (x, /, *, dtype = None, device = None))]
fn empty_like(py: Python<'_>, x: &PyTensor, dtype: Any, device: Any) -> PyResult<PyTensor> {
    full_like(py, x, 0.0, dtype, device)
}

/// `start, start+step, ...` up to but excluding `stop` (NumPy `arange`; `arange(n)` counts from 0).
/// The dtype is int64 when every argument is an int, else float32.
#[pyfunction]
#[pyo3(signature = (start, /, stop = None, step = None, *, dtype = None, device = None))]
fn arange(
    py: Python<'_>,
    start: &Bound<'_, PyAny>,
    stop: Any,
    step: Any,
    dtype: Any,
    device: Any,
) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let is_int = |o: &Bound<'_, PyAny>| o.is_instance_of::<pyo3::types::PyInt>();
    let all_int =
        is_int(start) && stop.is_none_or(|s| s.is_none() || is_int(s)) && step.is_none_or(|s| s.is_none() || is_int(s));
    let dt = dtype_or("arange", dtype, if all_int { DType::I64 } else { DType::F32 }, &dev)?;
    let (a, b) = match stop.filter(|s| !s.is_none()) {
        Some(s) => (start.extract::<f64>()?, s.extract::<f64>()?),
        None => (0.0, start.extract::<f64>()?),
    };
    let st: f64 = match step.filter(|s| !s.is_none()) {
        Some(s) => s.extract()?,
        None => 1.0,
    };
    Ok(run(py, "arange", move || Tensor::arange_step(a, b, st, dt, &dev))?.into())
}

/// `num` evenly spaced values from `start` to `stop` (inclusive unless `endpoint=False`).
#[pyfunction]
#[pyo3(signature = (start, stop, /, num, *, dtype = None, device = None, endpoint = true))]
fn linspace(
    py: Python<'_>,
    start: f64,
    stop: f64,
    num: i64,
    dtype: Any,
    device: Any,
    endpoint: bool,
) -> PyResult<PyTensor> {
    let num = usize::try_from(num).map_err(|_| value_err("linspace", format!("num must be >= 0, got {num}")))?;
    let dev = to_device(py, device)?;
    let dt = dtype_or("linspace", dtype, DType::F32, &dev)?;
    let t = run(py, "linspace", move || {
        if endpoint {
            Tensor::linspace(start, stop, num, dt, &dev)
        } else {
            let full = Tensor::linspace(start, stop, num + 1, dt, &dev)?;
            full.narrow(0, 0, num)
        }
    })?;
    Ok(t.into())
}

/// The `n_rows x n_cols` matrix with ones on diagonal `k` (NumPy `eye`).
#[pyfunction]
#[pyo3(signature = (n_rows, n_cols = None, /, *, k = 0, dtype = None, device = None))]
fn eye(py: Python<'_>, n_rows: usize, n_cols: Option<usize>, k: i64, dtype: Any, device: Any) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let dt = dtype_or("eye", dtype, DType::F32, &dev)?;
    let m = n_cols.unwrap_or(n_rows);
    let t = run(py, "eye", move || {
        if m == n_rows && k == 0 {
            return Tensor::eye(n_rows, dt, &dev);
        }
        let mut v = vec![0.0; n_rows * m];
        for r in 0..n_rows {
            let c = r as i64 + k;
            if c >= 0 && (c as usize) < m {
                v[r * m + c as usize] = 1.0;
            }
        }
        Tensor::from_f64_values(&v, (n_rows, m), dt, &dev)
    })?;
    Ok(t.into())
}

/// Uniform random values in `[low, high)` from a seeded generator (the same numbers on every
/// device and machine for a seed).
#[pyfunction]
#[pyo3(signature = (shape, *, low = 0.0, high = 1.0, seed = 0, dtype = None, device = None))]
fn rand(
    py: Python<'_>,
    shape: &Bound<'_, PyAny>,
    low: f64,
    high: f64,
    seed: u64,
    dtype: Any,
    device: Any,
) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let dt = dtype_or("rand", dtype, DType::F32, &dev)?;
    let s = shape_arg(shape)?;
    Ok(run(py, "rand", move || Tensor::rand(low, high, s, dt, seed, &dev))?.into())
}

/// Normally distributed values with `mean` and `std` from a seeded generator.
#[pyfunction]
#[pyo3(signature = (shape, *, mean = 0.0, std = 1.0, seed = 0, dtype = None, device = None))]
fn randn(
    py: Python<'_>,
    shape: &Bound<'_, PyAny>,
    mean: f64,
    std: f64,
    seed: u64,
    dtype: Any,
    device: Any,
) -> PyResult<PyTensor> {
    let dev = to_device(py, device)?;
    let dt = dtype_or("randn", dtype, DType::F32, &dev)?;
    let s = shape_arg(shape)?;
    Ok(run(py, "randn", move || Tensor::randn(mean, std, s, dt, seed, &dev))?.into())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(full, m)?)?;
    m.add_function(wrap_pyfunction!(zeros, m)?)?;
    m.add_function(wrap_pyfunction!(ones, m)?)?;
    m.add_function(wrap_pyfunction!(empty, m)?)?;
    m.add_function(wrap_pyfunction!(full_like, m)?)?;
    m.add_function(wrap_pyfunction!(zeros_like, m)?)?;
    m.add_function(wrap_pyfunction!(ones_like, m)?)?;
    m.add_function(wrap_pyfunction!(empty_like, m)?)?;
    m.add_function(wrap_pyfunction!(arange, m)?)?;
    m.add_function(wrap_pyfunction!(linspace, m)?)?;
    m.add_function(wrap_pyfunction!(eye, m)?)?;
    m.add_function(wrap_pyfunction!(rand, m)?)?;
    m.add_function(wrap_pyfunction!(randn, m)?)?;
    Ok(())
}
