//! One forward pass over several sequences at once (continuous batching, as a server runs it): every
//! sequence brings its next tokens (one for a decode step, a chunk for a prefill) and its own KV
//! store and position. The tokens of all sequences are stacked into one `(T, hidden)` activation, so
//! every projection is one matrix product with `M = T` rows (the weights are read once for the whole
//! batch); rotary embeddings take each row's own position. Rows of paged sequences (one pool) are
//! stacked first, each row one query of a block table: a decode token, or a token of a prompt chunk
//! of at most [`PAGED_CHUNK`] tokens, which attends to its sequence's positions up to its own (the
//! causal mask as a length). One kernel per layer stores all their keys and values and one attends
//! for all of them (`KvBlockPool::write_last`, `Tensor::sdpa_paged_with`, with the model's soft cap
//! and sliding windows), so prompts that arrive together are prefilled in the same pass as the decode
//! rows without a kernel per sequence. Other rows (longer chunks, contiguous caches) attend per
//! sequence over that sequence's keys and values.
//! A pass of one row (one sequence decoding alone) takes [`Model::forward`]'s fused kernels: the
//! RMSNorms and the SwiGLU gate inside the projections' kernels (`linear_fused`). With more rows the
//! norms run apart and the projections take the matmul kernels: the fused matrix-vector kernels with
//! 2-8 rows measured slower than the skinny matmul plus a norm (lavapipe: 20 against 14 ms for a
//! 512 x 3072 product of 8 rows, 170 ms for the 32000-word LM head), and they end at 8 rows.
//! `KILN_FUSED_ROWS=N` (1 to 8) moves that limit, for A/B runs on other GPUs.

use super::{Fused, Layer, Model};
use crate::{LlmError, Result};
use kiln::{BlockTable, RopeLayout, Tensor};

/// The keys and values of one sequence, layer by layer. [`super::Cache`] (one contiguous buffer per
/// layer) and `crate::paged::PagedSeq` (blocks of a shared pool) are the two stores.
pub trait SeqKv {
    /// Positions cached (in every layer, between forward passes).
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Appends `k`, `v` `(1, kv_heads, t, head_dim)` to layer `layer` and returns all of that layer's
    /// keys and values `(1, kv_heads, len, head_dim)`, the new ones last.
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)>;
    /// The store as a paged sequence (its decode steps then attend through the block table).
    fn paged(&mut self) -> Option<&mut crate::paged::PagedSeq> {
        None
    }
}

impl SeqKv for super::Cache {
    fn len(&self) -> usize {
        super::Cache::len(self)
    }
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let kv = self.layers.get_mut(layer).ok_or_else(|| LlmError::Arg(format!("cache has no layer {layer}")))?;
        Ok(kv.append(k, v)?)
    }
}

/// One sequence of a batched forward pass: its next tokens (positions `kv.len()..`) and its store.
pub struct BatchSeq<'a> {
    pub tokens: &'a [u32],
    pub kv: &'a mut dyn SeqKv,
}

/// Passes of at most this many rows take the fused decode kernels (`KILN_FUSED_ROWS`, default 1).
fn fused_rows() -> usize {
    static ROWS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *ROWS.get_or_init(|| {
        std::env::var("KILN_FUSED_ROWS").ok().and_then(|v| v.parse().ok()).map_or(1, |n: usize| n.clamp(1, 8))
    })
}

/// Prompt chunks of at most this many tokens attend through the block table (one query row per
/// token, like decode rows); longer ones gather their keys and values and take the causal kernel.
pub const PAGED_CHUNK: usize = 64;

/// Where the rows of a batched pass come from: the tokens of every sequence stacked, the paged
/// sequences (one pool, chunks of at most [`PAGED_CHUNK`] tokens) first.
struct Rows {
    /// Sequence indices in row order: `order[..paged]` attend through the block table.
    order: Vec<usize>,
    paged: usize,
    /// Rows (tokens) of the paged sequences: the first `paged_rows` rows.
    paged_rows: usize,
    /// (first row, rows) per sequence, in the caller's order.
    spans: Vec<(usize, usize)>,
    /// Every row's token id and position.
    ids: Vec<i64>,
    positions: Vec<i64>,
}

impl Model {
    /// Runs every sequence's tokens through the model in one pass, appending to each sequence's KV
    /// store, and returns f32 logits `(sequences, vocab)`: row `i` for the last token of sequence `i`.
    /// Sequence by sequence the result is [`Model::forward`]'s (up to rounding: the products have
    /// more rows).
    pub fn forward_batch(&self, seqs: &mut [BatchSeq<'_>]) -> Result<Tensor> {
        self.check_batch(seqs)?;
        let mut rows = self.stack_rows(seqs);
        // Split over several devices, each device has its own rope rows and block table.
        let devices = self.placement.devices();
        let tables =
            devices.iter().map(|d| self.block_table(seqs, &rows, d)).collect::<Result<Vec<Option<BlockTable>>>>()?;
        let total = rows.ids.len();
        let ids = Tensor::from_vec(std::mem::take(&mut rows.ids), total, &self.device)?;
        let positions = std::mem::take(&mut rows.positions);
        // (T, head_dim / 2): each row's own position.
        let ropes = devices
            .iter()
            .zip(&self.ropes)
            .map(|(d, r)| {
                let at = Tensor::from_vec(positions.clone(), total, d)?;
                Ok((r.cos.embedding(&at)?, r.sin.embedding(&at)?))
            })
            .collect::<Result<Vec<(Tensor, Tensor)>>>()?;
        let x = self.embed_tokens(&ids)?; // (T, hidden)
                                          // `fused`: the architecture takes the stacked kernels (no q/k norms, post norms or GeGLU);
                                          // `fuse`: few enough rows for the kernels with the norm in their prologue.
        let fused = self.fused_path();
        let fuse = fused && total <= fused_rows();
        let x = self.decoder(x, fuse, |l, layer, x| {
            let d = self.placement.device_index(l);
            let (cos, sin) = &ropes[d];
            let qkv = self.qkv_rows(layer, x, (cos, sin), fused, fuse)?;
            self.attention_rows(l, qkv, seqs, &rows, tables[d].as_ref())
        })?;
        self.last_logits(x, &rows.spans, fused, fuse)
    }

    /// An error for an empty batch, a sequence without tokens or past the context, or a token id
    /// outside the vocabulary.
    fn check_batch(&self, seqs: &[BatchSeq<'_>]) -> Result<()> {
        if seqs.is_empty() {
            return Err(LlmError::Arg("forward_batch: no sequences".into()));
        }
        for (i, s) in seqs.iter().enumerate() {
            let (t, offset) = (s.tokens.len(), s.kv.len());
            if t == 0 {
                return Err(LlmError::Arg(format!("forward_batch: sequence {i} has no tokens")));
            }
            if offset + t > self.max_context {
                return Err(LlmError::Arg(format!(
                    "sequence {i} would reach {} positions, past the context of {}",
                    offset + t,
                    self.max_context
                )));
            }
            self.check_vocabulary(s.tokens)?;
        }
        Ok(())
    }

    /// Stacks the sequences' tokens into rows, the paged ones first: chunks of up to
    /// [`PAGED_CHUNK`] tokens whose pool is the first of them's.
    fn stack_rows(&self, seqs: &mut [BatchSeq<'_>]) -> Rows {
        let mut first: Option<usize> = None;
        let mut fast = vec![false; seqs.len()];
        for i in 0..seqs.len() {
            if seqs[i].tokens.len() > PAGED_CHUNK || seqs[i].kv.paged().is_none() {
                continue;
            }
            fast[i] = match first {
                None => {
                    first = Some(i);
                    true
                }
                Some(f) => {
                    let (a, b) = seqs.split_at_mut(i);
                    let (x, y) = (a[f].kv.paged().expect("paged"), b[0].kv.paged().expect("paged"));
                    x.same_pool(y)
                }
            };
        }
        let order: Vec<usize> =
            (0..seqs.len()).filter(|&i| fast[i]).chain((0..seqs.len()).filter(|&i| !fast[i])).collect();
        let paged = fast.iter().filter(|&&f| f).count();
        let paged_rows = order[..paged].iter().map(|&i| seqs[i].tokens.len()).sum();
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut spans = vec![(0, 0); seqs.len()];
        for &i in &order {
            let s = &seqs[i];
            let (t, offset) = (s.tokens.len(), s.kv.len());
            spans[i] = (ids.len(), t);
            ids.extend(s.tokens.iter().map(|&x| x as i64));
            positions.extend((offset..offset + t).map(|p| p as i64));
        }
        Rows { order, paged, paged_rows, spans, ids, positions }
    }

    /// The paged rows' block tables on `device`, for every layer there (`None` without paged rows):
    /// row j of a sequence at offset o attends to positions 0..=o + j (its own, new, position last;
    /// write_last stores it there).
    fn block_table(&self, seqs: &mut [BatchSeq<'_>], rows: &Rows, device: &kiln::Device) -> Result<Option<BlockTable>> {
        if rows.paged_rows == 0 {
            return Ok(None);
        }
        let mut tables = Vec::with_capacity(rows.paged);
        let mut lens = Vec::with_capacity(rows.paged_rows);
        let mut bs = 0;
        for &i in &rows.order[..rows.paged] {
            let (t, offset) = (seqs[i].tokens.len(), seqs[i].kv.len());
            lens.extend((1..=t).map(|j| offset + j));
            let p = seqs[i].kv.paged().expect("paged");
            bs = p.pool(0)?.block_size();
            tables.push((p.block_table().to_vec(), t));
        }
        let refs: Vec<&[u32]> = tables.iter().flat_map(|(tb, t)| std::iter::repeat_n(tb.as_slice(), *t)).collect();
        Ok(Some(BlockTable::new(&refs, &lens, bs, device)?))
    }

    /// The q, k and v heads `(1, heads, T, head_dim)` of every row of `x` `(T, hidden)`, rotated by
    /// each row's `cos`/`sin`. A stacked q/k/v on the fused path is one product (`fuse`: the norm in
    /// its kernel) and one rope over q and k together.
    fn qkv_rows(
        &self,
        layer: &Layer,
        x: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
        fused: bool,
        fuse: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let cfg = &self.config;
        let (total, hd, nh, nkv, eps) = (x.dims()[0], cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.rms_norm_eps);
        let lin = match &layer.qkv {
            Fused::One(lin) if fused => lin,
            _ => return self.qkv_heads(layer, &x.rms_norm(&layer.attn_norm, eps)?, cos, sin),
        };
        let heads = |y: &Tensor, n: usize| -> Result<Tensor> { Ok(y.reshape((1, total, n, hd))?.transpose(1, 2)?) };
        let y = if fuse {
            lin.forward_norm(x, &layer.attn_norm, eps)?
        } else {
            lin.forward(&x.rms_norm(&layer.attn_norm, eps)?)?
        };
        let qk =
            heads(&y.narrow(1, 0, (nh + nkv) * hd)?, nh + nkv)?.rope_with_tables(cos, sin, RopeLayout::HalfSplit)?;
        let v = heads(&y.narrow(1, (nh + nkv) * hd, nkv * hd)?, nkv)?;
        Ok((qk.narrow(1, 0, nh)?, qk.narrow(1, nh, nkv)?, v))
    }

    /// Layer `l`'s attention for every row over the rows' `(q, k, v)` heads, `(T, heads * head_dim)`:
    /// the paged rows store their keys and values with one kernel and attend through the block table
    /// with one more; every other sequence appends to its own store and attends over it.
    fn attention_rows(
        &self,
        l: usize,
        (q, k, v): (Tensor, Tensor, Tensor),
        seqs: &mut [BatchSeq<'_>],
        rows: &Rows,
        table: Option<&BlockTable>,
    ) -> Result<Tensor> {
        let cfg = &self.config;
        let (hd, nh, nd) = (cfg.head_dim, cfg.num_heads, rows.paged_rows);
        let mut outs = Vec::with_capacity(seqs.len());
        if let Some(table) = table {
            // (nd, heads, 1, hd) views of the paged rows.
            let paged = |y: &Tensor| -> Result<Tensor> { Ok(y.narrow(2, 0, nd)?.permute(&[2, 1, 0, 3])?) };
            let pool = seqs[rows.order[0]].kv.paged().expect("paged").pool(l)?.clone();
            pool.write_last(table, &paged(&k)?, &paged(&v)?)?;
            for &i in &rows.order[..rows.paged] {
                let t = seqs[i].tokens.len();
                seqs[i].kv.paged().expect("paged").advance(l, t)?;
            }
            let (kp, vp) = pool.tensors();
            let att = paged(&q)?.sdpa_paged_with(kp, vp, table, self.attention_options(l))?;
            outs.push(att.reshape((nd, nh * hd))?);
        }
        for &i in &rows.order[rows.paged..] {
            let (start, t) = rows.spans[i];
            let (ks, vs) = seqs[i].kv.append(l, &k.narrow(2, start, t)?, &v.narrow(2, start, t)?)?;
            let att = self.attend(l, &q.narrow(2, start, t)?, &ks, &vs)?; // (1, nh, t, hd)
            outs.push(att.transpose(1, 2)?.reshape((t, nh * hd))?);
        }
        if outs.len() == 1 {
            return Ok(outs.pop().expect("one"));
        }
        Ok(Tensor::concat(&outs.iter().collect::<Vec<_>>(), 0)?)
    }

    /// f32 logits of each sequence's last row of `x` `(T, hidden)`, in the caller's order. Few rows
    /// (`fuse`) or the composed path put the final norm in the head's kernel (and Gemma 2's soft cap).
    fn last_logits(&self, x: Tensor, spans: &[(usize, usize)], fused: bool, fuse: bool) -> Result<Tensor> {
        let total = x.dims()[0];
        let last: Vec<i64> = spans.iter().map(|&(start, t)| (start + t - 1) as i64).collect();
        let x = if last.iter().enumerate().all(|(i, &r)| r == i as i64) && last.len() == total {
            x
        } else {
            x.index_select(&Tensor::from_vec(last.clone(), last.len(), x.device())?, 0)?
        };
        if fuse || !fused {
            return self.logits(&x);
        }
        Ok(self.lm_head.forward(&x.rms_norm(&self.norm, self.config.rms_norm_eps)?)?.to_dtype(kiln::DType::F32)?)
    }
}
