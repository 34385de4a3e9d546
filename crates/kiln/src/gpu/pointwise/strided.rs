//! The parameter block every elementwise kernel begins with, and the declaration of an elementwise
//! kernel's parameters with its op's constants.

use crate::gpu::runtime::params::{self, params, Block};

params! {
    /// The block every elementwise kernel's parameters begin with: the element (or vector) count,
    /// the merged output dims, each input's strides along them (8 per input, up to 3 inputs) and
    /// each input's offset. Kernels with op constants add them as a member `op` (see [`params_wgsl`]).
    pub(crate) struct Strided {
        n: u32,
        rank: u32,
        dims: [u32; 8],
        strides: [u32; 24],
        offsets: [u32; 3],
    }
}

/// The parameter declaration of an elementwise kernel: [`Strided`], then `op`'s struct as member
/// `op` when the op has constants.
pub(crate) fn params_wgsl(op: Option<&Block>) -> String {
    match op {
        None => Strided::wgsl(),
        Some(b) => {
            let mut fields = Strided::fields();
            fields.push(("op", b.name.to_string()));
            b.decl.clone() + &params::declaration("Elementwise", &fields)
        }
    }
}
