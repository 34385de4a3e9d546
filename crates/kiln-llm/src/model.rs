//! The Llama-family decoder: embedding, `num_layers` x (RMSNorm, grouped-query attention with rotary
//! embeddings and a KV cache, RMSNorm, SwiGLU MLP), a final RMSNorm and the LM head. Weights keep the
//! Hugging Face `(out, in)` layout and go through `Tensor::linear`.

use crate::config::LlamaConfig;
use crate::rope::{inv_freq, RopeTables};
use crate::weights::WeightSource;
use crate::{LlmError, Result};
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, KvCache, RopeLayout, Tensor};

/// The weight of a linear layer: dense in the model's dtype, or quantized blocks (GGUF files).
pub(crate) enum Weight {
    Dense(Tensor),
    Quant(QTensor),
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
        })
    }
}

pub(crate) struct Layer {
    pub(crate) attn_norm: Tensor,
    pub(crate) q: Linear,
    pub(crate) k: Linear,
    pub(crate) v: Linear,
    pub(crate) o: Linear,
    pub(crate) mlp_norm: Tensor,
    pub(crate) gate: Linear,
    pub(crate) up: Linear,
    pub(crate) down: Linear,
}

/// A loaded model on one device, in one dtype.
pub struct Model {
    pub config: LlamaConfig,
    embed: Tensor,
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
            layers.push(Layer {
                attn_norm: w.take(&format!("{p}.input_layernorm.weight")),
                q: w.linear(&format!("{p}.self_attn.q_proj"), cfg.qkv_bias),
                k: w.linear(&format!("{p}.self_attn.k_proj"), cfg.qkv_bias),
                v: w.linear(&format!("{p}.self_attn.v_proj"), cfg.qkv_bias),
                o: w.linear(&format!("{p}.self_attn.o_proj"), cfg.o_bias),
                mlp_norm: w.take(&format!("{p}.post_attention_layernorm.weight")),
                gate: w.linear(&format!("{p}.mlp.gate_proj"), cfg.mlp_bias),
                up: w.linear(&format!("{p}.mlp.up_proj"), cfg.mlp_bias),
                down: w.linear(&format!("{p}.mlp.down_proj"), cfg.mlp_bias),
            });
        }
        let embed = w.take("model.embed_tokens.weight");
        let lm_head =
            Linear { w: Weight::Dense(w.0.remove("lm_head.weight").unwrap_or_else(|| embed.clone())), b: None };
        let norm = w.take("model.norm.weight");
        let max_context = effective_context(&cfg, opts.max_context);
        let freqs = inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling.as_ref());
        let rope = RopeTables::new(&freqs, max_context, dtype, device)?;
        Ok(Model { config: cfg, embed, layers, norm, lm_head, rope, max_context, dtype, device: device.clone() })
    }

    /// A model from weights loaded elsewhere (GGUF files): `freqs` are the rotary inverse frequencies.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_parts(
        config: LlamaConfig,
        embed: Tensor,
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
        let linears = self
            .layers
            .iter_mut()
            .flat_map(|l| [&mut l.q, &mut l.k, &mut l.v, &mut l.o, &mut l.gate, &mut l.up, &mut l.down]);
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
            };
            w + l.b.as_ref().map_or(0, dense)
        };
        let layers: u64 = self
            .layers
            .iter()
            .map(|l| {
                dense(&l.attn_norm)
                    + dense(&l.mlp_norm)
                    + [&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down].into_iter().map(lin).sum::<u64>()
            })
            .sum();
        let tied = matches!(&self.lm_head.w, Weight::Dense(t) if t.shares_storage_with(&self.embed));
        layers + dense(&self.embed) + dense(&self.norm) + if tied { 0 } else { lin(&self.lm_head) }
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
            let h = x.rms_norm(&layer.attn_norm, cfg.rms_norm_eps)?;
            let heads = |lin: &Linear, n: usize| -> Result<Tensor> {
                Ok(lin.forward(&h)?.reshape((1, t, n, hd))?.transpose(1, 2)?)
            };
            let q = heads(&layer.q, nh)?.rope_with_tables(&cos, &sin, RopeLayout::HalfSplit)?;
            let k = heads(&layer.k, nkv)?.rope_with_tables(&cos, &sin, RopeLayout::HalfSplit)?;
            let v = heads(&layer.v, nkv)?;
            let (k, v) = kv.append(&k, &v)?;
            let att = q.sdpa(&k, &v, true, None)?; // (1, nh, t, hd)
            let att = att.transpose(1, 2)?.reshape((t, nh * hd))?;
            x = x.add(&layer.o.forward(&att)?)?;
            let h = x.rms_norm(&layer.mlp_norm, cfg.rms_norm_eps)?;
            let mlp = layer.gate.forward(&h)?.silu_mul(&layer.up.forward(&h)?)?;
            x = x.add(&layer.down.forward(&mlp)?)?;
        }
        let x = if all_logits { x } else { x.narrow(0, t - 1, 1)? };
        let x = x.rms_norm(&self.norm, cfg.rms_norm_eps)?;
        Ok(self.lm_head.forward(&x)?.to_dtype(DType::F32)?)
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
