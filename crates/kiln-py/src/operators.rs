//! Python operators: `+ - * / // % ** @`, comparisons, unary `- + abs ~`, `& | ^` (logical on bool
//! tensors, bitwise on integers through `kiln.bitwise_*`) and `<< >>`. Scalars are weak (the
//! tensor's dtype wins unless the scalar's kind is wider); NumPy arrays
//! on either side convert to tensors (`__array_ufunc__ = None` makes NumPy defer to these methods).

use crate::errors::{run, type_err};
use crate::tensor::PyTensor;
use kiln::{DType, Tensor};
use pyo3::basic::CompareOp;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// `a // b` (kiln's `floor_div`: exact integers, NumPy's float formula); bool operands give int64.
fn floor_div(a: &Tensor, b: &Tensor) -> kiln::Result<Tensor> {
    let (a, b) = bool_as_int(a, b)?;
    a.floor_div(&b)
}

/// `a % b` with the sign of `b` (kiln's `remainder`: Python's and NumPy's); bool operands give int64.
fn remainder(a: &Tensor, b: &Tensor) -> kiln::Result<Tensor> {
    let (a, b) = bool_as_int(a, b)?;
    a.remainder(&b)
}

/// Two bool operands of `//` or `%` as int64 (Python's `True // True` is an int).
fn bool_as_int(a: &Tensor, b: &Tensor) -> kiln::Result<(Tensor, Tensor)> {
    if a.dtype() == DType::Bool && b.dtype() == DType::Bool {
        return Ok((a.to_dtype(DType::I64)?, b.to_dtype(DType::I64)?));
    }
    Ok((a.clone(), b.clone()))
}

fn bool_op(op: &str, a: &Tensor, b: &Tensor, f: fn(&Tensor, &Tensor) -> kiln::Result<Tensor>) -> PyResult<Tensor> {
    if a.dtype() != DType::Bool || b.dtype() != DType::Bool {
        return Err(type_err(op, format!("needs bool tensors, got {} and {}", a.dtype(), b.dtype())));
    }
    f(a, b).map_err(crate::errors::to_py)
}

/// Generates an operator and its reflected form from a function of (left, right).
macro_rules! operator {
    ($($name:ident, $rname:ident => $f:expr),* $(,)?) => { $(
        #[pymethods]
        impl PyTensor {
            fn $name(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                let (a, b) = (self.t.clone(), PyTensor::operand(&self.t, other)?);
                Ok(run(py, stringify!($name), move || $f(&a, &b))?.into())
            }
            fn $rname(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
                let (a, b) = (PyTensor::operand(&self.t, other)?, self.t.clone());
                Ok(run(py, stringify!($rname), move || $f(&a, &b))?.into())
            }
        }
    )* };
}

operator! {
    __add__, __radd__ => Tensor::add,
    __sub__, __rsub__ => Tensor::sub,
    __mul__, __rmul__ => Tensor::mul,
    __truediv__, __rtruediv__ => Tensor::div,
    __floordiv__, __rfloordiv__ => floor_div,
    __mod__, __rmod__ => remainder,
    __matmul__, __rmatmul__ => Tensor::matmul,
}

#[pymethods]
impl PyTensor {
    /// NumPy ufuncs on tensors (`kiln._ufunc`): an operator's ufunc (`ndarray + t`, `np.add(a, t)`)
    /// calls the Tensor's operator method, as Python would, so the result is a tensor with kiln's
    /// promotion; `np.sqrt(t)` and the other ufuncs with a namespace function of their name
    /// run that function on the tensor's device; anything else (`out=`, `where=`, `reduce`, ufuncs
    /// kiln lacks) is NotImplemented, which NumPy raises as a TypeError.
    #[pyo3(signature = (ufunc, method, *inputs, **kwargs))]
    fn __array_ufunc__<'py>(
        slf: &Bound<'py, Self>,
        ufunc: &Bound<'py, PyAny>,
        method: &Bound<'py, PyAny>,
        inputs: &Bound<'py, PyTuple>,
        kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("kiln._ufunc")?.getattr("array_ufunc")?.call1((ufunc, method, inputs, kwargs))
    }
    /// NumPy's function protocol (NEP 18): `np.concatenate`, `np.sum`, `np.empty_like`... on
    /// tensors, as Dask calls them on its chunks. The mapping lives in the pure-Python
    /// `kiln._array_function.array_function`; a function it lacks raises a TypeError naming it.
    fn __array_function__<'py>(
        slf: &Bound<'py, Self>,
        func: &Bound<'py, PyAny>,
        types: &Bound<'py, PyAny>,
        args: &Bound<'py, PyTuple>,
        kwargs: &Bound<'py, pyo3::types::PyDict>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        py.import("kiln._array_function")?.getattr("array_function")?.call1((func, types, args, kwargs))
    }
    /// Above NumPy's arrays, for libraries that still look at it.
    #[classattr]
    fn __array_priority__() -> f64 {
        1000.0
    }

    fn __pow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_err("pow", "three-argument pow is not supported"));
        }
        let (a, b) = (self.t.clone(), PyTensor::operand(&self.t, other)?);
        Ok(run(py, "pow", move || a.pow(&b))?.into())
    }
    fn __rpow__(
        &self,
        py: Python<'_>,
        other: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyTensor> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_err("pow", "three-argument pow is not supported"));
        }
        let (a, b) = (PyTensor::operand(&self.t, other)?, self.t.clone());
        Ok(run(py, "pow", move || a.pow(&b))?.into())
    }

    fn __richcmp__(&self, py: Python<'_>, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyTensor> {
        let (a, b) = (self.t.clone(), PyTensor::operand(&self.t, other)?);
        Ok(run(py, "compare", move || match op {
            CompareOp::Lt => a.lt(&b),
            CompareOp::Le => a.le(&b),
            CompareOp::Eq => a.eq(&b),
            CompareOp::Ne => a.ne(&b),
            CompareOp::Gt => a.gt(&b),
            CompareOp::Ge => a.ge(&b),
        })?
        .into())
    }

    fn __neg__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        if self.t.dtype() == DType::Bool {
            return Err(type_err("neg", "the - operator is not defined on bool tensors; use ~ or logical_not"));
        }
        let t = self.t.clone();
        Ok(run(py, "neg", move || t.neg())?.into())
    }
    fn __pos__(&self) -> PyTensor {
        self.clone()
    }
    fn __abs__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        let t = self.t.clone();
        Ok(run(py, "abs", move || t.abs())?.into())
    }
    /// `~x`: logical not of a bool tensor, bitwise not of an integer one (`kiln.bitwise_invert`).
    fn __invert__(&self, py: Python<'_>) -> PyResult<PyTensor> {
        if self.t.dtype() != DType::Bool {
            return namespace_call(py, "bitwise_invert", vec![PyTensor::from(self.t.clone())]);
        }
        let t = self.t.clone();
        Ok(run(py, "logical_not", move || t.logical_not())?.into())
    }
    fn __and__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bit_op(py, "bitwise_and", self.t.clone(), other, false, Tensor::logical_and)
    }
    fn __rand__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bit_op(py, "bitwise_and", self.t.clone(), other, true, Tensor::logical_and)
    }
    fn __or__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bit_op(py, "bitwise_or", self.t.clone(), other, false, Tensor::logical_or)
    }
    fn __ror__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bit_op(py, "bitwise_or", self.t.clone(), other, true, Tensor::logical_or)
    }
    fn __xor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bit_op(py, "bitwise_xor", self.t.clone(), other, false, Tensor::ne)
    }
    fn __rxor__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        bit_op(py, "bitwise_xor", self.t.clone(), other, true, Tensor::ne)
    }
    /// `x << y` of integer tensors (`kiln.bitwise_left_shift`).
    fn __lshift__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        shift(py, "bitwise_left_shift", self.t.clone(), other, false)
    }
    fn __rlshift__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        shift(py, "bitwise_left_shift", self.t.clone(), other, true)
    }
    /// `x >> y` of integer tensors (`kiln.bitwise_right_shift`, arithmetic for signed types).
    fn __rshift__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        shift(py, "bitwise_right_shift", self.t.clone(), other, false)
    }
    fn __rrshift__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        shift(py, "bitwise_right_shift", self.t.clone(), other, true)
    }
}

/// Calls the namespace function `kiln.<name>` (the bitwise functions live in `kiln/array_api.py`).
fn namespace_call(py: Python<'_>, name: &str, args: Vec<PyTensor>) -> PyResult<PyTensor> {
    let r = py.import("kiln")?.getattr(name)?.call1(PyTuple::new(py, args)?)?;
    Ok(PyTensor::from(r.cast::<PyTensor>()?.borrow().t.clone()))
}

/// `& | ^`: logical on two bool tensors (in Rust), bitwise on integers (`kiln.bitwise_*`).
fn bit_op(
    py: Python<'_>,
    name: &str,
    t: Tensor,
    other: &Bound<'_, PyAny>,
    reflected: bool,
    logical: fn(&Tensor, &Tensor) -> kiln::Result<Tensor>,
) -> PyResult<PyTensor> {
    let o = PyTensor::operand(&t, other)?;
    let (a, b) = if reflected { (o, t) } else { (t, o) };
    if a.dtype() == DType::Bool && b.dtype() == DType::Bool {
        return Ok(bool_op(name, &a, &b, logical)?.into());
    }
    namespace_call(py, name, vec![PyTensor::from(a), PyTensor::from(b)])
}

fn shift(py: Python<'_>, name: &str, t: Tensor, other: &Bound<'_, PyAny>, reflected: bool) -> PyResult<PyTensor> {
    let o = PyTensor::operand(&t, other)?;
    let (a, b) = if reflected { (o, t) } else { (t, o) };
    namespace_call(py, name, vec![PyTensor::from(a), PyTensor::from(b)])
}

/// In-place operators (`x += y` ...): the out-of-place operator's result replaces `x`'s storage
/// (copy-on-write, as `x[...] = v`: views taken earlier keep the old values). As the array API
/// standard asks, an in-place operator never changes `x`'s dtype (TypeError) or shape (ValueError):
/// `int_tensor += 1.5` raises, as in NumPy.
fn inplace(slf: &Bound<'_, PyTensor>, other: &Bound<'_, PyAny>, op: &str, method: &str) -> PyResult<()> {
    let r = slf.call_method1(method, (other,))?;
    let t = r.cast::<PyTensor>()?.borrow().t.clone();
    let (dtype, dims) = {
        let this = slf.borrow();
        (this.t.dtype(), this.t.dims().to_vec())
    };
    if t.dtype() != dtype {
        return Err(type_err(
            op,
            format!(
                "the result's dtype {} differs from the tensor's {dtype}: an in-place operator cannot change it \
                 (write x = x {} y, or convert y first)",
                t.dtype(),
                &method[2..method.len() - 2]
            ),
        ));
    }
    if t.dims() != dims.as_slice() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "[{op}] the result's shape {:?} differs from the tensor's {dims:?}: an in-place operator cannot \
             broadcast the tensor itself",
            t.dims()
        )));
    }
    crate::indexing::replace_storage(slf, op, t)
}

macro_rules! inplace {
    ($($iname:ident => $name:literal),* $(,)?) => { $(
        #[pymethods]
        impl PyTensor {
            fn $iname(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<()> {
                inplace(slf, other, stringify!($iname), $name)
            }
        }
    )* };
}

inplace! {
    __iadd__ => "__add__",
    __isub__ => "__sub__",
    __imul__ => "__mul__",
    __itruediv__ => "__truediv__",
    __ifloordiv__ => "__floordiv__",
    __imod__ => "__mod__",
    __imatmul__ => "__matmul__",
    __iand__ => "__and__",
    __ior__ => "__or__",
    __ixor__ => "__xor__",
    __ilshift__ => "__lshift__",
    __irshift__ => "__rshift__",
}

#[pymethods]
impl PyTensor {
    fn __ipow__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>, modulo: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        if modulo.is_some_and(|m| !m.is_none()) {
            return Err(type_err("pow", "three-argument pow is not supported"));
        }
        inplace(slf, other, "__ipow__", "__pow__")
    }
}
