//! The OpenAI request bodies kiln understands, their checks (a clear 400 for anything it cannot do),
//! and the error body shape.

use serde::Deserialize;
use serde_json::{json, Value};

/// An OpenAI-style error: HTTP status and body `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<&'static str>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> ApiError {
        ApiError { status: 400, message: message.into(), kind: "invalid_request_error", param, code: None }
    }
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// `stop`: one string or a list of up to 4.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// A chat message: `content` is a string or a list of `{"type": "text", "text": ...}` parts.
#[derive(Debug, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// `prompt` of /v1/completions: a string, or a list holding one string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// The fields both endpoints share. Unknown fields are ignored (clients send many, such as `user`
/// and `metadata`); known ones of the wrong type, and known ones asking for what kiln cannot do, are
/// a 400.
#[derive(Debug, Deserialize)]
pub struct Common {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<i64>,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<Stop>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    #[serde(default)]
    pub n: Option<i64>,
    #[serde(default)]
    pub logprobs: Option<Value>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub best_of: Option<i64>,
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    #[serde(default)]
    pub logit_bias: Option<Value>,
    #[serde(default)]
    pub tools: Option<Value>,
    #[serde(default)]
    pub suffix: Option<Value>,
    #[serde(default)]
    pub top_k: Option<i64>,
    #[serde(default)]
    pub min_p: Option<f64>,
    #[serde(default)]
    pub response_format: Option<Value>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub functions: Option<Value>,
    #[serde(default)]
    pub function_call: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    #[serde(flatten)]
    pub common: Common,
}

#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    #[serde(flatten)]
    pub common: Common,
}

/// The checked generation settings of a request.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `None`: until a stop token or the end of the context.
    pub max_tokens: Option<usize>,
    pub temperature: f64,
    pub top_p: Option<f64>,
    /// Keep only the `k` most likely tokens (`None`: all).
    pub top_k: Option<usize>,
    /// Keep only the tokens at least `min_p` times as likely as the most likely (`None`: all).
    pub min_p: Option<f64>,
    pub seed: u64,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
}

/// Parses a JSON body into `T`, as a 400 naming what is wrong.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not valid JSON: {e}"), None))?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object", None));
    }
    serde_json::from_value(v).map_err(|e| ApiError::bad_request(format!("invalid request: {e}"), None))
}

impl Common {
    /// Checks every field kiln acts on and refuses the ones it cannot honour.
    pub fn settings(&self) -> Result<Settings, ApiError> {
        if let Some(n) = self.n {
            if n != 1 {
                return Err(ApiError::bad_request(
                    format!("n must be 1 (kiln returns one choice), got {n}"),
                    Some("n"),
                ));
            }
        }
        if let Some(b) = self.best_of {
            if b != 1 {
                return Err(ApiError::bad_request(format!("best_of must be 1, got {b}"), Some("best_of")));
            }
        }
        if matches!(&self.logprobs, Some(v) if !(v.is_null() || *v == Value::Bool(false))) {
            return Err(ApiError::bad_request("logprobs are not supported", Some("logprobs")));
        }
        if self.echo == Some(true) {
            return Err(ApiError::bad_request("echo is not supported", Some("echo")));
        }
        if matches!(&self.tools, Some(v) if !v.is_null()) {
            return Err(ApiError::bad_request("tools are not supported", Some("tools")));
        }
        if matches!(&self.tool_choice, Some(v) if !(v.is_null() || v == "none")) {
            return Err(ApiError::bad_request("tool_choice is not supported (only \"none\")", Some("tool_choice")));
        }
        for (name, v) in [("functions", &self.functions), ("function_call", &self.function_call)] {
            if matches!(v, Some(v) if !(v.is_null() || v == "none")) {
                return Err(ApiError::bad_request(format!("{name} is not supported"), None));
            }
        }
        if matches!(&self.response_format, Some(v) if !(v.is_null() || v["type"] == "text")) {
            return Err(ApiError::bad_request(
                "response_format is not supported (only {\"type\": \"text\"})",
                Some("response_format"),
            ));
        }
        if matches!(&self.suffix, Some(v) if !v.is_null()) {
            return Err(ApiError::bad_request("suffix is not supported", Some("suffix")));
        }
        if matches!(&self.logit_bias, Some(v) if !(v.is_null() || v.as_object().is_some_and(|m| m.is_empty()))) {
            return Err(ApiError::bad_request("logit_bias is not supported", Some("logit_bias")));
        }
        for (name, p) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if p.is_some_and(|x| x != 0.0) {
                return Err(ApiError::bad_request(format!("{name} is not supported (only 0)"), None));
            }
        }
        let max_tokens = match self.max_completion_tokens.or(self.max_tokens) {
            None => None,
            Some(m) if m <= 0 => {
                return Err(ApiError::bad_request(
                    format!("max_tokens must be at least 1, got {m}"),
                    Some("max_tokens"),
                ))
            }
            Some(m) => Some(m as usize),
        };
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
            return Err(ApiError::bad_request(
                format!("temperature must be in [0, 2], got {temperature}"),
                Some("temperature"),
            ));
        }
        let top_p = match self.top_p {
            Some(p) if !(p > 0.0 && p <= 1.0) => {
                return Err(ApiError::bad_request(format!("top_p must be in (0, 1], got {p}"), Some("top_p")))
            }
            Some(p) if p < 1.0 => Some(p),
            _ => None,
        };
        // llama.cpp's and vLLM's convention: 0 or a negative k keeps every token.
        let top_k = self.top_k.filter(|&k| k > 0).map(|k| k as usize);
        // llama.cpp's and vLLM's min_p: in [0, 1], 0 keeps every token.
        let min_p = match self.min_p {
            Some(p) if !(0.0..=1.0).contains(&p) => {
                return Err(ApiError::bad_request(format!("min_p must be in [0, 1], got {p}"), Some("min_p")))
            }
            Some(p) if p > 0.0 => Some(p),
            _ => None,
        };
        let stop = match &self.stop {
            None => vec![],
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > 4 || stop.iter().any(String::is_empty) {
            return Err(ApiError::bad_request("stop takes at most 4 non-empty strings", Some("stop")));
        }
        Ok(Settings {
            max_tokens,
            temperature,
            top_p,
            top_k,
            min_p,
            seed: self.seed.unwrap_or(0) as u64,
            stop,
            stream: self.stream.unwrap_or(false),
            include_usage: self.stream_options.as_ref().is_some_and(|o| o.include_usage),
        })
    }
}

impl ChatMessage {
    /// The text of the message (text parts joined); other part types are a 400.
    pub fn text(&self) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(s)) => Ok(s.clone()),
            Some(Content::Parts(parts)) => {
                let mut s = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => s.push_str(t),
                        (k, _) => {
                            return Err(ApiError::bad_request(
                                format!("message content parts of type \"{k}\" are not supported (text only)"),
                                Some("messages"),
                            ))
                        }
                    }
                }
                Ok(s)
            }
        }
    }
}

impl Prompt {
    pub fn text(&self) -> Result<&str, ApiError> {
        match self {
            Prompt::One(s) => Ok(s),
            Prompt::Many(v) if v.len() == 1 => Ok(&v[0]),
            Prompt::Many(v) => Err(ApiError::bad_request(
                format!("prompt must be one string (a list of {} prompts asks for batching by the client)", v.len()),
                Some("prompt"),
            )),
        }
    }
}

/// Finds the first stop string in `text[from..]`; returns the byte where it starts.
pub fn find_stop(text: &str, from: usize, stops: &[String]) -> Option<usize> {
    // A stop string may begin before `from` (its start was held back): search a little earlier.
    let longest = stops.iter().map(String::len).max().unwrap_or(0);
    let mut start = from.saturating_sub(longest);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    stops.iter().filter_map(|s| text[start..].find(s.as_str()).map(|i| start + i)).min()
}

/// How many bytes at the end of `text` could be the start of a stop string (held back from a stream).
pub fn held_back(text: &str, stops: &[String]) -> usize {
    let mut keep = 0;
    for s in stops {
        for n in (1..s.len()).rev() {
            if n <= text.len() && s.is_char_boundary(n) && text.ends_with(&s[..n]) {
                keep = keep.max(n);
                break;
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_refuse_what_kiln_cannot_do() {
        let c = |j: &str| parse::<CompletionRequest>(j.as_bytes()).and_then(|r| r.common.settings());
        assert_eq!(c(r#"{"prompt":"x","max_tokens":0}"#).unwrap_err().param, Some("max_tokens"));
        assert_eq!(c(r#"{"prompt":"x","n":2}"#).unwrap_err().param, Some("n"));
        assert_eq!(c(r#"{"prompt":"x","temperature":-1}"#).unwrap_err().param, Some("temperature"));
        assert_eq!(c(r#"{"prompt":"x","top_p":0}"#).unwrap_err().param, Some("top_p"));
        assert!(c(r#"{"prompt":"x","max_tokens":"ten"}"#).unwrap_err().message.contains("invalid"));
        assert!(c(r#"{"prompt":"x""#).unwrap_err().message.contains("not valid JSON"));
        assert!(c(r#"[1]"#).unwrap_err().message.contains("JSON object"));
        let s = c(r#"{"prompt":"x","max_tokens":5,"stop":"\n","seed":3,"stream":true,"unknown":1}"#).unwrap();
        assert_eq!((s.max_tokens, s.seed, s.stream, s.stop.len()), (Some(5), 3, true, 1));
    }

    /// Fields kiln cannot honour are a 400 naming them, never silently dropped; their neutral values
    /// pass; `top_k` and `min_p` are honoured.
    #[test]
    fn fields_kiln_ignored_are_refused_or_honoured() {
        let c = |j: &str| parse::<CompletionRequest>(j.as_bytes()).and_then(|r| r.common.settings());
        assert_eq!(c(r#"{"prompt":"x","min_p":0.1}"#).unwrap().min_p, Some(0.1));
        assert_eq!(c(r#"{"prompt":"x","min_p":0}"#).unwrap().min_p, None);
        assert_eq!(c(r#"{"prompt":"x","min_p":1.5}"#).unwrap_err().param, Some("min_p"));
        assert_eq!(c(r#"{"prompt":"x","min_p":-0.5}"#).unwrap_err().param, Some("min_p"));
        let schema = r#"{"prompt":"x","response_format":{"type":"json_object"}}"#;
        assert_eq!(c(schema).unwrap_err().param, Some("response_format"));
        assert_eq!(c(r#"{"prompt":"x","tool_choice":"auto"}"#).unwrap_err().param, Some("tool_choice"));
        assert!(c(r#"{"prompt":"x","functions":[{"name":"f"}]}"#).unwrap_err().message.contains("functions"));
        let neutral = r#"{"prompt":"x","min_p":0,"response_format":{"type":"text"},"tool_choice":"none"}"#;
        assert_eq!(c(neutral).unwrap().top_k, None);
        assert_eq!(c(r#"{"prompt":"x","top_k":40}"#).unwrap().top_k, Some(40));
        assert_eq!(c(r#"{"prompt":"x","top_k":-1}"#).unwrap().top_k, None);
    }

    #[test]
    fn stop_strings() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("abc END", 0, &stops), Some(4));
        assert_eq!(find_stop("abcEN", 0, &stops), None);
        assert_eq!(held_back("abcEN", &stops), 2);
        assert_eq!(held_back("abc\n", &stops), 1);
        assert_eq!(held_back("abc", &stops), 0);
        // Found even when it began in text already searched.
        assert_eq!(find_stop("abcEND", 5, &stops), Some(3));
    }
}
