//! Choosing the next token from the logits: greedy (argmax on the device, one index read back) or,
//! with a temperature, top-k / top-p / min-p sampling from a seeded ChaCha generator (reproducible
//! for a seed on every machine). The order is transformers': top-k, the temperature, top-p, then
//! min-p on the tempered probabilities. The repeat penalty follows transformers: a logit of a token already in the
//! window is divided by the penalty when positive and multiplied by it when negative.

use crate::{LlmError, Result};
use kiln::Tensor;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (0 or `None`: all).
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probabilities sum to at least `p`.
    pub top_p: Option<f64>,
    /// Keep only the tokens whose probability is at least `min_p` times the most likely one's
    /// (`None` or 0: all).
    pub min_p: Option<f64>,
    /// 1 means none.
    pub repeat_penalty: f32,
    /// How many of the last tokens the penalty looks at.
    pub repeat_last_n: usize,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: None,
            top_p: None,
            min_p: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
        }
    }
}

impl SamplingParams {
    /// What kiln samples with when the model says nothing: the chat defaults of llama.cpp and Ollama
    /// (temperature 0.8, top-k 40, top-p 0.95, repeat penalty 1.1 over the last 64 tokens; min-p
    /// off, as Ollama has it). Greedy decoding of small models loops ("the most beautiful and
    /// beautiful ..."); these do not.
    pub fn chat_defaults() -> SamplingParams {
        SamplingParams {
            temperature: 0.8,
            top_k: Some(40),
            top_p: Some(0.95),
            min_p: None,
            repeat_penalty: 1.1,
            repeat_last_n: 64,
        }
    }

    /// [`SamplingParams::chat_defaults`] with what a model's `generation_config.json` sets, as
    /// transformers reads it: `temperature`, `top_k`, `top_p`, `min_p`, `repetition_penalty`, and
    /// `"do_sample": false` for greedy decoding. A missing file gives the defaults; a field with a
    /// value no sampler can use is an error naming the field.
    pub fn from_generation_config(dir: &Path) -> Result<SamplingParams> {
        let mut p = SamplingParams::chat_defaults();
        let Some(g) = crate::tokenizer::read_json(dir, "generation_config.json")? else {
            return Ok(p);
        };
        let bad = |field: &str, msg: &str| LlmError::Config {
            file: "generation_config.json",
            field: field.to_string(),
            msg: msg.to_string(),
        };
        let number = |field: &str| -> Result<Option<f64>> {
            match g.get(field) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => v.as_f64().map(Some).ok_or_else(|| bad(field, "not a number")),
            }
        };
        if let Some(t) = number("temperature")? {
            if !(t.is_finite() && t >= 0.0) {
                return Err(bad("temperature", "must be >= 0"));
            }
            p.temperature = t;
        }
        if let Some(k) = number("top_k")? {
            if !(k >= 0.0 && k.fract() == 0.0) {
                return Err(bad("top_k", "must be a whole number >= 0"));
            }
            // transformers' 0 means no top-k, as here.
            p.top_k = Some(k as usize);
        }
        if let Some(top_p) = number("top_p")? {
            if !(top_p > 0.0 && top_p <= 1.0) {
                return Err(bad("top_p", "must be in (0, 1]"));
            }
            p.top_p = Some(top_p);
        }
        if let Some(min_p) = number("min_p")? {
            if !(0.0..=1.0).contains(&min_p) {
                return Err(bad("min_p", "must be in [0, 1]"));
            }
            p.min_p = Some(min_p);
        }
        if let Some(r) = number("repetition_penalty")? {
            if !(r.is_finite() && r > 0.0) {
                return Err(bad("repetition_penalty", "must be > 0"));
            }
            p.repeat_penalty = r as f32;
        }
        if g.get("do_sample").and_then(serde_json::Value::as_bool) == Some(false) {
            p.temperature = 0.0;
        }
        Ok(p)
    }
}

pub struct Sampler {
    params: SamplingParams,
    rng: ChaCha8Rng,
}

impl Sampler {
    pub fn new(params: SamplingParams, seed: u64) -> Result<Sampler> {
        if !(params.temperature.is_finite() && params.temperature >= 0.0) {
            return Err(LlmError::Arg(format!("--temperature must be >= 0, got {}", params.temperature)));
        }
        if let Some(p) = params.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(LlmError::Arg(format!("--top-p must be in (0, 1], got {p}")));
            }
        }
        if let Some(m) = params.min_p {
            if !(0.0..=1.0).contains(&m) {
                return Err(LlmError::Arg(format!("--min-p must be in [0, 1], got {m}")));
            }
        }
        if !(params.repeat_penalty.is_finite() && params.repeat_penalty > 0.0) {
            return Err(LlmError::Arg(format!("--repeat-penalty must be > 0, got {}", params.repeat_penalty)));
        }
        Ok(Sampler { params, rng: ChaCha8Rng::seed_from_u64(seed) })
    }

    /// Whether the next token is the plain argmax of the logits (greedy without a penalty): then
    /// only its index needs to leave the device, never the logits.
    pub fn is_greedy(&self) -> bool {
        self.params.temperature == 0.0 && self.params.repeat_penalty == 1.0
    }

    /// The next token from f32 `logits` `(1, vocab)`; `history` is every token so far (for the penalty).
    pub fn sample(&mut self, logits: &Tensor, history: &[u32]) -> Result<u32> {
        let p = &self.params;
        let penalise = p.repeat_penalty != 1.0 && !history.is_empty();
        if p.temperature == 0.0 && !penalise {
            let i = logits.argmax(-1, false)?.to_vec::<i64>()?;
            return Ok(i[0] as u32);
        }
        self.sample_host(logits.to_vec::<f32>()?, history)
    }

    /// [`Sampler::sample`] from logits already read back (one row of `vocab` values): a server
    /// reads the rows of all its sampled sequences in one transfer and samples each here. The same
    /// token as `sample` for the same logits, history and generator state.
    pub fn sample_host(&mut self, mut l: Vec<f32>, history: &[u32]) -> Result<u32> {
        let p = &self.params;
        let penalise = p.repeat_penalty != 1.0 && !history.is_empty();
        if penalise {
            let start = history.len().saturating_sub(p.repeat_last_n);
            let mut seen = history[start..].to_vec();
            seen.sort_unstable();
            seen.dedup();
            for &t in &seen {
                if let Some(x) = l.get_mut(t as usize) {
                    *x = if *x > 0.0 { *x / p.repeat_penalty } else { *x * p.repeat_penalty };
                }
            }
        }
        if p.temperature == 0.0 {
            return Ok(argmax(&l));
        }
        Ok(self.draw(&l))
    }

    fn draw(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]);
        let k = p.top_k.filter(|&k| k > 0).unwrap_or(idx.len()).min(idx.len());
        if k < idx.len() {
            idx.select_nth_unstable_by(k - 1, by_logit);
            idx.truncate(k);
        }
        idx.sort_unstable_by(by_logit);
        let max = logits[idx[0] as usize] as f64;
        let mut probs: Vec<f64> =
            idx.iter().map(|&i| ((logits[i as usize] as f64 - max) / p.temperature).exp()).collect();
        let sum: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= sum);
        if let Some(top_p) = p.top_p {
            let mut acc = 0.0;
            let keep = probs.iter().position(|&x| {
                acc += x;
                acc >= top_p
            });
            let keep = keep.map_or(probs.len(), |i| i + 1);
            probs.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= s);
        }
        if let Some(min_p) = p.min_p.filter(|&m| m > 0.0) {
            // Sorted, so the most likely is first and the kept tokens are a prefix (at least it).
            let floor = min_p * probs[0];
            let keep = probs.iter().position(|&x| x < floor).unwrap_or(probs.len()).max(1);
            probs.truncate(keep);
            let s: f64 = probs.iter().sum();
            probs.iter_mut().for_each(|x| *x /= s);
        }
        let mut r: f64 = self.rng.random::<f64>();
        for (i, &q) in probs.iter().enumerate() {
            if r < q {
                return idx[i];
            }
            r -= q;
        }
        idx[probs.len() - 1]
    }
}

fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in l.iter().enumerate() {
        if x > l[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::SamplingParams;

    /// A fresh folder holding `generation_config.json` with `json` (none when `None`).
    fn folder(name: &str, json: Option<&str>) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kiln-llm-genconfig-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        if let Some(j) = json {
            std::fs::write(dir.join("generation_config.json"), j).unwrap();
        }
        dir
    }

    fn read(name: &str, json: Option<&str>) -> Result<SamplingParams, String> {
        let dir = folder(name, json);
        let p = SamplingParams::from_generation_config(&dir).map_err(|e| e.to_string());
        std::fs::remove_dir_all(&dir).unwrap();
        p
    }

    #[test]
    fn generation_config_over_the_chat_defaults() {
        let d = read("none", None).unwrap();
        assert_eq!(
            (d.temperature, d.top_k, d.top_p, d.min_p, d.repeat_penalty, d.repeat_last_n),
            (0.8, Some(40), Some(0.95), None, 1.1, 64)
        );
        // Only eos ids (SmolLM2's file): the defaults, not transformers' greedy fallback.
        let p = read("ids", Some(r#"{"bos_token_id": 1, "eos_token_id": 2}"#)).unwrap();
        assert_eq!((p.temperature, p.top_k, p.top_p, p.repeat_penalty), (0.8, Some(40), Some(0.95), 1.1));
        // Qwen2.5-Instruct's file.
        let json = r#"{"do_sample": true, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}"#;
        let p = read("qwen", Some(json)).unwrap();
        assert_eq!((p.temperature, p.top_k, p.top_p, p.repeat_penalty), (0.7, Some(20), Some(0.8), 1.05));
        let p = read("min_p", Some(r#"{"min_p": 0.05, "top_p": 1.0}"#)).unwrap();
        assert_eq!((p.min_p, p.top_p), (Some(0.05), Some(1.0)));
        let p = read("greedy", Some(r#"{"do_sample": false, "temperature": 0.6}"#)).unwrap();
        assert_eq!(p.temperature, 0.0);
        for (json, field) in [
            (r#"{"temperature": -1}"#, "temperature"),
            (r#"{"top_p": 0}"#, "top_p"),
            (r#"{"top_k": 2.5}"#, "top_k"),
            (r#"{"min_p": 1.5}"#, "min_p"),
            (r#"{"repetition_penalty": "high"}"#, "repetition_penalty"),
        ] {
            let e = read("bad", Some(json)).unwrap_err();
            assert!(e.contains("generation_config.json") && e.contains(field), "{json}: {e}");
        }
    }
}
