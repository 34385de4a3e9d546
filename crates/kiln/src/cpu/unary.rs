use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::UnaryOp;
use crate::{Layout, Result};

pub(crate) fn unary(s: &CpuStorage, _l: &Layout, op: UnaryOp) -> Result<CpuStorage> {
    Err(unsupported(op.name(), s.dtype()))
}
