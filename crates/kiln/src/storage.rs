//! `Storage`: one variant per backend. Every op is one `match` that forwards to the backend, and a
//! pair of storages on different backends is an error naming the op.

use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Layout, Result};

#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
        }
    }

    pub fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => s.to_cpu(l),
        }
    }

    pub fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.unary(l, op)?)),
        }
    }

    pub fn binary(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: BinaryOp) -> Result<Storage> {
        match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Ok(Storage::Cpu(a.binary(l, b, rl, op)?)),
        }
    }

    pub fn cmp(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: CmpOp) -> Result<Storage> {
        match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Ok(Storage::Cpu(a.cmp(l, b, rl, op)?)),
        }
    }

    pub fn where_cond(&self, l: &Layout, t: &Storage, tl: &Layout, f: &Storage, fl: &Layout) -> Result<Storage> {
        match (self, t, f) {
            (Storage::Cpu(c), Storage::Cpu(t), Storage::Cpu(f)) => Ok(Storage::Cpu(c.where_cond(l, t, tl, f, fl)?)),
        }
    }

    pub fn cast(&self, l: &Layout, dtype: DType) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.cast(l, dtype)?)),
        }
    }

    pub fn copy_contiguous(&self, l: &Layout) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.copy_contiguous(l)?)),
        }
    }

    pub fn copy_into(&self, l: &Layout, dst: &mut Storage, dst_l: &Layout) -> Result<()> {
        match (self, dst) {
            (Storage::Cpu(s), Storage::Cpu(d)) => s.copy_into(l, d, dst_l),
        }
    }

    pub fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.reduce(l, op, axes)?)),
        }
    }

    pub fn cumsum(&self, l: &Layout, axis: usize) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.cumsum(l, axis)?)),
        }
    }

    pub fn matmul(&self, l: &Layout, rhs: &Storage, rl: &Layout) -> Result<Storage> {
        match (self, rhs) {
            (Storage::Cpu(a), Storage::Cpu(b)) => Ok(Storage::Cpu(a.matmul(l, b, rl)?)),
        }
    }

    pub fn softmax_last(&self, l: &Layout, log: bool) -> Result<Storage> {
        match self {
            Storage::Cpu(s) => Ok(Storage::Cpu(s.softmax_last(l, log)?)),
        }
    }

    pub fn rms_norm(&self, l: &Layout, w: &Storage, wl: &Layout, eps: f64) -> Result<Storage> {
        match (self, w) {
            (Storage::Cpu(x), Storage::Cpu(w)) => Ok(Storage::Cpu(x.rms_norm(l, w, wl, eps)?)),
        }
    }

    pub fn layer_norm(
        &self,
        l: &Layout,
        w: &Storage,
        wl: &Layout,
        b: Option<(&Storage, &Layout)>,
        eps: f64,
    ) -> Result<Storage> {
        match (self, w) {
            (Storage::Cpu(x), Storage::Cpu(w)) => {
                let b = b.map(|(b, bl)| match b {
                    Storage::Cpu(b) => (b, bl),
                });
                Ok(Storage::Cpu(x.layer_norm(l, w, wl, b, eps)?))
            }
        }
    }

    pub fn rope(
        &self,
        l: &Layout,
        cos: &Storage,
        cl: &Layout,
        sin: &Storage,
        sl: &Layout,
        interleaved: bool,
    ) -> Result<Storage> {
        match (self, cos, sin) {
            (Storage::Cpu(x), Storage::Cpu(c), Storage::Cpu(s)) => {
                Ok(Storage::Cpu(x.rope(l, c, cl, s, sl, interleaved)?))
            }
        }
    }

    pub fn attention(
        &self,
        l: &Layout,
        k: &Storage,
        kl: &Layout,
        v: &Storage,
        vl: &Layout,
        p: AttentionParams,
    ) -> Result<Storage> {
        match (self, k, v) {
            (Storage::Cpu(q), Storage::Cpu(k), Storage::Cpu(v)) => Ok(Storage::Cpu(q.attention(l, k, kl, v, vl, p)?)),
        }
    }

    pub fn silu_mul(&self, l: &Layout, up: &Storage, ul: &Layout) -> Result<Storage> {
        match (self, up) {
            (Storage::Cpu(g), Storage::Cpu(u)) => Ok(Storage::Cpu(g.silu_mul(l, u, ul)?)),
        }
    }

    pub fn index_select(&self, l: &Layout, ids: &Storage, il: &Layout, axis: usize) -> Result<Storage> {
        match (self, ids) {
            (Storage::Cpu(s), Storage::Cpu(i)) => Ok(Storage::Cpu(s.index_select(l, i, il, axis)?)),
        }
    }

    pub fn gather(&self, l: &Layout, ids: &Storage, il: &Layout, axis: usize) -> Result<Storage> {
        match (self, ids) {
            (Storage::Cpu(s), Storage::Cpu(i)) => Ok(Storage::Cpu(s.gather(l, i, il, axis)?)),
        }
    }
}
