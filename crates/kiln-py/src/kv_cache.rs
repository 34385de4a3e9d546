//! `kiln.KvCache`: kiln's key/value cache for autoregressive attention.

use crate::errors::run;
use crate::tensor::PyTensor;
use pyo3::prelude::*;
use std::sync::Mutex;

/// A key/value cache: keys `(b, h, t, d)` and values `(b, h, t, dv)` appended along `t` into
/// preallocated storage up to `max_len`; attention gets views of the valid prefix, so a decode step
/// copies only the new entries. Views handed out stay valid (later appends only write past them).
#[pyclass(name = "KvCache", module = "kiln", frozen)]
pub struct PyKvCache(Mutex<kiln::KvCache>);

impl PyKvCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, kiln::KvCache> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl PyKvCache {
    /// An empty cache that holds at most `max_len` positions.
    #[new]
    fn new(max_len: usize) -> Self {
        PyKvCache(Mutex::new(kiln::KvCache::new(max_len)))
    }

    /// Appends `k` (`(b, h, t_new, d)`) and `v` (`(b, h, t_new, dv)`) and returns views of all cached
    /// keys and values (`(b, h, len, d)` and `(b, h, len, dv)`). The first append fixes `b`, `h`, `d`,
    /// `dv`, the dtype and the device; later ones must match them. Appending past `max_len` is an
    /// error and leaves the cache unchanged.
    fn append(&self, py: Python<'_>, k: &PyTensor, v: &PyTensor) -> PyResult<(PyTensor, PyTensor)> {
        let (k, v) = (k.t.clone(), v.t.clone());
        let (k, v) = run(py, "kv_cache_append", || self.lock().append(&k, &v))?;
        Ok((k.into(), v.into()))
    }

    /// Views of the cached keys and values, None before the first append.
    fn current(&self) -> Option<(PyTensor, PyTensor)> {
        self.lock().current().map(|(k, v)| (k.into(), v.into()))
    }

    /// Forgets all cached positions (views handed out before keep their values).
    fn reset(&self) {
        self.lock().reset()
    }

    /// The most positions the cache holds.
    #[getter]
    fn max_len(&self) -> usize {
        self.lock().max_len()
    }

    /// Number of positions cached.
    fn __len__(&self) -> usize {
        self.lock().len()
    }
}
