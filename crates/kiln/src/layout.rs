//! Where a tensor's elements live in its storage: shape, strides (in elements) and a start offset.
//! Every view (narrow, slice with step, permute, broadcast, squeeze, reshape of contiguous data) is a
//! new `Layout` over the same storage; nothing here copies data.

use crate::{Error, Result, Shape};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Shape,
    strides: Vec<usize>,
    offset: usize,
}

impl Layout {
    pub fn contiguous(shape: impl Into<Shape>) -> Self {
        let shape = shape.into();
        let strides = shape.contiguous_strides();
        Layout { shape, strides, offset: 0 }
    }

    pub fn new(shape: Shape, strides: Vec<usize>, offset: usize) -> Self {
        debug_assert_eq!(shape.rank(), strides.len());
        Layout { shape, strides, offset }
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }
    pub fn offset(&self) -> usize {
        self.offset
    }
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
    pub fn elem_count(&self) -> usize {
        self.shape.elem_count()
    }

    /// True when the elements are stored row-major without gaps (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for (&d, &s) in self.dims().iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }

    /// `Some(start..end)` of storage indices when the layout is contiguous.
    pub fn contiguous_range(&self) -> Option<std::ops::Range<usize>> {
        if self.elem_count() == 0 {
            return Some(0..0);
        }
        self.is_contiguous().then(|| self.offset..self.offset + self.elem_count())
    }

    /// One past the largest storage index this layout touches (0 for an empty tensor).
    pub fn storage_extent(&self) -> usize {
        if self.elem_count() == 0 {
            return 0;
        }
        self.offset + self.dims().iter().zip(&self.strides).map(|(&d, &s)| (d - 1) * s).sum::<usize>() + 1
    }

    /// `len` elements of `axis` starting at `start`.
    pub fn narrow(&self, op: &'static str, axis: usize, start: usize, len: usize) -> Result<Layout> {
        self.slice(op, axis, start, start.saturating_add(len), 1)
    }

    /// Elements `start, start+step, ...` below `stop` along `axis` (Python's `start:stop:step`).
    pub fn slice(&self, op: &'static str, axis: usize, start: usize, stop: usize, step: usize) -> Result<Layout> {
        let dim = self.dims()[axis];
        if step == 0 {
            return Err(Error::arg(op, "slice step must be positive"));
        }
        if start > stop || stop > dim {
            return Err(Error::OutOfRange {
                op,
                msg: format!(
                    "range {start}..{stop} is out of bounds for axis {axis} of size {dim} (shape {})",
                    self.shape
                ),
            });
        }
        let len = (stop - start).div_ceil(step);
        let mut dims = self.dims().to_vec();
        dims[axis] = len;
        let mut strides = self.strides.clone();
        // With two or more elements, `step < dim`, so the product stays inside the storage extent.
        if len > 1 {
            strides[axis] *= step;
        }
        // An empty result keeps the offset, so it never points past the storage.
        let empty = len == 0 || dims.contains(&0);
        let offset = if empty { self.offset } else { self.offset + start * self.strides[axis] };
        Ok(Layout { shape: Shape::new(dims), strides, offset })
    }

    /// Reorders the axes: output axis `i` is input axis `perm[i]`.
    pub fn permute(&self, op: &'static str, perm: &[usize]) -> Result<Layout> {
        let rank = self.rank();
        let mut seen = vec![false; rank];
        if perm.len() != rank || perm.iter().any(|&p| p >= rank || std::mem::replace(&mut seen[p], true)) {
            return Err(Error::arg(
                op,
                format!("{perm:?} is not a permutation of the {rank} axes of shape {}", self.shape),
            ));
        }
        let dims = perm.iter().map(|&p| self.dims()[p]).collect::<Vec<_>>();
        let strides = perm.iter().map(|&p| self.strides[p]).collect();
        Ok(Layout { shape: Shape::new(dims), strides, offset: self.offset })
    }

    /// A view of this layout broadcast to `shape` (size-1 and missing leading dims get stride 0).
    pub fn broadcast_as(&self, op: &'static str, shape: &Shape) -> Result<Layout> {
        shape.check_size(op)?;
        let rank = shape.rank();
        if rank < self.rank() {
            return Err(Error::BroadcastMismatch { op, lhs: self.shape.clone(), rhs: shape.clone() });
        }
        let lead = rank - self.rank();
        let mut strides = vec![0; rank];
        for i in 0..self.rank() {
            let (d, target) = (self.dims()[i], shape.dims()[lead + i]);
            if d == target {
                strides[lead + i] = self.strides[i];
            } else if d != 1 {
                return Err(Error::BroadcastMismatch { op, lhs: self.shape.clone(), rhs: shape.clone() });
            }
        }
        Ok(Layout { shape: shape.clone(), strides, offset: self.offset })
    }

    /// A view with a new shape of the same element count, when it needs no copy. Works for contiguous
    /// layouts and, more generally, whenever each new dim lies inside a run of old dims that can be
    /// merged. `None` means the data must be copied first.
    pub fn reshape(&self, shape: &Shape) -> Option<Layout> {
        debug_assert_eq!(shape.elem_count(), self.elem_count());
        if self.is_contiguous() {
            return Some(Layout { shape: shape.clone(), strides: shape.contiguous_strides(), offset: self.offset });
        }
        // Merge old dims into groups of mergeable runs (skipping size-1 dims), then split each group.
        let old: Vec<(usize, usize)> =
            self.dims().iter().zip(&self.strides).filter(|(d, _)| **d != 1).map(|(&d, &s)| (d, s)).collect();
        let mut strides = vec![0; shape.rank()];
        let mut oi = 0;
        let mut ni = 0;
        let nd = shape.dims();
        while ni < nd.len() {
            if nd[ni] == 1 {
                strides[ni] = 0;
                ni += 1;
                continue;
            }
            if oi >= old.len() {
                return None;
            }
            // Take a run of old dims [oi, oj) and new dims [ni, nj) with equal products.
            let (mut op, mut np) = (old[oi].0, nd[ni]);
            let (mut oj, mut nj) = (oi + 1, ni + 1);
            while op != np {
                if op < np {
                    if oj >= old.len() {
                        return None;
                    }
                    op *= old[oj].0;
                    oj += 1;
                } else {
                    if nj >= nd.len() {
                        return None;
                    }
                    np *= nd[nj];
                    nj += 1;
                }
            }
            for k in oi..oj - 1 {
                if old[k].1 != old[k + 1].1 * old[k + 1].0 {
                    return None;
                }
            }
            let mut acc = old[oj - 1].1;
            for k in (ni..nj).rev() {
                strides[k] = acc;
                acc *= nd[k];
            }
            oi = oj;
            ni = nj;
        }
        Some(Layout { shape: shape.clone(), strides, offset: self.offset })
    }

    /// Storage indices of all elements in row-major logical order.
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets::new(self)
    }
}

/// Iterates the storage index of each element in row-major logical order.
pub struct StridedOffsets<'a> {
    dims: &'a [usize],
    strides: &'a [usize],
    index: Vec<usize>,
    next: Option<usize>,
}

impl<'a> StridedOffsets<'a> {
    fn new(l: &'a Layout) -> Self {
        let next = (l.elem_count() > 0).then_some(l.offset);
        StridedOffsets { dims: l.dims(), strides: &l.strides, index: vec![0; l.rank()], next }
    }
}

impl Iterator for StridedOffsets<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let cur = self.next?;
        let mut off = cur;
        let mut done = true;
        for i in (0..self.dims.len()).rev() {
            if self.index[i] + 1 < self.dims[i] {
                self.index[i] += 1;
                off += self.strides[i];
                done = false;
                break;
            }
            off -= self.index[i] * self.strides[i];
            self.index[i] = 0;
        }
        self.next = (!done).then_some(off);
        Some(cur)
    }
}

/// Merges adjacent dims that are contiguous with each other in every operand and drops size-1 dims.
/// Returns the collapsed dims and, per operand, the collapsed strides. Always returns at least one dim.
pub fn collapse(dims: &[usize], strides: &[&[usize]]) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_dims: Vec<usize> = Vec::with_capacity(dims.len());
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::with_capacity(dims.len()); strides.len()];
    for i in 0..dims.len() {
        if dims[i] == 1 {
            continue;
        }
        let mergeable = !out_dims.is_empty()
            && strides.iter().zip(&out_strides).all(|(s, os)| *os.last().unwrap() == s[i] * dims[i]);
        if mergeable {
            *out_dims.last_mut().unwrap() *= dims[i];
            for (s, os) in strides.iter().zip(out_strides.iter_mut()) {
                *os.last_mut().unwrap() = s[i];
            }
        } else {
            out_dims.push(dims[i]);
            for (s, os) in strides.iter().zip(out_strides.iter_mut()) {
                os.push(s[i]);
            }
        }
    }
    if out_dims.is_empty() || dims.contains(&0) {
        let n = dims.iter().product();
        return (vec![n], vec![vec![1]; strides.len()]);
    }
    (out_dims, out_strides)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offs(l: &Layout) -> Vec<usize> {
        l.offsets().collect()
    }

    #[test]
    fn transpose_offsets() {
        let l = Layout::contiguous([2, 3]).permute("t", &[1, 0]).unwrap();
        assert_eq!(offs(&l), vec![0, 3, 1, 4, 2, 5]);
        assert!(!l.is_contiguous());
    }

    #[test]
    fn slice_with_step() {
        let l = Layout::contiguous([10]).slice("t", 0, 1, 8, 3).unwrap();
        assert_eq!(offs(&l), vec![1, 4, 7]);
        let l = Layout::contiguous([10]).slice("t", 0, 1, 7, 3).unwrap();
        assert_eq!(offs(&l), vec![1, 4]);
    }

    #[test]
    fn reshape_of_noncontiguous_mergeable_view() {
        // A (4, 6) slice of (4, 8) keeps rows contiguous: splitting the last dim is a view.
        let l = Layout::contiguous([4, 8]).narrow("t", 1, 0, 6).unwrap();
        let r = l.reshape(&Shape::new(vec![4, 2, 3])).unwrap();
        assert_eq!(offs(&r), offs(&l));
        // Merging the rows is not.
        assert!(l.reshape(&Shape::new(vec![24])).is_none());
    }

    #[test]
    fn collapse_merges_contiguous_dims() {
        let (d, s) = collapse(&[2, 3, 4], &[&[12, 4, 1], &[0, 0, 1]]);
        assert_eq!(d, vec![6, 4]);
        assert_eq!(s, vec![vec![4, 1], vec![0, 1]]);
    }
}
