//! The kernel kit: pieces that more than one kernel family builds on, beneath the families and
//! above `runtime/` and `pointwise/` (it names nothing else of `gpu/`, and no family of another):
//! - `quant_units.rs`: the quantized formats' units, one lane's view of a packed weight row, which
//!   the quantized matrix-vector product (`matvec/`) and dequantisation (`dequant/`) both read.

pub(crate) mod quant_units;
