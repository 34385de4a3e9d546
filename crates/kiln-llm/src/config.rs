//! `config.json` of a Hugging Face Llama-family model: one [`LlamaConfig`] with switches for Llama
//! 2/3, Mistral, Qwen2, SmolLM, Qwen3 (q/k norms), Gemma 2 ([`Gemma2Params`]) and Phi-3 (fused
//! projections). Every missing or bad field is an error naming the field.

use crate::{LlmError, Result};
use serde_json::Value;
use std::path::Path;

/// Which member of the Llama family (they differ only in switches kept in [`LlamaConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
    /// Qwen3: RMSNorm over each q and k head before rope.
    Qwen3,
    /// Gemma 2: see [`Gemma2Params`].
    Gemma2,
    /// Phi-3: q/k/v and gate/up stored as one weight each (`qkv_proj`, `gate_up_proj`).
    Phi3,
}

/// The MLP's activation: `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu` (SwiGLU): Llama, Mistral, Qwen, Phi-3.
    Silu,
    /// `gelu_pytorch_tanh` (GeGLU with the tanh approximation): Gemma 2.
    GeluTanh,
}

/// What Gemma 2 adds to the Llama layer: embeddings scaled by `sqrt(hidden_size)`, RMSNorm weights
/// used as `1 + w`, norms after attention and after the MLP too (four per layer), attention scores
/// and final logits soft-capped (`tanh(x / cap) * cap`), the attention scale
/// `query_pre_attn_scalar^-1/2`, and sliding-window attention on some layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Gemma2Params {
    pub query_pre_attn_scalar: f64,
    pub attn_logit_softcapping: Option<f64>,
    pub final_logit_softcapping: Option<f64>,
    /// Keys a query of a sliding layer sees: itself and the `sliding_window - 1` before it.
    pub sliding_window: Option<usize>,
    /// Per layer, whether it attends through the sliding window (`layer_types`, else every even
    /// layer, as transformers' `Gemma2Config` makes `layer_types`).
    pub sliding_layers: Vec<bool>,
}

/// How the rotary frequencies are rescaled for long contexts (`rope_scaling` / `rope_parameters`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    /// Llama 3.1+: low frequencies divided by `factor`, high ones kept, a smooth blend between.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: usize },
    /// Positions divided by `factor`.
    Linear { factor: f64 },
}

#[derive(Debug, Clone)]
pub struct LlamaConfig {
    pub arch: Arch,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_layers: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    /// The sliding attention window of the layers in `sliding_layers` (Gemma 2 keeps its own in
    /// [`Gemma2Params`]): a query sees itself and the `sliding_window - 1` positions before it.
    pub sliding_window: Option<usize>,
    /// Per layer, whether it attends through `sliding_window`: every layer of Mistral and Phi-3;
    /// Qwen2/3 with `use_sliding_window`, the layers of `layer_types` or else those from
    /// `max_window_layers` on (as transformers makes `layer_types`). Empty without a window.
    pub sliding_layers: Vec<bool>,
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections (Qwen2 always; Llama with `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the output projection (Llama with `attention_bias`).
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub hidden_act: Activation,
    /// Qwen3: `q_norm` / `k_norm` weights (head_dim) applied per head to q and k before rope.
    pub qk_norm: bool,
    /// Gemma 2's extra switches (`None` for every other architecture).
    pub gemma2: Option<Gemma2Params>,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// The dtype the weights were saved in (`torch_dtype` or `dtype`), if stated.
    pub saved_dtype: Option<kiln::DType>,
}

impl LlamaConfig {
    /// The sliding window of layer `l`, where it slides (Gemma 2's sliding layers; `sliding_layers`
    /// of the others): its queries see themselves and the `window - 1` positions before.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        match &self.gemma2 {
            Some(g) => g.sliding_window.filter(|_| g.sliding_layers.get(l) == Some(&true)),
            None => self.sliding_window.filter(|_| self.sliding_layers.get(l) == Some(&true)),
        }
    }

    /// Reads `DIR/config.json`.
    pub fn from_dir(dir: &Path) -> Result<LlamaConfig> {
        let path = dir.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| LlmError::MissingFile {
            path: path.clone(),
            why: format!("a Hugging Face model folder needs config.json ({e})"),
        })?;
        let v: Value =
            serde_json::from_str(&text).map_err(|e| LlmError::BadFile { path: path.clone(), msg: e.to_string() })?;
        LlamaConfig::from_json(&v)
    }

    /// Parses the JSON of a `config.json`.
    pub fn from_json(v: &Value) -> Result<LlamaConfig> {
        let arch = arch_of(v)?;
        let usize_field = |name: &str| -> Result<usize> {
            let f = v.get(name).ok_or_else(|| LlmError::config(name, "missing"))?;
            f.as_u64()
                .filter(|&n| n > 0)
                .map(|n| n as usize)
                .ok_or_else(|| LlmError::config(name, format!("expected a positive integer, got {f}")))
        };
        let opt_usize = |name: &str| -> Result<Option<usize>> {
            match v.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(_) => usize_field(name).map(Some),
            }
        };
        let f64_field = |name: &str, default: Option<f64>| -> Result<f64> {
            match v.get(name) {
                None | Some(Value::Null) => default.ok_or_else(|| LlmError::config(name, "missing")),
                Some(f) => f
                    .as_f64()
                    .filter(|x| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| LlmError::config(name, format!("expected a positive number, got {f}"))),
            }
        };
        let bool_field = |name: &str, default: bool| -> Result<bool> {
            match v.get(name) {
                None | Some(Value::Null) => Ok(default),
                Some(f) => {
                    f.as_bool().ok_or_else(|| LlmError::config(name, format!("expected true or false, got {f}")))
                }
            }
        };
        let hidden_size = usize_field("hidden_size")?;
        let num_heads = usize_field("num_attention_heads")?;
        let num_kv_heads = opt_usize("num_key_value_heads")?.unwrap_or(num_heads);
        if num_heads % num_kv_heads != 0 {
            return Err(LlmError::config(
                "num_key_value_heads",
                format!("num_attention_heads ({num_heads}) must be a multiple of it ({num_kv_heads})"),
            ));
        }
        let head_dim = match opt_usize("head_dim")? {
            Some(d) => d,
            None if hidden_size % num_heads == 0 => hidden_size / num_heads,
            None => {
                return Err(LlmError::config(
                    "head_dim",
                    format!(
                    "missing, and hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({num_heads})"
                ),
                ))
            }
        };
        if head_dim % 2 != 0 {
            return Err(LlmError::config("head_dim", format!("must be even for rotary embeddings, got {head_dim}")));
        }
        let hidden_act = activation_of(v, arch)?;
        // transformers 5 moves rope_theta and the scaling into `rope_parameters`.
        let rope_params = v.get("rope_parameters").filter(|p| p.is_object());
        let rope_theta = match rope_params.and_then(|p| p.get("rope_theta")) {
            Some(t) => t.as_f64().filter(|x| x.is_finite() && *x > 0.0).ok_or_else(|| {
                LlmError::config("rope_parameters.rope_theta", format!("expected a positive number, got {t}"))
            })?,
            None => f64_field("rope_theta", Some(10_000.0))?,
        };
        let rope_scaling = match rope_params.or_else(|| v.get("rope_scaling").filter(|s| !s.is_null())) {
            Some(s) => rope_scaling_of(s, if rope_params.is_some() { "rope_parameters" } else { "rope_scaling" })?,
            None => None,
        };
        // Phi-4-mini and others rotate part of each head only (transformers 5 keeps the factor in
        // `rope_parameters`).
        for (field, f) in [
            ("partial_rotary_factor", v.get("partial_rotary_factor")),
            ("rope_parameters.partial_rotary_factor", rope_params.and_then(|p| p.get("partial_rotary_factor"))),
        ] {
            if let Some(p) = f.and_then(Value::as_f64).filter(|&p| p != 1.0) {
                return Err(LlmError::config(
                    field,
                    format!("only 1.0 (rotary embeddings over the whole head) is supported, got {p}"),
                ));
            }
        }
        let attention_bias = bool_field("attention_bias", false)?;
        // Mistral and Phi-3 slide on every layer, Qwen2/3 when asked on some; Gemma 2 on some
        // (`Gemma2Params`). The attention kernels mask past the window (`SdpaOptions::window`).
        let num_layers = usize_field("num_hidden_layers")?;
        let sliding_window = match arch {
            Arch::Mistral | Arch::Phi3 => opt_usize("sliding_window")?,
            Arch::Qwen2 | Arch::Qwen3 if bool_field("use_sliding_window", false)? => opt_usize("sliding_window")?,
            _ => None,
        };
        let slides = match (sliding_window, arch) {
            (None, _) => Vec::new(),
            (Some(_), Arch::Qwen2 | Arch::Qwen3) => {
                let from = opt_usize("max_window_layers")?.unwrap_or(28);
                sliding_layers(v, num_layers, |i| i >= from)?
            }
            (Some(_), _) => vec![true; num_layers],
        };
        if arch == Arch::Gemma2 && bool_field("use_bidirectional_attention", false)? {
            return Err(LlmError::config("use_bidirectional_attention", "only causal attention (false) is supported"));
        }
        let gemma2 = match arch {
            Arch::Gemma2 => Some(Gemma2Params {
                query_pre_attn_scalar: f64_field("query_pre_attn_scalar", Some(256.0))?,
                attn_logit_softcapping: opt_positive(v, "attn_logit_softcapping")?,
                final_logit_softcapping: opt_positive(v, "final_logit_softcapping")?,
                sliding_window: opt_usize("sliding_window")?,
                sliding_layers: sliding_layers(v, num_layers, |i| i % 2 == 0)?,
            }),
            _ => None,
        };
        Ok(LlamaConfig {
            arch,
            vocab_size: usize_field("vocab_size")?,
            hidden_size,
            intermediate_size: usize_field("intermediate_size")?,
            num_layers,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: f64_field("rms_norm_eps", Some(1e-6))?,
            rope_theta,
            rope_scaling,
            max_position_embeddings: opt_usize("max_position_embeddings")?.unwrap_or(4096),
            sliding_window,
            sliding_layers: slides,
            // transformers leaves the field out of config.json where it equals the base default (true).
            tie_word_embeddings: bool_field("tie_word_embeddings", arch == Arch::Gemma2)?,
            qkv_bias: arch == Arch::Qwen2 || attention_bias,
            o_bias: attention_bias,
            mlp_bias: bool_field("mlp_bias", false)?,
            hidden_act,
            qk_norm: arch == Arch::Qwen3,
            gemma2,
            bos_token_id: token_ids(v, "bos_token_id")?.first().copied(),
            eos_token_ids: token_ids(v, "eos_token_id")?,
            saved_dtype: ["torch_dtype", "dtype"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
                .and_then(torch_dtype),
        })
    }

    /// Bytes of one position of the KV cache over all layers (keys and values) in `dtype`.
    pub fn kv_bytes_per_position(&self, dtype: kiln::DType) -> u64 {
        (self.num_layers * 2 * self.num_kv_heads * self.head_dim * dtype.size_in_bytes()) as u64
    }
}

fn arch_of(v: &Value) -> Result<Arch> {
    let from_arch = v.get("architectures").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_str);
    let from_type = v.get("model_type").and_then(Value::as_str);
    match (from_arch, from_type) {
        (Some("LlamaForCausalLM"), _) | (None, Some("llama")) => Ok(Arch::Llama),
        (Some("MistralForCausalLM"), _) | (None, Some("mistral")) => Ok(Arch::Mistral),
        (Some("Qwen2ForCausalLM"), _) | (None, Some("qwen2")) => Ok(Arch::Qwen2),
        (Some("Qwen3ForCausalLM"), _) | (None, Some("qwen3")) => Ok(Arch::Qwen3),
        (Some("Gemma2ForCausalLM"), _) | (None, Some("gemma2")) => Ok(Arch::Gemma2),
        (Some("Phi3ForCausalLM"), _) | (None, Some("phi3")) => Ok(Arch::Phi3),
        (Some(a), _) => Err(LlmError::UnsupportedArchitecture(a.to_string())),
        (None, Some(t)) => Err(LlmError::UnsupportedArchitecture(t.to_string())),
        (None, None) => Err(LlmError::config("architectures", "missing (and no `model_type` either)")),
    }
}

/// The MLP activation: `silu` everywhere but Gemma 2 (`hidden_activation`, else `hidden_act`:
/// `gelu_pytorch_tanh`).
fn activation_of(v: &Value, arch: Arch) -> Result<Activation> {
    let field = if arch == Arch::Gemma2 && v.get("hidden_activation").is_some_and(|a| !a.is_null()) {
        "hidden_activation"
    } else {
        "hidden_act"
    };
    let (want, act) = match arch {
        Arch::Gemma2 => ("gelu_pytorch_tanh", Activation::GeluTanh),
        _ => ("silu", Activation::Silu),
    };
    match v.get(field).and_then(Value::as_str) {
        None => Ok(act),
        Some(a) if a == want => Ok(act),
        Some(a) => Err(LlmError::config(field, format!("only \"{want}\" is supported for {arch:?}, got \"{a}\""))),
    }
}

/// An optional positive number (absent or null: `None`).
fn opt_positive(v: &Value, name: &str) -> Result<Option<f64>> {
    match v.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(f) => f
            .as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .map(Some)
            .ok_or_else(|| LlmError::config(name, format!("expected a positive number or null, got {f}"))),
    }
}

/// The sliding layers: `layer_types` (`sliding_attention` / `full_attention`) when given, else
/// those that `default` picks (transformers' default `layer_types`: every even layer for Gemma 2,
/// `(i + 1) % 2` sliding; Qwen2/3's from `max_window_layers` on).
fn sliding_layers(v: &Value, num_layers: usize, default: impl Fn(usize) -> bool) -> Result<Vec<bool>> {
    let Some(types) = v.get("layer_types").filter(|t| !t.is_null()) else {
        return Ok((0..num_layers).map(default).collect());
    };
    let bad = || {
        LlmError::config(
            "layer_types",
            format!("expected {num_layers} of \"sliding_attention\" / \"full_attention\", got {types}"),
        )
    };
    let list = types.as_array().filter(|a| a.len() == num_layers).ok_or_else(bad)?;
    list.iter()
        .map(|t| match t.as_str() {
            Some("sliding_attention") => Ok(true),
            Some("full_attention") => Ok(false),
            _ => Err(bad()),
        })
        .collect()
}

fn rope_scaling_of(s: &Value, field: &str) -> Result<Option<RopeScaling>> {
    let kind = s.get("rope_type").or_else(|| s.get("type")).and_then(Value::as_str).unwrap_or("default");
    let num = |name: &str| -> Result<f64> {
        let f = s.get(name).ok_or_else(|| LlmError::config(&format!("{field}.{name}"), "missing"))?;
        f.as_f64()
            .filter(|x| x.is_finite() && *x > 0.0)
            .ok_or_else(|| LlmError::config(&format!("{field}.{name}"), format!("expected a positive number, got {f}")))
    };
    match kind {
        "default" => Ok(None),
        "linear" => Ok(Some(RopeScaling::Linear { factor: num("factor")? })),
        "llama3" => {
            let scaling = RopeScaling::Llama3 {
                factor: num("factor")?,
                low_freq_factor: num("low_freq_factor")?,
                high_freq_factor: num("high_freq_factor")?,
                original_max_position_embeddings: num("original_max_position_embeddings")? as usize,
            };
            if let RopeScaling::Llama3 { low_freq_factor, high_freq_factor, .. } = scaling {
                if high_freq_factor <= low_freq_factor {
                    return Err(LlmError::config(
                        &format!("{field}.high_freq_factor"),
                        format!("must exceed low_freq_factor ({low_freq_factor}), got {high_freq_factor}"),
                    ));
                }
            }
            Ok(Some(scaling))
        }
        "longrope" | "su" => Err(LlmError::config(
            &format!("{field}.rope_type"),
            format!("\"{kind}\" (the long-context rope of Phi-3 -128k and Phi-3.5) is not supported (supported: default, linear, llama3)"),
        )),
        other => Err(LlmError::config(
            &format!("{field}.rope_type"),
            format!("\"{other}\" is not supported (supported: default, linear, llama3)"),
        )),
    }
}

/// `bos_token_id` / `eos_token_id`: absent, null, one id or a list of ids.
pub(crate) fn token_ids(v: &Value, field: &str) -> Result<Vec<u32>> {
    let bad = |f: &Value| LlmError::config(field, format!("expected a token id or a list of ids, got {f}"));
    let one = |f: &Value| f.as_u64().filter(|&n| n <= u32::MAX as u64).map(|n| n as u32).ok_or_else(|| bad(f));
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(one).collect(),
        Some(f) => Ok(vec![one(f)?]),
    }
}

/// `float32`, `torch.bfloat16`, `f16`, ... as a kiln dtype.
fn torch_dtype(s: &str) -> Option<kiln::DType> {
    match s.trim_start_matches("torch.") {
        "float32" | "float" => Some(kiln::DType::F32),
        "float16" | "half" => Some(kiln::DType::F16),
        "bfloat16" => Some(kiln::DType::BF16),
        other => kiln::DType::parse(other),
    }
}
