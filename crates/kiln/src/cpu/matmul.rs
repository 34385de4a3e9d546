use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

pub(crate) fn matmul(a: &CpuStorage, _al: &Layout, _b: &CpuStorage, _bl: &Layout) -> Result<CpuStorage> {
    Err(unsupported("matmul", a.dtype()))
}
