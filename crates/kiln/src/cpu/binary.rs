use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::op::{BinaryOp, CmpOp};
use crate::{Layout, Result};

pub(crate) fn binary(a: &CpuStorage, _al: &Layout, _b: &CpuStorage, _bl: &Layout, op: BinaryOp) -> Result<CpuStorage> {
    Err(unsupported(op.name(), a.dtype()))
}

pub(crate) fn cmp(a: &CpuStorage, _al: &Layout, _b: &CpuStorage, _bl: &Layout, op: CmpOp) -> Result<CpuStorage> {
    Err(unsupported(op.name(), a.dtype()))
}

pub(crate) fn where_cond(
    c: &CpuStorage,
    _cl: &Layout,
    _t: &CpuStorage,
    _tl: &Layout,
    _f: &CpuStorage,
    _fl: &Layout,
) -> Result<CpuStorage> {
    Err(unsupported("where", c.dtype()))
}
