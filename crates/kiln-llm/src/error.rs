//! One error type for loading and running models: each variant names the file, field or tensor.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// A file the model folder must hold is not there.
    #[error("missing file {path}: {why}")]
    MissingFile { path: PathBuf, why: String },
    /// A file could not be read or parsed.
    #[error("cannot read {path}: {msg}")]
    BadFile { path: PathBuf, msg: String },
    /// A field of `config.json` (or another JSON file) is missing or has a bad value.
    #[error("{file}: field `{field}`: {msg}")]
    Config { file: &'static str, field: String, msg: String },
    /// The architecture is not one kiln-llm implements.
    #[error("unsupported architecture '{0}' (config.json `architectures`/`model_type`); supported: Llama (LlamaForCausalLM, incl. Llama 3 and SmolLM), Mistral (MistralForCausalLM), Qwen2 (Qwen2ForCausalLM), Qwen3 (Qwen3ForCausalLM), Gemma 2 (Gemma2ForCausalLM), Phi-3 (Phi3ForCausalLM)")]
    UnsupportedArchitecture(String),
    /// A weight tensor is missing or has the wrong shape or dtype.
    #[error("weight `{name}`: {msg}")]
    Weight { name: String, msg: String },
    /// The model and its KV cache do not fit.
    #[error("out of memory: {0}")]
    Memory(String),
    /// Tokenizer or chat-template errors.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// The model computed NaN or infinite logits.
    #[error("{0}")]
    NonFinite(String),
    /// Bad generation or sampling arguments.
    #[error("{0}")]
    Arg(String),
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
}

pub type Result<T> = std::result::Result<T, LlmError>;

impl LlmError {
    pub(crate) fn config(field: &str, msg: impl Into<String>) -> LlmError {
        LlmError::Config { file: "config.json", field: field.to_string(), msg: msg.into() }
    }
    pub(crate) fn weight(name: &str, msg: impl Into<String>) -> LlmError {
        LlmError::Weight { name: name.to_string(), msg: msg.into() }
    }
}
