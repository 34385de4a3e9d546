//! kiln's `Error` as Python exceptions, and the one way the bindings call into kiln: with the GIL
//! released and panics caught, so that no panic reaches Python.

use pyo3::exceptions::{PyIndexError, PyMemoryError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyType;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Shapes and arguments give `ValueError`, an index out of range `kiln.OutOfRangeError` (both an
/// `IndexError` and a `ValueError`), dtypes `TypeError`,
/// sizes past the address space `ValueError`, out of (device or host) memory `MemoryError`, and the rest (GPU, device lost, missing backend) `RuntimeError`.
/// Every message names the op, as kiln's messages do.
pub fn to_py(e: kiln::Error) -> PyErr {
    use kiln::Error::*;
    let msg = e.to_string();
    match e {
        BroadcastMismatch { .. }
        | ShapeMismatch { .. }
        | ElementCountMismatch { .. }
        | AxisOutOfRange { .. }
        | DuplicateAxis { .. }
        | DeviceMismatch { .. }
        | InvalidArgument { .. }
        | TooLarge { .. } => PyValueError::new_err(msg),
        OutOfRange { .. } => out_of_range(msg),
        UnsupportedDType { .. } | DTypeMismatch { .. } => PyTypeError::new_err(msg),
        OutOfMemory { .. } | HostOutOfMemory { .. } => PyMemoryError::new_err(msg),
        BackendUnavailable { .. } | NotImplemented { .. } | DeviceLost(_) | Gpu { .. } | BadEnv { .. } => {
            PyRuntimeError::new_err(msg)
        }
    }
}

/// `kiln.OutOfRangeError` (an `IndexError` and a `ValueError`, defined in `kiln/__init__.py`), or a
/// plain `IndexError` before the package has loaded.
fn out_of_range(msg: String) -> PyErr {
    Python::attach(|py| {
        match py.import("kiln").and_then(|m| m.getattr("OutOfRangeError")).map(|t| t.cast_into::<PyType>()) {
            Ok(Ok(t)) => PyErr::from_type(t, msg),
            _ => PyIndexError::new_err(msg),
        }
    })
}

/// `kiln::Result` into `PyResult`.
pub trait IntoPyResult<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for kiln::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// Runs kiln work `f` with the GIL released (other Python threads run meanwhile) and turns a panic
/// into `RuntimeError` naming `op`.
pub fn run<T: Send>(py: Python<'_>, op: &str, f: impl FnOnce() -> kiln::Result<T> + Send) -> PyResult<T> {
    match py.detach(|| catch_unwind(AssertUnwindSafe(f))) {
        Ok(r) => r.py(),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(PyRuntimeError::new_err(format!("[{op}] internal error (a bug in kiln, please report it): {what}")))
        }
    }
}

/// `ValueError` with a message naming `op`.
pub fn value_err(op: &str, msg: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("[{op}] {msg}"))
}

/// `TypeError` with a message naming `op`.
pub fn type_err(op: &str, msg: impl std::fmt::Display) -> PyErr {
    PyTypeError::new_err(format!("[{op}] {msg}"))
}
