//! One forward pass over several sequences at once (continuous batching, as a server runs it): every
//! sequence brings its next tokens (one for a decode step, a chunk for a prefill) and its own KV
//! store and position. The tokens of all sequences are stacked into one `(T, hidden)` activation, so
//! every projection is one matrix product with `M = T` rows (the weights are read once for the whole
//! batch); rotary embeddings take each row's own position. Rows of paged sequences (one pool) are
//! stacked first, each row one query of a block table: a decode token, or a token of a prompt chunk
//! of at most [`PAGED_CHUNK`] tokens, which attends to its sequence's positions up to its own (the
//! causal mask as a length). One kernel per layer stores all their keys and values and one attends
//! for all of them (`KvBlockPool::write_last`, `Tensor::sdpa_paged`), so prompts that arrive
//! together are prefilled in the same pass as the decode rows without a kernel per sequence. Other
//! rows (longer chunks, contiguous caches) attend per sequence over that sequence's keys and values.
//! A pass of one row (one sequence decoding alone) takes [`Model::forward`]'s fused kernels: the
//! RMSNorms and the SwiGLU gate inside the projections' kernels (`linear_fused`). With more rows the
//! norms run apart and the projections take the matmul kernels: the fused matrix-vector kernels with
//! 2-8 rows measured slower than the skinny matmul plus a norm (lavapipe: 20 against 14 ms for a
//! 512 x 3072 product of 8 rows, 170 ms for the 32000-word LM head), and they end at 8 rows.
//! `KILN_FUSED_ROWS=N` (1 to 8) moves that limit, for A/B runs on other GPUs.

use super::{Fused, Model};
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

impl Model {
    /// Runs every sequence's tokens through the model in one pass, appending to each sequence's KV
    /// store, and returns f32 logits `(sequences, vocab)`: row `i` for the last token of sequence `i`.
    /// Sequence by sequence the result is [`Model::forward`]'s (up to rounding: the products have
    /// more rows).
    pub fn forward_batch(&self, seqs: &mut [BatchSeq<'_>]) -> Result<Tensor> {
        if seqs.is_empty() {
            return Err(LlmError::Arg("forward_batch: no sequences".into()));
        }
        let cfg = &self.config;
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
            if let Some(&bad) = s.tokens.iter().find(|&&id| id as usize >= cfg.vocab_size) {
                return Err(LlmError::Arg(format!("token id {bad} is outside the vocabulary ({})", cfg.vocab_size)));
            }
        }
        // The paged rows (chunks of up to PAGED_CHUNK tokens, a pool shared with the first of
        // them) first.
        let mut first: Option<usize> = None;
        let mut fast = vec![false; seqs.len()];
        // `sdpa_paged` has no soft cap nor window: Gemma 2 gathers every sequence's keys instead.
        let paged_ok = cfg.gemma2.is_none();
        for i in 0..seqs.len() {
            if !paged_ok || seqs[i].tokens.len() > PAGED_CHUNK || seqs[i].kv.paged().is_none() {
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
        let nfast = fast.iter().filter(|&&f| f).count();
        // Rows (tokens) of the paged sequences.
        let nd: usize = order[..nfast].iter().map(|&i| seqs[i].tokens.len()).sum();
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut spans = vec![(0, 0); seqs.len()]; // (first row, rows) per sequence
        for &i in &order {
            let s = &seqs[i];
            let (t, offset) = (s.tokens.len(), s.kv.len());
            spans[i] = (ids.len(), t);
            ids.extend(s.tokens.iter().map(|&x| x as i64));
            positions.extend((offset..offset + t).map(|p| p as i64));
        }
        // The paged rows' block tables, for every layer: row j of a sequence at offset o attends
        // to positions 0..=o + j (its own, new, position last; write_last stores it there).
        let table = if nd > 0 {
            let mut tables = Vec::with_capacity(nfast);
            let mut lens = Vec::with_capacity(nd);
            let mut bs = 0;
            for &i in &order[..nfast] {
                let (t, offset) = (seqs[i].tokens.len(), seqs[i].kv.len());
                lens.extend((1..=t).map(|j| offset + j));
                let p = seqs[i].kv.paged().expect("paged");
                bs = p.pool(0)?.block_size();
                tables.push((p.block_table().to_vec(), t));
            }
            let refs: Vec<&[u32]> = tables.iter().flat_map(|(tb, t)| std::iter::repeat_n(tb.as_slice(), *t)).collect();
            Some(BlockTable::new(&refs, &lens, bs, &self.device)?)
        } else {
            None
        };
        let total = ids.len();
        let (hd, nh, nkv) = (cfg.head_dim, cfg.num_heads, cfg.num_kv_heads);
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let positions = Tensor::from_vec(positions, total, &self.device)?;
        let cos = self.rope.cos.embedding(&positions)?; // (T, head_dim / 2): each row's own position
        let sin = self.rope.sin.embedding(&positions)?;
        let mut x = self.embed_tokens(&ids)?; // (T, hidden)
        let eps = cfg.rms_norm_eps;
        // `fused`: the architecture takes the stacked kernels (no q/k norms, post norms or GeGLU);
        // `fuse`: few enough rows for the kernels with the norm in their prologue.
        let fused = self.fused_path();
        let fuse = fused && total <= fused_rows();
        for (l, layer) in self.layers.iter().enumerate() {
            let heads = |y: &Tensor, n: usize| -> Result<Tensor> { Ok(y.reshape((1, total, n, hd))?.transpose(1, 2)?) };
            let rope = |y: Tensor| y.rope_with_tables(&cos, &sin, RopeLayout::HalfSplit);
            let (q, k, v) = match &layer.qkv {
                Fused::One(lin) if fused => {
                    let y = if fuse {
                        lin.forward_norm(&x, &layer.attn_norm, eps)?
                    } else {
                        lin.forward(&x.rms_norm(&layer.attn_norm, eps)?)?
                    };
                    let qk = rope(heads(&y.narrow(1, 0, (nh + nkv) * hd)?, nh + nkv)?)?;
                    let v = heads(&y.narrow(1, (nh + nkv) * hd, nkv * hd)?, nkv)?;
                    (qk.narrow(1, 0, nh)?, qk.narrow(1, nh, nkv)?, v)
                }
                _ => self.qkv_heads(layer, &x.rms_norm(&layer.attn_norm, eps)?, &cos, &sin)?,
            };
            let mut outs = Vec::with_capacity(seqs.len());
            if let Some(table) = &table {
                // (nd, heads, 1, hd) views of the paged rows.
                let rows = |y: &Tensor| -> Result<Tensor> { Ok(y.narrow(2, 0, nd)?.permute(&[2, 1, 0, 3])?) };
                let pool = seqs[order[0]].kv.paged().expect("paged").pool(l)?.clone();
                pool.write_last(table, &rows(&k)?, &rows(&v)?)?;
                for &i in &order[..nfast] {
                    let t = seqs[i].tokens.len();
                    seqs[i].kv.paged().expect("paged").advance(l, t)?;
                }
                let (kp, vp) = pool.tensors();
                outs.push(rows(&q)?.sdpa_paged(kp, vp, table, None)?.reshape((nd, nh * hd))?);
            }
            for &i in &order[nfast..] {
                let (start, t) = spans[i];
                let (ks, vs) = seqs[i].kv.append(l, &k.narrow(2, start, t)?, &v.narrow(2, start, t)?)?;
                let att = self.attend(l, &q.narrow(2, start, t)?, &ks, &vs)?; // (1, nh, t, hd)
                outs.push(att.transpose(1, 2)?.reshape((t, nh * hd))?);
            }
            let att = if outs.len() == 1 {
                outs.pop().expect("one")
            } else {
                Tensor::concat(&outs.iter().collect::<Vec<_>>(), 0)?
            };
            x = self.attn_residual(layer, &att, &x)?;
            x = match &layer.gate_up {
                // Few rows, stacked: the norm in the gate/up kernel, silu_mul and the residual in the
                // down one.
                Fused::One(lin) if fuse => {
                    layer.down.forward_silu_add(&lin.forward_norm(&x, &layer.mlp_norm, eps)?, &x)?
                }
                _ => self.mlp_residual(layer, &x)?,
            };
        }
        let last: Vec<i64> = spans.iter().map(|&(start, t)| (start + t - 1) as i64).collect();
        let x = if last.iter().enumerate().all(|(i, &r)| r == i as i64) && last.len() == total {
            x
        } else {
            x.index_select(&Tensor::from_vec(last.clone(), last.len(), &self.device)?, 0)?
        };
        if fuse || !fused {
            // The norm in the head's kernel (and Gemma 2's final soft cap).
            return self.logits(&x);
        }
        Ok(self.lm_head.forward(&x.rms_norm(&self.norm, eps)?)?.to_dtype(kiln::DType::F32)?)
    }
}
