//! Joining and splitting: `concat`, `stack`, `split`, `chunk`, `pad`, `flip`.
//!
//! `concat` and `pad` allocate their output and write each input into a narrowed view of it with the
//! backend's `copy_into`, so they work unchanged on every backend. `split` and `chunk` are views.

use crate::{Error, Layout, Result, Tensor};

impl Tensor {
    /// Writes `src` (same shape and dtype as `dst`) into view `dst` of this freshly made tensor's
    /// storage.
    fn write_part(&self, src: &Tensor, dst: &Layout) -> Result<()> {
        if src.elem_count() == 0 {
            return Ok(());
        }
        let mut out = self.storage_mut();
        src.storage().copy_into(src.layout(), &mut out, dst)
    }

    /// Joins tensors along an existing axis; all other dims must agree. Dtypes are promoted like a
    /// binary op's ([`crate::DType::promote`]); empty inputs are allowed.
    pub fn concat(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        if !tensors.is_empty() {
            let kind = || crate::fusion::trace::Kind::Other;
            let replay = move |t: &[Tensor]| Tensor::concat(&t.iter().collect::<Vec<_>>(), axis);
            if let Some(r) = crate::fusion::trace::hook(kind, "concat", tensors, replay) {
                return r;
            }
        }
        let op = "concat";
        let Some(first) = tensors.first() else {
            return Err(Error::arg(op, "needs at least one tensor, got an empty list"));
        };
        let axis = first.shape().axis(op, axis)?;
        let mut dtype = first.dtype();
        let mut total = 0;
        for (i, t) in tensors.iter().enumerate() {
            first.same_device(op, t)?;
            let agree = t.rank() == first.rank()
                && t.dims().iter().zip(first.dims()).enumerate().all(|(d, (a, b))| d == axis || a == b);
            if !agree {
                return Err(Error::shape(
                    op,
                    format!(
                        "tensor {i} has shape {} but tensor 0 has shape {}: all dims but axis {axis} must agree",
                        t.shape(),
                        first.shape()
                    ),
                ));
            }
            dtype = dtype.promote(t.dtype());
            total += t.dims()[axis];
        }
        if tensors.len() == 1 {
            return first.to_dtype(dtype);
        }
        let mut dims = first.dims().to_vec();
        dims[axis] = total;
        // Every element is written by one input below: no fill first.
        let shape = crate::Shape::new(dims);
        Tensor::check_size(op, &shape, dtype)?;
        let out = Tensor::from_storage(first.device().uninit_storage(&shape, dtype)?, shape, first.device());
        let mut start = 0;
        for t in tensors {
            let len = t.dims()[axis];
            if len > 0 && t.elem_count() > 0 {
                let dst = out.layout().narrow(op, axis, start, len)?;
                out.write_part(&t.to_dtype(dtype)?, &dst)?;
            }
            start += len;
        }
        Ok(out)
    }

    /// Joins tensors of one shape along a new axis (`axis` may be `-1`, meaning after the last).
    pub fn stack(tensors: &[&Tensor], axis: isize) -> Result<Tensor> {
        let op = "stack";
        let Some(first) = tensors.first() else {
            return Err(Error::arg(op, "needs at least one tensor, got an empty list"));
        };
        let axis = crate::shape::normalize_axis(op, axis, first.rank() + 1, first.shape())?;
        if let Some((i, t)) = tensors.iter().enumerate().find(|(_, t)| t.shape() != first.shape()) {
            return Err(Error::shape(
                op,
                format!("tensor {i} has shape {} but tensor 0 has shape {}: all must agree", t.shape(), first.shape()),
            ));
        }
        let parts = tensors.iter().map(|t| t.unsqueeze(axis as isize)).collect::<Result<Vec<_>>>()?;
        Tensor::concat(&parts.iter().collect::<Vec<_>>(), axis as isize)
    }

    /// Views of consecutive pieces of `axis` with the given sizes (they must sum to the axis size).
    pub fn split(&self, sizes: &[usize], axis: isize) -> Result<Vec<Tensor>> {
        let a = self.shape().axis("split", axis)?;
        let sum: usize = sizes.iter().sum();
        if sum != self.dims()[a] {
            return Err(Error::shape(
                "split",
                format!(
                    "sizes {sizes:?} sum to {sum} but axis {a} of shape {} has size {}",
                    self.shape(),
                    self.dims()[a]
                ),
            ));
        }
        let mut start = 0;
        let mut out = Vec::with_capacity(sizes.len());
        for &len in sizes {
            out.push(self.with_layout(self.layout().narrow("split", a, start, len)?));
            start += len;
        }
        Ok(out)
    }

    /// `n` views along `axis`, all of size `ceil(dim / n)` but the last (PyTorch `chunk`). Like
    /// PyTorch this gives fewer than `n` pieces when `dim` does not fill them (`dim = 5, n = 4` gives
    /// sizes 2, 2, 1), and `n` empty pieces when `dim` is 0.
    pub fn chunk(&self, n: usize, axis: isize) -> Result<Vec<Tensor>> {
        if n == 0 {
            return Err(Error::arg(
                "chunk",
                format!("number of chunks must be positive, got 0 (shape {})", self.shape()),
            ));
        }
        let a = self.shape().axis("chunk", axis)?;
        let dim = self.dims()[a];
        if dim == 0 {
            return self.split(&vec![0; n], axis);
        }
        let size = dim.div_ceil(n);
        let sizes: Vec<usize> = (0..dim.div_ceil(size)).map(|i| size.min(dim - i * size)).collect();
        self.split(&sizes, axis)
    }

    /// Pads with a constant: `pads[i] = (before, after)` for axis `i`; with fewer pairs than axes, the
    /// pairs apply to the first `pads.len()` axes. `value` is converted to the dtype like
    /// [`Tensor::full`] does.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Result<Tensor> {
        if pads.len() > self.rank() {
            return Err(Error::arg(
                "pad",
                format!(
                    "{} (before, after) pairs given for a tensor of rank {} (shape {})",
                    pads.len(),
                    self.rank(),
                    self.shape()
                ),
            ));
        }
        let mut dims = self.dims().to_vec();
        for (d, &(b, a)) in dims.iter_mut().zip(pads) {
            *d = d.checked_add(b).and_then(|d| d.checked_add(a)).ok_or_else(|| Error::TooLarge {
                op: "pad",
                msg: format!("padding shape {} by {pads:?} overflows", self.shape()),
            })?;
        }
        let out = Tensor::full(value, dims, self.dtype(), self.device())?;
        let mut dst = out.layout().clone();
        for (axis, (&(b, _), &d)) in pads.iter().zip(self.dims()).enumerate() {
            dst = dst.narrow("pad", axis, b, d)?;
        }
        out.write_part(self, &dst)?;
        Ok(out)
    }

    /// Reverses the order of entries along each of `axes` (a copy; no axes gives a plain copy).
    pub fn flip(&self, axes: &[isize]) -> Result<Tensor> {
        let axes = self.shape().axes("flip", axes)?;
        let mut out = self.clone();
        for &a in &axes {
            let n = self.dims()[a];
            if n <= 1 {
                continue;
            }
            let rev: Vec<i64> = (0..n as i64).rev().collect();
            let ids = Tensor::from_vec(rev, n, self.device())?;
            out = out.index_select(&ids, a as isize)?;
        }
        if out.shares_storage_with(self) {
            let s = self.storage().copy_contiguous(self.layout())?;
            out = Tensor::from_storage(s, self.shape(), self.device());
        }
        Ok(out)
    }
}
