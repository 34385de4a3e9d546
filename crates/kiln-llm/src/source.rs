//! One type for "a model on disk", whichever format it comes in: a Hugging Face folder
//! ([`ModelDir`]) or a GGUF file ([`GgufModel`]). Programs that accept both (the CLI, the server)
//! open a [`ModelSource`] and ask it for the config, the memory estimate, the loaded [`Model`], the
//! tokenizer, the stop tokens and the chat template, with one signature for both formats.

use crate::model::{LoadOptions, MemoryEstimate, Model};
use crate::{ChatTemplate, GgufModel, LlamaConfig, ModelDir, Result, SamplingParams, Tokenizer};
use kiln::{DType, Device};
use std::path::Path;

/// A model folder or a GGUF file, opened (config read, nothing loaded yet).
pub enum ModelSource {
    Dir(ModelDir),
    Gguf(GgufModel),
}

impl From<ModelDir> for ModelSource {
    fn from(d: ModelDir) -> ModelSource {
        ModelSource::Dir(d)
    }
}

impl From<GgufModel> for ModelSource {
    fn from(g: GgufModel) -> ModelSource {
        ModelSource::Gguf(g)
    }
}

impl ModelSource {
    /// A file ending in `.gguf` opens as GGUF, anything else as a Hugging Face folder.
    pub fn open(path: impl AsRef<Path>) -> Result<ModelSource> {
        let path = path.as_ref();
        let is_gguf = path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        Ok(if is_gguf { ModelSource::Gguf(GgufModel::open(path)?) } else { ModelSource::Dir(ModelDir::open(path)?) })
    }

    pub fn path(&self) -> &Path {
        match self {
            ModelSource::Dir(d) => &d.path,
            ModelSource::Gguf(g) => &g.path,
        }
    }

    pub fn is_gguf(&self) -> bool {
        matches!(self, ModelSource::Gguf(_))
    }

    pub fn config(&self) -> &LlamaConfig {
        match self {
            ModelSource::Dir(d) => &d.config,
            ModelSource::Gguf(g) => &g.config,
        }
    }

    /// Weights plus a KV cache of `max_context` positions.
    pub fn estimate(&self, dtype: DType, max_context: usize) -> MemoryEstimate {
        match self {
            ModelSource::Dir(d) => d.estimate(dtype, max_context),
            ModelSource::Gguf(g) => g.estimate(dtype, max_context),
        }
    }

    /// Checks that the model fits, then loads it onto `device`.
    pub fn load(&self, device: &Device, opts: LoadOptions) -> Result<Model> {
        match self {
            ModelSource::Dir(d) => d.load(device, opts),
            ModelSource::Gguf(g) => g.load(device, opts),
        }
    }

    /// Checks that each device's share fits, then loads the layers onto the devices of `placement`
    /// (one device: [`ModelSource::load`]).
    pub fn load_on(&self, placement: &crate::Placement, opts: LoadOptions) -> Result<Model> {
        match self {
            ModelSource::Dir(d) => d.load_on(placement, opts),
            ModelSource::Gguf(g) => g.load_on(placement, opts),
        }
    }

    /// The model's own tokenizer (`tokenizer.json`, or the GGUF `tokenizer.ggml.*` metadata).
    pub fn tokenizer(&self) -> Result<Tokenizer> {
        match self {
            ModelSource::Dir(d) => d.tokenizer(),
            ModelSource::Gguf(g) => g.tokenizer(),
        }
    }

    /// The ids that end generation (`tok` maps the named end tokens of a folder's configs to ids).
    pub fn stop_tokens(&self, tok: &Tokenizer) -> Result<Vec<u32>> {
        match self {
            ModelSource::Dir(d) => d.stop_tokens(tok),
            ModelSource::Gguf(g) => Ok(g.stop_tokens()),
        }
    }

    /// The sampling a program uses unless told otherwise: a folder's `generation_config.json` over
    /// [`SamplingParams::chat_defaults`]; a GGUF file, the defaults. The flag says whether the file
    /// set anything.
    pub fn sampling_defaults(&self) -> Result<(SamplingParams, bool)> {
        match self {
            ModelSource::Dir(d) => {
                Ok((SamplingParams::from_generation_config(&d.path)?, d.path.join("generation_config.json").is_file()))
            }
            ModelSource::Gguf(_) => Ok((SamplingParams::chat_defaults(), false)),
        }
    }

    pub fn chat_template(&self) -> Result<ChatTemplate> {
        match self {
            ModelSource::Dir(d) => d.chat_template(),
            ModelSource::Gguf(g) => g.chat_template(),
        }
    }
}
