use super::{unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::{Layout, Result};

pub(crate) fn rms_norm(x: &CpuStorage, _l: &Layout, _w: &CpuStorage, _wl: &Layout, _eps: f64) -> Result<CpuStorage> {
    Err(unsupported("rms_norm", x.dtype()))
}

pub(crate) fn layer_norm(
    x: &CpuStorage,
    _l: &Layout,
    _w: &CpuStorage,
    _wl: &Layout,
    _b: Option<(&CpuStorage, &Layout)>,
    _eps: f64,
) -> Result<CpuStorage> {
    Err(unsupported("layer_norm", x.dtype()))
}
