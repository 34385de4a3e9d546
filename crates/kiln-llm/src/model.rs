//! The Llama-family decoder: embedding, `num_layers` x (RMSNorm, grouped-query attention with rotary
//! embeddings and a KV cache, RMSNorm, SwiGLU MLP), a final RMSNorm and the LM head. Weights keep the
//! Hugging Face `(out, in)` layout and go through `Tensor::linear`.

use crate::config::LlamaConfig;
use crate::embedding::Embedding;
use crate::rope::{inv_freq, RopeTables};
use crate::weights::WeightSource;
use crate::{LlmError, Result};
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, KvCache, LinearInput, RopeLayout, Tensor};

mod batch;
pub use batch::{BatchSeq, SeqKv, PAGED_CHUNK};

/// The weight of a linear layer: dense in the model's dtype, or quantized blocks (GGUF files), or
/// dense row blocks each within the device's largest buffer (a large vocabulary's tied LM head; see
/// `embedding.rs`).
pub(crate) enum Weight {
    Dense(Tensor),
    Quant(QTensor),
    Rows(Vec<Tensor>),
}

pub(crate) struct Linear {
    pub(crate) w: Weight,
    pub(crate) b: Option<Tensor>,
}

impl Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match &self.w {
            Weight::Dense(w) => x.linear(w, self.b.as_ref())?,
            Weight::Quant(q) => x.qlinear(q, self.b.as_ref())?,
            Weight::Rows(ws) => {
                let ys = ws.iter().map(|w| x.linear(w, None)).collect::<kiln::Result<Vec<_>>>()?;
                let y = Tensor::concat(&ys.iter().collect::<Vec<_>>(), -1)?;
                match &self.b {
                    Some(b) => y.add(b)?,
                    None => y,
                }
            }
        })
    }

    /// `residual + self(x)`: one kernel for a weight without bias (`qlinear_add`, `linear_fused`).
    fn forward_add(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        Ok(match (&self.w, &self.b) {
            (Weight::Quant(q), None) => x.qlinear_add(q, residual)?,
            (Weight::Dense(w), None) => x.linear_fused(w, LinearInput::Plain, Some(residual))?,
            _ => residual.add(&self.forward(x)?)?,
        })
    }

    /// `self(rms_norm(x, norm, eps))`: one kernel for a weight without bias.
    fn forward_norm(&self, x: &Tensor, norm: &Tensor, eps: f64) -> Result<Tensor> {
        Ok(match (&self.w, &self.b) {
            (Weight::Dense(w), None) => x.linear_fused(w, LinearInput::RmsNorm { weight: norm, eps }, None)?,
            (Weight::Quant(q), None) => x.qlinear_fused(q, LinearInput::RmsNorm { weight: norm, eps }, None)?,
            _ => self.forward(&x.rms_norm(norm, eps)?)?,
        })
    }

    /// `residual + self(silu(gu[.., :i]) * gu[.., i..])` for the stacked gate/up product `gu`:
    /// one kernel for a weight without bias.
    fn forward_silu_add(&self, gu: &Tensor, residual: &Tensor) -> Result<Tensor> {
        Ok(match (&self.w, &self.b) {
            (Weight::Dense(w), None) => gu.linear_fused(w, LinearInput::SiluMul, Some(residual))?,
            (Weight::Quant(q), None) => gu.qlinear_fused(q, LinearInput::SiluMul, Some(residual))?,
            _ => {
                let (axis, i) = (gu.rank() as isize - 1, gu.dims()[gu.rank() - 1] / 2);
                self.forward_add(&gu.narrow(axis, 0, i)?.silu_mul(&gu.narrow(axis, i, i)?)?, residual)?
            }
        })
    }
}

/// Projections that read the same input, as one stacked weight when they can be stacked (same
/// storage format and dtype: one matrix product instead of several; the output is split by views),
/// else apart (e.g. GGUF Q4_K_M files keep some `v_proj` in Q6_K next to a Q4_K `q_proj`).
pub(crate) enum Fused {
    One(Linear),
    Apart(Vec<Linear>),
}

/// The stacking key of a weight: its dtype, or its quantization format.
fn format_of(w: &Weight) -> (DType, Option<QuantType>) {
    match w {
        Weight::Dense(t) => (t.dtype(), None),
        Weight::Quant(q) => (DType::U32, Some(q.qtype())),
        Weight::Rows(ts) => (ts[0].dtype(), None),
    }
}

impl Fused {
    /// Stacks `parts` (with their biases, all or none) when their weights share format and dtype.
    fn new(parts: Vec<Linear>) -> Result<Fused> {
        let same = parts.windows(2).all(|p| format_of(&p[0].w) == format_of(&p[1].w));
        let biases: Option<Vec<&Tensor>> = parts.iter().map(|l| l.b.as_ref()).collect();
        if !same || parts.len() < 2 || (biases.is_none() && parts.iter().any(|l| l.b.is_some())) {
            return Ok(Fused::Apart(parts));
        }
        let mut dense = Vec::new();
        let mut quant = Vec::new();
        for l in &parts {
            match &l.w {
                Weight::Dense(t) => dense.push(t),
                Weight::Quant(q) => quant.push(q),
                Weight::Rows(ts) => dense.extend(ts),
            }
        }
        let w = if quant.is_empty() {
            Weight::Dense(Tensor::concat(&dense, 0)?)
        } else {
            Weight::Quant(QTensor::cat_rows(&quant)?)
        };
        let b = match biases {
            Some(bs) => Some(Tensor::concat(&bs, 0)?),
            None => None,
        };
        Ok(Fused::One(Linear { w, b }))
    }

    /// The outputs of the parts (of `sizes` features each), as views of one product when stacked.
    fn forward(&self, x: &Tensor, sizes: &[usize]) -> Result<Vec<Tensor>> {
        match self {
            Fused::One(l) => {
                let y = l.forward(x)?;
                let axis = y.rank() as isize - 1;
                let mut start = 0;
                let mut out = Vec::with_capacity(sizes.len());
                for &n in sizes {
                    out.push(y.narrow(axis, start, n)?);
                    start += n;
                }
                Ok(out)
            }
            Fused::Apart(ls) => ls.iter().map(|l| l.forward(x)).collect(),
        }
    }

    fn linears(&self) -> Vec<&Linear> {
        match self {
            Fused::One(l) => vec![l],
            Fused::Apart(ls) => ls.iter().collect(),
        }
    }

    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        match self {
            Fused::One(l) => vec![l],
            Fused::Apart(ls) => ls.iter_mut().collect(),
        }
    }
}

pub(crate) struct Layer {
    pub(crate) attn_norm: Tensor,
    /// The q, k and v projections.
    pub(crate) qkv: Fused,
    pub(crate) o: Linear,
    pub(crate) mlp_norm: Tensor,
    /// The gate and up projections.
    pub(crate) gate_up: Fused,
    pub(crate) down: Linear,
}

impl Layer {
    /// A layer with q/k/v and gate/up stacked where their formats allow.
    pub(crate) fn new(
        attn_norm: Tensor,
        [q, k, v]: [Linear; 3],
        o: Linear,
        mlp_norm: Tensor,
        [gate, up]: [Linear; 2],
        down: Linear,
    ) -> Result<Layer> {
        Ok(Layer {
            attn_norm,
            qkv: Fused::new(vec![q, k, v])?,
            o,
            mlp_norm,
            gate_up: Fused::new(vec![gate, up])?,
            down,
        })
    }

    fn linears_mut(&mut self) -> Vec<&mut Linear> {
        let mut v = self.qkv.linears_mut();
        v.push(&mut self.o);
        v.extend(self.gate_up.linears_mut());
        v.push(&mut self.down);
        v
    }

    fn linears(&self) -> Vec<&Linear> {
        let mut v = self.qkv.linears();
        v.push(&self.o);
        v.extend(self.gate_up.linears());
        v.push(&self.down);
        v
    }
}

/// A loaded model on one device, in one dtype.
pub struct Model {
    pub config: LlamaConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Linear,
    rope: RopeTables,
    max_context: usize,
    dtype: DType,
    device: Device,
}

/// The per-layer KV caches of one sequence.
pub struct Cache {
    layers: Vec<KvCache>,
}

impl Cache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, KvCache::len)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Forgets everything (the storage is made anew on the next forward pass).
    pub fn reset(&mut self) {
        self.layers.iter_mut().for_each(KvCache::reset);
    }
}

/// What loading will hold on the device.
#[derive(Debug, Clone, Copy)]
pub struct MemoryEstimate {
    pub weight_bytes: u64,
    pub kv_cache_bytes: u64,
    /// The largest single tensor (weights or one layer's K or V cache).
    pub largest_tensor_bytes: u64,
}

impl MemoryEstimate {
    pub fn total(&self) -> u64 {
        self.weight_bytes + self.kv_cache_bytes
    }
}

/// The names and expected shapes of every weight, in load order.
fn weight_plan(cfg: &LlamaConfig, src: &dyn WeightSource) -> Vec<(String, Vec<usize>)> {
    let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let (q_out, kv_out) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
    let mut plan = vec![("model.embed_tokens.weight".to_string(), vec![cfg.vocab_size, h])];
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        plan.push((format!("{p}.input_layernorm.weight"), vec![h]));
        for (n, out) in [("q", q_out), ("k", kv_out), ("v", kv_out)] {
            plan.push((format!("{p}.self_attn.{n}_proj.weight"), vec![out, h]));
            if cfg.qkv_bias {
                plan.push((format!("{p}.self_attn.{n}_proj.bias"), vec![out]));
            }
        }
        plan.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q_out]));
        if cfg.o_bias {
            plan.push((format!("{p}.self_attn.o_proj.bias"), vec![h]));
        }
        plan.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        for (n, shape) in [("gate", vec![i, h]), ("up", vec![i, h]), ("down", vec![h, i])] {
            let out = shape[0];
            plan.push((format!("{p}.mlp.{n}_proj.weight"), shape));
            if cfg.mlp_bias {
                plan.push((format!("{p}.mlp.{n}_proj.bias"), vec![out]));
            }
        }
    }
    plan.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings || src.meta("lm_head.weight").is_some() {
        plan.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    plan
}

/// Weights plus a KV cache of `max_context` positions, both in `dtype`.
pub fn estimate_memory(cfg: &LlamaConfig, src: &dyn WeightSource, dtype: DType, max_context: usize) -> MemoryEstimate {
    let size = dtype.size_in_bytes() as u64;
    let plan = weight_plan(cfg, src);
    let elems = |s: &Vec<usize>| s.iter().product::<usize>() as u64;
    let per_layer_kv = (cfg.num_kv_heads * cfg.head_dim * max_context) as u64 * size;
    MemoryEstimate {
        weight_bytes: plan.iter().map(|(_, s)| elems(s) * size).sum(),
        kv_cache_bytes: per_layer_kv * 2 * cfg.num_layers as u64,
        largest_tensor_bytes: plan.iter().map(|(_, s)| elems(s) * size).max().unwrap_or(0).max(per_layer_kv),
    }
}

/// How to load a model.
pub struct LoadOptions {
    pub dtype: DType,
    /// KV cache length; clamped to `max_position_embeddings` (and Mistral's sliding window).
    pub max_context: usize,
    /// Called with (bytes loaded so far, total bytes) after each tensor.
    pub progress: Option<Box<dyn FnMut(u64, u64)>>,
}

impl Model {
    /// Loads every weight of `cfg` from `src` onto `device`, checking names and shapes.
    pub fn load(cfg: LlamaConfig, src: &dyn WeightSource, device: &Device, mut opts: LoadOptions) -> Result<Model> {
        let dtype = opts.dtype;
        if !dtype.is_float() || dtype == DType::F64 {
            return Err(LlmError::Arg(format!("model dtype must be f32, f16 or bf16, got {dtype}")));
        }
        let plan = weight_plan(&cfg, src);
        let total: u64 =
            plan.iter().map(|(_, s)| s.iter().product::<usize>() as u64 * dtype.size_in_bytes() as u64).sum();
        let mut done = 0u64;
        let mut tensors = std::collections::HashMap::new();
        for (name, shape) in plan {
            let meta =
                src.meta(&name).ok_or_else(|| LlmError::weight(&name, "missing from the model's weight files"))?;
            if meta.shape != shape {
                return Err(LlmError::weight(
                    &name,
                    format!("has shape {:?}, config.json implies {:?}", meta.shape, shape),
                ));
            }
            let t = src.load(&name, dtype, device)?;
            done += t.elem_count() as u64 * dtype.size_in_bytes() as u64;
            if let Some(p) = opts.progress.as_mut() {
                p(done, total);
            }
            tensors.insert(name, t);
        }
        let mut w = Loaded(tensors);
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = format!("model.layers.{l}");
            let a = |w: &mut Loaded, n: &str| w.linear(&format!("{p}.self_attn.{n}_proj"), cfg.qkv_bias);
            let m = |w: &mut Loaded, n: &str| w.linear(&format!("{p}.mlp.{n}_proj"), cfg.mlp_bias);
            layers.push(Layer::new(
                w.take(&format!("{p}.input_layernorm.weight")),
                [a(&mut w, "q"), a(&mut w, "k"), a(&mut w, "v")],
                w.linear(&format!("{p}.self_attn.o_proj"), cfg.o_bias),
                w.take(&format!("{p}.post_attention_layernorm.weight")),
                [m(&mut w, "gate"), m(&mut w, "up")],
                m(&mut w, "down"),
            )?);
        }
        let embed = w.take("model.embed_tokens.weight");
        let lm_head =
            Linear { w: Weight::Dense(w.0.remove("lm_head.weight").unwrap_or_else(|| embed.clone())), b: None };
        let norm = w.take("model.norm.weight");
        let max_context = effective_context(&cfg, opts.max_context);
        let freqs = inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling.as_ref());
        let rope = RopeTables::new(&freqs, max_context, dtype, device)?;
        let embed = Embedding::whole(embed);
        Ok(Model { config: cfg, embed, layers, norm, lm_head, rope, max_context, dtype, device: device.clone() })
    }

    /// A model from weights loaded elsewhere (GGUF files): `freqs` are the rotary inverse frequencies.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        config: LlamaConfig,
        embed: Embedding,
        layers: Vec<Layer>,
        norm: Tensor,
        lm_head: Linear,
        freqs: &[f64],
        max_context: usize,
        device: &Device,
    ) -> Result<Model> {
        let dtype = embed.dtype();
        let max_context = effective_context(&config, max_context);
        let rope = RopeTables::new(freqs, max_context, dtype, device)?;
        Ok(Model { config, embed, layers, norm, lm_head, rope, max_context, dtype, device: device.clone() })
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Quantizes every dense projection (attention, MLP and the LM head; not the embedding table,
    /// of which a step reads one row) to `qt`, in place, one weight at a time (the dense copy is
    /// freed as its quantized one arrives). A weight whose input size is not a whole number of
    /// `qt`'s blocks takes Q8_0 (blocks of 32), or stays dense if that does not fit either, as
    /// llama.cpp does. Returns how many weights were quantized.
    pub fn quantize(&mut self, qt: QuantType) -> Result<usize> {
        let mut count = 0;
        let linears = self.layers.iter_mut().flat_map(|l| l.linears_mut());
        for lin in linears.chain([&mut self.lm_head]) {
            let Weight::Dense(w) = &lin.w else { continue };
            let k = w.dims()[w.rank() - 1];
            let fmt = [qt, QuantType::Q8_0].into_iter().find(|f| k % f.block_elems() == 0);
            if let Some(f) = fmt {
                lin.w = Weight::Quant(QTensor::quantize(w, f)?);
                count += 1;
            }
        }
        Ok(count)
    }

    /// Bytes of every weight on the device (quantized ones at their packed size; a tied LM head
    /// counted once).
    pub fn weight_bytes(&self) -> u64 {
        let dense = |t: &Tensor| (t.elem_count() * t.dtype().size_in_bytes()) as u64;
        let lin = |l: &Linear| {
            let w = match &l.w {
                Weight::Dense(t) => dense(t),
                Weight::Quant(q) => q.storage_bytes() as u64,
                Weight::Rows(ts) => ts.iter().map(dense).sum(),
            };
            w + l.b.as_ref().map_or(0, dense)
        };
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| dense(&l.attn_norm) + dense(&l.mlp_norm) + l.linears().into_iter().map(lin).sum::<u64>())
            .sum();
        let tied = match &self.lm_head.w {
            Weight::Dense(t) => self.embed.shares_storage_with(t),
            Weight::Rows(ts) => ts.iter().all(|t| self.embed.shares_storage_with(t)),
            Weight::Quant(_) => false,
        };
        layers + self.embed.bytes() + dense(&self.norm) + if tied { 0 } else { lin(&self.lm_head) }
    }
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The most positions a sequence may have (the KV cache length).
    pub fn max_context(&self) -> usize {
        self.max_context
    }

    /// An empty KV cache for one sequence of up to [`Model::max_context`] positions (allocated on the
    /// first forward pass).
    pub fn new_cache(&self) -> Cache {
        Cache { layers: (0..self.config.num_layers).map(|_| KvCache::new(self.max_context)).collect() }
    }

    /// Runs `tokens` (positions `cache.len()..`) through the model, appending to `cache`, and returns
    /// f32 logits: `(t, vocab)` for every position when `all_logits`, else `(1, vocab)` for the last.
    pub fn forward(&self, tokens: &[u32], cache: &mut Cache, all_logits: bool) -> Result<Tensor> {
        let t = tokens.len();
        let offset = cache.len();
        if t == 0 {
            return Err(LlmError::Arg("forward: no tokens".into()));
        }
        if offset + t > self.max_context {
            return Err(LlmError::Arg(format!(
                "the sequence would reach {} positions, past the context of {} (--max-context)",
                offset + t,
                self.max_context
            )));
        }
        if let Some(&bad) = tokens.iter().find(|&&id| id as usize >= self.config.vocab_size) {
            return Err(LlmError::Arg(format!(
                "token id {bad} is outside the vocabulary ({})",
                self.config.vocab_size
            )));
        }
        let cfg = &self.config;
        let (hd, nh, nkv) = (cfg.head_dim, cfg.num_heads, cfg.num_kv_heads);
        let ids: Vec<i64> = tokens.iter().map(|&x| x as i64).collect();
        let ids = Tensor::from_vec(ids, t, &self.device)?;
        let mut x = self.embed.embedding(&ids)?; // (t, hidden)
        let (cos, sin) = self.rope.rows(offset, t)?;
        for (layer, kv) in self.layers.iter().zip(cache.layers.iter_mut()) {
            let eps = cfg.rms_norm_eps;
            let (q, k, v) = match &layer.qkv {
                // Stacked: the norm in the product's kernel, rope and the cache append in one more.
                Fused::One(lin) => {
                    kv.append_rope(&lin.forward_norm(&x, &layer.attn_norm, eps)?, nh, nkv, &cos, &sin)?
                }
                Fused::Apart(_) => {
                    let h = x.rms_norm(&layer.attn_norm, eps)?;
                    let heads =
                        |y: &Tensor, n: usize| -> Result<Tensor> { Ok(y.reshape((1, t, n, hd))?.transpose(1, 2)?) };
                    let rope = |y: Tensor| y.rope_with_tables(&cos, &sin, RopeLayout::HalfSplit);
                    let ys = layer.qkv.forward(&h, &[nh * hd, nkv * hd, nkv * hd])?;
                    let (q, k, v) = (rope(heads(&ys[0], nh)?)?, rope(heads(&ys[1], nkv)?)?, heads(&ys[2], nkv)?);
                    let (k, v) = kv.append(&k, &v)?;
                    (q, k, v)
                }
            };
            let att = q.sdpa(&k, &v, true, None)?; // (1, nh, t, hd)
            let att = att.transpose(1, 2)?.reshape((t, nh * hd))?;
            x = layer.o.forward_add(&att, &x)?;
            x = match &layer.gate_up {
                // Stacked: the norm in the gate/up kernel, silu_mul and the residual in the down one.
                Fused::One(lin) => layer.down.forward_silu_add(&lin.forward_norm(&x, &layer.mlp_norm, eps)?, &x)?,
                Fused::Apart(_) => {
                    let h = x.rms_norm(&layer.mlp_norm, eps)?;
                    let gu = layer.gate_up.forward(&h, &[cfg.intermediate_size; 2])?;
                    layer.down.forward_add(&gu[0].silu_mul(&gu[1])?, &x)?
                }
            };
        }
        let x = if all_logits { x } else { x.narrow(0, t - 1, 1)? };
        Ok(self.lm_head.forward_norm(&x, &self.norm, cfg.rms_norm_eps)?.to_dtype(DType::F32)?)
    }
}

/// The KV cache length: the request, at most `max_position_embeddings` and Mistral's sliding window
/// (attention past the window would need a rolling cache).
pub fn effective_context(cfg: &LlamaConfig, requested: usize) -> usize {
    let mut n = requested.min(cfg.max_position_embeddings);
    if let Some(w) = cfg.sliding_window {
        n = n.min(w);
    }
    n.max(1)
}

/// Loaded tensors, taken out one by one when the layers are built.
struct Loaded(std::collections::HashMap<String, Tensor>);

impl Loaded {
    fn take(&mut self, name: &str) -> Tensor {
        self.0.remove(name).expect("every planned weight was loaded")
    }
    fn linear(&mut self, prefix: &str, bias: bool) -> Linear {
        Linear {
            w: Weight::Dense(self.take(&format!("{prefix}.weight"))),
            b: if bias { Some(self.take(&format!("{prefix}.bias"))) } else { None },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LoadOptions;

    /// The forward pass with q/k/v and gate/up apart (as mixed-format GGUF files load) gives the
    /// logits of the stacked weights.
    #[test]
    fn apart_projections_match_stacked() {
        let dir = crate::ModelDir::open(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen2"))
            .unwrap();
        let dev = Device::cpu();
        let opts = || LoadOptions { dtype: DType::F32, max_context: 32, progress: None };
        let stacked = dir.load(&dev, opts()).unwrap();
        let mut apart = dir.load(&dev, opts()).unwrap();
        for layer in &mut apart.layers {
            for f in [&mut layer.qkv, &mut layer.gate_up] {
                let Fused::One(Linear { w: Weight::Dense(w), b }) = f else { panic!("dense projections stack") };
                let sizes: Vec<usize> = if w.dims()[0] == 2 * stacked.config.intermediate_size {
                    vec![stacked.config.intermediate_size; 2]
                } else {
                    let (hd, c) = (stacked.config.head_dim, &stacked.config);
                    vec![c.num_heads * hd, c.num_kv_heads * hd, c.num_kv_heads * hd]
                };
                let mut start = 0;
                let mut parts = Vec::new();
                for n in sizes {
                    let part = |t: &Tensor| t.narrow(0, start, n).unwrap().contiguous().unwrap();
                    parts.push(Linear { w: Weight::Dense(part(w)), b: b.as_ref().map(part) });
                    start += n;
                }
                *f = Fused::Apart(parts);
            }
        }
        let ids = [1u32, 5, 9, 2, 7];
        let a = stacked.forward(&ids, &mut stacked.new_cache(), true).unwrap().to_vec::<f32>().unwrap();
        let b = apart.forward(&ids, &mut apart.new_cache(), true).unwrap().to_vec::<f32>().unwrap();
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-4, "apart vs stacked logits differ by {worst}");
    }
}
