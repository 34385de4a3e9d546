//! The GGUF reader's error type.

/// Why a GGUF file could not be read or a tensor not loaded.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    #[error("gguf: cannot open {path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// The file ends before a field that the header says is there.
    #[error("gguf: truncated file: {what} at byte {offset} needs {needed} bytes, {left} left")]
    Truncated { what: String, offset: usize, needed: u64, left: usize },
    /// A field with a value the format does not allow.
    #[error("gguf: corrupt file: {0}")]
    Corrupt(String),
    /// A valid file using something this reader does not support.
    #[error("gguf: unsupported: {0}")]
    Unsupported(String),
    /// A metadata key that is missing or has another type than asked for.
    #[error("gguf: metadata key {key}: {msg}")]
    Metadata { key: String, msg: String },
    /// An error of kiln while making a tensor.
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
}

pub type Result<T> = std::result::Result<T, GgufError>;
