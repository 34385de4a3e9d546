//! Few-row matrix-vector products `x (m, k) @ w^T` for up to 8 rows of x, the weight read once per
//! workgroup's rows with wide loads, each lane set owning a few weight rows (output columns):
//! - `dense.rs` (`dense.wgsl`): a dense f32/f16/bf16 weight (`Tensor::linear_fused`, the decode
//!   step);
//! - `quant.rs` (`quant.wgsl`): a quantized weight in kiln's planar layout, dequantised in registers
//!   through the units of `kit/quant_units.rs` (`Tensor::qlinear`, `qlinear_fused`);
//! - `quant_i8.rs` (`quant_i8.wgsl`): the same product on 4-way integer dot products for Q8_0,
//!   Q4_0, Q4_K and Q6_K, from x put in 16-bit fixed point by `qx.rs` (`qx.wgsl`) first.
//!
//! Both may normalise (RMSNorm) or gate (`silu_mul`) their own input rows first (`Pro`) and add a
//! bias or residual before the store; `emit.rs` holds what they share, `quant_args.rs` what the two
//! quantized ones share.

pub(crate) mod dense;
mod emit;
pub(crate) mod quant;
mod quant_args;
pub(crate) mod quant_i8;
pub(crate) mod qx;

/// Every matvec kernel variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    quant::catalog(push);
    quant_i8::catalog(push);
    qx::catalog(push);
    dense::catalog(push);
}
