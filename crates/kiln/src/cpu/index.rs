use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

pub(crate) fn index_select(
    s: &CpuStorage,
    _l: &Layout,
    _ids: &CpuStorage,
    _il: &Layout,
    _axis: usize,
) -> Result<CpuStorage> {
    Err(unsupported("index_select", s.dtype()))
}

pub(crate) fn gather(s: &CpuStorage, _l: &Layout, _ids: &CpuStorage, _il: &Layout, _axis: usize) -> Result<CpuStorage> {
    Err(unsupported("gather", s.dtype()))
}
