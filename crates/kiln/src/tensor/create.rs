//! Constructors. Random tensors are generated on the host with a seeded ChaCha generator and then
//! moved to the device, so a seed gives the same numbers on every backend and machine.

use super::Tensor;
use crate::cpu::CpuStorage;
use crate::{DType, Device, Error, Result, Shape, WithDType};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

impl Tensor {
    /// A tensor of `shape` holding `data` in row-major order.
    pub fn from_vec<T: WithDType>(data: Vec<T>, shape: impl Into<Shape>, device: &Device) -> Result<Tensor> {
        let shape = shape.into();
        if data.len() != Tensor::check_size("from_vec", &shape, T::DTYPE)? {
            return Err(Error::ElementCountMismatch {
                op: "from_vec",
                len: data.len(),
                expected: shape.elem_count(),
                shape,
            });
        }
        Tensor::from_cpu_storage(T::into_storage(data), shape, device)
    }

    /// Like [`Tensor::from_vec`], copying from a slice.
    pub fn from_slice<T: WithDType>(data: &[T], shape: impl Into<Shape>, device: &Device) -> Result<Tensor> {
        Tensor::from_vec(data.to_vec(), shape, device)
    }

    /// A tensor of `shape` and `dtype` whose elements are the little-endian `bytes` (row-major),
    /// as weight files store them. On a GPU the bytes are uploaded as they are, with no typed copy on
    /// the host (loading a model reads each weight once).
    pub fn from_le_bytes(bytes: &[u8], dtype: DType, shape: impl Into<Shape>, device: &Device) -> Result<Tensor> {
        let shape = shape.into();
        let n = Tensor::check_size("from_le_bytes", &shape, dtype)?;
        if bytes.len() != n * dtype.size_in_bytes() {
            return Err(Error::arg(
                "from_le_bytes",
                format!(
                    "a {dtype} tensor of shape {shape} needs {} bytes, got {}",
                    n * dtype.size_in_bytes(),
                    bytes.len()
                ),
            ));
        }
        if !device.supports_dtype(dtype) {
            return Tensor::from_cpu_storage(CpuStorage::from_le_bytes(bytes, dtype), shape, device);
        }
        Ok(Tensor::from_storage(device.storage_from_le_bytes(bytes, dtype)?, shape, device))
    }

    /// Refuses shapes whose element count or bytes cannot exist at all (overflowing `usize`, or more
    /// than `isize::MAX` bytes); returns the element count. Allocations that are representable but
    /// fail are `Error::HostOutOfMemory` / `Error::OutOfMemory` where they happen.
    pub(crate) fn check_size(op: &'static str, shape: &Shape, dtype: DType) -> Result<usize> {
        let n = shape.check_size(op)?;
        match n.checked_mul(dtype.size_in_bytes()) {
            Some(bytes) if bytes <= isize::MAX as usize => Ok(n),
            _ => {
                Err(Error::TooLarge { op, msg: format!("a {dtype} tensor of shape {shape} is too large to allocate") })
            }
        }
    }

    pub(crate) fn from_cpu_storage(data: CpuStorage, shape: impl Into<Shape>, device: &Device) -> Result<Tensor> {
        let storage = device.storage_from_cpu(data)?;
        Ok(Tensor::from_storage(storage, shape, device))
    }

    /// A rank-0 tensor.
    pub fn scalar(value: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(value, (), dtype, device)
    }

    /// A tensor with every element `value` (converted to `dtype` like [`Tensor::to_dtype`]).
    pub fn full(value: f64, shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        let shape = shape.into();
        Tensor::check_size("full", &shape, dtype)?;
        let storage = device.full_storage(&shape, dtype, value)?;
        Ok(Tensor::from_storage(storage, shape, device))
    }

    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(0.0, shape, dtype, device)
    }

    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::full(1.0, shape, dtype, device)
    }

    pub fn zeros_like(&self) -> Result<Tensor> {
        Tensor::zeros(self.shape(), self.dtype(), self.device())
    }

    pub fn ones_like(&self) -> Result<Tensor> {
        Tensor::ones(self.shape(), self.dtype(), self.device())
    }

    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Tensor::full(value, self.shape(), self.dtype(), self.device())
    }

    /// `start, start+1, ...` below `end` (NumPy `arange`).
    pub fn arange(start: f64, end: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::arange_step(start, end, 1.0, dtype, device)
    }

    /// `start, start+step, ...` up to but excluding `end`; `step` may be negative, not zero.
    pub fn arange_step(start: f64, end: f64, step: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::arg(
                "arange",
                format!("need finite start, end and a nonzero step, got {start}, {end}, {step}"),
            ));
        }
        let n = ((end - start) / step).ceil().max(0.0);
        if n > (isize::MAX as usize / dtype.size_in_bytes().max(8)) as f64 {
            return Err(Error::arg(
                "arange",
                format!("{n} elements ({start} to {end} by {step}) are too many to allocate"),
            ));
        }
        let n = n as usize;
        let values = crate::cpu::alloc::try_collect("arange", n, |i| start + i as f64 * step)?;
        Tensor::from_f64_values(&values, n, dtype, device)
    }

    /// `n` evenly spaced values from `start` to `end` inclusive (NumPy `linspace`).
    pub fn linspace(start: f64, end: f64, n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::check_size("linspace", &Shape::new(vec![n, 8 / dtype.size_in_bytes()]), dtype)?;
        let step = if n > 1 { (end - start) / (n - 1) as f64 } else { 0.0 };
        let values = crate::cpu::alloc::try_collect("linspace", n, |i| {
            if i + 1 == n && n > 1 {
                end
            } else {
                start + i as f64 * step
            }
        })?;
        Tensor::from_f64_values(&values, n, dtype, device)
    }

    /// The `n x n` identity matrix.
    pub fn eye(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        Tensor::check_size("eye", &Shape::new(vec![n, n, 8 / dtype.size_in_bytes()]), dtype)?;
        let mut values = crate::cpu::alloc::try_collect("eye", n * n, |_| 0.0)?;
        for i in 0..n {
            values[i * n + i] = 1.0;
        }
        Tensor::from_f64_values(&values, (n, n), dtype, device)
    }

    /// Uniform random values in `[lo, hi)` from a seeded generator.
    pub fn rand(lo: f64, hi: f64, shape: impl Into<Shape>, dtype: DType, seed: u64, device: &Device) -> Result<Tensor> {
        let shape = shape.into();
        Tensor::check_size("rand", &Shape::new([shape.dims(), &[8 / dtype.size_in_bytes()]].concat()), dtype)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let values =
            crate::cpu::alloc::try_collect("rand", shape.elem_count(), |_| lo + (hi - lo) * rng.random::<f64>())?;
        Tensor::from_f64_values(&values, shape, dtype, device)
    }

    /// Normally distributed values with `mean` and `std` from a seeded generator.
    pub fn randn(
        mean: f64,
        std: f64,
        shape: impl Into<Shape>,
        dtype: DType,
        seed: u64,
        device: &Device,
    ) -> Result<Tensor> {
        let shape = shape.into();
        Tensor::check_size("randn", &Shape::new([shape.dims(), &[8 / dtype.size_in_bytes()]].concat()), dtype)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let values = crate::cpu::alloc::try_collect("randn", shape.elem_count(), |_| {
            let z: f64 = StandardNormal.sample(&mut rng);
            mean + std * z
        })?;
        Tensor::from_f64_values(&values, shape, dtype, device)
    }

    /// A tensor from f64 values converted to `dtype` (integers truncate toward zero).
    pub fn from_f64_values(values: &[f64], shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        fn conv<T: WithDType>(v: &[f64]) -> CpuStorage {
            T::into_storage(v.iter().map(|&x| T::from_f64(x)).collect())
        }
        let shape = shape.into();
        if values.len() != Tensor::check_size("from_f64_values", &shape, dtype)? {
            return Err(Error::ElementCountMismatch {
                op: "from_f64_values",
                len: values.len(),
                expected: shape.elem_count(),
                shape,
            });
        }
        let data = match dtype {
            DType::F32 => conv::<f32>(values),
            DType::F16 => conv::<half::f16>(values),
            DType::BF16 => conv::<half::bf16>(values),
            DType::F64 => conv::<f64>(values),
            DType::I32 => conv::<i32>(values),
            DType::U32 => conv::<u32>(values),
            DType::I64 => conv::<i64>(values),
            DType::U8 => conv::<u8>(values),
            DType::Bool => conv::<bool>(values),
            DType::I8 => conv::<i8>(values),
            DType::I16 => conv::<i16>(values),
            DType::U16 => conv::<u16>(values),
            DType::U64 => conv::<u64>(values),
        };
        Tensor::from_cpu_storage(data, shape, device)
    }
}
