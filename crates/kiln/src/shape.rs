//! Shapes, axis normalisation and NumPy broadcasting.

use crate::{Error, Result};
use std::fmt;

/// The dimensions of a tensor, outermost first. A rank-0 shape is a scalar.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(Vec<usize>);

impl Shape {
    pub fn new(dims: impl Into<Vec<usize>>) -> Self {
        Shape(dims.into())
    }
    pub fn scalar() -> Self {
        Shape(vec![])
    }
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// The number of elements. Every tensor's shape has passed [`Shape::check_size`], so this cannot
    /// overflow for a shape that belongs to a tensor.
    pub fn elem_count(&self) -> usize {
        self.0.iter().product()
    }

    /// The number of elements, or `None` when the shape is too large for any tensor: the product of its
    /// nonzero dims must not exceed `isize::MAX` (so strides and byte offsets of every dtype that fits
    /// in memory are representable, even where a zero dim makes the shape empty).
    pub fn checked_elem_count(&self) -> Option<usize> {
        let nonzero = self.0.iter().filter(|&&d| d != 0).try_fold(1usize, |acc, &d| acc.checked_mul(d))?;
        if nonzero > isize::MAX as usize {
            return None;
        }
        Some(if self.0.contains(&0) { 0 } else { nonzero })
    }

    /// The number of elements, or an error naming `op` when the shape is too large for any tensor
    /// (see [`Shape::checked_elem_count`]). Every path that makes a tensor of a new shape calls this.
    pub fn check_size(&self, op: &'static str) -> Result<usize> {
        self.checked_elem_count().ok_or_else(|| Error::TooLarge {
            op,
            msg: format!("shape {self} has more elements than any tensor can hold"),
        })
    }
    /// Row-major strides of a contiguous tensor of this shape, in elements.
    pub fn contiguous_strides(&self) -> Vec<usize> {
        let mut strides = vec![0; self.0.len()];
        let mut acc = 1;
        for (s, &d) in strides.iter_mut().zip(&self.0).rev() {
            *s = acc;
            acc *= d;
        }
        strides
    }

    /// Turns a possibly negative axis (`-1` is the last) into an index, or an error naming `op`.
    pub fn axis(&self, op: &'static str, axis: isize) -> Result<usize> {
        normalize_axis(op, axis, self.rank(), self)
    }

    /// Normalises a list of axes, refusing duplicates.
    pub fn axes(&self, op: &'static str, axes: &[isize]) -> Result<Vec<usize>> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let a = self.axis(op, a)?;
            if out.contains(&a) {
                return Err(Error::DuplicateAxis { op, axis: a });
            }
            out.push(a);
        }
        Ok(out)
    }

    /// The shape two operands broadcast to, NumPy rules: align trailing dims; each pair must be equal
    /// or contain a 1.
    pub fn broadcast(op: &'static str, lhs: &Shape, rhs: &Shape) -> Result<Shape> {
        let rank = lhs.rank().max(rhs.rank());
        let mut dims = vec![0; rank];
        for (i, d) in dims.iter_mut().enumerate() {
            let l = dim_from_right(lhs, rank - 1 - i);
            let r = dim_from_right(rhs, rank - 1 - i);
            *d = match (l, r) {
                (a, b) if a == b => a,
                (1, b) => b,
                (a, 1) => a,
                _ => return Err(Error::BroadcastMismatch { op, lhs: lhs.clone(), rhs: rhs.clone() }),
            };
        }
        Ok(Shape(dims))
    }
}

fn dim_from_right(s: &Shape, i: usize) -> usize {
    if i < s.rank() {
        s.0[s.rank() - 1 - i]
    } else {
        1
    }
}

pub(crate) fn normalize_axis(op: &'static str, axis: isize, rank: usize, shape: &Shape) -> Result<usize> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(Error::AxisOutOfRange { op, axis, rank, shape: shape.clone() });
    }
    Ok(a as usize)
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() == 1 {
            write!(f, ",")?;
        }
        write!(f, ")")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Self {
        Shape(v)
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Self {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Self {
        Shape(v.to_vec())
    }
}
impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}
impl From<()> for Shape {
    fn from(_: ()) -> Self {
        Shape(vec![])
    }
}
impl From<usize> for Shape {
    fn from(d: usize) -> Self {
        Shape(vec![d])
    }
}
macro_rules! tuple_shape {
    ($($n:ident),+) => {
        impl From<($(tuple_shape!(@u $n),)+)> for Shape {
            #[allow(non_snake_case)]
            fn from(($($n,)+): ($(tuple_shape!(@u $n),)+)) -> Self {
                Shape(vec![$($n),+])
            }
        }
    };
    (@u $n:ident) => { usize };
}
tuple_shape!(A);
tuple_shape!(A, B);
tuple_shape!(A, B, C);
tuple_shape!(A, B, C, D);
tuple_shape!(A, B, C, D, E);
tuple_shape!(A, B, C, D, E, F);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_like_numpy() {
        assert_eq!(Shape::new(vec![2, 3]).to_string(), "(2, 3)");
        assert_eq!(Shape::new(vec![4]).to_string(), "(4,)");
        assert_eq!(Shape::scalar().to_string(), "()");
    }

    #[test]
    fn broadcast_rules() {
        let b = |a: &[usize], c: &[usize]| Shape::broadcast("t", &a.into(), &c.into());
        assert_eq!(b(&[3, 1], &[4]).unwrap().dims(), &[3, 4]);
        assert_eq!(b(&[], &[2, 2]).unwrap().dims(), &[2, 2]);
        assert_eq!(b(&[0, 1], &[1, 5]).unwrap().dims(), &[0, 5]);
        let e = b(&[2, 3], &[4]).unwrap_err().to_string();
        assert_eq!(e, "[t] shapes (2, 3) and (4,) cannot be broadcast together");
    }
}
