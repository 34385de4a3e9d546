//! kiln-gguf: reads GGUF files (llama.cpp's model format, versions 2 and 3) for kiln.
//!
//! [`Gguf::open`] memory-maps a file and parses its header (metadata of every type, tensor infos,
//! alignment, data offsets); a truncated or corrupt file gives a [`GgufError`], never a panic.
//! Typed accessors give the Llama hyper-parameters ([`Gguf::llama_params`]) and the tokenizer
//! ([`Gguf::tokenizer`]); [`Gguf::load`] and [`Gguf::tensors`] give each tensor as a kiln
//! [`Tensor`] (f32, f16, bf16) or [`QTensor`] (Q8_0, Q4_0, Q4_K, Q6_K) on a device, and
//! [`Gguf::load_hf`] under its Hugging Face name with the Q/K row permutation undone (see
//! [`names`]).
//!
//! ```no_run
//! # fn main() -> kiln_gguf::Result<()> {
//! let file = kiln_gguf::Gguf::open("model.gguf")?;
//! let p = file.llama_params()?;
//! let dev = kiln::Device::cpu();
//! for t in file.tensors(&dev) {
//!     let (name, tensor) = t?;
//!     println!("{name}: {:?} ({} layers)", tensor.shape(), p.block_count);
//! }
//! # Ok(()) }
//! ```

mod error;
pub mod names;
mod reader;
mod value;

pub use error::{GgufError, Result};
pub use reader::{ggml_block, TensorInfo};
pub use value::{Value, ValueType};

use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, Shape, Tensor};
use reader::Header;

/// The bytes of a file: memory-mapped, or owned.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// An open GGUF file.
pub struct Gguf {
    bytes: Bytes,
    header: Header,
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Gguf(v{}, {} metadata, {} tensors, {} bytes)",
            self.header.version,
            self.header.metadata.len(),
            self.header.tensors.len(),
            self.bytes.len()
        )
    }
}

/// A tensor of a GGUF file: plain floats or quantized blocks.
#[derive(Debug, Clone)]
pub enum GgufTensor {
    Float(Tensor),
    Quant(QTensor),
}

impl GgufTensor {
    pub fn shape(&self) -> &Shape {
        match self {
            GgufTensor::Float(t) => t.shape(),
            GgufTensor::Quant(q) => q.shape(),
        }
    }
}

/// The Llama hyper-parameters (keys `{arch}.*`, where `arch` is `general.architecture`).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaParams {
    pub architecture: String,
    /// `{arch}.block_count`: layers.
    pub block_count: usize,
    /// `{arch}.embedding_length`: hidden size.
    pub embedding_length: usize,
    /// `{arch}.attention.head_count`.
    pub head_count: usize,
    /// `{arch}.attention.head_count_kv` (defaults to `head_count`).
    pub head_count_kv: usize,
    /// `{arch}.rope.freq_base` (defaults to 10000).
    pub rope_freq_base: f32,
    /// `{arch}.attention.layer_norm_rms_epsilon`.
    pub rms_norm_eps: f32,
    /// `{arch}.context_length`.
    pub context_length: usize,
    /// `{arch}.feed_forward_length`: MLP hidden size.
    pub feed_forward_length: usize,
    /// `{arch}.rope.dimension_count` (defaults to `embedding_length / head_count`).
    pub rope_dimension_count: usize,
}

/// The tokenizer metadata (`tokenizer.ggml.*`).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenizerMeta {
    /// `tokenizer.ggml.model`: `llama` (SentencePiece), `gpt2` (byte-level BPE), ...
    pub model: String,
    pub tokens: Vec<String>,
    /// BPE merges (`"a b"`); empty when the file has none.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.token_type` (1 normal, 2 unknown, 3 control, 4 user defined, 5 unused,
    /// 6 byte); empty when absent.
    pub token_types: Vec<i32>,
    pub scores: Vec<f32>,
    pub bos_id: Option<u32>,
    pub eos_id: Option<u32>,
}

impl Gguf {
    /// Memory-maps and parses the file at `path`.
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.display().to_string(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; like every reader of memory-mapped files we rely on the
        // file not being truncated or rewritten by another process while it is open.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Gguf::parse(Bytes::Mapped(map))
    }

    /// Parses GGUF bytes held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Gguf> {
        Gguf::parse(Bytes::Owned(bytes))
    }

    fn parse(bytes: Bytes) -> Result<Gguf> {
        let header = reader::parse(&bytes)?;
        Ok(Gguf { bytes, header })
    }

    /// The format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }
    /// `general.alignment` (32 when absent).
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }
    /// Byte offset of the data section.
    pub fn data_offset(&self) -> u64 {
        self.header.data_offset
    }
    /// Every metadata key and value, in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.header.metadata
    }
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.header.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn need(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::Metadata { key: key.into(), msg: "missing".into() })
    }
    fn wrong(key: &str, v: &Value, want: &str) -> GgufError {
        GgufError::Metadata { key: key.into(), msg: format!("is {v}, not {want}") }
    }

    /// An integer value that fits a `usize`.
    pub fn get_usize(&self, key: &str) -> Result<usize> {
        let v = self.need(key)?;
        v.to_u64().and_then(|x| usize::try_from(x).ok()).ok_or_else(|| Gguf::wrong(key, v, "a non-negative integer"))
    }
    /// A float value (integers converted).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.need(key)?;
        v.to_f64().map(|x| x as f32).ok_or_else(|| Gguf::wrong(key, v, "a number"))
    }
    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.need(key)?;
        v.as_str().ok_or_else(|| Gguf::wrong(key, v, "a string"))
    }
    /// An array of strings.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<String>> {
        let v = self.need(key)?;
        let items = v.as_array().ok_or_else(|| Gguf::wrong(key, v, "an array of strings"))?;
        items
            .iter()
            .map(|i| i.as_str().map(String::from).ok_or_else(|| Gguf::wrong(key, v, "an array of strings")))
            .collect()
    }
    /// An array of integers (each fitting an i64).
    pub fn get_int_array(&self, key: &str) -> Result<Vec<i64>> {
        let v = self.need(key)?;
        let items = v.as_array().ok_or_else(|| Gguf::wrong(key, v, "an array of integers"))?;
        items.iter().map(|i| i.to_i64().ok_or_else(|| Gguf::wrong(key, v, "an array of integers"))).collect()
    }

    /// `general.architecture` (`llama` when absent).
    pub fn architecture(&self) -> Result<String> {
        match self.get("general.architecture") {
            None => Ok("llama".into()),
            Some(_) => Ok(self.get_str("general.architecture")?.to_string()),
        }
    }

    /// The Llama hyper-parameters.
    pub fn llama_params(&self) -> Result<LlamaParams> {
        let a = self.architecture()?;
        let k = |s: &str| format!("{a}.{s}");
        let head_count = self.get_usize(&k("attention.head_count"))?;
        let embedding_length = self.get_usize(&k("embedding_length"))?;
        let opt_usize = |key: &str, default: usize| match self.get(key) {
            None => Ok(default),
            Some(_) => self.get_usize(key),
        };
        if head_count == 0 {
            return Err(GgufError::Metadata { key: k("attention.head_count"), msg: "is 0".into() });
        }
        Ok(LlamaParams {
            block_count: self.get_usize(&k("block_count"))?,
            embedding_length,
            head_count,
            head_count_kv: opt_usize(&k("attention.head_count_kv"), head_count)?,
            rope_freq_base: match self.get(&k("rope.freq_base")) {
                None => 10000.0,
                Some(_) => self.get_f32(&k("rope.freq_base"))?,
            },
            rms_norm_eps: self.get_f32(&k("attention.layer_norm_rms_epsilon"))?,
            context_length: self.get_usize(&k("context_length"))?,
            feed_forward_length: self.get_usize(&k("feed_forward_length"))?,
            rope_dimension_count: opt_usize(&k("rope.dimension_count"), embedding_length / head_count)?,
            architecture: a,
        })
    }

    /// The tokenizer metadata.
    pub fn tokenizer(&self) -> Result<TokenizerMeta> {
        let opt_id = |key: &str| match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .to_u64()
                .and_then(|x| u32::try_from(x).ok())
                .map(Some)
                .ok_or_else(|| Gguf::wrong(key, v, "a token id")),
        };
        let token_types = match self.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(v) => self
                .get_int_array("tokenizer.ggml.token_type")?
                .into_iter()
                .map(|t| i32::try_from(t).map_err(|_| Gguf::wrong("tokenizer.ggml.token_type", v, "i32 token types")))
                .collect::<Result<_>>()?,
        };
        let scores = match self.get("tokenizer.ggml.scores") {
            None => Vec::new(),
            Some(v) => {
                let items =
                    v.as_array().ok_or_else(|| Gguf::wrong("tokenizer.ggml.scores", v, "an array of floats"))?;
                items
                    .iter()
                    .map(|i| {
                        i.to_f64()
                            .map(|x| x as f32)
                            .ok_or_else(|| Gguf::wrong("tokenizer.ggml.scores", v, "an array of floats"))
                    })
                    .collect::<Result<_>>()?
            }
        };
        Ok(TokenizerMeta {
            model: self.get_str("tokenizer.ggml.model")?.to_string(),
            tokens: self.get_str_array("tokenizer.ggml.tokens")?,
            merges: match self.get("tokenizer.ggml.merges") {
                None => Vec::new(),
                Some(_) => self.get_str_array("tokenizer.ggml.merges")?,
            },
            token_types,
            scores,
            bos_id: opt_id("tokenizer.ggml.bos_token_id")?,
            eos_id: opt_id("tokenizer.ggml.eos_token_id")?,
        })
    }

    /// The tensor infos, in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.header.tensors
    }
    /// The info of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of a tensor (ggml's layout).
    pub fn tensor_bytes(&self, info: &TensorInfo) -> Result<&[u8]> {
        if ggml_block(info.ggml_type).is_none() {
            return Err(GgufError::Unsupported(format!("tensor {} has ggml type {}", info.name, info.ggml_type)));
        }
        // parse() checked that the range lies inside the file.
        let start = (self.header.data_offset + info.offset) as usize;
        Ok(&self.bytes[start..start + info.size as usize])
    }

    /// Tensor `name` on `device`.
    pub fn load(&self, name: &str, device: &Device) -> Result<GgufTensor> {
        let info = self
            .tensor_info(name)
            .ok_or_else(|| GgufError::Metadata { key: name.into(), msg: "no such tensor".into() })?;
        self.load_info(info, device, None)
    }

    /// Every tensor, in file order, under its GGUF name.
    pub fn tensors<'a>(&'a self, device: &'a Device) -> impl Iterator<Item = Result<(String, GgufTensor)>> + 'a {
        self.header.tensors.iter().map(move |i| Ok((i.name.clone(), self.load_info(i, device, None)?)))
    }

    /// Every tensor with a Hugging Face name (see [`names`]), under that name, with the rows of the
    /// query and key weights put back in Hugging Face order (so half-split `rope` applies).
    pub fn load_hf<'a>(
        &'a self,
        device: &'a Device,
    ) -> Result<impl Iterator<Item = Result<(String, GgufTensor)>> + 'a> {
        self.load_hf_on(move |_| device)
    }

    /// [`Gguf::load_hf`] with each tensor read straight onto `device_of(its Hugging Face name)` (a
    /// model split over several devices).
    pub fn load_hf_on<'a>(
        &'a self,
        device_of: impl Fn(&str) -> &'a Device + 'a,
    ) -> Result<impl Iterator<Item = Result<(String, GgufTensor)>> + 'a> {
        let p = self.llama_params()?;
        Ok(self.header.tensors.iter().filter_map(move |i| {
            let hf = names::hf_name(&i.name)?;
            let heads = names::qk_heads(&i.name, p.head_count, p.head_count_kv);
            Some(self.load_info(i, device_of(&hf), heads).map(|t| (hf, t)))
        }))
    }

    fn load_info(&self, info: &TensorInfo, device: &Device, unpermute: Option<usize>) -> Result<GgufTensor> {
        let bytes = self.tensor_bytes(info)?;
        let owned;
        let bytes = match unpermute {
            None => bytes,
            Some(heads) => {
                let rows = info.shape.first().copied().unwrap_or(1);
                let bad = || {
                    GgufError::Corrupt(format!(
                        "tensor {} of shape {:?} does not split into {heads} heads of even size",
                        info.name, info.shape
                    ))
                };
                if info.shape.len() != 2 {
                    return Err(bad());
                }
                owned = names::unpermute_rows(bytes, rows, bytes.len() / rows.max(1), heads).ok_or_else(bad)?;
                &owned[..]
            }
        };
        let shape = info.shape.clone();
        Ok(match info.ggml_type {
            // The file's bytes straight onto the device (no typed copy on the way to a GPU).
            0 => GgufTensor::Float(Tensor::from_le_bytes(bytes, DType::F32, shape, device)?),
            1 => GgufTensor::Float(Tensor::from_le_bytes(bytes, DType::F16, shape, device)?),
            30 => GgufTensor::Float(Tensor::from_le_bytes(bytes, DType::BF16, shape, device)?),
            t => match QuantType::from_ggml_type(t) {
                Some(q) => GgufTensor::Quant(QTensor::from_raw(bytes, q, shape, device)?),
                None => {
                    return Err(GgufError::Unsupported(format!(
                        "tensor {} has ggml type {t}; kiln reads f32, f16, bf16, {}",
                        info.name,
                        QuantType::ALL.map(|q| q.name()).join(", ")
                    )))
                }
            },
        })
    }
}
