//! One forward pass over several sequences at once (continuous batching, as a server runs it): every
//! sequence brings its next tokens (one for a decode step, a chunk for a prefill) and its own KV
//! store and position. The tokens of all sequences are stacked into one `(T, hidden)` activation, so
//! every projection is one matrix product with `M = T` rows (the weights are read once for the whole
//! batch); rotary embeddings take each row's own position; attention runs per sequence over that
//! sequence's keys and values.

use super::{Fused, Model};
use crate::{LlmError, Result};
use kiln::{DType, RopeLayout, Tensor};

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
        let mut ids = Vec::new();
        let mut positions = Vec::new();
        let mut spans = Vec::with_capacity(seqs.len()); // (first row, rows) per sequence
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
            spans.push((ids.len(), t));
            ids.extend(s.tokens.iter().map(|&x| x as i64));
            positions.extend((offset..offset + t).map(|p| p as i64));
        }
        let total = ids.len();
        let (hd, nh, nkv) = (cfg.head_dim, cfg.num_heads, cfg.num_kv_heads);
        let ids = Tensor::from_vec(ids, total, &self.device)?;
        let positions = Tensor::from_vec(positions, total, &self.device)?;
        let cos = self.rope.cos.embedding(&positions)?; // (T, head_dim / 2): each row's own position
        let sin = self.rope.sin.embedding(&positions)?;
        let mut x = self.embed.embedding(&ids)?; // (T, hidden)
        for (l, layer) in self.layers.iter().enumerate() {
            let h = x.rms_norm(&layer.attn_norm, cfg.rms_norm_eps)?;
            let heads = |y: &Tensor, n: usize| -> Result<Tensor> { Ok(y.reshape((1, total, n, hd))?.transpose(1, 2)?) };
            let rope = |y: Tensor| y.rope_with_tables(&cos, &sin, RopeLayout::HalfSplit);
            let (q, k, v) = match &layer.qkv {
                Fused::One(lin) => {
                    let y = lin.forward(&h)?;
                    let qk = rope(heads(&y.narrow(1, 0, (nh + nkv) * hd)?, nh + nkv)?)?;
                    let v = heads(&y.narrow(1, (nh + nkv) * hd, nkv * hd)?, nkv)?;
                    (qk.narrow(1, 0, nh)?, qk.narrow(1, nh, nkv)?, v)
                }
                Fused::Apart(_) => {
                    let ys = layer.qkv.forward(&h, &[nh * hd, nkv * hd, nkv * hd])?;
                    (rope(heads(&ys[0], nh)?)?, rope(heads(&ys[1], nkv)?)?, heads(&ys[2], nkv)?)
                }
            };
            let mut outs = Vec::with_capacity(seqs.len());
            for (s, &(start, t)) in seqs.iter_mut().zip(&spans) {
                let (ks, vs) = s.kv.append(l, &k.narrow(2, start, t)?, &v.narrow(2, start, t)?)?;
                outs.push(q.narrow(2, start, t)?.sdpa(&ks, &vs, true, None)?); // (1, nh, t, hd)
            }
            let att = if outs.len() == 1 {
                outs.pop().expect("one")
            } else {
                Tensor::concat(&outs.iter().collect::<Vec<_>>(), 2)?
            };
            let att = att.transpose(1, 2)?.reshape((total, nh * hd))?;
            x = layer.o.forward_add(&att, &x)?;
            let h = x.rms_norm(&layer.mlp_norm, cfg.rms_norm_eps)?;
            let gu = layer.gate_up.forward(&h, &[cfg.intermediate_size; 2])?;
            let mlp = gu[0].silu_mul(&gu[1])?;
            x = layer.down.forward_add(&mlp, &x)?;
        }
        let last: Vec<i64> = spans.iter().map(|&(start, t)| (start + t - 1) as i64).collect();
        let x = if last.len() == total {
            x
        } else {
            x.index_select(&Tensor::from_vec(last.clone(), last.len(), &self.device)?, 0)?
        };
        let x = x.rms_norm(&self.norm, cfg.rms_norm_eps)?;
        Ok(self.lm_head.forward(&x)?.to_dtype(DType::F32)?)
    }
}
