//! Scalar math kernels shared by the CPU ops, written to vectorise when called in a loop.

/// e^x in f32.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    x.exp()
}
