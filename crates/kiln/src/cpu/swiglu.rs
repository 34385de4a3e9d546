use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

pub(crate) fn silu_mul(g: &CpuStorage, _l: &Layout, _up: &CpuStorage, _ul: &Layout) -> Result<CpuStorage> {
    Err(unsupported("silu_mul", g.dtype()))
}
