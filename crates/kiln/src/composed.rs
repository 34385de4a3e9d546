//! Fused ops written out from primitive ops. They serve as the fallback where a backend lacks a fused
//! kernel and as the reference the fused kernels are tested against.
