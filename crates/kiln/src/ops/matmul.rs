//! Matrix products with NumPy `matmul` rules, `linear` and `dot`.

use crate::{DType, Error, Result, Shape, Tensor};

/// The error for operands whose contracted dims differ, worded like NumPy's.
fn not_aligned(op: &'static str, a: &Shape, b: &Shape, ka: usize, kb: usize) -> Error {
    Error::shape(op, format!("shapes {a} and {b} are not aligned: {ka} != {kb}"))
}

impl Tensor {
    /// NumPy `matmul`: 1-D operands are promoted to matrices and the added axis removed; batch axes
    /// broadcast. Transposed views are used as they are. Mixed dtypes promote (see [`DType::promote`]);
    /// bool is refused. A zero-length contracted dim gives zeros.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        if let Some(r) = crate::fusion::trace::hook(
            || crate::fusion::trace::Kind::Other,
            "matmul",
            &[self, rhs],
            |t| t[0].matmul(&t[1]),
        ) {
            return r;
        }
        self.matmul_named("matmul", rhs)
    }

    fn matmul_named(&self, op: &'static str, rhs: &Tensor) -> Result<Tensor> {
        self.same_device(op, rhs)?;
        let (sa, sb) = (self.shape(), rhs.shape());
        if self.rank() == 0 || rhs.rank() == 0 {
            return Err(Error::shape(
                op,
                format!("operands must have at least one dimension, got shapes {sa} and {sb}"),
            ));
        }
        for d in [self.dtype(), rhs.dtype()] {
            if d == DType::Bool {
                return Err(Error::dtype(op, d, format!("matrix products of shapes {sa} and {sb} need numbers")));
            }
        }
        let dtype = self.dtype().promote(rhs.dtype());
        // Promote 1-D operands: (k,) @ .. is (1, k); .. @ (k,) is (k, 1).
        let a = if self.rank() == 1 { self.unsqueeze(0)? } else { self.clone() };
        let b = if rhs.rank() == 1 { rhs.unsqueeze(1)? } else { rhs.clone() };
        let (ra, rb) = (a.rank(), b.rank());
        let (m, ka) = (a.dims()[ra - 2], a.dims()[ra - 1]);
        let (kb, n) = (b.dims()[rb - 2], b.dims()[rb - 1]);
        if ka != kb {
            return Err(not_aligned(op, sa, sb, ka, kb));
        }
        let batch = Shape::broadcast(op, &Shape::from(&a.dims()[..ra - 2]), &Shape::from(&b.dims()[..rb - 2]))
            .map_err(|_| Error::BroadcastMismatch { op, lhs: sa.clone(), rhs: sb.clone() })?;
        let mut out_dims = batch.dims().to_vec();
        out_dims.extend([m, n]);
        // The result shape with the promoted axes removed again.
        let mut final_dims = batch.dims().to_vec();
        if self.rank() > 1 {
            final_dims.push(m);
        }
        if rhs.rank() > 1 {
            final_dims.push(n);
        }
        let out = if out_dims.contains(&0) || ka == 0 {
            Tensor::zeros(out_dims, dtype, self.device())?
        } else {
            let (a, b) = (a.to_dtype(dtype)?, b.to_dtype(dtype)?);
            let mut da = batch.dims().to_vec();
            da.extend([m, ka]);
            let mut db = batch.dims().to_vec();
            db.extend([kb, n]);
            let la = a.layout().broadcast_as(op, &da.into())?;
            let lb = b.layout().broadcast_as(op, &db.into())?;
            let sa = a.storage();
            let s = if a.shares_storage_with(&b) {
                // One read guard for both: taking the same lock twice on one thread may deadlock.
                sa.matmul(&la, &sa, &lb)?
            } else {
                sa.matmul(&la, &b.storage(), &lb)?
            };
            Tensor::from_storage(s, out_dims, self.device())
        };
        out.reshape(final_dims)
    }

    /// `self @ w^T + bias` with `w` of shape `(out, in)` (PyTorch's `nn.Linear`); `w^T` is a view, no
    /// copy. `self` is `(.., in)`; `bias`, if given, is `(out,)`.
    pub fn linear(&self, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
        let op = "linear";
        if w.rank() != 2 {
            return Err(Error::shape(op, format!("weight must be (out, in), got shape {}", w.shape())));
        }
        if self.rank() == 0 || self.dims()[self.rank() - 1] != w.dims()[1] {
            return Err(Error::shape(
                op,
                format!(
                    "input of shape {} does not end in the {} inputs of weight {}",
                    self.shape(),
                    w.dims()[1],
                    w.shape()
                ),
            ));
        }
        if let Some(b) = bias {
            self.same_device(op, b)?;
            if b.dims() != [w.dims()[0]] {
                return Err(Error::shape(
                    op,
                    format!(
                        "bias of shape {} does not match the {} outputs of weight {}",
                        b.shape(),
                        w.dims()[0],
                        w.shape()
                    ),
                ));
            }
        }
        let y = self.matmul_named(op, &w.t()?)?;
        match bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }

    /// Inner product of two 1-D tensors, rank 0.
    pub fn dot(&self, rhs: &Tensor) -> Result<Tensor> {
        let op = "dot";
        if self.rank() != 1 || rhs.rank() != 1 {
            return Err(Error::shape(
                op,
                format!("needs two 1-D tensors, got shapes {} and {}", self.shape(), rhs.shape()),
            ));
        }
        if self.dims()[0] != rhs.dims()[0] {
            return Err(not_aligned(op, self.shape(), rhs.shape(), self.dims()[0], rhs.dims()[0]));
        }
        self.matmul_named(op, rhs)
    }
}
