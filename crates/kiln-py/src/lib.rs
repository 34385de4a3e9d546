//! Python bindings of kiln (`import kiln`): the `Tensor` class with NumPy-style operators and
//! indexing, creation functions, NumPy and DLPack interop, and the device runtime. The pure-Python
//! parts (array API namespace, `Backend`, `UnifiedBuffer`) live in `python/kiln/`.

mod compile;
mod creation;
mod device;
mod dlpack;
mod dtype;
mod errors;
mod indexing;
mod interop;
mod kv_cache;
mod operators;
mod ops;
mod tensor;

use pyo3::prelude::*;

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<dtype::PyDType>()?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<interop::HostView>()?;
    m.add_class::<kv_cache::PyKvCache>()?;
    dtype::register(m)?;
    creation::register(m)?;
    interop::register(m)?;
    dlpack::register(m)?;
    ops::register(m)?;
    compile::register(m)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
