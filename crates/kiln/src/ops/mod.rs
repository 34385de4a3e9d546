//! The public op API as `impl Tensor` blocks, one family per file. Each op validates its inputs
//! (shapes, dtypes, axes, devices), promotes dtypes, broadcasts, and forwards to the storage.

pub(crate) mod attention;
mod binary;
pub(crate) mod decode;
mod index;
mod join;
mod mask;
mod matmul;
mod nn;
pub(crate) mod paged;
pub mod primitive;
mod reduce;
pub(crate) mod rotary_embedding;
mod unary;
pub(crate) mod unary_table;
