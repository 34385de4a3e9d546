//! kiln: tensors and a complete op set for numeric and ML work, on a fast CPU backend and (behind the
//! same API) on GPUs through wgpu.
//!
//! ```
//! use kiln::{DType, Device, Tensor};
//! # fn main() -> kiln::Result<()> {
//! let dev = Device::cpu();
//! let a = Tensor::arange(0.0, 6.0, DType::F32, &dev)?.reshape((2, 3))?;
//! let b = Tensor::ones((3, 2), DType::F32, &dev)?;
//! let c = a.matmul(&b)?;
//! assert_eq!(c.to_vec::<f32>()?, vec![3.0, 3.0, 12.0, 12.0]);
//! # Ok(()) }
//! ```

pub mod backend;
pub mod composed;
pub mod cpu;
mod device;
mod dtype;
mod error;
mod fusion;
pub mod gpu;
#[doc(hidden)]
pub mod gpu_probes;
mod kv_cache;
mod kv_pool;
pub mod layout;
mod ops;
pub mod quant;
pub mod settings;
pub mod shape;
mod storage;
mod tensor;

pub use device::{Device, DeviceRequest, Measured};
pub use dtype::{DType, FloatDType, WithDType};
pub use error::{Error, Result};
pub use fusion::{compile, CompileStats, Compiled};
pub use kv_cache::KvCache;
pub use kv_pool::KvBlockPool;
pub use layout::Layout;
pub use ops::attention::SdpaOptions;
pub use ops::decode::LinearInput;
pub use ops::paged::BlockTable;
/// The primitive op families a backend implements (`ops/primitive.rs`).
pub use ops::primitive as op;
pub use ops::rotary_embedding::RopeLayout;
pub use shape::Shape;
pub use tensor::{PendingRead, Tensor};

pub use half::{bf16, f16};
