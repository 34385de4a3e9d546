//! Llama-family models from one GGUF file (llama.cpp's format) through `kiln-gguf`: the config from
//! the `{arch}.*` metadata, the weights under their Hugging Face names (the Q/K row permutation of
//! llama.cpp's converter undone for `llama`), quantized linear weights kept quantized (`qlinear`), the
//! tokenizer and chat template from the `tokenizer.*` metadata.
//!
//! Architectures: `llama` (Llama 1/2/3, Mistral, SmolLM converted by llama.cpp) and `qwen2`. Llama 3
//! rope scaling comes as the `rope_freqs.weight` tensor (per-frequency divisors), linear scaling as
//! `{arch}.rope.scaling.*`. Tokenizers: `gpt2` (byte-level BPE, pre-tokenizer `default`/`gpt2`,
//! `llama-bpe` or `qwen2`) and `llama` (SentencePiece BPE with byte fallback); anything else asks for
//! `--tokenizer tokenizer.json`.

use crate::config::{Arch, LlamaConfig, RopeScaling};
use crate::embedding::{max_tensor_bytes, rows_per_block, split_rows, Embedding};
use crate::model::{effective_context, Layer, Linear, LoadOptions, MemoryEstimate, Model, Weight};
use crate::placement::Placement;
use crate::{ChatTemplate, LlmError, Result, Tokenizer};
use kiln::quant::QTensor;
use kiln::{DType, Device, Tensor};
use kiln_gguf::{names, Gguf, GgufError, GgufTensor, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// An open GGUF model file: its config (nothing is loaded yet).
pub struct GgufModel {
    pub path: PathBuf,
    pub file: Gguf,
    pub config: LlamaConfig,
}

impl GgufModel {
    /// Parses the header and the `{arch}.*` metadata.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufModel> {
        let path = path.as_ref().to_path_buf();
        let file = Gguf::open(&path).map_err(|e| bad(&path, e))?;
        let config = config_of(&file).map_err(|e| match e {
            Bad::Gguf(e) => bad(&path, e),
            Bad::Msg(m) => LlmError::BadFile { path: path.clone(), msg: m },
        })?;
        Ok(GgufModel { path, file, config })
    }

    /// Weights (quantized ones at their stored size, the rest in `dtype`) plus a KV cache of
    /// `max_context` positions.
    pub fn estimate(&self, dtype: DType, max_context: usize) -> MemoryEstimate {
        let cfg = &self.config;
        let size = dtype.size_in_bytes() as u64;
        let mut weight_bytes = 0u64;
        let mut largest = 0u64;
        for info in self.file.tensor_infos() {
            if names::hf_name(&info.name).is_none() {
                continue;
            }
            let elems = info.shape.iter().product::<usize>() as u64;
            let quant = !matches!(info.ggml_type, 0 | 1 | 30);
            let embd = info.name == "token_embd.weight";
            let mut b = if quant && !embd { info.size } else { elems * size };
            // The table (and a dense tied head) is split in row blocks that fit the largest
            // buffer (`embedding.rs`): one row must fit; a quantized tied head is one tensor.
            let mut one = if embd { cfg.hidden_size as u64 * size } else { b };
            if quant && embd && cfg.tie_word_embeddings {
                b += info.size; // the quantized copy is the LM head
                one = one.max(info.size);
            }
            weight_bytes += b;
            largest = largest.max(one);
        }
        let ctx = effective_context(cfg, max_context);
        let per_layer_kv = (cfg.num_kv_heads * cfg.head_dim * ctx) as u64 * size;
        MemoryEstimate {
            weight_bytes,
            kv_cache_bytes: per_layer_kv * 2 * cfg.num_layers as u64,
            largest_tensor_bytes: largest.max(per_layer_kv),
        }
    }

    /// Checks that the model fits, then loads it onto `device`: quantized linear weights stay
    /// quantized, float tensors become `opts.dtype`, a quantized `token_embd` is dequantised for the
    /// embedding lookup (and kept quantized as the LM head when the embeddings are tied).
    pub fn load(&self, device: &Device, opts: LoadOptions) -> Result<Model> {
        self.load_with(&Placement::single(device, self.config.num_layers), opts, false)
    }

    /// [`GgufModel::load`] with the layers over the devices of `placement` (each tensor read on the
    /// host, then moved to its device).
    pub fn load_on(&self, placement: &Placement, opts: LoadOptions) -> Result<Model> {
        self.load_with(placement, opts, false)
    }

    /// Like [`GgufModel::load`] but every quantized weight dequantised to `opts.dtype` (dense
    /// `linear`): the same numbers without the quantized kernels (a reference, or for speed where
    /// `qlinear` is slower than `linear`), at the memory of a dense model.
    pub fn load_dequantized(&self, device: &Device, opts: LoadOptions) -> Result<Model> {
        self.load_with(&Placement::single(device, self.config.num_layers), opts, true)
    }

    fn load_with(&self, placement: &Placement, mut opts: LoadOptions, dequantize: bool) -> Result<Model> {
        let device = placement.first();
        // Every tensor is read straight onto its layer's device (split or not).
        let dtype = opts.dtype;
        if !dtype.is_float() || dtype == DType::F64 {
            return Err(LlmError::Arg(format!("model dtype must be f32, f16 or bf16, got {dtype}")));
        }
        placement.check_fits(&self.estimate(dtype, opts.max_context))?;
        let cfg = self.config.clone();
        let total = self.estimate(dtype, 1).weight_bytes;
        let mut done = 0u64;
        let mut tensors = HashMap::new();
        let mut add = |name: String, t: GgufTensor| -> Result<()> {
            done += match &t {
                GgufTensor::Float(t) => (t.elem_count() * dtype.size_in_bytes()) as u64,
                GgufTensor::Quant(q) => q.storage_bytes() as u64,
            };
            if let Some(p) = opts.progress.as_mut() {
                p(done.min(total), total);
            }
            tensors.insert(name, t);
            Ok(())
        };
        if cfg.arch == Arch::Llama {
            // The converter permuted the q/k rows for GGML's interleaved rope: back to HF order.
            for t in self.file.load_hf_on(|hf| placement.device_of(hf)).map_err(|e| bad(&self.path, e))? {
                let (name, t) = t.map_err(|e| bad(&self.path, e))?;
                add(name, t)?;
            }
        } else {
            for info in self.file.tensor_infos() {
                if let Some(hf) = names::hf_name(&info.name) {
                    let on = placement.device_of(&hf);
                    add(hf, self.file.load(&info.name, on).map_err(|e| bad(&self.path, e))?)?;
                }
            }
        }
        let mut w = Parts { map: tensors, dtype, dequantize };
        let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
        let (q_out, kv_out) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
        let mut layers = Vec::with_capacity(cfg.num_layers);
        for l in 0..cfg.num_layers {
            let p = format!("model.layers.{l}");
            layers.push(Layer::new(
                w.dense(&format!("{p}.input_layernorm.weight"), &[h])?,
                [
                    w.linear(&format!("{p}.self_attn.q_proj"), q_out, h, cfg.qkv_bias)?,
                    w.linear(&format!("{p}.self_attn.k_proj"), kv_out, h, cfg.qkv_bias)?,
                    w.linear(&format!("{p}.self_attn.v_proj"), kv_out, h, cfg.qkv_bias)?,
                ],
                w.linear(&format!("{p}.self_attn.o_proj"), h, q_out, cfg.o_bias)?,
                w.dense(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                [
                    w.linear(&format!("{p}.mlp.gate_proj"), i, h, cfg.mlp_bias)?,
                    w.linear(&format!("{p}.mlp.up_proj"), i, h, cfg.mlp_bias)?,
                ],
                w.linear(&format!("{p}.mlp.down_proj"), h, i, cfg.mlp_bias)?,
            )?);
        }
        let norm = w.dense("model.norm.weight", &[h])?;
        let lm_head =
            if cfg.tie_word_embeddings { None } else { Some(w.linear("lm_head", cfg.vocab_size, h, false)?) };
        let embed_name = "model.embed_tokens.weight";
        // The table in `dtype`, in row blocks that each fit the device's largest buffer (one block
        // where the whole table fits); a tied dense LM head multiplies by the same blocks.
        let vocab = cfg.vocab_size;
        let row_bytes = (h * dtype.size_in_bytes()) as u64;
        // Split: the blocks fit both the first device (the table) and the last (a tied head).
        let limit = match (max_tensor_bytes(device), max_tensor_bytes(placement.last())) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let rows = rows_per_block("token_embd.weight", vocab, row_bytes, limit)?;
        let last = placement.last();
        let dense_head = |blocks: &[Tensor]| -> Result<Weight> {
            let moved = blocks.iter().map(|t| t.to_device(last)).collect::<kiln::Result<Vec<_>>>()?;
            Ok(match moved.as_slice() {
                [t] => Weight::Dense(t.clone()),
                _ => Weight::Rows(moved),
            })
        };
        let (blocks, lm_head) = match (w.take(embed_name, &[vocab, h])?, lm_head) {
            (GgufTensor::Float(t), head) => {
                let blocks = if rows >= vocab { vec![to_dtype(t, dtype)?] } else { split_rows(&t, rows, dtype)? };
                let head = match head {
                    Some(h) => h,
                    None => Linear { w: dense_head(&blocks)?, b: None },
                };
                (blocks, head)
            }
            (GgufTensor::Quant(q), head) => {
                let blocks = if rows >= vocab {
                    vec![q.dequantize(dtype)?]
                } else {
                    // Each block dequantized on its own from the file's bytes of its rows.
                    let (qt, raw) = (q.qtype(), q.to_raw()?);
                    let raw_row = h / qt.block_elems() * qt.block_bytes();
                    (0..vocab.div_ceil(rows))
                        .map(|b| {
                            let len = rows.min(vocab - b * rows);
                            let bytes = &raw[b * rows * raw_row..(b * rows + len) * raw_row];
                            QTensor::from_raw(bytes, qt, (len, h), device)?.dequantize(dtype)
                        })
                        .collect::<kiln::Result<Vec<_>>>()?
                };
                let w = if dequantize { dense_head(&blocks)? } else { Weight::Quant(q.to_device(last)?) };
                (blocks, head.unwrap_or(Linear { w, b: None }))
            }
        };
        let embed = Embedding::from_blocks(blocks, rows);
        let mut freqs = crate::rope::inv_freq(hd, cfg.rope_theta, cfg.rope_scaling.as_ref());
        if self.file.tensor_info("rope_freqs.weight").is_some() {
            // Llama 3 scaling as llama.cpp stores it: each frequency divided by its factor.
            let f = match self.file.load("rope_freqs.weight", &Device::cpu()).map_err(|e| bad(&self.path, e))? {
                GgufTensor::Float(t) => t.to_dtype(DType::F32)?.to_vec::<f32>()?,
                GgufTensor::Quant(_) => return Err(LlmError::weight("rope_freqs.weight", "is quantized")),
            };
            if f.len() != freqs.len() || f.iter().any(|&x| !(x.is_finite() && x > 0.0)) {
                return Err(LlmError::weight(
                    "rope_freqs.weight",
                    format!("needs {} positive factors (head_dim / 2), has {} values", freqs.len(), f.len()),
                ));
            }
            freqs.iter_mut().zip(&f).for_each(|(q, &d)| *q /= d as f64);
        }
        Model::from_parts(cfg, embed, layers, norm, lm_head, &freqs, opts.max_context, placement)
    }

    /// The tokenizer of the `tokenizer.ggml.*` metadata (byte-level BPE or SentencePiece BPE).
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        tokenizer_of(&self.file).map_err(|m| LlmError::Tokenizer(format!("{}: {m}", self.path.display())))
    }

    /// `tokenizer.ggml.eos_token_id` and `eot_token_id` / `eom_token_id` (Llama 3's end of turn).
    pub fn stop_tokens(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = ["eos", "eot", "eom"]
            .iter()
            .filter_map(|k| self.file.get(&format!("tokenizer.ggml.{k}_token_id")).and_then(Value::to_u64))
            .map(|x| x as u32)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// `tokenizer.chat_template`, with the BOS/EOS token texts.
    pub fn chat_template(&self) -> Result<ChatTemplate> {
        let template = self.file.get("tokenizer.chat_template").and_then(Value::as_str).ok_or_else(|| {
            LlmError::Template(format!(
                "{} has no tokenizer.chat_template (a base model: use `kiln generate`)",
                self.path.display()
            ))
        })?;
        let tokens = self.file.get_str_array("tokenizer.ggml.tokens").unwrap_or_default();
        let text = |k: &str| {
            self.file
                .get(&format!("tokenizer.ggml.{k}_token_id"))
                .and_then(Value::to_u64)
                .and_then(|i| tokens.get(i as usize).cloned())
                .unwrap_or_default()
        };
        Ok(ChatTemplate::new(template, &text("bos"), &text("eos")))
    }
}

fn bad(path: &Path, e: GgufError) -> LlmError {
    LlmError::BadFile { path: path.to_path_buf(), msg: e.to_string() }
}

enum Bad {
    Gguf(GgufError),
    Msg(String),
}

impl From<GgufError> for Bad {
    fn from(e: GgufError) -> Bad {
        Bad::Gguf(e)
    }
}

/// The `LlamaConfig` of the `{arch}.*` metadata and the tensors present.
fn config_of(f: &Gguf) -> std::result::Result<LlamaConfig, Bad> {
    let a = f.architecture()?;
    let arch = match a.as_str() {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        other => {
            return Err(Bad::Msg(format!(
                "general.architecture is \"{other}\"; kiln reads \"llama\" (Llama, Mistral, SmolLM) and \"qwen2\" GGUF files"
            )))
        }
    };
    let p = f.llama_params()?;
    let key = |s: &str| format!("{a}.{s}");
    let head_dim = match f.get(&key("attention.key_length")) {
        Some(_) => f.get_usize(&key("attention.key_length"))?,
        None => p.embedding_length / p.head_count,
    };
    if f.get(&key("attention.value_length")).is_some() {
        let v = f.get_usize(&key("attention.value_length"))?;
        if v != head_dim {
            return Err(Bad::Msg(format!("value_length {v} differs from key_length {head_dim}: not supported")));
        }
    }
    if head_dim == 0 || head_dim % 2 != 0 {
        return Err(Bad::Msg(format!("head dimension {head_dim} must be even and positive")));
    }
    if p.rope_dimension_count != head_dim {
        return Err(Bad::Msg(format!(
            "{} is {} but heads have {head_dim} dimensions: partial rotary embeddings are not supported",
            key("rope.dimension_count"),
            p.rope_dimension_count
        )));
    }
    if p.head_count_kv == 0 || p.head_count % p.head_count_kv != 0 {
        return Err(Bad::Msg(format!(
            "head_count ({}) must be a multiple of head_count_kv ({})",
            p.head_count, p.head_count_kv
        )));
    }
    let rope_scaling = match f.get(&key("rope.scaling.type")).and_then(Value::as_str) {
        None | Some("none") => None,
        Some("linear") => Some(RopeScaling::Linear { factor: f.get_f32(&key("rope.scaling.factor"))? as f64 }),
        Some(other) => return Err(Bad::Msg(format!("rope scaling \"{other}\" is not supported (none, linear)"))),
    };
    let embd = f.tensor_info("token_embd.weight").ok_or_else(|| Bad::Msg("no token_embd.weight tensor".into()))?;
    if embd.shape.len() != 2 || embd.shape[1] != p.embedding_length {
        return Err(Bad::Msg(format!(
            "token_embd.weight has shape {:?}, expected (vocab, {})",
            embd.shape, p.embedding_length
        )));
    }
    let has = |n: &str| f.tensor_info(n).is_some();
    let id = |k: &str| f.get(&format!("tokenizer.ggml.{k}_token_id")).and_then(Value::to_u64).map(|x| x as u32);
    Ok(LlamaConfig {
        arch,
        vocab_size: embd.shape[0],
        hidden_size: p.embedding_length,
        intermediate_size: p.feed_forward_length,
        num_layers: p.block_count,
        num_heads: p.head_count,
        num_kv_heads: p.head_count_kv,
        head_dim,
        rms_norm_eps: p.rms_norm_eps as f64,
        rope_theta: p.rope_freq_base as f64,
        rope_scaling,
        max_position_embeddings: p.context_length.max(1),
        sliding_window: None,
        sliding_layers: Vec::new(),
        tie_word_embeddings: !has("output.weight"),
        qkv_bias: has("blk.0.attn_q.bias"),
        o_bias: has("blk.0.attn_output.bias"),
        mlp_bias: has("blk.0.ffn_up.bias"),
        hidden_act: crate::config::Activation::Silu,
        qk_norm: false,
        gemma2: None,
        bos_token_id: id("bos"),
        eos_token_ids: id("eos").into_iter().collect(),
        saved_dtype: None,
    })
}

fn to_dtype(t: Tensor, dtype: DType) -> Result<Tensor> {
    Ok(if t.dtype() == dtype { t } else { t.to_dtype(dtype)? })
}

/// Loaded tensors under their HF names, taken out one by one with their shapes checked.
struct Parts {
    map: HashMap<String, GgufTensor>,
    dtype: DType,
    /// Dequantise quantized linear weights too.
    dequantize: bool,
}

impl Parts {
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<GgufTensor> {
        let t = self.map.remove(name).ok_or_else(|| {
            LlmError::weight(name, "missing from the GGUF file (llama.cpp's name: see kiln_gguf::names)")
        })?;
        if t.shape().dims() != shape {
            return Err(LlmError::weight(
                name,
                format!("has shape {:?}, the metadata implies {shape:?}", t.shape().dims()),
            ));
        }
        Ok(t)
    }

    /// A tensor needed dense (norms, biases) in the model's dtype.
    fn dense(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        match self.take(name, shape)? {
            GgufTensor::Float(t) => to_dtype(t, self.dtype),
            GgufTensor::Quant(q) => Ok(q.dequantize(self.dtype)?),
        }
    }

    fn linear(&mut self, prefix: &str, out: usize, inp: usize, bias: bool) -> Result<Linear> {
        let w = match self.take(&format!("{prefix}.weight"), &[out, inp])? {
            GgufTensor::Float(t) => Weight::Dense(to_dtype(t, self.dtype)?),
            GgufTensor::Quant(q) if self.dequantize => Weight::Dense(q.dequantize(self.dtype)?),
            GgufTensor::Quant(q) => Weight::Quant(q),
        };
        let b = if bias { Some(self.dense(&format!("{prefix}.bias"), &[out])?) } else { None };
        Ok(Linear { w, b })
    }
}

/// Llama 3's pre-tokenizer split (`tokenizer.ggml.pre` = `llama-bpe`).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's (`qwen2`): digits one by one.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// SmolLM's and StarCoder's (`smollm`, `starcoder`, `refact`): every digit on its own, then GPT-2's
/// byte-level split (`Digits(individual_digits)` + `ByteLevel(use_regex)` in tokenizer.json).
const DIGIT_SPLIT: &str = r"\p{N}";

/// A `tokenizers` tokenizer from the GGUF metadata: byte-level BPE (`gpt2`) or SentencePiece
/// (`llama`).
fn tokenizer_of(f: &Gguf) -> std::result::Result<Tokenizer, String> {
    use tokenizers::processors::template::TemplateProcessing;
    use tokenizers::AddedToken;

    let hint = "pass the model's Hugging Face tokenizer with --tokenizer tokenizer.json";
    let meta = f.tokenizer().map_err(|e| format!("{e}; {hint}"))?;
    let mut tok = match meta.model.as_str() {
        "gpt2" => byte_level_bpe(f, &meta, hint)?,
        "llama" => sentencepiece_bpe(f, &meta)?,
        other => {
            return Err(format!(
                "tokenizer.ggml.model \"{other}\" is not supported (kiln builds \"gpt2\" byte-level BPE and \"llama\" SentencePiece tokenizers); {hint}"
            ))
        }
    };
    // Control tokens (type 3) are special, user-defined ones (4) matched whole but decoded.
    let added = |kind: i32, special: bool| -> Vec<AddedToken> {
        meta.token_types
            .iter()
            .zip(&meta.tokens)
            .filter(|(&t, _)| t == kind)
            .map(|(_, s)| AddedToken::from(s.clone(), special))
            .collect()
    };
    tok.add_special_tokens(&added(3, true));
    tok.add_tokens(&added(4, false));
    // llama.cpp adds BOS by default for SentencePiece models, not for BPE ones.
    let add_bos = f.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool).unwrap_or(meta.model == "llama");
    if let (true, Some(bos)) = (add_bos, meta.bos_id) {
        let text = meta.tokens.get(bos as usize).ok_or("bos_token_id outside the vocabulary")?.clone();
        let err = |e: String| format!("post-processor: {e}");
        let mut post = TemplateProcessing::builder();
        post.try_single(format!("{text} $A").as_str()).map_err(err)?;
        post.try_pair(format!("{text} $A {text} $B").as_str()).map_err(err)?;
        post.special_tokens(vec![(text, bos)]);
        let post = post.build().map_err(|e| err(e.to_string()))?;
        tok.with_post_processor(Some(post));
    }
    Ok(Tokenizer::from_inner(tok))
}

/// `gpt2`: byte-level BPE from tokens and merges, with the pre-tokenizer split `tokenizer.ggml.pre`
/// names.
fn byte_level_bpe(
    f: &Gguf,
    meta: &kiln_gguf::TokenizerMeta,
    hint: &str,
) -> std::result::Result<tokenizers::Tokenizer, String> {
    use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
    use tokenizers::models::bpe::BPE;
    use tokenizers::pre_tokenizers::byte_level::ByteLevel;
    use tokenizers::pre_tokenizers::sequence::Sequence;
    use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
    use tokenizers::{PreTokenizerWrapper, SplitDelimiterBehavior};

    let pre = f.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
    let split = match pre {
        "default" | "gpt-2" | "gpt2" => None,
        "llama-bpe" | "llama3" => Some(LLAMA3_SPLIT),
        "qwen2" => Some(QWEN2_SPLIT),
        "smollm" | "starcoder" | "refact" => Some(DIGIT_SPLIT),
        other => {
            return Err(format!(
                "tokenizer.ggml.pre \"{other}\" is not supported (default, gpt-2, llama-bpe, qwen2, smollm, starcoder, refact); {hint}"
            ))
        }
    };
    let vocab: tokenizers::models::bpe::Vocab =
        meta.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    let merges = meta
        .merges
        .iter()
        .map(|m| m.split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).ok_or(format!("bad merge \"{m}\"")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .ignore_merges(split == Some(LLAMA3_SPLIT))
        .build()
        .map_err(|e| format!("cannot build the BPE model: {e}"))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    let pre_tok: PreTokenizerWrapper = match split {
        None => ByteLevel::new(false, true, true).into(),
        Some(re) => {
            let s = Split::new(SplitPattern::Regex(re.into()), SplitDelimiterBehavior::Isolated, false)
                .map_err(|e| format!("pre-tokenizer regex: {e}"))?;
            // The digit split is followed by GPT-2's own regex; the others replace it.
            Sequence::new(vec![s.into(), ByteLevel::new(false, true, re == DIGIT_SPLIT).into()]).into()
        }
    };
    tok.with_pre_tokenizer(Some(pre_tok));
    tok.with_decoder(Some(ByteLevelDecoder::default()));
    if pre == "qwen2" {
        // Qwen2's tokenizer.json normalizes to NFC first.
        tok.with_normalizer(Some(tokenizers::normalizers::NFC));
    }
    Ok(tok)
}

/// `llama` (SentencePiece BPE, Llama 1/2 and Mistral): as transformers' `LlamaConverter` builds it: BPE
/// whose merges rank every split of a piece into two pieces by the piece's score, byte fallback to
/// the `<0xNN>` tokens, `▁` for spaces with one prepended (`tokenizer.ggml.add_space_prefix`,
/// default true), decoded back through the bytes.
fn sentencepiece_bpe(f: &Gguf, meta: &kiln_gguf::TokenizerMeta) -> std::result::Result<tokenizers::Tokenizer, String> {
    use tokenizers::decoders::byte_fallback::ByteFallback;
    use tokenizers::decoders::fuse::Fuse;
    use tokenizers::decoders::sequence::Sequence as DecoderSequence;
    use tokenizers::decoders::strip::Strip;
    use tokenizers::models::bpe::BPE;
    use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
    use tokenizers::{DecoderWrapper, NormalizerWrapper};

    if meta.scores.len() != meta.tokens.len() {
        return Err(format!("{} tokens but {} scores", meta.tokens.len(), meta.scores.len()));
    }
    let vocab: tokenizers::models::bpe::Vocab =
        meta.tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
    // SentencePieceExtractor: (left, right, score of left+right), by score, then by the pieces' ids.
    let mut merges: Vec<(u32, u32, f32)> = Vec::new();
    for (piece, &score) in meta.tokens.iter().zip(&meta.scores) {
        for (i, _) in piece.char_indices().skip(1) {
            if let (Some(&l), Some(&r)) = (vocab.get(&piece[..i]), vocab.get(&piece[i..])) {
                merges.push((l, r, score));
            }
        }
    }
    merges.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
    let merges = merges
        .into_iter()
        .map(|(l, r, _)| (meta.tokens[l as usize].clone(), meta.tokens[r as usize].clone()))
        .collect();
    let unk = f.get("tokenizer.ggml.unknown_token_id").and_then(Value::to_u64).unwrap_or(0) as usize;
    let mut bpe = BPE::builder().vocab_and_merges(vocab, merges).byte_fallback(true).fuse_unk(true);
    if let Some(u) = meta.tokens.get(unk) {
        bpe = bpe.unk_token(u.clone());
    }
    let bpe = bpe.build().map_err(|e| format!("cannot build the BPE model: {e}"))?;
    let mut tok = tokenizers::Tokenizer::new(bpe);
    let space = Replace::new(" ", "\u{2581}").map_err(|e| e.to_string())?;
    let add_prefix = f.get("tokenizer.ggml.add_space_prefix").and_then(Value::as_bool).unwrap_or(true);
    let mut norm: Vec<NormalizerWrapper> = Vec::new();
    if add_prefix {
        norm.push(Prepend::new("\u{2581}".into()).into());
    }
    norm.push(space.into());
    tok.with_normalizer(Some(NormalizerSequence::new(norm)));
    let mut dec: Vec<DecoderWrapper> = vec![
        Replace::new("\u{2581}", " ").map_err(|e| e.to_string())?.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ];
    if add_prefix {
        dec.push(Strip::new(' ', 1, 0).into());
    }
    tok.with_decoder(Some(DecoderSequence::new(dec)));
    Ok(tok)
}
