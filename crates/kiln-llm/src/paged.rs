//! A paged KV cache for serving many sequences: one [`kiln::KvBlockPool`] per layer (fixed-size
//! blocks, allocated once), a free list, and per sequence a block table. A sequence gets blocks for
//! its first positions when it is admitted ([`PagedPool::reserve`]), more as it generates
//! ([`PagedPool::grow`], appended to its table) and gives them all back when dropped, so admission is
//! decided by free blocks and memory never grows past the pool. The block table reaches the kernels
//! afresh with every batched step, so a grown table is seen at the next step.
//!
//! A batched step ([`crate::Model::forward_batch`]) writes the new positions of every decode token and
//! of every token of prompt chunks up to [`crate::model::PAGED_CHUNK`] tokens with one
//! [`kiln::KvBlockPool::write_last`] per layer and attends through the block tables with one
//! [`kiln::Tensor::sdpa_paged`] (no copy of the blocks; a chunk's token is a row whose length ends at
//! its own position); a longer chunk appends through [`SeqKv::append`] and attends over
//! [`kiln::KvBlockPool::gather`]'s contiguous copy.

use crate::model::{Model, SeqKv};
use crate::{LlmError, Result};
use kiln::{KvBlockPool, Tensor};
use std::sync::{Arc, Mutex};

/// The KV blocks of every layer and the list of free block ids.
pub struct PagedPool {
    layers: Vec<KvBlockPool>,
    block_size: usize,
    total: usize,
    free: Arc<Mutex<Vec<u32>>>,
}

impl PagedPool {
    /// A pool of `blocks` blocks of `block_size` positions for `model` (its KV heads, head size and
    /// dtype; each layer's blocks on that layer's device), allocated now.
    pub fn new(model: &Model, block_size: usize, blocks: usize) -> Result<PagedPool> {
        if block_size == 0 || blocks == 0 || blocks > u32::MAX as usize {
            return Err(LlmError::Arg(format!(
                "a KV pool needs blocks (got {blocks}) of positions (got {block_size})"
            )));
        }
        let c = &model.config;
        let place = model.placement();
        let layers = (0..c.num_layers)
            .map(|l| {
                KvBlockPool::new(
                    blocks,
                    c.num_kv_heads,
                    block_size,
                    c.head_dim,
                    c.head_dim,
                    model.dtype(),
                    &place.devices()[place.device_index(l)],
                )
            })
            .collect::<kiln::Result<Vec<_>>>()?;
        // Popped from the end: block 0 is handed out first.
        let free = (0..blocks as u32).rev().collect();
        Ok(PagedPool { layers, block_size, total: blocks, free: Arc::new(Mutex::new(free)) })
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn total_blocks(&self) -> usize {
        self.total
    }

    pub fn free_blocks(&self) -> usize {
        self.free.lock().map_or(0, |f| f.len())
    }

    pub fn used_blocks(&self) -> usize {
        self.total - self.free_blocks()
    }

    /// Bytes the pool holds on its device.
    pub fn bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(|p| {
                let (k, v) = p.tensors();
                ((k.elem_count() + v.elem_count()) * k.dtype().size_in_bytes()) as u64
            })
            .sum()
    }

    /// An empty sequence with blocks for `positions` positions, or `None` when too few are free.
    pub fn reserve(&self, positions: usize) -> Option<PagedSeq> {
        let n = positions.div_ceil(self.block_size).max(1);
        let mut free = self.free.lock().ok()?;
        if free.len() < n {
            return None;
        }
        let at = free.len() - n;
        let mut blocks = free.split_off(at);
        blocks.reverse();
        Some(PagedSeq {
            layers: self.layers.clone(),
            blocks,
            lens: vec![0; self.layers.len()],
            free: self.free.clone(),
        })
    }

    /// Appends free blocks to `seq`'s table until it holds `positions` positions; `false` (and no
    /// block taken) when too few are free or `seq` is not from this pool.
    pub fn grow(&self, seq: &mut PagedSeq, positions: usize) -> bool {
        if !Arc::ptr_eq(&self.free, &seq.free) {
            return false;
        }
        let n = positions.div_ceil(self.block_size).saturating_sub(seq.blocks.len());
        if n == 0 {
            return true;
        }
        let Ok(mut free) = self.free.lock() else { return false };
        if free.len() < n {
            return false;
        }
        let at = free.len() - n;
        seq.blocks.extend(free.drain(at..).rev());
        true
    }
}

/// One sequence's block table in a [`PagedPool`]; its blocks go back to the pool when dropped.
pub struct PagedSeq {
    layers: Vec<KvBlockPool>,
    blocks: Vec<u32>,
    /// Positions stored per layer (equal between forward passes).
    lens: Vec<usize>,
    free: Arc<Mutex<Vec<u32>>>,
}

impl PagedSeq {
    /// The block ids of the sequence, in position order.
    pub fn block_table(&self) -> &[u32] {
        &self.blocks
    }

    /// The most positions the reserved blocks hold.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * self.layers.first().map_or(0, KvBlockPool::block_size)
    }

    /// The pool of layer `layer`.
    pub(crate) fn pool(&self, layer: usize) -> Result<&KvBlockPool> {
        self.layers.get(layer).ok_or_else(|| LlmError::Arg(format!("KV pool has no layer {layer}")))
    }

    /// Whether both sequences take their blocks from one pool.
    pub(crate) fn same_pool(&self, other: &PagedSeq) -> bool {
        Arc::ptr_eq(&self.free, &other.free)
    }

    /// Records `t` positions that a batched write stored in layer `layer`'s blocks.
    pub(crate) fn advance(&mut self, layer: usize, t: usize) -> Result<()> {
        let cap = self.capacity();
        let n = self.lens.get_mut(layer).ok_or_else(|| LlmError::Arg(format!("KV pool has no layer {layer}")))?;
        if *n + t > cap {
            return Err(LlmError::Arg(format!(
                "the sequence would reach {} positions, its KV blocks hold {cap}",
                *n + t
            )));
        }
        *n += t;
        Ok(())
    }
}

impl SeqKv for PagedSeq {
    fn paged(&mut self) -> Option<&mut PagedSeq> {
        Some(self)
    }

    fn len(&self) -> usize {
        self.lens.iter().copied().min().unwrap_or(0)
    }

    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let pool = self.layers.get(layer).ok_or_else(|| LlmError::Arg(format!("KV pool has no layer {layer}")))?;
        let at = self.lens[layer];
        let t = k.dims().get(2).copied().unwrap_or(0);
        if at + t > self.capacity() {
            return Err(LlmError::Arg(format!(
                "the sequence would reach {} positions, its KV blocks hold {}",
                at + t,
                self.capacity()
            )));
        }
        pool.write(&self.blocks, at, k, v)?;
        self.lens[layer] = at + t;
        Ok(pool.gather(&self.blocks, at + t)?)
    }
}

impl Drop for PagedSeq {
    fn drop(&mut self) {
        if let Ok(mut free) = self.free.lock() {
            free.extend(self.blocks.drain(..).rev());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LoadOptions, ModelDir};
    use kiln::{DType, Device};

    fn pool(blocks: usize) -> PagedPool {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama");
        let opts = LoadOptions { dtype: DType::F32, max_context: 64, progress: None };
        let model = ModelDir::open(dir).unwrap().load(&Device::cpu(), opts).unwrap();
        PagedPool::new(&model, 4, blocks).unwrap()
    }

    /// Growth appends free blocks to the table (the reserved ones stay first), takes none when too
    /// few are free, refuses a sequence of another pool, and every block goes back on drop.
    #[test]
    fn grow_appends_blocks_or_takes_none() {
        let p = pool(5);
        let mut a = p.reserve(3).unwrap();
        let mut b = p.reserve(4).unwrap();
        assert_eq!((a.block_table(), b.block_table()), (&[0][..], &[1][..]));
        assert!(p.grow(&mut a, 4), "within its capacity: nothing to take");
        assert_eq!(a.capacity(), 4);
        assert!(p.grow(&mut a, 9));
        assert_eq!(a.block_table(), &[0, 2, 3]);
        assert_eq!((a.capacity(), p.used_blocks()), (12, 4));
        assert!(!p.grow(&mut b, 12), "two more blocks, one free");
        assert_eq!((b.block_table(), p.free_blocks()), (&[1][..], 1));
        let other = pool(2);
        assert!(!other.grow(&mut b, 8), "a sequence of another pool");
        assert_eq!(other.free_blocks(), 2);
        drop(a);
        assert!(p.grow(&mut b, 12));
        assert_eq!(b.block_table(), &[1, 0, 2]);
        drop(b);
        assert_eq!(p.free_blocks(), 5);
    }
}
