use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::AttentionParams;
use crate::{Layout, Result};

pub(crate) fn attention(
    q: &CpuStorage,
    _l: &Layout,
    _k: &CpuStorage,
    _kl: &Layout,
    _v: &CpuStorage,
    _vl: &Layout,
    _p: AttentionParams,
) -> Result<CpuStorage> {
    Err(unsupported("attention", q.dtype()))
}
