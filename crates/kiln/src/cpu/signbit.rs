//! `signbit`: whether each element's sign bit is set (bool result).

use super::{strided, CpuStorage};
use crate::{Layout, Result};

/// Whether each element's sign bit is set; `x < 0` for integers (see `BackendStorage::signbit`).
pub(crate) fn signbit(s: &CpuStorage, l: &Layout) -> Result<CpuStorage> {
    use CpuStorage as S;
    Ok(S::Bool(match s {
        S::F32(v) => strided::unary_map(v, l, |x: f32| x.is_sign_negative()),
        S::F64(v) => strided::unary_map(v, l, |x: f64| x.is_sign_negative()),
        S::F16(v) => strided::unary_map(v, l, |x: half::f16| x.is_sign_negative()),
        S::BF16(v) => strided::unary_map(v, l, |x: half::bf16| x.is_sign_negative()),
        S::I32(v) => strided::unary_map(v, l, |x: i32| x < 0),
        S::I64(v) => strided::unary_map(v, l, |x: i64| x < 0),
        S::U32(v) => strided::unary_map(v, l, |_: u32| false),
        S::U8(v) => strided::unary_map(v, l, |_: u8| false),
        S::Bool(v) => strided::unary_map(v, l, |_: bool| false),
        S::I8(v) => strided::unary_map(v, l, |x: i8| x < 0),
        S::I16(v) => strided::unary_map(v, l, |x: i16| x < 0),
        S::U16(v) => strided::unary_map(v, l, |_: u16| false),
        S::U64(v) => strided::unary_map(v, l, |_: u64| false),
    }))
}
