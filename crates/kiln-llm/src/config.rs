//! `config.json` of a Hugging Face Llama-family model: one [`LlamaConfig`] with switches for Llama
//! 2/3, Mistral, Qwen2 and SmolLM. Every missing or bad field is an error naming the field.

use crate::{LlmError, Result};
use serde_json::Value;
use std::path::Path;

/// Which member of the Llama family (they differ only in switches kept in [`LlamaConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Mistral,
    Qwen2,
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
    /// Mistral's sliding attention window: the cache is never longer than this.
    pub sliding_window: Option<usize>,
    pub tie_word_embeddings: bool,
    /// Bias on the q/k/v projections (Qwen2 always; Llama with `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the output projection (Llama with `attention_bias`).
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// The dtype the weights were saved in (`torch_dtype` or `dtype`), if stated.
    pub saved_dtype: Option<kiln::DType>,
}

impl LlamaConfig {
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
        if let Some(act) = v.get("hidden_act").and_then(Value::as_str) {
            if act != "silu" {
                return Err(LlmError::config("hidden_act", format!("only \"silu\" is supported, got \"{act}\"")));
            }
        }
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
        let attention_bias = bool_field("attention_bias", false)?;
        let sliding_window = match arch {
            Arch::Mistral => opt_usize("sliding_window")?,
            Arch::Qwen2 if bool_field("use_sliding_window", false)? => opt_usize("sliding_window")?,
            _ => None,
        };
        Ok(LlamaConfig {
            arch,
            vocab_size: usize_field("vocab_size")?,
            hidden_size,
            intermediate_size: usize_field("intermediate_size")?,
            num_layers: usize_field("num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            rms_norm_eps: f64_field("rms_norm_eps", Some(1e-6))?,
            rope_theta,
            rope_scaling,
            max_position_embeddings: opt_usize("max_position_embeddings")?.unwrap_or(4096),
            sliding_window,
            tie_word_embeddings: bool_field("tie_word_embeddings", false)?,
            qkv_bias: arch == Arch::Qwen2 || attention_bias,
            o_bias: attention_bias,
            mlp_bias: bool_field("mlp_bias", false)?,
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
        (Some(a), _) => Err(LlmError::UnsupportedArchitecture(a.to_string())),
        (None, Some(t)) => Err(LlmError::UnsupportedArchitecture(t.to_string())),
        (None, None) => Err(LlmError::config("architectures", "missing (and no `model_type` either)")),
    }
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
