//! `kiln.DType` objects (`kiln.float32`, ...) and the conversion of any dtype-like Python object
//! (a `DType`, a name such as `"float32"` or `"f32"`, a NumPy dtype, `float`/`int`/`bool`).

use crate::errors::type_err;
use kiln::DType;
use pyo3::prelude::*;
use pyo3::types::PyString;

/// A kiln element type. Compare with `==` against other dtypes or names (`kiln.float32 == "float32"`).
#[pyclass(name = "DType", module = "kiln", frozen)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDType(pub DType);

/// The array-API / NumPy name of a dtype (`bfloat16` has no NumPy equivalent).
pub fn np_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::U8 => "uint8",
        DType::I32 => "int32",
        DType::U32 => "uint32",
        DType::I64 => "int64",
        DType::I8 => "int8",
        DType::I16 => "int16",
        DType::U16 => "uint16",
        DType::U64 => "uint64",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        DType::F32 => "float32",
        DType::F64 => "float64",
    }
}

/// A dtype from its NumPy name or kiln's short name.
pub fn from_name(name: &str) -> Option<DType> {
    DType::parse(name).or_else(|| DType::ALL.into_iter().find(|&d| np_name(d) == name))
}

#[pymethods]
impl PyDType {
    /// The NumPy-style name (`float32`).
    #[getter]
    fn name(&self) -> &'static str {
        np_name(self.0)
    }
    /// kiln's short name (`f32`).
    #[getter]
    fn short_name(&self) -> &'static str {
        self.0.as_str()
    }
    /// Bytes per element.
    #[getter]
    fn itemsize(&self) -> usize {
        self.0.size_in_bytes()
    }
    /// The NumPy dtype (`numpy.dtype("float32")`; bfloat16 is ml_dtypes' and needs it installed),
    /// so `numpy.dtype(kiln.float32)` works and libraries that read `x.dtype` (Dask) get one.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let np_dtype = py.import("numpy")?.getattr("dtype")?;
        if self.0 == DType::BF16 {
            let bf16 =
                py.import("ml_dtypes").map_err(|_| type_err("dtype", "bfloat16 as a NumPy dtype needs ml_dtypes"))?;
            return np_dtype.call1((bf16.getattr("bfloat16")?,));
        }
        np_dtype.call1((np_name(self.0),))
    }
    /// NumPy's kind character: `b` bool, `u` unsigned, `i` signed, `f` float (bfloat16 too).
    #[getter]
    fn kind(&self) -> &'static str {
        match self.0 {
            DType::Bool => "b",
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => "u",
            d if d.is_float() => "f",
            _ => "i",
        }
    }
    /// NumPy's scalar type (`numpy.float32`), as `numpy.dtype(...).type` gives it.
    #[getter]
    fn r#type<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.dtype(py)?.getattr("type")
    }
    #[getter]
    fn is_float(&self) -> bool {
        self.0.is_float()
    }
    #[getter]
    fn is_int(&self) -> bool {
        self.0.is_int()
    }
    /// The dtype of a binary op over `self` and `other` (kiln's promotion lattice).
    fn promote(&self, other: &Bound<'_, PyAny>) -> PyResult<PyDType> {
        Ok(PyDType(self.0.promote(to_dtype(other)?)))
    }
    fn __repr__(&self) -> String {
        format!("kiln.{}", np_name(self.0))
    }
    fn __str__(&self) -> &'static str {
        np_name(self.0)
    }
    /// `kiln.DType("float32")`: the dtype of any dtype-like (a name, a NumPy dtype, float/int/bool).
    #[new]
    fn new(dtype: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyDType(to_dtype(dtype)?))
    }
    /// Pickles as `DType(name)`.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, (&'static str,))> {
        Ok((py.get_type::<PyDType>().into_any(), (np_name(self.0),)))
    }
    /// Equal to the same dtype and to anything naming it (`"float32"`, `"f32"`, `numpy.float32`).
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        to_dtype(other).is_ok_and(|d| d == self.0)
    }
    fn __ne__(&self, other: &Bound<'_, PyAny>) -> bool {
        !self.__eq__(other)
    }
    fn __hash__(&self) -> u64 {
        self.0 as u64 + 0x6b696c6e
    }
}

/// Any dtype-like object as a kiln dtype.
pub fn to_dtype(obj: &Bound<'_, PyAny>) -> PyResult<DType> {
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(d.get().0);
    }
    if let Ok(s) = obj.cast::<PyString>() {
        let s: String = s.extract()?;
        if let Some(d) = from_name(&s) {
            return Ok(d);
        }
    }
    let py = obj.py();
    let builtins = py.import("builtins")?;
    if obj.is(&builtins.getattr("float")?) {
        return Ok(DType::F32);
    }
    if obj.is(&builtins.getattr("int")?) {
        return Ok(DType::I64);
    }
    if obj.is(&builtins.getattr("bool")?) {
        return Ok(DType::Bool);
    }
    // NumPy dtypes and scalar types (np.float32, np.dtype('int64'), 'i8', ...).
    let np_dtype = py.import("numpy")?.getattr("dtype")?.call1((obj,));
    if let Ok(nd) = np_dtype {
        let name: String = nd.getattr("name")?.extract()?;
        if let Some(d) = from_name(&name) {
            return Ok(d);
        }
        return Err(type_err("dtype", format!("NumPy dtype {name} has no kiln equivalent")));
    }
    Err(type_err("dtype", format!("{} is not a dtype kiln knows", obj.repr()?)))
}

/// Registers `kiln.float32`, ... (NumPy names) and `kiln.f32`, ... (short names).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for d in DType::ALL {
        m.add(np_name(d), PyDType(d))?;
    }
    m.add("bool_", PyDType(DType::Bool))?;
    Ok(())
}
