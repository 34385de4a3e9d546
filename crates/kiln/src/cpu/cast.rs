use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{DType, Layout, Result};

pub(crate) fn cast(s: &CpuStorage, _l: &Layout, _dtype: DType) -> Result<CpuStorage> {
    Err(unsupported("cast", s.dtype()))
}
