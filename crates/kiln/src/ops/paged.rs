//! Decode attention through a block table (paged KV cache): [`BlockTable`] holds the block ids and
//! lengths of a batch of sequences, checked once on the host and kept on the device, and
//! [`Tensor::sdpa_paged`] attends one query per sequence over its positions in a KV block pool
//! (`KvBlockPool`'s `(blocks, h, block_size, d)` layout) without gathering them, through the
//! backend seam (`ExtOps::sdpa_paged`, `ExtOps::paged_write`): one GPU kernel
//! (`gpu/attention/paged_decode.rs`) or a direct CPU loop (`cpu/paged.rs`).

use super::attention::SdpaOptions;
use crate::backend::Paged;
use crate::{DType, Device, Error, KvBlockPool, Result, Tensor};

const OP: &str = "sdpa_paged";

/// The block tables and lengths of `b` sequences: row `i` names the blocks of sequence `i` in
/// position order (position `p` is slot `p % block_size` of block `table[i][p / block_size]`), and
/// `lens[i]` of its positions are attended. Made once per batch step and shared by every layer.
#[derive(Clone, Debug)]
pub struct BlockTable {
    /// u32 `(b, max_blocks)` (rows padded with block 0) and `(b,)`.
    table: Tensor,
    lens_t: Tensor,
    /// u32 `(b,)`: the flat slot (`block * block_size + offset`) of each sequence's last position.
    slots: Tensor,
    lens: Vec<usize>,
    rows: Vec<Vec<u32>>,
    block_size: usize,
    max_blocks: usize,
    /// The largest block id of any row.
    max_id: u32,
}

impl BlockTable {
    /// Checks and uploads the tables of a batch: at least one sequence, one table per length,
    /// every length at least 1 (a query needs a key) and covered by its table's blocks.
    pub fn new(tables: &[&[u32]], lens: &[usize], block_size: usize, device: &Device) -> Result<BlockTable> {
        const OP: &str = "block_table";
        if tables.is_empty() || tables.len() != lens.len() {
            return Err(Error::shape(
                OP,
                format!(
                    "expected one block table per sequence, got {} tables and {} lengths",
                    tables.len(),
                    lens.len()
                ),
            ));
        }
        if block_size == 0 {
            return Err(Error::arg(OP, "block_size must be positive"));
        }
        for (i, (t, &n)) in tables.iter().zip(lens).enumerate() {
            if n == 0 {
                return Err(Error::arg(OP, format!("sequence {i} has length 0: decode attention needs a key")));
            }
            if n > t.len() * block_size || n > u32::MAX as usize {
                return Err(Error::OutOfRange {
                    op: OP,
                    msg: format!(
                        "sequence {i} has {n} positions, its table's {} blocks of {block_size} hold {}",
                        t.len(),
                        t.len() * block_size
                    ),
                });
            }
        }
        let max_blocks = tables.iter().map(|t| t.len()).max().unwrap_or(0);
        let mut flat = vec![0u32; tables.len() * max_blocks];
        for (row, t) in flat.chunks_mut(max_blocks.max(1)).zip(tables) {
            row[..t.len()].copy_from_slice(t);
        }
        let max_id = flat.iter().copied().max().unwrap_or(0);
        let slots: Vec<u32> = tables
            .iter()
            .zip(lens)
            .map(|(t, &n)| (t[(n - 1) / block_size] as usize * block_size + (n - 1) % block_size) as u32)
            .collect();
        if (max_id as usize + 1) * block_size > u32::MAX as usize {
            return Err(Error::OutOfRange {
                op: OP,
                msg: format!("block {max_id} of {block_size} positions is past u32 slots"),
            });
        }
        Ok(BlockTable {
            slots: Tensor::from_vec(slots, tables.len(), device)?,
            table: Tensor::from_vec(flat, (tables.len(), max_blocks), device)?,
            lens_t: Tensor::from_vec(lens.iter().map(|&n| n as u32).collect::<Vec<_>>(), lens.len(), device)?,
            lens: lens.to_vec(),
            rows: tables.iter().map(|t| t.to_vec()).collect(),
            block_size,
            max_blocks,
            max_id,
        })
    }

    /// Sequences in the batch.
    pub fn len(&self) -> usize {
        self.lens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lens.is_empty()
    }

    pub fn lens(&self) -> &[usize] {
        &self.lens
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }
}

impl KvBlockPool {
    /// Stores each sequence's newest position (`table.lens()[i] - 1`, through its block table) from
    /// row `i` of `k` `(b, h, 1, d)` and `v` `(b, h, 1, dv)` (any strides): the batched decode
    /// step's append, one kernel per pool on the GPU. Checks shapes, dtype, device and that the
    /// table fits the pool before writing anything.
    pub fn write_last(&self, table: &BlockTable, k: &Tensor, v: &Tensor) -> Result<()> {
        const OP: &str = "kv_block_pool";
        let (kp, vp) = self.tensors();
        for (x, pool) in [(k, kp), (v, vp)] {
            x.same_device(OP, pool)?;
            x.same_dtype(OP, pool)?;
            x.same_device(OP, &table.table)?;
            let (xd, pd) = (x.dims(), pool.dims());
            if x.rank() != 4 || xd[0] != table.len() || xd[1] != pd[1] || xd[2] != 1 || xd[3] != pd[3] {
                return Err(Error::shape(
                    OP,
                    format!(
                        "expected k (b, h, 1, d) and v (b, h, 1, dv) for {} sequences of the pool: k {}, v {}, pool k {}, v {}",
                        table.len(),
                        k.shape(),
                        v.shape(),
                        kp.shape(),
                        vp.shape()
                    ),
                ));
            }
            if x.shares_storage_with(pool) {
                return Err(Error::shape(OP, "k and v must not be views of the pool itself"));
            }
        }
        if table.block_size != self.block_size() {
            return Err(Error::shape(
                OP,
                format!(
                    "the pool holds blocks of {} positions, the table's are of {}",
                    self.block_size(),
                    table.block_size
                ),
            ));
        }
        if table.max_id as usize >= self.num_blocks() {
            return Err(Error::OutOfRange {
                op: OP,
                msg: format!("block {} of the table is past the pool's {}", table.max_id, self.num_blocks()),
            });
        }
        let written = {
            let (slots, ks) = (table.slots.storage(), k.storage());
            // k and v may be views of one product: read-lock that storage once.
            let vs = (!v.shares_storage_with(k)).then(|| v.storage());
            let (mut kps, mut vps) = (kp.storage_mut(), vp.storage_mut());
            let vsrc = vs.as_deref().unwrap_or(&*ks);
            kps.paged_write(kp.layout(), (&mut *vps, vp.layout()), (&*ks, k.layout()), (vsrc, v.layout()), &slots)?
        };
        if !written {
            for (i, (t, &n)) in table.rows.iter().zip(&table.lens).enumerate() {
                self.write(t, n - 1, &k.narrow(0, i, 1)?, &v.narrow(0, i, 1)?)?;
            }
        }
        Ok(())
    }
}

impl Tensor {
    /// Decode attention over a paged KV cache: `self` holds one query per sequence `(b, hq, 1, d)`,
    /// `k_pool` `(blocks, hkv, block_size, d)` and `v_pool` `(blocks, hkv, block_size, dv)` the
    /// keys and values of all sequences in blocks (contiguous, as `KvBlockPool::tensors` gives
    /// them), and `table` which blocks and how many positions each sequence has. Query `i` attends
    /// to all `table.lens()[i]` positions of sequence `i` (the new token included: no causal mask
    /// is needed for one query at the end), query head `h` to key/value head `h / (hq / hkv)`.
    /// `scale` defaults to `1/sqrt(d)`. The result is `(b, hq, 1, dv)` in `self`'s dtype, equal to
    /// [`Tensor::sdpa`] over each sequence's gathered keys and values; f16/bf16 are computed in f32.
    /// A block id past the pool, a table of another block size or batch size, or mismatched
    /// shapes, dtypes or devices give an `Err`.
    pub fn sdpa_paged(
        &self,
        k_pool: &Tensor,
        v_pool: &Tensor,
        table: &BlockTable,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        self.sdpa_paged_with(k_pool, v_pool, table, SdpaOptions { scale, ..SdpaOptions::default() })
    }

    /// [`Tensor::sdpa_paged`] with a soft cap and a sliding window ([`SdpaOptions`]; `causal` makes
    /// no difference: each query is its sequence's last position): with a window `w`, query `i` sees
    /// the last `w` of its sequence's positions. Equal to [`Tensor::sdpa_with`] over each sequence's
    /// gathered keys and values.
    pub fn sdpa_paged_with(
        &self,
        k_pool: &Tensor,
        v_pool: &Tensor,
        table: &BlockTable,
        opts: SdpaOptions,
    ) -> Result<Tensor> {
        let SdpaOptions { scale, softcap, window, .. } = opts;
        super::attention::check_cap_window(OP, softcap, window)?;
        let shapes = || format!("q {}, k pool {}, v pool {}", self.shape(), k_pool.shape(), v_pool.shape());
        for t in [self, k_pool, v_pool] {
            if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) {
                return Err(Error::dtype(OP, t.dtype(), format!("takes f32, f16 or bf16 tensors: {}", shapes())));
            }
        }
        for t in [k_pool, v_pool, &table.table] {
            self.same_device(OP, t)?;
        }
        k_pool.same_dtype(OP, self)?;
        v_pool.same_dtype(OP, self)?;
        if self.rank() != 4 || k_pool.rank() != 4 || v_pool.rank() != 4 || self.dims()[2] != 1 {
            return Err(Error::shape(
                OP,
                format!(
                    "expected q (b, hq, 1, d), k pool (blocks, hkv, block_size, d), v pool (blocks, hkv, block_size, dv), got {}",
                    shapes()
                ),
            ));
        }
        let (q_, k_, v_) = (self.dims(), k_pool.dims(), v_pool.dims());
        if k_[..3] != v_[..3] {
            return Err(Error::shape(OP, format!("k and v pools differ in blocks, heads or block size: {}", shapes())));
        }
        if q_[3] != k_[3] {
            return Err(Error::shape(OP, format!("q and k must have the same head size: {}", shapes())));
        }
        let (b, hq, hkv) = (q_[0], q_[1], k_[1]);
        if hkv == 0 || hq % hkv != 0 {
            return Err(Error::shape(
                OP,
                format!("the query heads ({hq}) must be a multiple of the key/value heads ({hkv}): {}", shapes()),
            ));
        }
        if b != table.len() {
            return Err(Error::shape(OP, format!("{b} queries but the block table has {} sequences", table.len())));
        }
        if k_[2] != table.block_size {
            return Err(Error::shape(
                OP,
                format!("the pools hold blocks of {} positions, the table's are of {}", k_[2], table.block_size),
            ));
        }
        if table.max_id as usize >= k_[0] {
            return Err(Error::OutOfRange {
                op: OP,
                msg: format!("block {} of the table is past the pool's {} blocks", table.max_id, k_[0]),
            });
        }
        if !k_pool.is_contiguous() || !v_pool.is_contiguous() {
            return Err(Error::shape(OP, format!("the pools must be contiguous (as KvBlockPool's): {}", shapes())));
        }
        let d = q_[3];
        let scale = scale.unwrap_or(if d == 0 { 1.0 } else { 1.0 / (d as f64).sqrt() });
        if !scale.is_finite() || scale.abs() > f32::MAX as f64 {
            return Err(Error::arg(
                OP,
                format!("scale must be finite and within f32 range (|scale| <= {:e}), got {scale:e}", f32::MAX),
            ));
        }
        let dv = v_[3];
        let out_shape = (b, hq, 1, dv);
        if hq * dv == 0 {
            return Tensor::zeros(out_shape, self.dtype(), self.device());
        }
        let (qs, ks, vs) = (self.storage(), k_pool.storage(), v_pool.storage());
        let (ts, ls) = (table.table.storage(), table.lens_t.storage());
        let t = Paged {
            table: &*ts,
            lens: &*ls,
            host_lens: &table.lens,
            max_blocks: table.max_blocks,
            block_size: table.block_size,
            scale,
            softcap,
            window,
        };
        let out = qs.sdpa_paged(self.layout(), (&*ks, k_pool.layout()), (&*vs, v_pool.layout()), &t)?;
        Ok(Tensor::from_storage(out, out_shape, self.device()))
    }
}
