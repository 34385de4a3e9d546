//! `tokenizer.json` through the `tokenizers` crate, special tokens from `tokenizer_config.json` and
//! `generation_config.json`, and a [`TokenStream`] that turns tokens into text as they come.

use crate::{LlmError, Result};
use serde_json::Value;
use std::path::Path;

pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
}

impl Tokenizer {
    /// Reads `DIR/tokenizer.json`.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(LlmError::MissingFile {
                path,
                why: "kiln-llm needs the Hugging Face fast tokenizer file tokenizer.json".into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(&path)
            .map_err(|e| LlmError::BadFile { path: path.clone(), msg: e.to_string() })?;
        Ok(Tokenizer { inner })
    }

    /// Reads a `tokenizer.json` file (`kiln generate --tokenizer FILE`).
    pub fn from_file(path: &Path) -> Result<Tokenizer> {
        let inner = tokenizers::Tokenizer::from_file(path)
            .map_err(|e| LlmError::BadFile { path: path.to_path_buf(), msg: e.to_string() })?;
        Ok(Tokenizer { inner })
    }

    /// Wraps a tokenizer built in code (the GGUF tokenizer metadata).
    pub(crate) fn from_inner(inner: tokenizers::Tokenizer) -> Tokenizer {
        Tokenizer { inner }
    }

    /// Token ids of `text`; `add_special` adds what the tokenizer's post-processor adds (e.g. BOS).
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, add_special).map_err(|e| LlmError::Tokenizer(e.to_string()))?;
        Ok(enc.get_ids().to_vec())
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner.decode(ids, skip_special).map_err(|e| LlmError::Tokenizer(e.to_string()))
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// Checks that this tokenizer belongs to a model whose embedding has `rows` rows: its ids must
    /// all have a row, and it must cover all but a padding of the rows (models round the embedding
    /// up: Qwen2 has 151,936 rows for 151,665 tokens, Phi-3 32,064 for 32,011), else the text is
    /// garbage without any other error.
    pub fn check_vocab(&self, rows: usize) -> Result<()> {
        let n = self.vocab_size();
        if n > rows || n < rows - rows / 8 {
            return Err(LlmError::Tokenizer(format!(
                "the tokenizer has {n} tokens but the model's embedding has {rows} rows: it is not this \
                 model's tokenizer (pass the tokenizer.json of the model the weights come from)"
            )));
        }
        Ok(())
    }
}

/// A token written in `tokenizer_config.json`: a string or `{"content": "..."}`.
pub(crate) fn special_token(v: &Value, field: &str) -> Option<String> {
    match v.get(field)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// Reads an optional JSON file of the model folder (`None` when absent).
pub(crate) fn read_json(dir: &Path, name: &str) -> Result<Option<Value>> {
    let path = dir.join(name);
    if !path.exists() {
        return Ok(None);
    }
    let bad = |msg: String| LlmError::BadFile { path: path.clone(), msg };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&text).map(Some).map_err(|e| bad(e.to_string()))
}

/// Every id that ends generation: `eos_token_id` of config.json and generation_config.json and the
/// `eos_token` of tokenizer_config.json.
pub fn stop_tokens(dir: &Path, config_eos: &[u32], tok: &Tokenizer) -> Result<Vec<u32>> {
    let mut ids = config_eos.to_vec();
    if let Some(g) = read_json(dir, "generation_config.json")? {
        ids.extend(crate::config::token_ids(&g, "eos_token_id")?);
    }
    if let Some(c) = read_json(dir, "tokenizer_config.json")? {
        if let Some(id) = special_token(&c, "eos_token").and_then(|t| tok.token_to_id(&t)) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Turns a stream of token ids into text pieces: each call returns the text the new token completes
/// (nothing while a multi-byte character is still incomplete).
pub struct TokenStream<'a> {
    tok: &'a Tokenizer,
    ids: Vec<u32>,
    printed: usize,
}

impl<'a> TokenStream<'a> {
    pub fn new(tok: &'a Tokenizer) -> TokenStream<'a> {
        TokenStream { tok, ids: Vec::new(), printed: 0 }
    }

    pub fn push(&mut self, id: u32) -> Result<String> {
        self.ids.push(id);
        let text = self.tok.decode(&self.ids, true)?;
        if text.ends_with('\u{FFFD}') || text.len() <= self.printed || !text.is_char_boundary(self.printed) {
            return Ok(String::new());
        }
        let piece = text[self.printed..].to_string();
        self.printed = text.len();
        Ok(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::Tokenizer;
    use std::path::Path;

    #[test]
    fn vocabulary_must_match_the_embedding_up_to_padding() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama");
        let tok = Tokenizer::from_dir(&dir).unwrap();
        assert_eq!(tok.vocab_size(), 320);
        assert!(tok.check_vocab(320).is_ok());
        // Padded embeddings (Qwen2 rounds 151,665 tokens up to 151,936 rows).
        assert!(tok.check_vocab(352).is_ok());
        let e = tok.check_vocab(49152).unwrap_err().to_string();
        assert!(e.contains("320 tokens") && e.contains("49152 rows"), "{e}");
        // Ids past the embedding's rows.
        assert!(tok.check_vocab(256).is_err());
    }
}
