//! kiln-llm: Llama-family LLM inference on kiln (Llama 2/3, Mistral, Qwen2/2.5/3, SmolLM, Gemma 2,
//! Phi-3) from Hugging Face model folders: `config.json`, safetensors weights (memory-mapped,
//! sharded or not), `tokenizer.json`, the chat template of `tokenizer_config.json`.
//!
//! ```no_run
//! # fn main() -> kiln_llm::Result<()> {
//! use kiln_llm::{GenerateOptions, LoadOptions, ModelDir};
//! let dir = ModelDir::open("path/to/model")?;
//! let dev = kiln::Device::cpu();
//! let model = dir.load(&dev, LoadOptions { dtype: kiln::DType::F32, max_context: 512, progress: None })?;
//! let tok = dir.tokenizer()?;
//! let prompt = tok.encode("Once upon a time", true)?;
//! let opts = GenerateOptions { max_tokens: 20, sampling: Default::default(), seed: 0, stop_tokens: vec![] };
//! let (ids, _stats) = kiln_llm::generate(&model, &mut model.new_cache(), &prompt, &opts, |_| Ok(()))?;
//! println!("{}", tok.decode(&ids, true)?);
//! # Ok(()) }
//! ```

pub mod chat;
pub mod config;
pub mod embedding;
mod error;
pub mod generate;
pub mod gguf;
pub mod memory;
pub mod model;
pub mod paged;
pub mod placement;
pub mod rope;
pub mod sampling;
pub mod source;
pub mod tokenizer;
pub mod weights;

pub use chat::{ChatTemplate, Message};
pub use config::{Activation, Arch, Gemma2Params, LlamaConfig, RopeScaling};
pub use error::{LlmError, Result};
pub use generate::{decode_greedy, generate, GenerateOptions, GenerateStats};
pub use gguf::GgufModel;
pub use model::{estimate_memory, BatchSeq, Cache, LoadOptions, MemoryEstimate, Model, SeqKv};
pub use placement::Placement;
pub use sampling::{Sampler, SamplingParams};
pub use source::ModelSource;
pub use tokenizer::{TokenStream, Tokenizer};
pub use weights::{SafetensorsDir, TensorMeta, WeightSource};

use std::path::{Path, PathBuf};

/// A Hugging Face model folder: its config and memory-mapped weights.
pub struct ModelDir {
    pub path: PathBuf,
    pub config: LlamaConfig,
    pub weights: SafetensorsDir,
}

impl ModelDir {
    /// Reads `config.json` and maps the safetensors files (nothing is copied yet).
    pub fn open(path: impl AsRef<Path>) -> Result<ModelDir> {
        let path = path.as_ref().to_path_buf();
        if path.is_file() {
            return Err(LlmError::Arg(format!(
                "{} is a file, not a model folder: pass the folder that holds config.json, tokenizer.json \
                 and the safetensors weights (or a .gguf file)",
                path.display()
            )));
        }
        if !path.is_dir() {
            return Err(LlmError::MissingFile { path, why: "no such model folder".into() });
        }
        let config = LlamaConfig::from_dir(&path)?;
        let weights = SafetensorsDir::open(&path)?;
        Ok(ModelDir { path, config, weights })
    }

    /// Weights plus a KV cache of `max_context` positions (clamped like [`Model::load`] does).
    pub fn estimate(&self, dtype: kiln::DType, max_context: usize) -> MemoryEstimate {
        let ctx = model::effective_context(&self.config, max_context);
        estimate_memory(&self.config, &self.weights, dtype, ctx)
    }

    /// Checks that the model fits, then loads it onto `device`.
    pub fn load(&self, device: &kiln::Device, opts: LoadOptions) -> Result<Model> {
        memory::check_fits(&self.estimate(opts.dtype, opts.max_context), device)?;
        Model::load(self.config.clone(), &self.weights, device, opts)
    }

    /// Checks that each device's share fits, then loads the layers onto the devices of `placement`.
    pub fn load_on(&self, placement: &Placement, opts: LoadOptions) -> Result<Model> {
        placement.check_fits(&self.estimate(opts.dtype, opts.max_context))?;
        Model::load_on(self.config.clone(), &self.weights, placement, opts)
    }

    pub fn tokenizer(&self) -> Result<Tokenizer> {
        Tokenizer::from_dir(&self.path)
    }

    /// The ids that end generation (config, generation config, tokenizer config).
    pub fn stop_tokens(&self, tok: &Tokenizer) -> Result<Vec<u32>> {
        tokenizer::stop_tokens(&self.path, &self.config.eos_token_ids, tok)
    }

    pub fn chat_template(&self) -> Result<ChatTemplate> {
        ChatTemplate::from_dir(&self.path)
    }
}
