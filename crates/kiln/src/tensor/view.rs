//! Views: new layouts over the same storage. Only `reshape` of data that cannot be viewed copies.

use super::Tensor;
use crate::{Error, Result, Shape};

impl Tensor {
    /// The same elements in row-major logical order with a new shape. A view when the layout allows
    /// it (always for contiguous data), else a copy. See [`Tensor::reshape_infer`] for `-1`.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let s = shape.clone();
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "reshape",
            &[self],
            move |t| t[0].reshape(s.clone()),
        ) {
            return r;
        }
        if shape.check_size("reshape")? != self.elem_count() {
            return Err(Error::shape(
                "reshape",
                format!(
                    "cannot reshape a tensor of shape {} ({} elements) into {} ({} elements)",
                    self.shape(),
                    self.elem_count(),
                    shape,
                    shape.elem_count()
                ),
            ));
        }
        match self.layout().reshape(&shape) {
            Some(l) => Ok(self.with_layout(l)),
            None => self.contiguous()?.reshape(shape),
        }
    }

    /// Reshape where at most one dim is `-1`, meaning "whatever is left".
    pub fn reshape_infer(&self, dims: &[isize]) -> Result<Tensor> {
        let bad =
            || Error::shape("reshape", format!("cannot reshape a tensor of shape {} into {dims:?}", self.shape()));
        let known = dims.iter().filter(|&&d| d > 0).try_fold(1usize, |acc, &d| acc.checked_mul(d as usize));
        let known = if dims.contains(&0) { 0 } else { known.ok_or_else(bad)? };
        let holes = dims.iter().filter(|&&d| d == -1).count();
        if holes > 1 || dims.iter().any(|&d| d < -1) {
            return Err(bad());
        }
        let fill = if holes == 1 {
            if known == 0 || !self.elem_count().is_multiple_of(known) {
                return Err(bad());
            }
            self.elem_count() / known
        } else {
            0
        };
        let shape: Vec<usize> = dims.iter().map(|&d| if d == -1 { fill } else { d as usize }).collect();
        self.reshape(shape)
    }

    /// All elements as one axis.
    pub fn flatten(&self) -> Result<Tensor> {
        self.reshape(self.elem_count())
    }

    /// Reorders axes: output axis `i` is input axis `perm[i]`.
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        let p = perm.to_vec();
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "permute",
            &[self],
            move |t| t[0].permute(&p),
        ) {
            return r;
        }
        Ok(self.with_layout(self.layout().permute("permute", perm)?))
    }

    /// Swaps two axes.
    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        let (a, b) = (self.shape().axis("transpose", a)?, self.shape().axis("transpose", b)?);
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Swaps the last two axes (a matrix transpose); rank 1 and 0 are returned as they are.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Ok(self.clone());
        }
        self.transpose(-2, -1)
    }

    /// `len` entries of `axis` from `start`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "narrow",
            &[self],
            move |t| t[0].narrow(axis, start, len),
        ) {
            return r;
        }
        let axis = self.shape().axis("narrow", axis)?;
        Ok(self.with_layout(self.layout().narrow("narrow", axis, start, len)?))
    }

    /// Entries `start, start+step, ...` below `stop` of `axis` (Python's `start:stop:step`, clamped
    /// to the axis like Python does).
    pub fn slice(&self, axis: isize, start: usize, stop: usize, step: usize) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "slice",
            &[self],
            move |t| t[0].slice(axis, start, stop, step),
        ) {
            return r;
        }
        let axis = self.shape().axis("slice", axis)?;
        let dim = self.dims()[axis];
        let stop = stop.min(dim);
        let start = start.min(stop);
        Ok(self.with_layout(self.layout().slice("slice", axis, start, stop, step)?))
    }

    /// Entry `index` of `axis`, with that axis removed.
    pub fn select(&self, axis: isize, index: usize) -> Result<Tensor> {
        let a = self.shape().axis("select", axis)?;
        if index >= self.dims()[a] {
            return Err(Error::OutOfRange {
                op: "select",
                msg: format!("index {index} is out of bounds for axis {a} of shape {}", self.shape()),
            });
        }
        self.narrow(axis, index, 1)?.squeeze(a as isize)
    }

    /// A view broadcast to `shape` (NumPy `broadcast_to`): size-1 and missing leading axes repeat.
    pub fn broadcast_to(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let s = shape.clone();
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "broadcast_to",
            &[self],
            move |t| t[0].broadcast_to(s.clone()),
        ) {
            return r;
        }
        Ok(self.with_layout(self.layout().broadcast_as("broadcast_to", &shape)?))
    }

    /// PyTorch's name for [`Tensor::broadcast_to`].
    pub fn expand(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        self.broadcast_to(shape)
    }

    /// Removes `axis`, which must have size 1.
    pub fn squeeze(&self, axis: isize) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "squeeze",
            &[self],
            move |t| t[0].squeeze(axis),
        ) {
            return r;
        }
        let a = self.shape().axis("squeeze", axis)?;
        if self.dims()[a] != 1 {
            return Err(Error::shape(
                "squeeze",
                format!("axis {a} of shape {} has size {}, not 1", self.shape(), self.dims()[a]),
            ));
        }
        let mut dims = self.dims().to_vec();
        let mut strides = self.strides().to_vec();
        dims.remove(a);
        strides.remove(a);
        Ok(self.with_layout(crate::Layout::new(dims.into(), strides, self.layout().offset())))
    }

    /// Removes every size-1 axis.
    pub fn squeeze_all(&self) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "squeeze_all",
            &[self],
            |t| t[0].squeeze_all(),
        ) {
            return r;
        }
        let keep: Vec<usize> = (0..self.rank()).filter(|&i| self.dims()[i] != 1).collect();
        let dims = keep.iter().map(|&i| self.dims()[i]).collect::<Vec<_>>();
        let strides = keep.iter().map(|&i| self.strides()[i]).collect();
        Ok(self.with_layout(crate::Layout::new(dims.into(), strides, self.layout().offset())))
    }

    /// Inserts a size-1 axis at position `axis` (`-1` appends).
    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "unsqueeze",
            &[self],
            move |t| t[0].unsqueeze(axis),
        ) {
            return r;
        }
        let rank = self.rank() + 1;
        let a = crate::shape::normalize_axis("unsqueeze", axis, rank, self.shape())?;
        let mut dims = self.dims().to_vec();
        let mut strides = self.strides().to_vec();
        let stride = if a < self.rank() { self.strides()[a] * self.dims()[a] } else { 1 };
        dims.insert(a, 1);
        strides.insert(a, stride);
        Ok(self.with_layout(crate::Layout::new(dims.into(), strides, self.layout().offset())))
    }
}
