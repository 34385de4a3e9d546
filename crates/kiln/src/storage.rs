//! `Storage`: one variant per backend. Every op is one `match` that forwards to the backend, and
//! storages on different backends give an error naming the op.

use crate::backend::BackendStorage;
use crate::cpu::alloc::guard;
use crate::cpu::CpuStorage;
use crate::gpu::GpuStorage;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Error, Layout, Result};

#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Gpu(GpuStorage),
}

fn mixed(op: &'static str) -> Error {
    Error::DeviceMismatch { op, lhs: "cpu".into(), rhs: "gpu".into() }
}

/// Forwards a method of one storage.
/// CPU arms run inside `alloc::guard`, so a kernel's failed allocation is an `Err` naming the op.
macro_rules! one {
    ($op:expr, $self:ident, $s:ident => $e:expr) => {
        match $self {
            Storage::Cpu($s) => Ok(Storage::Cpu(guard($op, || $e)?)),
            Storage::Gpu($s) => Ok(Storage::Gpu($e?)),
        }
    };
}

/// Forwards a method of two storages of one backend.
macro_rules! two {
    ($op:expr, $a:expr, $b:expr, ($x:ident, $y:ident) => $e:expr) => {
        match ($a, $b) {
            (Storage::Cpu($x), Storage::Cpu($y)) => Ok(Storage::Cpu(guard($op, || $e)?)),
            (Storage::Gpu($x), Storage::Gpu($y)) => Ok(Storage::Gpu($e?)),
            _ => Err(mixed($op)),
        }
    };
}

/// Forwards a method of three storages of one backend.
macro_rules! three {
    ($op:expr, $a:expr, $b:expr, $c:expr, ($x:ident, $y:ident, $z:ident) => $e:expr) => {
        match ($a, $b, $c) {
            (Storage::Cpu($x), Storage::Cpu($y), Storage::Cpu($z)) => Ok(Storage::Cpu(guard($op, || $e)?)),
            (Storage::Gpu($x), Storage::Gpu($y), Storage::Gpu($z)) => Ok(Storage::Gpu($e?)),
            _ => Err(mixed($op)),
        }
    };
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Gpu(s) => s.dtype(),
        }
    }

    pub fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => guard("to_cpu", || s.to_cpu(l)),
            Storage::Gpu(s) => s.to_cpu(l),
        }
    }

    pub fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Storage> {
        one!(op.name(), self, s => s.unary(l, op))
    }

    pub fn binary(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: BinaryOp) -> Result<Storage> {
        two!(op.name(), self, rhs, (a, b) => a.binary(l, b, rl, op))
    }

    pub fn signbit(&self, l: &Layout) -> Result<Storage> {
        one!("signbit", self, s => s.signbit(l))
    }

    pub fn cmp(&self, l: &Layout, rhs: &Storage, rl: &Layout, op: CmpOp) -> Result<Storage> {
        two!(op.name(), self, rhs, (a, b) => a.cmp(l, b, rl, op))
    }

    pub fn where_cond(&self, l: &Layout, t: &Storage, tl: &Layout, f: &Storage, fl: &Layout) -> Result<Storage> {
        three!("where", self, t, f, (c, t, f) => c.where_cond(l, t, tl, f, fl))
    }

    pub fn cast(&self, l: &Layout, dtype: DType) -> Result<Storage> {
        one!("cast", self, s => s.cast(l, dtype))
    }

    pub fn copy_contiguous(&self, l: &Layout) -> Result<Storage> {
        one!("contiguous", self, s => s.copy_contiguous(l))
    }

    pub fn copy_into(&self, l: &Layout, dst: &mut Storage, dst_l: &Layout) -> Result<()> {
        match (self, dst) {
            (Storage::Cpu(s), Storage::Cpu(d)) => s.copy_into(l, d, dst_l),
            (Storage::Gpu(s), Storage::Gpu(d)) => s.copy_into(l, d, dst_l),
            _ => Err(mixed("copy_into")),
        }
    }

    pub fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Storage> {
        one!(op.name(), self, s => s.reduce(l, op, axes))
    }

    pub fn cumsum(&self, l: &Layout, axis: usize) -> Result<Storage> {
        one!("cumsum", self, s => s.cumsum(l, axis))
    }

    pub fn matmul(&self, l: &Layout, rhs: &Storage, rl: &Layout) -> Result<Storage> {
        two!("matmul", self, rhs, (a, b) => a.matmul(l, b, rl))
    }

    pub fn softmax_last(&self, l: &Layout, log: bool) -> Result<Storage> {
        one!(if log { "log_softmax" } else { "softmax" }, self, s => s.softmax_last(l, log))
    }

    pub fn rms_norm(&self, l: &Layout, w: &Storage, wl: &Layout, eps: f64) -> Result<Storage> {
        two!("rms_norm", self, w, (x, w) => x.rms_norm(l, w, wl, eps))
    }

    pub fn layer_norm(
        &self,
        l: &Layout,
        w: &Storage,
        wl: &Layout,
        b: Option<(&Storage, &Layout)>,
        eps: f64,
    ) -> Result<Storage> {
        match (self, w, b) {
            (Storage::Cpu(x), Storage::Cpu(w), None) => {
                Ok(Storage::Cpu(guard("layer_norm", || x.layer_norm(l, w, wl, None, eps))?))
            }
            (Storage::Cpu(x), Storage::Cpu(w), Some((Storage::Cpu(b), bl))) => {
                Ok(Storage::Cpu(guard("layer_norm", || x.layer_norm(l, w, wl, Some((b, bl)), eps))?))
            }
            (Storage::Gpu(x), Storage::Gpu(w), None) => Ok(Storage::Gpu(x.layer_norm(l, w, wl, None, eps)?)),
            (Storage::Gpu(x), Storage::Gpu(w), Some((Storage::Gpu(b), bl))) => {
                Ok(Storage::Gpu(x.layer_norm(l, w, wl, Some((b, bl)), eps)?))
            }
            _ => Err(mixed("layer_norm")),
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
        three!("rope", self, cos, sin, (x, c, s) => x.rope(l, c, cl, s, sl, interleaved))
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
        three!("attention", self, k, v, (q, k, v) => q.attention(l, k, kl, v, vl, p))
    }

    pub fn silu_mul(&self, l: &Layout, up: &Storage, ul: &Layout) -> Result<Storage> {
        two!("silu_mul", self, up, (g, u) => g.silu_mul(l, u, ul))
    }

    pub fn index_select(&self, l: &Layout, ids: &Storage, il: &Layout, axis: usize) -> Result<Storage> {
        two!("index_select", self, ids, (s, i) => s.index_select(l, i, il, axis))
    }

    pub fn gather(&self, l: &Layout, ids: &Storage, il: &Layout, axis: usize) -> Result<Storage> {
        two!("gather", self, ids, (s, i) => s.gather(l, i, il, axis))
    }
}
