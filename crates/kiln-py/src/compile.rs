//! `kiln.compile` (issue 26): a Python function over tensors traced once per signature and run as
//! fused kernels by `kiln::compile`. `python/kiln/__init__.py` wraps it as a decorator.

use crate::errors::run;
use crate::tensor::PyTensor;
use kiln::Tensor;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::sync::{Arc, Mutex};

/// How the function returned its tensors (the last time it ran).
#[derive(Clone, Copy)]
enum Ret {
    One,
    Tuple,
    List,
}

/// A compiled function (made by `kiln.compile`); call it with tensors.
#[pyclass(name = "Compiled", module = "kiln")]
pub struct PyCompiled {
    inner: Arc<kiln::Compiled>,
    func: Py<PyAny>,
    ret: Arc<Mutex<Ret>>,
    raised: Arc<Mutex<Option<PyErr>>>,
    /// Set when the function returned something other than tensors: then it runs as it is, and
    /// this holds that result of the call that found out.
    plain: Arc<Mutex<Option<Py<PyAny>>>>,
    is_plain: Arc<std::sync::atomic::AtomicBool>,
}

/// The results of the Python function as tensors, remembering how they came.
fn outputs(r: &Bound<'_, PyAny>, ret: &Mutex<Ret>) -> PyResult<Vec<Tensor>> {
    if let Ok(t) = r.cast::<PyTensor>() {
        *ret.lock().unwrap_or_else(|e| e.into_inner()) = Ret::One;
        return Ok(vec![t.borrow().t.clone()]);
    }
    let kind = if r.cast::<PyTuple>().is_ok() {
        Ret::Tuple
    } else if r.cast::<PyList>().is_ok() {
        Ret::List
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "[compile] the function must return a kiln.Tensor or a tuple or list of them, got {}",
            r.get_type().name()?
        )));
    };
    let items: Vec<Bound<'_, PyAny>> = r.extract()?;
    let ts = items
        .iter()
        .map(|i| {
            i.cast::<PyTensor>().map(|t| t.borrow().t.clone()).map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err("[compile] the function must return kiln.Tensor values only")
            })
        })
        .collect::<PyResult<Vec<_>>>()?;
    *ret.lock().unwrap_or_else(|e| e.into_inner()) = kind;
    Ok(ts)
}

/// Compiles `func` (a function of kiln tensors returning a tensor or a tuple/list of tensors).
#[pyfunction]
#[pyo3(name = "_compile")]
pub fn compile(py: Python<'_>, func: Py<PyAny>) -> PyCompiled {
    let ret = Arc::new(Mutex::new(Ret::One));
    let raised: Arc<Mutex<Option<PyErr>>> = Arc::new(Mutex::new(None));
    let plain: Arc<Mutex<Option<Py<PyAny>>>> = Arc::new(Mutex::new(None));
    let is_plain = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (f, r, e, pl, ip) = (func.clone_ref(py), ret.clone(), raised.clone(), plain.clone(), is_plain.clone());
    let inner = kiln::compile(move |xs: &[Tensor]| {
        Python::attach(|py| {
            let args: Vec<Py<PyTensor>> =
                xs.iter().map(|t| Py::new(py, PyTensor::from(t.clone()))).collect::<PyResult<_>>().map_err(|err| {
                    *e.lock().unwrap_or_else(|p| p.into_inner()) = Some(err);
                    kiln::Error::Gpu { op: "compile", msg: "could not wrap the arguments".into() }
                })?;
            let res = PyTuple::new(py, args.iter().map(|a| a.clone_ref(py))).and_then(|a| f.call1(py, a));
            // An in-place operator on an argument (`x += 1`) updates the caller's tensor when the
            // function runs as it is; a trace cannot: such a function runs as it is from now on.
            if res.is_ok() && args.iter().zip(xs).any(|(a, x)| !a.borrow(py).t.shares_storage_with(x)) {
                ip.store(true, std::sync::atomic::Ordering::Relaxed);
                return Err(kiln::Error::InvalidArgument { op: "compile", msg: "updates an argument in place".into() });
            }
            if let Ok(o) = &res {
                if outputs(o.bind(py), &r).is_err() {
                    // Not tensors: the function runs as it is from now on.
                    ip.store(true, std::sync::atomic::Ordering::Relaxed);
                    *pl.lock().unwrap_or_else(|p| p.into_inner()) = Some(o.clone_ref(py));
                    return Err(kiln::Error::InvalidArgument { op: "compile", msg: "not tensors".into() });
                }
            }
            let called = res.and_then(|o| outputs(o.bind(py), &r));
            called.map_err(|err| {
                let msg = err.to_string();
                *e.lock().unwrap_or_else(|p| p.into_inner()) = Some(err);
                kiln::Error::InvalidArgument { op: "compile", msg: format!("the compiled function raised: {msg}") }
            })
        })
    });
    PyCompiled { inner: Arc::new(inner), func, ret, raised, plain, is_plain }
}

#[pymethods]
impl PyCompiled {
    /// Runs the function: traced on the first call of each signature (shapes, dtypes, device),
    /// then as fused kernels. Arguments that are not all tensors run the function as it is.
    #[pyo3(signature = (*args))]
    fn __call__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<Py<PyAny>> {
        let ts: Option<Vec<Tensor>> =
            args.iter().map(|a| a.cast::<PyTensor>().ok().map(|t| t.borrow().t.clone())).collect();
        let Some(ts) = ts else { return self.func.call1(py, args) };
        if self.is_plain.load(std::sync::atomic::Ordering::Relaxed) {
            return self.func.call1(py, args);
        }
        let inner = self.inner.clone();
        let r = run(py, "compile", move || inner.call(&ts));
        if let Some(o) = self.plain.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Ok(o);
        }
        if let Some(e) = self.raised.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        if self.is_plain.load(std::sync::atomic::Ordering::Relaxed) {
            // Found out during this call that it updates an argument in place: run it as it is.
            return self.func.call1(py, args);
        }
        let outs: Vec<Py<PyTensor>> =
            r?.into_iter().map(|t| Py::new(py, PyTensor::from(t))).collect::<PyResult<_>>()?;
        let ret = *self.ret.lock().unwrap_or_else(|p| p.into_inner());
        Ok(match ret {
            Ret::One if outs.len() == 1 => outs.into_iter().next().expect("one").into_any(),
            Ret::List => PyList::new(py, outs)?.into_any().unbind(),
            _ => PyTuple::new(py, outs)?.into_any().unbind(),
        })
    }

    /// Counts over the signatures traced so far: `traces`, `eager` (signatures that run eagerly),
    /// `groups` (fused kernels), `fused_ops`, `eager_ops`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("traces", s.traces)?;
        d.set_item("eager", s.eager)?;
        d.set_item("groups", s.groups)?;
        d.set_item("fused_ops", s.fused_ops)?;
        d.set_item("eager_ops", s.eager_ops)?;
        Ok(d)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyCompiled>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    Ok(())
}
