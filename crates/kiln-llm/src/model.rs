//! The Llama-family decoder: embedding, `num_layers` x (RMSNorm, grouped-query attention with rotary
//! embeddings and a KV cache, RMSNorm, SwiGLU MLP), a final RMSNorm and the LM head. Weights keep the
//! Hugging Face `(out, in)` layout and go through `Tensor::linear`.
//!
//! The variants: Qwen3 normalises each q and k head before rope (`Layer::qk_norm`); Gemma 2 scales
//! the embeddings, normalises the attention and MLP outputs too (`Layer::post_norms`), uses GeGLU,
//! soft-caps attention scores and logits and slides a window on some layers; Phi-3 stores q/k/v and
//! gate/up stacked, which is how every model runs them anyway. Attention, with a soft cap or a window
//! or neither, is one fused kernel (`Tensor::sdpa_with`; Mistral, Phi-3 and Qwen2/3 with
//! `use_sliding_window` mask past their window, inside a context that may be longer). Llama, Mistral,
//! Qwen2 and Phi-3 take the fused path of [`Model::forward`], the others the composed one.

use crate::config::{Activation, Arch, LlamaConfig};
use crate::embedding::Embedding;
use crate::placement::Placement;
use crate::rope::{inv_freq, RopeTables};
use crate::weights::WeightSource;
use crate::{LlmError, Result};
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, KvCache, LinearInput, RopeLayout, SdpaOptions, Tensor};

mod batch;
mod plan;
pub use batch::{BatchSeq, SeqKv, PAGED_CHUNK};
use plan::weight_plan;
pub use plan::{estimate_memory, MemoryEstimate};

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
/// else apart: each run of neighbours that share a format stacked (e.g. GGUF Q4_K_M files keep some
/// `v_proj` in Q6_K next to Q4_K `q_proj` and `k_proj`: q/k stacked, v apart). The outputs of the
/// `Apart` products, side by side, are the parts' outputs in order.
pub(crate) enum Fused {
    One(Linear),
    Apart(Vec<Linear>),
}

/// Whether a quantized q/k/v product rotates its row and appends k and v itself
/// (`KvCache::qlinear_append_rope`, `KILN_QKV_ROPE=1`) instead of `rope_kv` after it. Off by default:
/// it takes 32 dispatches off an 8B decode step and 1.5-4% of the per-kernel profile's GPU time, yet
/// on an H200, with each step recorded ahead of the last token's read, an 8B Q4_K_M decode ran 7%
/// fewer tokens/s with it (279 against 300, three interleaved pairs) and Q8_0 2% more
/// (docs/PERFORMANCE.md, the sixteenth and seventeenth sessions).
fn rope_in_product() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KILN_QKV_ROPE").is_ok_and(|v| v == "1"))
}

/// The quantized weights of unstacked projections without biases (a GGUF Q4_K_M layer's Q4_K q/k
/// and Q6_K v): one `qlinear_fused_cat` takes them as if stacked.
fn quant_parts(parts: &[Linear]) -> Option<Vec<&QTensor>> {
    parts
        .iter()
        .map(|l| match (&l.w, &l.b) {
            (Weight::Quant(q), None) => Some(q),
            _ => None,
        })
        .collect()
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
    /// Stacks `parts` (with their biases, all or none) when their weights share format and dtype,
    /// else stacks each run of neighbours that share format and dtype and all have, or all lack, a bias.
    fn new(parts: Vec<Linear>) -> Result<Fused> {
        let same = parts.windows(2).all(|p| format_of(&p[0].w) == format_of(&p[1].w));
        let biases: Option<Vec<&Tensor>> = parts.iter().map(|l| l.b.as_ref()).collect();
        if parts.len() < 2 {
            return Ok(Fused::Apart(parts));
        }
        if !same || (biases.is_none() && parts.iter().any(|l| l.b.is_some())) {
            let key = |l: &Linear| (format_of(&l.w), l.b.is_some());
            let mut groups: Vec<Vec<Linear>> = Vec::new();
            for l in parts {
                match groups.last_mut() {
                    Some(run) if key(&run[0]) == key(&l) => run.push(l),
                    _ => groups.push(vec![l]),
                }
            }
            let mut out = Vec::with_capacity(groups.len());
            for run in groups {
                match Fused::new(run)? {
                    Fused::One(l) => out.push(l),
                    Fused::Apart(ls) => out.extend(ls),
                }
            }
            return Ok(Fused::Apart(out));
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
            Fused::Apart(ls) => {
                let mut sizes = sizes.iter();
                let mut out = Vec::new();
                for l in ls {
                    let y = l.forward(x)?;
                    let (axis, width) = (y.rank() as isize - 1, y.dims()[y.rank() - 1]);
                    let mut start = 0;
                    while start < width {
                        let n = *sizes.next().ok_or_else(|| LlmError::Weight {
                            name: "stacked projections".into(),
                            msg: format!("a product of {width} outputs past the parts' sizes"),
                        })?;
                        out.push(if n == width { y.clone() } else { y.narrow(axis, start, n)? });
                        start += n;
                    }
                }
                Ok(out)
            }
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
    /// Qwen3: the RMSNorm weights `(head_dim,)` of every q head and every k head.
    pub(crate) qk_norm: Option<(Tensor, Tensor)>,
    /// Gemma 2: the RMSNorms of the attention output and of the MLP output, before each residual add.
    pub(crate) post_norms: Option<(Tensor, Tensor)>,
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
            qk_norm: None,
            post_norms: None,
        })
    }

    /// The norm weights of this layer, in the order [`Model::weight_bytes`] counts them.
    fn norms(&self) -> Vec<&Tensor> {
        let mut v = vec![&self.attn_norm, &self.mlp_norm];
        for (a, b) in self.qk_norm.iter().chain(&self.post_norms) {
            v.extend([a, b]);
        }
        v
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

/// A loaded model in one dtype, on one device or with its layers split over several
/// ([`Placement`]).
pub struct Model {
    pub config: LlamaConfig,
    embed: Embedding,
    layers: Vec<Layer>,
    norm: Tensor,
    lm_head: Linear,
    /// The rope tables on each device of the placement.
    ropes: Vec<RopeTables>,
    max_context: usize,
    dtype: DType,
    /// The first device (the embedding's).
    device: Device,
    placement: Placement,
}

/// The token ids of a forward pass: from the host (checked against the vocabulary), or on the
/// model's first device already.
#[derive(Clone, Copy)]
enum Ids<'a> {
    Host(&'a [u32]),
    Device(&'a Tensor),
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
    /// Forgets the positions from `len` on (`KvCache::truncate`); the next forward pass continues
    /// from there.
    pub fn truncate(&mut self, len: usize) {
        self.layers.iter_mut().for_each(|l| l.truncate(len));
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
    pub fn load(cfg: LlamaConfig, src: &dyn WeightSource, device: &Device, opts: LoadOptions) -> Result<Model> {
        let placement = Placement::single(device, cfg.num_layers);
        Self::load_on(cfg, src, &placement, opts)
    }

    /// [`Model::load`] with each weight on its device of `placement` ([`Placement::device_of`]).
    pub fn load_on(
        cfg: LlamaConfig,
        src: &dyn WeightSource,
        placement: &Placement,
        mut opts: LoadOptions,
    ) -> Result<Model> {
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
            let device = placement.device_of(&name);
            let t = if cfg.gemma2.is_some() && name.ends_with("norm.weight") {
                // Gemma 2's RMSNorm multiplies by `1 + w` (in f32): the sum is made once, here.
                src.load(&name, DType::F32, device)?.add_scalar(1.0)?.to_dtype(dtype)?
            } else {
                src.load(&name, dtype, device)?
            };
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
            let norm = |w: &mut Loaded, n: &str| w.take(&format!("{p}.{n}.weight"));
            let attn_norm = norm(&mut w, "input_layernorm");
            let o = w.linear(&format!("{p}.self_attn.o_proj"), cfg.o_bias);
            let mut layer = if cfg.arch == Arch::Phi3 {
                // Stored stacked: used as they are (the layout `Layer::new` would stack them into).
                Layer {
                    attn_norm,
                    qkv: Fused::One(a(&mut w, "qkv")),
                    o,
                    mlp_norm: norm(&mut w, "post_attention_layernorm"),
                    gate_up: Fused::One(m(&mut w, "gate_up")),
                    down: m(&mut w, "down"),
                    qk_norm: None,
                    post_norms: None,
                }
            } else {
                let qkv = [a(&mut w, "q"), a(&mut w, "k"), a(&mut w, "v")];
                // Gemma 2's `post_attention_layernorm` follows the attention; its MLP norm is the
                // `pre_feedforward_layernorm`.
                let mlp_norm =
                    if cfg.gemma2.is_some() { "pre_feedforward_layernorm" } else { "post_attention_layernorm" };
                let mlp_norm = norm(&mut w, mlp_norm);
                Layer::new(attn_norm, qkv, o, mlp_norm, [m(&mut w, "gate"), m(&mut w, "up")], m(&mut w, "down"))?
            };
            if cfg.qk_norm {
                layer.qk_norm = Some((norm(&mut w, "self_attn.q_norm"), norm(&mut w, "self_attn.k_norm")));
            }
            if cfg.gemma2.is_some() {
                let post_attn = norm(&mut w, "post_attention_layernorm");
                layer.post_norms = Some((post_attn, norm(&mut w, "post_feedforward_layernorm")));
            }
            layers.push(layer);
        }
        let embed = w.take("model.embed_tokens.weight");
        let head = match w.0.remove("lm_head.weight") {
            Some(h) => h,
            // Tied: the table itself, or a copy of it when the head is on another device.
            None => embed.to_device(placement.last())?,
        };
        let lm_head = Linear { w: Weight::Dense(head), b: None };
        let norm = w.take("model.norm.weight");
        let freqs = inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling.as_ref());
        Self::from_parts(cfg, Embedding::whole(embed), layers, norm, lm_head, &freqs, opts.max_context, placement)
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
        placement: &Placement,
    ) -> Result<Model> {
        let dtype = embed.dtype();
        let max_context = effective_context(&config, max_context);
        let ropes = placement
            .devices()
            .iter()
            .map(|d| RopeTables::new(freqs, max_context, dtype, d))
            .collect::<Result<Vec<_>>>()?;
        let device = placement.first().clone();
        Ok(Model {
            config,
            embed,
            layers,
            norm,
            lm_head,
            ropes,
            max_context,
            dtype,
            device,
            placement: placement.clone(),
        })
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
            .map(|l| l.norms().into_iter().map(dense).sum::<u64>() + l.linears().into_iter().map(lin).sum::<u64>())
            .sum();
        let tied = match &self.lm_head.w {
            Weight::Dense(t) => self.embed.shares_storage_with(t),
            Weight::Rows(ts) => ts.iter().all(|t| self.embed.shares_storage_with(t)),
            Weight::Quant(_) => false,
        };
        layers + self.embed.bytes() + dense(&self.norm) + if tied { 0 } else { lin(&self.lm_head) }
    }
    /// The first device (with one device, the model's).
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The devices and the layers on each.
    pub fn placement(&self) -> &Placement {
        &self.placement
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
        if self.placement.devices().iter().any(Device::is_cpu) {
            // The whole pass on a CPU worker thread: its parallel ops split there, not each handed
            // over from this thread.
            return kiln::cpu::on_worker_threads(|| self.forward_on(Ids::Host(tokens), cache, all_logits));
        }
        self.forward_on(Ids::Host(tokens), cache, all_logits)
    }

    /// [`Model::forward`] of ids already on the model's first device: `(t,)` i64, as a step's argmax
    /// gives them (so inside the vocabulary), read by the embedding there, not by the host. A decode
    /// step recorded this way does not wait for the previous token to be read back.
    pub(crate) fn forward_ids(&self, ids: &Tensor, cache: &mut Cache) -> Result<Tensor> {
        if ids.rank() != 1 || ids.dtype() != DType::I64 || ids.device() != &self.device {
            return Err(LlmError::Arg(format!(
                "forward_ids: expected (t,) i64 ids on {:?}, got {} {} on {:?}",
                self.device,
                ids.shape(),
                ids.dtype(),
                ids.device()
            )));
        }
        if self.placement.devices().iter().any(Device::is_cpu) {
            return kiln::cpu::on_worker_threads(|| self.forward_on(Ids::Device(ids), cache, false));
        }
        self.forward_on(Ids::Device(ids), cache, false)
    }

    fn forward_on(&self, ids: Ids, cache: &mut Cache, all_logits: bool) -> Result<Tensor> {
        let t = match ids {
            Ids::Host(tokens) => tokens.len(),
            Ids::Device(ids) => ids.elem_count(),
        };
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
        let ids = match ids {
            Ids::Host(tokens) => {
                self.check_vocabulary(tokens)?;
                Tensor::from_vec(tokens.iter().map(|&x| x as i64).collect::<Vec<_>>(), t, &self.device)?
            }
            Ids::Device(ids) => ids.clone(),
        };
        // (t, hidden)
        let x = self.embed_tokens(&ids)?;
        // Each device's rope rows.
        let ropes = self.ropes.iter().map(|r| r.rows(offset, t)).collect::<Result<Vec<_>>>()?;
        // The fused path takes the kernels with the norm in their prologue at every length.
        let fused = self.fused_path();
        let x = self.decoder(x, fused, |l, layer, x| {
            let kv = cache.layers.get_mut(l).ok_or_else(|| LlmError::Arg(format!("cache has no layer {l}")))?;
            let (cos, sin) = &ropes[self.placement.device_index(l)];
            self.attention_cached(l, layer, x, kv, (cos, sin), fused)
        })?;
        let x = if all_logits { x } else { x.narrow(0, t - 1, 1)? };
        // Onto the LM head's device (a no-op with one device).
        self.logits(&x.to_device(self.placement.last())?)
    }

    /// An error naming the first token id outside the vocabulary.
    fn check_vocabulary(&self, tokens: &[u32]) -> Result<()> {
        match tokens.iter().find(|&&id| id as usize >= self.config.vocab_size) {
            None => Ok(()),
            Some(&bad) => {
                Err(LlmError::Arg(format!("token id {bad} is outside the vocabulary ({})", self.config.vocab_size)))
            }
        }
    }

    /// The decoder layers over the hidden states `x` `(rows, hidden)`, the one layer loop of
    /// [`Model::forward`] and [`Model::forward_batch`]: each layer's attention block (the caller's
    /// `attention`: projections, KV store and attention of layer `l` over `x`, giving `(rows, heads *
    /// head_dim)`), its residual, then the MLP block. `fuse`: the MLP norm runs in the stacked
    /// gate/up kernel.
    fn decoder(
        &self,
        mut x: Tensor,
        fuse: bool,
        mut attention: impl FnMut(usize, &Layer, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        for (l, layer) in self.layers.iter().enumerate() {
            if self.placement.is_split() {
                // Onto the layer's device (through host memory; a no-op within one device).
                x = x.to_device(&self.placement.devices()[self.placement.device_index(l)])?;
            }
            let att = attention(l, layer, &x)?;
            x = self.attn_residual(layer, &att, &x)?;
            x = self.mlp_block(layer, &x, fuse)?;
        }
        Ok(x)
    }

    /// Layer `l`'s attention block over one sequence's rows `x` `(t, hidden)` with its contiguous
    /// cache `kv` and the rows' rope tables `(cos, sin)`: `(t, heads * head_dim)`. On the fused path a
    /// stacked q/k/v takes the norm in the product's kernel and rope plus the cache append in one more;
    /// with `KILN_QKV_ROPE=1`, quantized q/k/v weights (stacked or apart) take rope and the append in
    /// the product's kernels too (`KvCache::qlinear_append_rope`; see [`rope_in_product`]).
    fn attention_cached(
        &self,
        l: usize,
        layer: &Layer,
        x: &Tensor,
        kv: &mut KvCache,
        (cos, sin): (&Tensor, &Tensor),
        fused: bool,
    ) -> Result<Tensor> {
        let cfg = &self.config;
        let (t, hd, nh, nkv, eps) = (x.dims()[0], cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.rms_norm_eps);
        let norm = LinearInput::RmsNorm { weight: &layer.attn_norm, eps };
        let (q, k, v) = match &layer.qkv {
            Fused::One(Linear { w: Weight::Quant(w), b: None }) if fused && rope_in_product() => {
                kv.qlinear_append_rope(x, &[w], norm, nh, nkv, cos, sin)?
            }
            Fused::One(lin) if fused => {
                kv.append_rope(&lin.forward_norm(x, &layer.attn_norm, eps)?, nh, nkv, cos, sin)?
            }
            Fused::Apart(parts) if fused && quant_parts(parts).is_some() => {
                let ws = quant_parts(parts).expect("checked");
                if rope_in_product() {
                    kv.qlinear_append_rope(x, &ws, norm, nh, nkv, cos, sin)?
                } else {
                    kv.append_rope(&x.qlinear_fused_cat(&ws, norm)?, nh, nkv, cos, sin)?
                }
            }
            _ => {
                let (q, k, v) = self.qkv_heads(layer, &x.rms_norm(&layer.attn_norm, eps)?, cos, sin)?;
                let (k, v) = kv.append(&k, &v)?;
                (q, k, v)
            }
        };
        Ok(self.attend(l, &q, &k, &v)?.transpose(1, 2)?.reshape((t, nh * hd))?)
    }

    /// The MLP block with its residual: `x + down(act(gate(h)) * up(h))`. With `fuse` and a stacked
    /// gate/up, the norm runs in the gate/up kernel and silu_mul plus the residual in the down one.
    fn mlp_block(&self, layer: &Layer, x: &Tensor, fuse: bool) -> Result<Tensor> {
        match &layer.gate_up {
            Fused::One(lin) if fuse => {
                layer.down.forward_silu_add(&lin.forward_norm(x, &layer.mlp_norm, self.config.rms_norm_eps)?, x)
            }
            _ => self.mlp_residual(layer, x),
        }
    }

    /// Whether every layer is plain Llama (RMSNorm, SwiGLU, `sdpa`): the fused kernels of
    /// [`Model::forward`] apply. Qwen3 and Gemma 2 take the composed path.
    fn fused_path(&self) -> bool {
        let c = &self.config;
        !c.qk_norm && c.gemma2.is_none() && c.hidden_act == Activation::Silu
    }

    /// The embedding rows of `ids` `(t,)`: `(t, hidden)`, times `sqrt(hidden)` for Gemma 2 (the
    /// factor rounded to the model dtype first, as transformers does).
    fn embed_tokens(&self, ids: &Tensor) -> Result<Tensor> {
        let x = self.embed.embedding(ids)?;
        if self.config.gemma2.is_none() {
            return Ok(x);
        }
        // A scalar operand takes the tensor's dtype (see `Tensor::binary_scalar`).
        Ok(x.mul_scalar((self.config.hidden_size as f64).sqrt())?)
    }

    /// The q, k and v heads `(1, heads, t, head_dim)` of the normalised input `h` `(t, hidden)`: q
    /// and k normalised per head (Qwen3) and rotated by the `cos`/`sin` rows `(t, head_dim / 2)`.
    fn qkv_heads(&self, layer: &Layer, h: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let cfg = &self.config;
        let (t, hd, nh, nkv) = (h.dims()[0], cfg.head_dim, cfg.num_heads, cfg.num_kv_heads);
        let heads = |y: &Tensor, n: usize| -> Result<Tensor> { Ok(y.reshape((1, t, n, hd))?) };
        let rope = |y: Tensor| y.transpose(1, 2)?.rope_with_tables(cos, sin, RopeLayout::HalfSplit);
        let ys = layer.qkv.forward(h, &[nh * hd, nkv * hd, nkv * hd])?;
        let (mut q, mut k) = (heads(&ys[0], nh)?, heads(&ys[1], nkv)?);
        if let Some((qn, kn)) = &layer.qk_norm {
            q = q.rms_norm(qn, cfg.rms_norm_eps)?;
            k = k.rms_norm(kn, cfg.rms_norm_eps)?;
        }
        Ok((rope(q)?, rope(k)?, heads(&ys[2], nkv)?.transpose(1, 2)?))
    }

    /// Causal attention of layer `l`'s queries over its cached keys and values, in the fused kernels:
    /// with Gemma 2's scale and soft cap, and the layer's sliding window where it slides.
    fn attend(&self, l: usize, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        Ok(q.sdpa_with(k, v, self.attention_options(l))?)
    }

    /// Layer `l`'s attention: causal, with Gemma 2's scale and soft cap, and the layer's sliding
    /// window where it slides (the paged rows of a batch take the same, `sdpa_paged_with`).
    fn attention_options(&self, l: usize) -> SdpaOptions {
        let (scale, softcap) = match &self.config.gemma2 {
            None => (None, None),
            Some(g) => (Some(1.0 / g.query_pre_attn_scalar.sqrt()), g.attn_logit_softcapping),
        };
        SdpaOptions { causal: true, scale, softcap, window: self.config.layer_window(l) }
    }

    /// `x + o(att)`, the product normalised first for Gemma 2.
    fn attn_residual(&self, layer: &Layer, att: &Tensor, x: &Tensor) -> Result<Tensor> {
        match &layer.post_norms {
            None => layer.o.forward_add(att, x),
            Some((post, _)) => Ok(x.add(&layer.o.forward(att)?.rms_norm(post, self.config.rms_norm_eps)?)?),
        }
    }

    /// `x + down(act(gate(h)) * up(h))` with `h` the MLP norm of `x`, the output normalised first for
    /// Gemma 2.
    fn mlp_residual(&self, layer: &Layer, x: &Tensor) -> Result<Tensor> {
        let cfg = &self.config;
        let h = x.rms_norm(&layer.mlp_norm, cfg.rms_norm_eps)?;
        let gu = layer.gate_up.forward(&h, &[cfg.intermediate_size; 2])?;
        let a = match cfg.hidden_act {
            Activation::Silu => gu[0].silu_mul(&gu[1])?,
            Activation::GeluTanh => gu[0].gelu()?.mul(&gu[1])?,
        };
        match &layer.post_norms {
            None => layer.down.forward_add(&a, x),
            Some((_, post)) => Ok(x.add(&layer.down.forward(&a)?.rms_norm(post, cfg.rms_norm_eps)?)?),
        }
    }

    /// f32 logits of the last hidden states `x` `(rows, hidden)`: final norm, LM head, and Gemma 2's
    /// soft cap.
    fn logits(&self, x: &Tensor) -> Result<Tensor> {
        let logits = self.lm_head.forward_norm(x, &self.norm, self.config.rms_norm_eps)?.to_dtype(DType::F32)?;
        match self.config.gemma2.as_ref().and_then(|g| g.final_logit_softcapping) {
            None => Ok(logits),
            Some(cap) => Ok(logits.div_scalar(cap)?.tanh()?.mul_scalar(cap)?),
        }
    }
}

/// The KV cache length: the request, at most `max_position_embeddings` (sliding windows mask inside
/// it: they do not cap it).
pub fn effective_context(cfg: &LlamaConfig, requested: usize) -> usize {
    requested.min(cfg.max_position_embeddings).max(1)
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
