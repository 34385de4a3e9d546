//! Printing like NumPy: `[[1. 2.]\n [3. 4.]]`, with large tensors summarised by their first and last
//! three entries per axis.

use super::Tensor;
use std::fmt;

const THRESHOLD: usize = 1000;
const EDGE: usize = 3;

/// `x` rounded to `dtype` (to test whether a decimal string identifies a value of that dtype).
fn round_to(x: f64, dtype: crate::DType) -> f64 {
    use crate::DType;
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// NumPy's scientific notation (its default float mode, "maxprec" with precision 8): each value needs
/// the fewest fraction digits (at most 8) that identify it in its dtype; all are printed with the most
/// any needs, and the exponents with as many digits as the widest (at least 2):
/// `[1.e+08 1.e+00]`, `[ 1.0e-05 -2.5e-07]`, `[1.e-100 1.e+000]`.
fn scientific(values: &[f64], dtype: crate::DType) -> Vec<String> {
    let digits = |v: f64| {
        (0..8usize).find(|&p| format!("{v:.p$e}").parse::<f64>().is_ok_and(|x| round_to(x, dtype) == v)).unwrap_or(8)
    };
    let finite = values.iter().copied().filter(|v| v.is_finite());
    let prec = finite.clone().map(digits).max().unwrap_or(0);
    let split = |v: f64| {
        let s = format!("{v:.prec$e}");
        let (m, e) = s.split_once('e').map(|(m, e)| (m.to_string(), e.parse::<i32>().unwrap_or(0))).unwrap_or_default();
        (m, e)
    };
    let exp_digits = finite.map(|v| split(v).1.unsigned_abs().to_string().len()).max().unwrap_or(2).max(2);
    values
        .iter()
        .map(|&v| {
            if v.is_nan() {
                "nan".into()
            } else if v.is_infinite() {
                if v > 0.0 { "inf" } else { "-inf" }.into()
            } else {
                let (m, e) = split(v);
                let dot = if prec == 0 { "." } else { "" };
                format!("{m}{dot}e{}{:0exp_digits$}", if e < 0 { '-' } else { '+' }, e.unsigned_abs())
            }
        })
        .collect()
}

fn format_values(values: &[f64], dtype: crate::DType) -> Vec<String> {
    let (is_float, is_bool) = (dtype.is_float(), dtype == crate::DType::Bool);
    if is_bool {
        return values.iter().map(|&v| if v != 0.0 { "True".into() } else { "False".into() }).collect();
    }
    if !is_float {
        return values.iter().map(|v| format!("{v}")).collect();
    }
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let min_nz = finite.iter().filter(|v| **v != 0.0).fold(f64::INFINITY, |m, v| m.min(v.abs()));
    let sci = max >= 1e8 || (min_nz.is_finite() && min_nz < 1e-4);
    if sci {
        return scientific(values, dtype);
    }
    let all_int = finite.iter().all(|v| v.fract() == 0.0);
    values
        .iter()
        .map(|&v| {
            if v.is_nan() {
                "nan".into()
            } else if v.is_infinite() {
                if v > 0.0 {
                    "inf".into()
                } else {
                    "-inf".into()
                }
            } else if all_int {
                format!("{v}.")
            } else {
                let s = format!("{v:.4}");
                let s = s.trim_end_matches('0');
                s.to_string()
            }
        })
        .collect()
}

/// Indices kept along an axis of size `n` when summarising (`None` marks the "...").
fn kept(n: usize, summarise: bool) -> Vec<Option<usize>> {
    if summarise && n > 2 * EDGE {
        (0..EDGE).map(Some).chain([None]).chain((n - EDGE..n).map(Some)).collect()
    } else {
        (0..n).map(Some).collect()
    }
}

struct Printer<'a> {
    dims: &'a [usize],
    strings: &'a [String],
    width: usize,
    summarise: bool,
}

impl Printer<'_> {
    fn write(&self, f: &mut fmt::Formatter<'_>, axis: usize, base: usize, indent: usize) -> fmt::Result {
        if axis == self.dims.len() {
            return write!(f, "{:>w$}", self.strings[base], w = self.width);
        }
        let stride: usize = self.dims[axis + 1..].iter().product();
        write!(f, "[")?;
        let last_axis = axis + 1 == self.dims.len();
        for (j, idx) in kept(self.dims[axis], self.summarise).into_iter().enumerate() {
            if j > 0 {
                if last_axis {
                    write!(f, " ")?;
                } else {
                    let blank = self.dims.len() - axis - 1;
                    write!(f, "{}{:indent$}", "\n".repeat(blank), "", indent = indent + 1)?;
                }
            }
            match idx {
                Some(i) => self.write(f, axis + 1, base + i * stride, indent + 1)?,
                None => write!(f, "...")?,
            }
        }
        write!(f, "]")
    }
}

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let values = match self.to_f64_vec() {
            Ok(v) => v,
            Err(e) => return write!(f, "<tensor: {e}>"),
        };
        let dt = self.dtype();
        let strings = format_values(&values, dt);
        let summarise = self.elem_count() > THRESHOLD;
        // Width from the entries that will be printed (all of them is close enough and simpler).
        let width = strings.iter().map(|s| s.len()).max().unwrap_or(0);
        if self.rank() == 0 {
            return write!(f, "{}", strings[0]);
        }
        Printer { dims: self.dims(), strings: &strings, width, summarise }.write(f, 0, 0, 0)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor(shape={}, dtype={}, device={})\n{}", self.shape(), self.dtype(), self.device(), self)
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor};

    #[test]
    fn prints_like_numpy() {
        let d = Device::cpu();
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], (2, 2), &d).unwrap();
        assert_eq!(t.to_string(), "[[1. 2.]\n [3. 4.]]");
        let t = Tensor::from_vec(vec![0.5f32, -1.25], 2, &d).unwrap();
        assert_eq!(t.to_string(), "[  0.5 -1.25]");
        let t = Tensor::arange(0.0, 2000.0, DType::I32, &d).unwrap();
        assert_eq!(t.to_string(), "[   0    1    2 ... 1997 1998 1999]");
        let t = Tensor::zeros((2, 1, 2), DType::Bool, &d).unwrap();
        assert_eq!(t.to_string(), "[[[False False]]\n\n [[False False]]]");
    }
}
