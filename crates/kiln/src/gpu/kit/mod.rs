//! The kernel kit: pieces that more than one kernel family builds on, beneath the families and
//! above `runtime/` and `pointwise/` (it names nothing else of `gpu/`, and no family of another):
//! - `quant_units.rs`: the quantized formats' units, one lane's view of a packed weight row, which
//!   the quantized matrix-vector product (`matvec/`) and dequantisation (`dequant/`) both read;
//! - `rope_store.rs`: where a rotated q/k/v pair goes, for `kv/`'s rope + append kernel and the
//!   quantized q/k/v product that rotates its own row (`matvec/`).

pub(crate) mod quant_units;
pub(crate) mod rope_store;
