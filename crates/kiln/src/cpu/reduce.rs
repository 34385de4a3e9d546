use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::ReduceOp;
use crate::{Layout, Result};

pub(crate) fn reduce(s: &CpuStorage, _l: &Layout, op: ReduceOp, _axes: &[usize]) -> Result<CpuStorage> {
    Err(unsupported(op.name(), s.dtype()))
}

pub(crate) fn cumsum(s: &CpuStorage, _l: &Layout, _axis: usize) -> Result<CpuStorage> {
    Err(unsupported("cumsum", s.dtype()))
}
