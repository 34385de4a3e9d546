use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

pub(crate) fn rope(
    x: &CpuStorage,
    _l: &Layout,
    _cos: &CpuStorage,
    _cl: &Layout,
    _sin: &CpuStorage,
    _sl: &Layout,
    _interleaved: bool,
) -> Result<CpuStorage> {
    Err(unsupported("rope", x.dtype()))
}
