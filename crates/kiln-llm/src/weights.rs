//! Named weight tensors behind a small trait ([`WeightSource`]), so the model does not care where
//! weights come from. [`SafetensorsDir`] reads a Hugging Face folder (`model.safetensors` or the shards
//! of `model.safetensors.index.json`) through memory maps; a GGUF reader can implement the same trait.

use crate::{LlmError, Result};
use kiln::{DType, Device, Tensor};
use memmap2::Mmap;
use safetensors::tensor::{Dtype as StDtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Shape and stored dtype of one named tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorMeta {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

impl TensorMeta {
    pub fn elem_count(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Where a model's named tensors come from.
pub trait WeightSource {
    /// Shape and dtype of tensor `name`, `None` if there is no such tensor.
    fn meta(&self, name: &str) -> Option<TensorMeta>;
    /// Tensor `name` on `device`, converted to `dtype` (a float dtype).
    fn load(&self, name: &str, dtype: DType, device: &Device) -> Result<Tensor>;
    /// All tensor names, sorted.
    fn names(&self) -> Vec<String>;
}

struct Entry {
    file: usize,
    meta: TensorMeta,
    /// Byte range inside the memory-mapped file.
    start: usize,
    end: usize,
}

/// The safetensors files of a Hugging Face model folder, memory-mapped.
pub struct SafetensorsDir {
    files: Vec<(PathBuf, Mmap)>,
    entries: HashMap<String, Entry>,
}

impl SafetensorsDir {
    /// Opens `DIR/model.safetensors`, or every shard named in `DIR/model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<SafetensorsDir> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let paths = if index.exists() {
            shard_paths(&index, dir)?
        } else if single.exists() {
            vec![single]
        } else {
            return Err(LlmError::MissingFile {
                path: single,
                why: format!(
                    "the model folder needs model.safetensors or model.safetensors.index.json (in {})",
                    dir.display()
                ),
            });
        };
        SafetensorsDir::open_files(paths)
    }

    /// One safetensors file.
    pub fn open_file(path: &Path) -> Result<SafetensorsDir> {
        SafetensorsDir::open_files(vec![path.to_path_buf()])
    }

    fn open_files(paths: Vec<PathBuf>) -> Result<SafetensorsDir> {
        let mut files = Vec::new();
        let mut entries = HashMap::new();
        for (i, path) in paths.into_iter().enumerate() {
            let bad = |msg: String| LlmError::BadFile { path: path.clone(), msg };
            let file =
                File::open(&path).map_err(|e| LlmError::MissingFile { path: path.clone(), why: e.to_string() })?;
            // SAFETY: the map is read-only; like every mmap reader we assume nobody truncates the file meanwhile.
            let mmap = unsafe { Mmap::map(&file) }.map_err(|e| bad(e.to_string()))?;
            let (header_len, metadata) = SafeTensors::read_metadata(&mmap).map_err(|e| bad(e.to_string()))?;
            let data_start = 8 + header_len;
            for (name, info) in metadata.tensors() {
                let dtype = kiln_dtype(info.dtype).ok_or_else(|| {
                    LlmError::weight(
                        &name,
                        format!("stored as {:?} in {}: kiln-llm reads f32, f16 and bf16", info.dtype, path.display()),
                    )
                })?;
                let (s, e) = info.data_offsets;
                let meta = TensorMeta { shape: info.shape.clone(), dtype };
                if e - s != meta.elem_count() * dtype.size_in_bytes() || data_start + e > mmap.len() {
                    return Err(bad(format!("tensor `{name}` has a bad byte range {s}..{e}")));
                }
                entries.insert(name, Entry { file: i, meta, start: data_start + s, end: data_start + e });
            }
            files.push((path, mmap));
        }
        Ok(SafetensorsDir { files, entries })
    }

    /// Total bytes of all tensors as stored.
    pub fn stored_bytes(&self) -> u64 {
        self.entries.values().map(|e| (e.end - e.start) as u64).sum()
    }
}

fn shard_paths(index: &Path, dir: &Path) -> Result<Vec<PathBuf>> {
    let bad = |msg: String| LlmError::BadFile { path: index.to_path_buf(), msg };
    let text = std::fs::read_to_string(index).map_err(|e| bad(e.to_string()))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = v.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| LlmError::Config {
        file: "model.safetensors.index.json",
        field: "weight_map".into(),
        msg: "missing or not an object".into(),
    })?;
    let mut shards: BTreeMap<String, ()> = BTreeMap::new();
    for (name, f) in map {
        let f = f.as_str().ok_or_else(|| LlmError::Config {
            file: "model.safetensors.index.json",
            field: format!("weight_map.{name}"),
            msg: format!("expected a file name, got {f}"),
        })?;
        shards.insert(f.to_string(), ());
    }
    Ok(shards.into_keys().map(|f| dir.join(f)).collect())
}

fn kiln_dtype(d: StDtype) -> Option<DType> {
    match d {
        StDtype::F32 => Some(DType::F32),
        StDtype::F16 => Some(DType::F16),
        StDtype::BF16 => Some(DType::BF16),
        _ => None,
    }
}

impl WeightSource for SafetensorsDir {
    fn meta(&self, name: &str) -> Option<TensorMeta> {
        self.entries.get(name).map(|e| e.meta.clone())
    }

    fn load(&self, name: &str, dtype: DType, device: &Device) -> Result<Tensor> {
        let e = self.entries.get(name).ok_or_else(|| LlmError::weight(name, "not found in the safetensors files"))?;
        let bytes = &self.files[e.file].1[e.start..e.end];
        let shape = e.meta.shape.clone();
        // Upload in the stored dtype (fewest bytes), then convert on the device.
        let t = match e.meta.dtype {
            d @ (DType::F32 | DType::F16 | DType::BF16) => Tensor::from_le_bytes(bytes, d, shape, device)?,
            other => return Err(LlmError::weight(name, format!("cannot read dtype {other}"))),
        };
        if t.dtype() == dtype {
            Ok(t)
        } else {
            Ok(t.to_dtype(dtype)?)
        }
    }

    fn names(&self) -> Vec<String> {
        let mut n: Vec<String> = self.entries.keys().cloned().collect();
        n.sort();
        n
    }
}
