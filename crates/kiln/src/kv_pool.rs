//! A paged key/value store (as vLLM's PagedAttention): keys and values of many sequences live in
//! fixed-size blocks of one preallocated pool, and each sequence names its blocks in a block table,
//! so sequences take memory block by block instead of each reserving a whole context.
//!
//! Block `b` holds `block_size` consecutive positions of one sequence: position `p` of a sequence
//! with block table `table` is slot `p % block_size` of block `table[p / block_size]`.
//! [`KvBlockPool::write`] stores new positions in place; [`KvBlockPool::gather`] reads a sequence's
//! first `len` positions back as contiguous `(1, h, len, d)` tensors (a copy: later writes do not
//! change tensors handed out before).

use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "kv_block_pool";

/// Keys `(blocks, h, block_size, d)` and values `(blocks, h, block_size, dv)`. Cloning shares the
/// storage (handles of one pool).
#[derive(Clone)]
pub struct KvBlockPool {
    k: Tensor,
    v: Tensor,
    block_size: usize,
}

impl KvBlockPool {
    /// A zeroed pool of `blocks` blocks of `block_size` positions, `heads` heads of `d` (keys) and
    /// `dv` (values) elements.
    pub fn new(
        blocks: usize,
        heads: usize,
        block_size: usize,
        d: usize,
        dv: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<KvBlockPool> {
        if block_size == 0 {
            return Err(Error::shape(OP, "block_size must be positive"));
        }
        Ok(KvBlockPool {
            k: Tensor::zeros((blocks, heads, block_size, d), dtype, device)?,
            v: Tensor::zeros((blocks, heads, block_size, dv), dtype, device)?,
            block_size,
        })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.k.dims()[0]
    }

    /// The key and value pools `(blocks, h, block_size, d)` / `(.., dv)` (for kernels that read
    /// through a block table).
    pub fn tensors(&self) -> (&Tensor, &Tensor) {
        (&self.k, &self.v)
    }

    fn check_table(&self, table: &[u32], positions: usize) -> Result<()> {
        let n = self.num_blocks();
        if let Some(&b) = table.iter().find(|&&b| b as usize >= n) {
            return Err(Error::OutOfRange { op: OP, msg: format!("block {b} of the table is past the pool's {n}") });
        }
        if positions > table.len() * self.block_size {
            return Err(Error::OutOfRange {
                op: OP,
                msg: format!(
                    "{positions} positions need {} blocks of {}, the table has {}",
                    positions.div_ceil(self.block_size),
                    self.block_size,
                    table.len()
                ),
            });
        }
        Ok(())
    }

    /// Stores `k` `(1, h, t, d)` and `v` `(1, h, t, dv)` at positions `at..at + t` of the sequence
    /// whose block table is `table`. Checks shapes, dtype, device and that the table covers the
    /// positions before writing anything.
    pub fn write(&self, table: &[u32], at: usize, k: &Tensor, v: &Tensor) -> Result<()> {
        let shapes = || format!("k {}, v {}, pool k {}, v {}", k.shape(), v.shape(), self.k.shape(), self.v.shape());
        for (x, pool) in [(k, &self.k), (v, &self.v)] {
            x.same_device(OP, pool)?;
            x.same_dtype(OP, pool)?;
            if x.rank() != 4 || x.dims()[0] != 1 || x.dims()[1] != pool.dims()[1] || x.dims()[3] != pool.dims()[3] {
                return Err(Error::shape(
                    OP,
                    format!("expected k (1, h, t, d) and v (1, h, t, dv) of the pool: {}", shapes()),
                ));
            }
        }
        let t = k.dims()[2];
        if v.dims()[2] != t {
            return Err(Error::shape(OP, format!("k and v lengths differ: {}", shapes())));
        }
        if k.shares_storage_with(&self.k) || v.shares_storage_with(&self.v) {
            return Err(Error::shape(OP, "k and v must not be views of the pool itself"));
        }
        self.check_table(table, at + t)?;
        let bs = self.block_size;
        let mut p = at;
        while p < at + t {
            let (block, slot) = (table[p / bs] as usize, p % bs);
            let n = (bs - slot).min(at + t - p);
            for (x, pool) in [(k, &self.k), (v, &self.v)] {
                let src = x.narrow(2, p - at, n)?;
                let dst = pool.layout().narrow(OP, 0, block, 1)?.narrow(OP, 2, slot, n)?;
                let s = src.storage();
                let mut d = pool.storage_mut();
                s.copy_into(src.layout(), &mut d, &dst)?;
            }
            p += n;
        }
        Ok(())
    }

    /// The first `len` positions of the sequence with block table `table`, as contiguous keys
    /// `(1, h, len, d)` and values `(1, h, len, dv)`.
    pub fn gather(&self, table: &[u32], len: usize) -> Result<(Tensor, Tensor)> {
        self.check_table(table, len)?;
        if len == 0 {
            let (h, d, dv) = (self.k.dims()[1], self.k.dims()[3], self.v.dims()[3]);
            let (dt, dev) = (self.k.dtype(), self.k.device());
            return Ok((Tensor::zeros((1, h, 0, d), dt, dev)?, Tensor::zeros((1, h, 0, dv), dt, dev)?));
        }
        let used = len.div_ceil(self.block_size);
        let ids: Vec<i64> = table[..used].iter().map(|&b| b as i64).collect();
        let ids = Tensor::from_vec(ids, used, self.k.device())?;
        let read = |pool: &Tensor| -> Result<Tensor> {
            let (h, d) = (pool.dims()[1], pool.dims()[3]);
            let blocks = pool.index_select(&ids, 0)?; // (used, h, bs, d)
            let seq = blocks.permute(&[1, 0, 2, 3])?.contiguous()?.reshape((1, h, used * self.block_size, d))?;
            seq.narrow(2, 0, len)
        };
        Ok((read(&self.k)?, read(&self.v)?))
    }
}
