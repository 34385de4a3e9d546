//! Helpers shared by the fixture tests (safetensors and GGUF).
#![allow(dead_code)]

use kiln::{DType, Device};
use kiln_llm::{LoadOptions, Model};
use std::path::PathBuf;

/// Loading in f32 with a 32-position cache (the fixture models' logit tests).
pub fn f32_opts() -> LoadOptions {
    LoadOptions { dtype: DType::F32, max_context: 32, progress: None }
}

/// Logits of a 5-token prefill (every row), then of 3 decode steps: 8 rows.
pub fn prefill_decode_logits(model: &Model) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let mut rows = model.forward(&[1, 5, 9, 2, 7], &mut cache, true).unwrap().to_vec2::<f32>().unwrap();
    for t in [3u32, 11, 4] {
        rows.extend(model.forward(&[t], &mut cache, false).unwrap().to_vec2::<f32>().unwrap());
    }
    assert_eq!(cache.len(), 8);
    rows
}

/// The largest [`row_err`] over paired rows.
pub fn worst_row_err(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter().zip(b).map(|(x, y)| row_err(x, y)).fold(0.0, f64::max)
}

/// The CPU, and the GPU (with output poisoning) when there is one; `KILN_REQUIRE_GPU=1` makes a missing
/// adapter a failure.
pub fn devices() -> Vec<Device> {
    let mut devs = vec![Device::cpu()];
    match Device::gpu() {
        Ok(d) => {
            d.set_poison(true);
            devs.push(d);
        }
        Err(e) if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") => {
            panic!("KILN_REQUIRE_GPU=1 but no GPU adapter: {e}")
        }
        Err(e) => eprintln!("GPU half skipped: {e}"),
    }
    devs
}

/// Max |a - b| over a row, relative to max(1, max |b|); NaN is infinitely wrong.
pub fn row_err(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(1.0f64, |m, &x| m.max((x as f64).abs()));
    let diff = a.iter().zip(b).fold(0.0f64, |m, (&x, &y)| m.max((x as f64 - y as f64).abs()));
    if diff.is_nan() || a.iter().chain(b).any(|x| x.is_nan()) {
        return f64::INFINITY;
    }
    diff / scale
}

pub fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b }) as u32
}

/// Top-1 minus top-2 logit: how safely the greedy choice is decided.
pub fn margin(row: &[f32]) -> f32 {
    let mut s = row.to_vec();
    s.sort_by(|a, b| b.total_cmp(a));
    s[0] - s[1]
}

/// A fixture folder under tests/fixtures.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

/// A fixture's `expected.json` and `expected.safetensors`: what transformers gave.
pub struct Expected {
    pub prompt: String,
    pub prompt_ids: Vec<u32>,
    pub generated: Vec<u32>,
    /// `(len(prompt) + len(generated) - 1, vocab)` f32 logits of transformers.
    pub logits: Vec<Vec<f32>>,
}

pub fn expected(name: &str) -> Expected {
    let dir = fixture(name);
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    let ids = |k: &str| j[k].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let w = kiln_llm::SafetensorsDir::open_file(&dir.join("expected.safetensors")).unwrap();
    use kiln_llm::WeightSource;
    let logits = w.load("logits", DType::F32, &Device::cpu()).unwrap().to_vec2::<f32>().unwrap();
    Expected {
        prompt: j["prompt"].as_str().unwrap().to_string(),
        prompt_ids: ids("prompt_ids"),
        generated: ids("generated_ids"),
        logits,
    }
}
