//! Index-driven selection: `index_select`, `embedding`, `gather`.
//!
//! Index tensors hold any integer dtype (`i8`, `i16`, `u16` and `u64` ids are widened to `i64`
//! first; a `u64` past `i64::MAX` becomes negative, so it is out of range). On the CPU every index is checked before the
//! backend runs: negative indices are refused (like PyTorch's `index_select`/`gather`; there is no
//! wrap-around) and so are indices at or past the size of the axis, with an error naming the index,
//! the axis and its size. On the GPU the ids stay on the device (checking them on the host would
//! read them back and wait for all queued work on every call): the kernels check each id as they
//! read it, and an out-of-range id (negative, or at or past the size) selects zeros, never other
//! memory. Dtype, shape and device errors are the same on both backends.

use crate::{DType, Error, Result, Shape, Tensor};

/// Index dtypes the index ops accept.
const INDEX_DTYPES: [DType; 8] =
    [DType::I64, DType::I32, DType::U32, DType::U8, DType::I8, DType::I16, DType::U16, DType::U64];

/// `ids` in a dtype the backends' index kernels read: the narrow integers and u64 become i64.
fn kernel_ids(ids: &Tensor) -> Result<Tensor> {
    match ids.dtype() {
        DType::I8 | DType::I16 | DType::U16 | DType::U64 => ids.to_dtype(DType::I64),
        _ => Ok(ids.clone()),
    }
}

/// Checks that `ids` is an integer tensor on `src`'s device whose values all lie in `0..size`
/// (`size` being the size of `axis` of `src`).
fn check_ids(op: &'static str, src: &Tensor, ids: &Tensor, axis: usize) -> Result<()> {
    src.same_device(op, ids)?;
    if !INDEX_DTYPES.contains(&ids.dtype()) {
        return Err(Error::dtype(op, ids.dtype(), "index tensors must have an integer dtype"));
    }
    if !ids.device().is_cpu() {
        // On the GPU the kernels read the ids on the device (a host check would read them back and
        // wait for the queue on every call): an id outside 0..size gives zeros there.
        return Ok(());
    }
    let size = src.dims()[axis];
    let bad = if ids.dtype() == DType::I64 {
        // Exact for every i64 (to_f64 would round beyond 2^53).
        ids.to_vec::<i64>()?.into_iter().find(|&i| i < 0 || i as u64 >= size as u64).map(|i| i.to_string())
    } else {
        ids.to_f64_vec()?.into_iter().find(|&i| i < 0.0 || i >= size as f64).map(|i| i.to_string())
    };
    match bad {
        None => Ok(()),
        Some(i) => Err(Error::OutOfRange {
            op,
            msg: format!(
                "index {i} is out of range for axis {axis} of size {size} (shape {}); indices must lie in 0..{size}",
                src.shape()
            ),
        }),
    }
}

impl Tensor {
    /// Entries of `axis` picked by the 1-D integer tensor `ids` (in that order, repeats allowed).
    /// The result has this tensor's shape with `axis` resized to `ids.len()`. An id outside the axis
    /// is an `Err` on the CPU and selects zeros on the GPU (see the module docs).
    pub fn index_select(&self, ids: &Tensor, axis: isize) -> Result<Tensor> {
        self.index_select_op("index_select", ids, axis)
    }

    fn index_select_op(&self, op: &'static str, ids: &Tensor, axis: isize) -> Result<Tensor> {
        let axis = self.shape().axis(op, axis)?;
        if ids.rank() != 1 {
            return Err(Error::shape(op, format!("indices must be 1-D, got shape {}", ids.shape())));
        }
        if !ids.dtype().is_int() {
            check_ids(op, self, ids, axis)?;
        }
        let ids = &kernel_ids(ids)?;
        check_ids(op, self, ids, axis)?;
        let mut dims = self.dims().to_vec();
        dims[axis] = ids.elem_count();
        let shape = Shape::new(dims);
        if shape.elem_count() == 0 {
            return Tensor::zeros(shape, self.dtype(), self.device());
        }
        let s = self.storage().index_select(self.layout(), &ids.storage(), ids.layout(), axis)?;
        Ok(Tensor::from_storage(s, shape, self.device()))
    }

    /// Rows of this `(vocab, d)` table for integer `ids` of any shape; output `ids.shape + (d,)`.
    /// (Tables of any rank ≥ 1 work: the output is `ids.shape + table.shape[1..]`.)
    pub fn embedding(&self, ids: &Tensor) -> Result<Tensor> {
        if self.rank() == 0 {
            return Err(Error::shape("embedding", "the table must have rank at least 1, got a scalar (shape ())"));
        }
        let flat = ids.reshape(ids.elem_count())?;
        let rows = self.index_select_op("embedding", &flat, 0)?;
        let dims: Vec<usize> = ids.dims().iter().chain(&self.dims()[1..]).copied().collect();
        rows.reshape(dims)
    }

    /// PyTorch `gather`: `out[..][j][..] = self[..][ids[..][j][..]][..]` along `axis`. `ids` has the
    /// rank of `self` and no dim larger than `self`'s except along `axis`; the result has `ids`'s shape.
    pub fn gather(&self, axis: isize, ids: &Tensor) -> Result<Tensor> {
        let op = "gather";
        let axis = self.shape().axis(op, axis)?;
        if ids.rank() != self.rank() {
            return Err(Error::shape(
                op,
                format!("indices of shape {} must have the rank of the input shape {}", ids.shape(), self.shape()),
            ));
        }
        if let Some(d) = (0..self.rank()).find(|&d| d != axis && ids.dims()[d] > self.dims()[d]) {
            return Err(Error::shape(
                op,
                format!(
                    "indices of shape {} are larger than the input shape {} along axis {d} (only axis {axis} may differ)",
                    ids.shape(),
                    self.shape()
                ),
            ));
        }
        if ids.elem_count() == 0 {
            // Nothing to read: checked like PyTorch only for dtype and device.
            self.same_device(op, ids)?;
            if !INDEX_DTYPES.contains(&ids.dtype()) {
                return Err(Error::dtype(op, ids.dtype(), "index tensors must have an integer dtype"));
            }
            return Tensor::zeros(ids.shape(), self.dtype(), self.device());
        }
        if !ids.dtype().is_int() {
            check_ids(op, self, ids, axis)?;
        }
        let ids = &kernel_ids(ids)?;
        check_ids(op, self, ids, axis)?;
        let s = self.storage().gather(self.layout(), &ids.storage(), ids.layout(), axis)?;
        Ok(Tensor::from_storage(s, ids.shape(), self.device()))
    }
}
