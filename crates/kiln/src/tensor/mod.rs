//! `Tensor`: an immutable n-dimensional array on a device. Cloning is cheap (the storage is shared);
//! views share storage with their source; ops return new tensors.

mod create;
mod display;
mod read;
pub use read::PendingRead;
mod view;

use crate::fusion::trace::Kind;
use crate::storage::Storage;
use crate::{DType, Device, Error, Layout, Result, Shape, WithDType};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

#[derive(Clone)]
pub struct Tensor(Arc<Inner>);

struct Inner {
    storage: Arc<RwLock<Storage>>,
    layout: Layout,
    dtype: DType,
    device: Device,
}

impl Tensor {
    /// A contiguous tensor over freshly made storage.
    pub(crate) fn from_storage(storage: Storage, shape: impl Into<Shape>, device: &Device) -> Tensor {
        let dtype = storage.dtype();
        Tensor(Arc::new(Inner {
            storage: Arc::new(RwLock::new(storage)),
            layout: Layout::contiguous(shape),
            dtype,
            device: device.clone(),
        }))
    }

    /// Another view of this tensor's storage.
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        crate::fusion::trace::touch(self, "viewed");
        Tensor(Arc::new(Inner {
            storage: self.0.storage.clone(),
            layout,
            dtype: self.0.dtype,
            device: self.0.device.clone(),
        }))
    }

    pub(crate) fn storage(&self) -> RwLockReadGuard<'_, Storage> {
        crate::fusion::trace::touch(self, "read");
        // A poisoned lock means a panic happened while writing (a bug); the data is still usable.
        self.0.storage.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn storage_mut(&self) -> RwLockWriteGuard<'_, Storage> {
        crate::fusion::trace::touch(self, "written");
        let guard = self.0.storage.write().unwrap_or_else(|e| e.into_inner());
        // Buffers derived from the contents (a bf16 weight's line maxima) go stale with a write.
        if let Storage::Gpu(g) = &*guard {
            g.forget_derived();
        }
        guard
    }

    /// This tensor object's identity for the fusion tracer, and a weak handle that keeps the address
    /// from being reused while the trace holds it.
    pub(crate) fn trace_id(&self) -> (usize, Box<dyn std::any::Any + Send + Sync>) {
        (Arc::as_ptr(&self.0) as usize, Box::new(Arc::downgrade(&self.0)))
    }

    /// True when both tensors view the same storage.
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0.storage, &other.0.storage)
    }

    pub fn shape(&self) -> &Shape {
        self.0.layout.shape()
    }
    pub fn dims(&self) -> &[usize] {
        self.0.layout.dims()
    }
    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }
    pub fn elem_count(&self) -> usize {
        self.0.layout.elem_count()
    }
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    pub fn device(&self) -> &Device {
        &self.0.device
    }
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    pub fn strides(&self) -> &[usize] {
        self.0.layout.strides()
    }
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// The address of the first element of this tensor's storage when it lives on the CPU (`None` on a
    /// GPU), for zero-copy exports to NumPy and DLPack; the view's first element is `layout().offset()`
    /// elements further. The memory neither moves nor changes while a tensor sharing the storage is
    /// alive (tensors are immutable); writing through the pointer is undefined behaviour.
    pub fn cpu_storage_ptr(&self) -> Option<*const u8> {
        self.storage().host_ptr()
    }

    /// Size of one axis (negative counts from the end).
    pub fn dim(&self, axis: isize) -> Result<usize> {
        Ok(self.dims()[self.shape().axis("dim", axis)?])
    }

    /// An error unless `other` is on this tensor's device.
    pub(crate) fn same_device(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch { op, lhs: self.device().name(), rhs: other.device().name() });
        }
        Ok(())
    }

    /// An error unless `other` has this tensor's dtype.
    pub(crate) fn same_dtype(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch { op, lhs: self.dtype(), rhs: other.dtype() });
        }
        Ok(())
    }

    /// The elements in row-major order. `T` must be the tensor's dtype.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch { op: "to_vec", lhs: self.dtype(), rhs: T::DTYPE });
        }
        let host = self.storage().to_cpu(self.layout())?;
        Ok(T::storage_slice(&host).expect("dtype checked above").to_vec())
    }

    /// The elements as f64, whatever the dtype (read back and converted on the host).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(self.storage().to_cpu(self.layout())?.to_f64_vec())
    }

    /// The single element of a tensor with one element (any rank).
    pub fn to_scalar<T: WithDType>(&self) -> Result<T> {
        if self.elem_count() != 1 {
            return Err(Error::shape(
                "to_scalar",
                format!("tensor of shape {} has {} elements, not 1", self.shape(), self.elem_count()),
            ));
        }
        Ok(self.to_vec::<T>()?[0])
    }

    /// Rows of a rank-2 tensor.
    pub fn to_vec2<T: WithDType>(&self) -> Result<Vec<Vec<T>>> {
        let &[rows, cols] = self.dims() else {
            return Err(Error::shape("to_vec2", format!("expected rank 2, got shape {}", self.shape())));
        };
        let v = self.to_vec::<T>()?;
        Ok((0..rows).map(|r| v[r * cols..(r + 1) * cols].to_vec()).collect())
    }

    /// A copy with elements converted to `dtype` (a cheap clone when it already has it).
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(|| Kind::Cast, "to_dtype", &[self], move |t| t[0].to_dtype(dtype)) {
            return r;
        }
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let s = self.storage().cast(self.layout(), dtype)?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }

    /// A copy on `device` (a cheap clone when it is already there).
    pub fn to_device(&self, device: &Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let host = self.storage().to_cpu(self.layout())?;
        Tensor::from_cpu_storage(host, self.shape().clone(), device)
    }

    /// A contiguous tensor with the same elements: `self` if it already is contiguous, else a copy.
    pub fn contiguous(&self) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(|| Kind::Cast, "contiguous", &[self], |t| t[0].contiguous()) {
            return r;
        }
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let s = self.storage().copy_contiguous(self.layout())?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }

    /// The shape all `tensors` broadcast to and each one's layout broadcast to it. Also checks that
    /// they share one device.
    pub(crate) fn broadcast_layouts(op: &'static str, tensors: &[&Tensor]) -> Result<(Shape, Vec<Layout>)> {
        let mut shape = tensors[0].shape().clone();
        for t in &tensors[1..] {
            tensors[0].same_device(op, t)?;
            shape = Shape::broadcast(op, &shape, t.shape())?;
        }
        let layouts = tensors.iter().map(|t| t.layout().broadcast_as(op, &shape)).collect::<Result<_>>()?;
        Ok((shape, layouts))
    }
}
