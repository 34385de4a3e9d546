//! The one error type of kiln. Every variant names the op and carries what is needed to understand the
//! failure (shapes, dtypes, axes, devices) so that a message alone tells the user what went wrong.

use crate::{DType, Shape};

/// Result alias used across kiln.
pub type Result<T> = std::result::Result<T, Error>;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Two operands whose shapes cannot be broadcast together.
    #[error("[{op}] shapes {lhs} and {rhs} cannot be broadcast together")]
    BroadcastMismatch { op: &'static str, lhs: Shape, rhs: Shape },

    /// A shape constraint specific to one op failed; `msg` says which.
    #[error("[{op}] {msg}")]
    ShapeMismatch { op: &'static str, msg: String },

    /// The number of elements given does not match the shape.
    #[error("[{op}] {len} elements given for shape {shape} which holds {expected}")]
    ElementCountMismatch { op: &'static str, shape: Shape, len: usize, expected: usize },

    /// An axis (dimension index) outside the tensor's rank.
    #[error("[{op}] axis {axis} is out of range for a tensor of rank {rank} (shape {shape})")]
    AxisOutOfRange { op: &'static str, axis: isize, rank: usize, shape: Shape },

    /// An axis named twice.
    #[error("[{op}] axis {axis} given more than once")]
    DuplicateAxis { op: &'static str, axis: usize },

    /// An index or range outside a dimension.
    #[error("[{op}] {msg}")]
    OutOfRange { op: &'static str, msg: String },

    /// A dtype the op does not accept.
    #[error("[{op}] dtype {dtype} is not supported{}", if msg.is_empty() { String::new() } else { format!(": {msg}") })]
    UnsupportedDType { op: &'static str, dtype: DType, msg: String },

    /// Operands whose dtypes must agree but do not.
    #[error("[{op}] dtypes {lhs} and {rhs} do not match")]
    DTypeMismatch { op: &'static str, lhs: DType, rhs: DType },

    /// Operands living on different devices.
    #[error("[{op}] tensors are on different devices: {lhs} and {rhs}")]
    DeviceMismatch { op: &'static str, lhs: String, rhs: String },

    /// A backend that is not compiled in or not available on this machine.
    #[error("backend {backend} is not available: {msg}")]
    BackendUnavailable { backend: &'static str, msg: String },

    /// An op that a backend does not implement (yet).
    #[error("[{op}] is not implemented on the {backend} backend")]
    NotImplemented { op: &'static str, backend: &'static str },

    /// A bad argument that is not a shape or dtype (e.g. a negative step, an empty list).
    #[error("[{op}] {msg}")]
    InvalidArgument { op: &'static str, msg: String },

    /// A shape or size whose element count or byte size does not fit in the address space (it
    /// overflows, or exceeds `isize::MAX` bytes).
    #[error("[{op}] {msg}")]
    TooLarge { op: &'static str, msg: String },

    /// Host memory for a result could not be allocated.
    #[error("[{op}] could not allocate {bytes} bytes of host memory")]
    HostOutOfMemory { op: &'static str, bytes: u64 },

    /// The device ran out of memory.
    #[error("out of memory: {requested} bytes requested ({active} bytes active, {cached} bytes cached)")]
    OutOfMemory { requested: u64, active: u64, cached: u64 },

    /// The device was lost; every later op on it fails with this error.
    #[error("device lost: {0}")]
    DeviceLost(String),

    /// An error reported by the GPU driver or runtime (validation, compilation).
    #[error("[{op}] GPU error: {msg}")]
    Gpu { op: &'static str, msg: String },

    /// An environment variable with a value kiln cannot read.
    #[error("environment variable {var}={value} is not valid: {msg}")]
    BadEnv { var: &'static str, value: String, msg: String },
}

impl Error {
    pub(crate) fn shape(op: &'static str, msg: impl Into<String>) -> Self {
        Error::ShapeMismatch { op, msg: msg.into() }
    }
    pub(crate) fn arg(op: &'static str, msg: impl Into<String>) -> Self {
        Error::InvalidArgument { op, msg: msg.into() }
    }
    pub(crate) fn dtype(op: &'static str, dtype: DType, msg: impl Into<String>) -> Self {
        Error::UnsupportedDType { op, dtype, msg: msg.into() }
    }
}
