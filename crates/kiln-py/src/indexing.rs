//! NumPy-style indexing: `t[key]` with ints, slices (any step, negative too), `None`, `...`, boolean
//! masks and integer arrays (lists, NumPy arrays or tensors; negative indices count from the end).
//! Ints, slices and `None` give views; steps below zero flip (a copy); array indices gather (a copy)
//! and follow NumPy's placement: the indexed axes' result goes where they were when they are
//! adjacent, else to the front.

use crate::errors::{run, type_err};
use crate::interop::asarray_impl;
use crate::tensor::PyTensor;
use kiln::{DType, Device, Tensor};
use pyo3::exceptions::{PyIndexError, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::{PyEllipsis, PySlice, PySliceMethods, PyTuple};

/// An integer index tensor for the index ops, on `like`'s device. Indices given as Python or NumPy
/// data are checked against `size` (the indexed axis) on the host, on every device: kiln's GPU
/// kernels read ids on the device and give zeros for ids out of range, but host data costs nothing
/// to check. Index tensors are passed through as they are.
pub fn index_tensor(
    py: Python<'_>,
    op: &'static str,
    like: &Tensor,
    obj: &Bound<'_, PyAny>,
    size: usize,
) -> PyResult<Tensor> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(t.borrow().t.clone());
    }
    let t = asarray_impl(py, obj, None, Some(Device::cpu()), None)?;
    let dev = like.device().clone();
    run(py, op, move || {
        // An empty list comes from NumPy as float: it indexes nothing either way.
        let t = if t.elem_count() == 0 && t.dtype().is_float() { t.to_dtype(DType::I64)? } else { t };
        if t.dtype().is_int() {
            let ids = t.to_dtype(DType::I64)?.to_vec::<i64>()?;
            if let Some(i) = ids.into_iter().find(|&i| i < 0 || i as u64 >= size as u64) {
                return Err(kiln::Error::OutOfRange {
                    op,
                    msg: format!("index {i} is out of range for an axis of size {size}; indices must lie in 0..{size}"),
                });
            }
        }
        t.to_device(&dev)
    })
}

enum Item<'py> {
    NewAxis,
    Ellipsis,
    Int(isize),
    Slice(Bound<'py, PySlice>),
    /// Integer indices (row-major values and shape).
    Array(Vec<i64>, Vec<usize>),
    /// A boolean mask (row-major values and shape).
    Mask(Vec<bool>, Vec<usize>),
}

impl Item<'_> {
    /// Axes of the source this item consumes.
    fn consumes(&self) -> usize {
        match self {
            Item::NewAxis | Item::Ellipsis => 0,
            Item::Int(_) | Item::Slice(_) | Item::Array(..) => 1,
            Item::Mask(_, s) => s.len(),
        }
    }
}

fn index_err(msg: impl std::fmt::Display) -> PyErr {
    PyIndexError::new_err(format!("[index] {msg}"))
}

fn classify<'py>(py: Python<'py>, obj: &Bound<'py, PyAny>) -> PyResult<Item<'py>> {
    if obj.is_none() {
        return Ok(Item::NewAxis);
    }
    if obj.is_instance_of::<PyEllipsis>() {
        return Ok(Item::Ellipsis);
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        return Ok(Item::Slice(s.clone()));
    }
    if !obj.is_instance_of::<pyo3::types::PyBool>() {
        if let Ok(i) = obj.extract::<isize>() {
            if !obj.hasattr("__len__")? {
                return Ok(Item::Int(i));
            }
        }
    }
    let t = asarray_impl(py, obj, None, Some(Device::cpu()), None).map_err(|_| {
        type_err("index", format!("cannot index with {}", obj.repr().map(|r| r.to_string()).unwrap_or_default()))
    })?;
    let shape = t.dims().to_vec();
    match t.dtype() {
        DType::Bool => Ok(Item::Mask(run(py, "index", move || t.to_vec::<bool>())?, shape)),
        d if d.is_int() || t.elem_count() == 0 => {
            Ok(Item::Array(run(py, "index", move || t.to_dtype(DType::I64)?.to_vec::<i64>())?, shape))
        }
        d => Err(type_err("index", format!("index arrays must be integer or bool, got {d}"))),
    }
}

/// The positions of `shape`'s elements broadcast to `target` (row-major).
fn broadcast_positions(shape: &[usize], target: &[usize]) -> Vec<usize> {
    let n: usize = target.iter().product();
    let pad = target.len() - shape.len();
    let mut strides = vec![0usize; target.len()];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        strides[pad + i] = if shape[i] == 1 { 0 } else { acc };
        acc *= shape[i];
    }
    (0..n)
        .map(|mut flat| {
            let mut pos = 0;
            for d in (0..target.len()).rev() {
                pos += (flat % target[d]) * strides[d];
                flat /= target[d];
            }
            pos
        })
        .collect()
}

fn broadcast_shapes(shapes: &[&Vec<usize>]) -> PyResult<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(index_err(format!("index arrays of shapes {shapes:?} cannot be broadcast together")));
            }
        }
    }
    Ok(out)
}

/// Applies the key to `t`.
pub fn getitem(py: Python<'_>, t: &Tensor, key: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let keys: Vec<Bound<'_, PyAny>> = match key.cast::<PyTuple>() {
        Ok(tup) => tup.iter().collect(),
        Err(_) => vec![key.clone()],
    };
    let mut items = keys.iter().map(|k| classify(py, k)).collect::<PyResult<Vec<_>>>()?;
    let consumed: usize = items.iter().map(Item::consumes).sum();
    if consumed > t.rank() {
        return Err(index_err(format!("too many indices for a tensor of shape {}: {consumed} given", t.shape())));
    }
    let fill = t.rank() - consumed;
    match items.iter().filter(|i| matches!(i, Item::Ellipsis)).count() {
        0 => items.extend((0..fill).map(|_| Item::Slice(PySlice::full(py)))),
        1 => {
            let at = items.iter().position(|i| matches!(i, Item::Ellipsis)).expect("counted one");
            items.splice(at..=at, (0..fill).map(|_| Item::Slice(PySlice::full(py))));
        }
        _ => return Err(index_err("an index can only have a single ellipsis (...)")),
    }

    // With an array index present, integers are advanced indices too (NumPy: they broadcast as 0-d
    // arrays), so they count when deciding whether the advanced indices are adjacent: `x[0, :, idx]`
    // puts idx's dims first, as its two advanced indices are separated by a slice.
    if items.iter().any(|i| matches!(i, Item::Array(..) | Item::Mask(..))) {
        for it in items.iter_mut() {
            if let Item::Int(i) = *it {
                *it = Item::Array(vec![i as i64], vec![]);
            }
        }
    }

    let mut cur = t.clone();
    let mut axis = 0usize;
    let mut advanced: Vec<(usize, Vec<i64>, Vec<usize>)> = Vec::new();
    for item in items {
        match item {
            Item::NewAxis => {
                cur = cur.unsqueeze(axis as isize).map_err(crate::errors::to_py)?;
                axis += 1;
            }
            Item::Ellipsis => unreachable!("expanded above"),
            Item::Int(i) => {
                let n = cur.dims()[axis] as isize;
                let j = if i < 0 { i + n } else { i };
                if j < 0 || j >= n {
                    return Err(index_err(format!("index {i} is out of bounds for axis {axis} with size {n}")));
                }
                cur = cur.select(axis as isize, j as usize).map_err(crate::errors::to_py)?;
            }
            Item::Slice(s) => {
                let n = cur.dims()[axis];
                let ind = s.indices(n as isize)?;
                let len = ind.slicelength;
                let (mut start, step) = (ind.start, ind.step);
                let src = if step < 0 {
                    start = n as isize - 1 - start;
                    let c = cur.clone();
                    run(py, "index", move || c.flip(&[axis as isize]))?
                } else {
                    cur.clone()
                };
                let step = step.unsigned_abs();
                cur = if len == 0 {
                    src.narrow(axis as isize, 0, 0)
                } else {
                    let start = start as usize;
                    src.slice(axis as isize, start, start + (len - 1) * step + 1, step)
                }
                .map_err(crate::errors::to_py)?;
                axis += 1;
            }
            Item::Array(v, shape) => {
                advanced.push((axis, v, shape));
                axis += 1;
            }
            Item::Mask(m, shape) if shape.is_empty() => {
                // A 0-d mask adds an axis of length 1 (True) or 0 (False), as in NumPy.
                cur = cur.unsqueeze(axis as isize).map_err(crate::errors::to_py)?;
                let n = m[0] as usize;
                advanced.push((axis, vec![0; n], vec![n]));
                axis += 1;
            }
            Item::Mask(m, shape) => {
                let k = shape.len();
                // A mask dim of size 0 matches any size (the mask then selects nothing), as in NumPy
                // and the array API tests.
                let fits = cur.dims()[axis..axis + k].iter().zip(&shape).all(|(&d, &m)| m == d || m == 0);
                if !fits {
                    return Err(index_err(format!(
                        "boolean mask of shape {shape:?} does not match the indexed dims {:?} of shape {}",
                        &cur.dims()[axis..axis + k],
                        cur.shape()
                    )));
                }
                let hits: Vec<usize> = m.iter().enumerate().filter(|(_, &b)| b).map(|(i, _)| i).collect();
                for j in 0..k {
                    let inner: usize = shape[j + 1..].iter().product();
                    let idx = hits.iter().map(|&h| ((h / inner) % shape[j]) as i64).collect();
                    advanced.push((axis + j, idx, vec![hits.len()]));
                }
                axis += k;
            }
        }
    }
    if advanced.is_empty() {
        return Ok(cur);
    }
    gather_advanced(py, cur, advanced)
}

/// The integer-array part of an index: every indexed axis gathered at once.
fn gather_advanced(py: Python<'_>, cur: Tensor, mut adv: Vec<(usize, Vec<i64>, Vec<usize>)>) -> PyResult<Tensor> {
    for (axis, v, _) in adv.iter_mut() {
        let n = cur.dims()[*axis] as i64;
        for x in v.iter_mut() {
            if *x < -n || *x >= n {
                return Err(index_err(format!("index {x} is out of bounds for axis {axis} with size {n}")));
            }
            if *x < 0 {
                *x += n;
            }
        }
    }
    let bshape = broadcast_shapes(&adv.iter().map(|a| &a.2).collect::<Vec<_>>())?;
    let axes: Vec<usize> = adv.iter().map(|a| a.0).collect();
    let adjacent = axes.windows(2).all(|w| w[1] == w[0] + 1);
    let rank = cur.rank();
    // Bring the indexed axes together: in place when adjacent, else to the front (NumPy's rule).
    let (cur, at) = if adjacent {
        (cur, axes[0])
    } else {
        let perm: Vec<usize> = axes.iter().copied().chain((0..rank).filter(|a| !axes.contains(a))).collect();
        (cur.permute(&perm).map_err(crate::errors::to_py)?, 0)
    };
    let m = axes.len();
    let dims = cur.dims().to_vec();
    let n: usize = bshape.iter().product();
    let mut flat = vec![0i64; n];
    let mut scale = 1i64;
    for j in (0..m).rev() {
        let (_, v, shape) = &adv[j];
        for (f, p) in flat.iter_mut().zip(broadcast_positions(shape, &bshape)) {
            *f += v[p] * scale;
        }
        scale *= dims[at + j] as i64;
    }
    let merged: Vec<usize> = dims[..at]
        .iter()
        .copied()
        .chain([dims[at..at + m].iter().product()])
        .chain(dims[at + m..].iter().copied())
        .collect();
    let out: Vec<usize> = dims[..at].iter().chain(&bshape).chain(&dims[at + m..]).copied().collect();
    let dev = cur.device().clone();
    run(py, "index", move || {
        let ids = if scale <= i32::MAX as i64 {
            Tensor::from_vec(flat.into_iter().map(|x| x as i32).collect::<Vec<_>>(), n, &dev)?
        } else {
            Tensor::from_vec(flat, n, &dev)?
        };
        cur.reshape(merged)?.index_select(&ids, at as isize)?.reshape(out)
    })
}

#[pymethods]
impl PyTensor {
    /// NumPy indexing: ints, slices with steps, `None`, `...`, boolean masks and integer arrays.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        Ok(getitem(py, &self.t, key)?.into())
    }

    /// `t[key] = value`, copy-on-write: the update is computed as a new tensor (on `t`'s device, by
    /// `kiln._setitem`), which then replaces `t`'s storage. Views of `t` taken earlier, and tensors
    /// sharing its storage, keep the old values (unlike NumPy). `value` is cast to `t`'s dtype and
    /// broadcast to `t[key]`'s shape. Waits for ops other threads run on `t` (RuntimeError after 2 s).
    fn __setitem__(slf: &Bound<'_, Self>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        let current = Bound::new(py, PyTensor::from(slf.borrow().t.clone()))?;
        let updated = py.import("kiln._setitem")?.getattr("setitem")?.call1((current, key, value))?;
        let t = updated.cast::<PyTensor>()?.borrow().t.clone();
        replace_storage(slf, "setitem", t)
    }
}

/// Replaces the tensor of `slf` by `t` (`t[key] = v`, in-place operators). Another thread running
/// an op on this tensor holds it (with the GIL released): waits for it, up to about two seconds,
/// before giving up.
pub(crate) fn replace_storage(slf: &Bound<'_, PyTensor>, op: &str, t: Tensor) -> PyResult<()> {
    let py = slf.py();
    let mut tries = 0u32;
    let mut this = loop {
        match slf.try_borrow_mut() {
            Ok(this) => break this,
            Err(_) if tries < 20_000 => {
                tries += 1;
                py.detach(|| std::thread::sleep(std::time::Duration::from_micros(100)));
            }
            Err(_) => {
                return Err(PyRuntimeError::new_err(format!(
                    "[{op}] the tensor stayed in use by another thread for 2 s; cannot update it now"
                )))
            }
        }
    };
    this.t = t;
    Ok(())
}
