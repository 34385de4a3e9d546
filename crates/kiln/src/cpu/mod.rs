//! The CPU backend: multi-threaded with rayon, written so the compiler vectorises the inner loops,
//! with matmul through the `gemm` crate. It is the fallback for every op and the reference the GPU
//! backend is checked against. f16 and bf16 are stored as such and computed in f32.

pub(crate) mod alloc;
pub use alloc::{host_allocation_limit, set_host_allocation_limit};
mod attention;
mod binary;
mod blocks;
mod cast;
mod divmod;
mod ext;
mod index;
pub(crate) mod math;
mod matmul;
mod norm;
mod paged;
mod reduce;
mod rope_rows;
mod signbit;
mod softmax;
pub(crate) mod strided;
mod swiglu;
mod unary;

use crate::backend::{BackendDevice, BackendStorage};
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Error, Layout, Result, Shape, WithDType};
use half::{bf16, f16};

/// Runs `f` on one of rayon's worker threads (on this one when it is already a worker), so that the
/// CPU ops `f` runs split their work among the pool's threads directly: called from another thread
/// (a program's main thread), every parallel op would hand its work to the pool and sleep until it
/// is done, a round trip through the scheduler per op (a decode step has hundreds of small ones).
pub fn on_worker_threads<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        return f();
    }
    rayon::scope(|_| f())
}

/// Host memory holding the elements of one dtype.
#[derive(Debug, Clone, PartialEq)]
pub enum CpuStorage {
    F32(Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F64(Vec<f64>),
    I32(Vec<i32>),
    U32(Vec<u32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    U64(Vec<u64>),
}

impl CpuStorage {
    /// The elements of `dtype` whose little-endian bytes are `bytes` (a whole number of elements;
    /// hosts are little-endian). Bool: non-zero bytes are true.
    pub(crate) fn from_le_bytes(bytes: &[u8], dtype: crate::DType) -> CpuStorage {
        use crate::DType as D;
        use bytemuck::pod_collect_to_vec as v;
        match dtype {
            D::F32 => CpuStorage::F32(v(bytes)),
            D::F16 => CpuStorage::F16(v(bytes)),
            D::BF16 => CpuStorage::BF16(v(bytes)),
            D::F64 => CpuStorage::F64(v(bytes)),
            D::I32 => CpuStorage::I32(v(bytes)),
            D::U32 => CpuStorage::U32(v(bytes)),
            D::I64 => CpuStorage::I64(v(bytes)),
            D::U8 => CpuStorage::U8(bytes.to_vec()),
            D::Bool => CpuStorage::Bool(bytes.iter().map(|&b| b != 0).collect()),
            D::I8 => CpuStorage::I8(v(bytes)),
            D::I16 => CpuStorage::I16(v(bytes)),
            D::U16 => CpuStorage::U16(v(bytes)),
            D::U64 => CpuStorage::U64(v(bytes)),
        }
    }
}

/// Runs `$body` with `$v` bound to the typed vector of any variant.
macro_rules! with_vec {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            $crate::cpu::CpuStorage::F32($v) => $body,
            $crate::cpu::CpuStorage::F16($v) => $body,
            $crate::cpu::CpuStorage::BF16($v) => $body,
            $crate::cpu::CpuStorage::F64($v) => $body,
            $crate::cpu::CpuStorage::I32($v) => $body,
            $crate::cpu::CpuStorage::U32($v) => $body,
            $crate::cpu::CpuStorage::I64($v) => $body,
            $crate::cpu::CpuStorage::U8($v) => $body,
            $crate::cpu::CpuStorage::Bool($v) => $body,
            $crate::cpu::CpuStorage::I8($v) => $body,
            $crate::cpu::CpuStorage::I16($v) => $body,
            $crate::cpu::CpuStorage::U16($v) => $body,
            $crate::cpu::CpuStorage::U64($v) => $body,
        }
    };
}

/// Like `with_vec!`, but the body returns a `Vec` of the same element type, which is wrapped back
/// into the same variant.
macro_rules! map_vec {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            $crate::cpu::CpuStorage::F32($v) => $crate::cpu::CpuStorage::F32($body),
            $crate::cpu::CpuStorage::F16($v) => $crate::cpu::CpuStorage::F16($body),
            $crate::cpu::CpuStorage::BF16($v) => $crate::cpu::CpuStorage::BF16($body),
            $crate::cpu::CpuStorage::F64($v) => $crate::cpu::CpuStorage::F64($body),
            $crate::cpu::CpuStorage::I32($v) => $crate::cpu::CpuStorage::I32($body),
            $crate::cpu::CpuStorage::U32($v) => $crate::cpu::CpuStorage::U32($body),
            $crate::cpu::CpuStorage::I64($v) => $crate::cpu::CpuStorage::I64($body),
            $crate::cpu::CpuStorage::U8($v) => $crate::cpu::CpuStorage::U8($body),
            $crate::cpu::CpuStorage::Bool($v) => $crate::cpu::CpuStorage::Bool($body),
            $crate::cpu::CpuStorage::I8($v) => $crate::cpu::CpuStorage::I8($body),
            $crate::cpu::CpuStorage::I16($v) => $crate::cpu::CpuStorage::I16($body),
            $crate::cpu::CpuStorage::U16($v) => $crate::cpu::CpuStorage::U16($body),
            $crate::cpu::CpuStorage::U64($v) => $crate::cpu::CpuStorage::U64($body),
        }
    };
}
pub(crate) use map_vec;
pub(crate) use with_vec;

impl CpuStorage {
    /// The typed elements, if the dtype is `T`'s.
    pub fn as_slice<T: WithDType>(&self) -> Option<&[T]> {
        T::storage_slice(self)
    }

    /// Every element converted to f64 (exact for all dtypes but very large i64).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_vec!(self, v => v.iter().map(|x| x.to_f64()).collect())
    }

    /// `n` elements of `value` converted to `dtype`; an `Err` when the memory cannot be had.
    pub(crate) fn full(n: usize, dtype: DType, value: f64) -> Result<CpuStorage> {
        fn fill<T: WithDType>(n: usize, value: f64) -> Result<CpuStorage> {
            // Zero is all-zero bits in every dtype: take zeroed pages, with no pass over them (not
            // for -0.0, whose float bits are not zero).
            let v = if value == 0.0 && value.is_sign_positive() {
                alloc::try_zeroed("full", n)?
            } else {
                alloc::try_filled("full", n, T::from_f64(value))?
            };
            Ok(T::into_storage(v))
        }
        match dtype {
            DType::F32 => fill::<f32>(n, value),
            DType::F16 => fill::<f16>(n, value),
            DType::BF16 => fill::<bf16>(n, value),
            DType::F64 => fill::<f64>(n, value),
            DType::I32 => fill::<i32>(n, value),
            DType::U32 => fill::<u32>(n, value),
            DType::I64 => fill::<i64>(n, value),
            DType::U8 => fill::<u8>(n, value),
            DType::Bool => fill::<bool>(n, value),
            DType::I8 => fill::<i8>(n, value),
            DType::I16 => fill::<i16>(n, value),
            DType::U16 => fill::<u16>(n, value),
            DType::U64 => fill::<u64>(n, value),
        }
    }

    pub(crate) fn not_same_dtype(&self, op: &'static str, other: &CpuStorage) -> Error {
        Error::DTypeMismatch { op, lhs: self.dtype(), rhs: other.dtype() }
    }
}

impl BackendStorage for CpuStorage {
    fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::U32(_) => DType::U32,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::U8(_) => DType::U8,
            CpuStorage::Bool(_) => DType::Bool,
            CpuStorage::I8(_) => DType::I8,
            CpuStorage::I16(_) => DType::I16,
            CpuStorage::U16(_) => DType::U16,
            CpuStorage::U64(_) => DType::U64,
        }
    }

    fn len(&self) -> usize {
        with_vec!(self, v => v.len())
    }

    fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        self.copy_contiguous(l)
    }

    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        unary::unary(self, l, op)
    }

    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        binary::binary(self, l, rhs, rl, op)
    }

    fn signbit(&self, l: &Layout) -> Result<Self> {
        signbit::signbit(self, l)
    }

    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self> {
        binary::cmp(self, l, rhs, rl, op)
    }

    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        binary::where_cond(self, l, t, tl, f, fl)
    }

    fn cast(&self, l: &Layout, dtype: DType) -> Result<Self> {
        cast::cast(self, l, dtype)
    }

    fn copy_contiguous(&self, l: &Layout) -> Result<Self> {
        Ok(map_vec!(self, v => strided::contiguous(v, l).into_owned()))
    }

    fn copy_into(&self, l: &Layout, dst: &mut Self, dst_l: &Layout) -> Result<()> {
        macro_rules! arm {
            ($($var:ident),*) => {
                match (self, dst) {
                    $((CpuStorage::$var(s), CpuStorage::$var(d)) => strided::copy_into(s, l, d, dst_l),)*
                    (s, d) => return Err(s.not_same_dtype("copy_into", d)),
                }
            };
        }
        arm!(F32, F16, BF16, F64, I32, U32, I64, U8, Bool, I8, I16, U16, U64);
        Ok(())
    }

    fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Self> {
        reduce::reduce(self, l, op, axes)
    }

    fn cumsum(&self, l: &Layout, axis: usize) -> Result<Self> {
        reduce::cumsum(self, l, axis)
    }

    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        matmul::matmul(self, l, rhs, rl)
    }

    fn softmax_last(&self, l: &Layout, log: bool) -> Result<Self> {
        softmax::softmax_last(self, l, log)
    }

    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f64) -> Result<Self> {
        norm::rms_norm(self, l, w, wl, eps)
    }

    fn layer_norm(&self, l: &Layout, w: &Self, wl: &Layout, b: Option<(&Self, &Layout)>, eps: f64) -> Result<Self> {
        norm::layer_norm(self, l, w, wl, b, eps)
    }

    fn rope(&self, l: &Layout, cos: &Self, cl: &Layout, sin: &Self, sl: &Layout, interleaved: bool) -> Result<Self> {
        rope_rows::rope(self, l, cos, cl, sin, sl, interleaved)
    }

    fn attention(&self, l: &Layout, k: &Self, kl: &Layout, v: &Self, vl: &Layout, p: AttentionParams) -> Result<Self> {
        attention::attention(self, l, k, kl, v, vl, p)
    }

    fn silu_mul(&self, l: &Layout, up: &Self, ul: &Layout) -> Result<Self> {
        swiglu::silu_mul(self, l, up, ul)
    }

    fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, axis: usize) -> Result<Self> {
        index::index_select(self, l, ids, il, axis)
    }

    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, axis: usize) -> Result<Self> {
        index::gather(self, l, ids, il, axis)
    }
}

/// The CPU as a place to create storage.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuDevice;

impl BackendDevice for CpuDevice {
    type Storage = CpuStorage;

    fn full(&self, shape: &Shape, dtype: DType, value: f64) -> Result<CpuStorage> {
        CpuStorage::full(shape.elem_count(), dtype, value)
    }

    fn upload(&self, data: &CpuStorage) -> Result<CpuStorage> {
        Ok(data.clone())
    }
}

/// The error a CPU kernel returns for a dtype it does not handle.
pub(crate) fn unsupported(op: &'static str, dtype: DType) -> Error {
    Error::dtype(op, dtype, "on the cpu backend")
}
