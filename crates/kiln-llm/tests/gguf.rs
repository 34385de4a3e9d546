//! GGUF model files (made from the tiny safetensors fixtures by `fixtures/make_gguf.py` in llama.cpp's
//! conventions) on the CPU and the GPU: logits against the f32 transformers reference within each
//! format's error, greedy tokens and logits against llama.cpp's own on the same files
//! (`fixtures/make_llama_cpp_refs.py`), the Q/K row permutation round trip, quantized weights kept quantized, tied
//! embeddings, the tokenizer and chat template of the metadata, clear errors.

mod common;
use common::{argmax, devices, expected, fixture, margin, row_err};
use kiln::{DType, Device};
use kiln_gguf::{Gguf, GgufTensor};
use kiln_llm::{GgufModel, LoadOptions, Message, Model, ModelDir, WeightSource};
use std::path::PathBuf;

fn load(file: &str, dev: &Device, dtype: DType) -> Model {
    let m = GgufModel::open(fixture(file)).unwrap();
    m.load(dev, LoadOptions { dtype, max_context: 64, progress: None }).unwrap()
}

/// Prefill rows, then the continuation through the KV cache: every logit row within `tol` of the f32
/// transformers reference, the greedy token equal wherever the reference margin exceeds
/// `margin_floor`. Returns the worst error.
/// `margin_floor`: the greedy token must match where the reference's top-two margin exceeds it;
/// `None` where the format's error is too large for any fixture margin to decide the token (then the
/// token check is the one against llama.cpp on the same file, `llama_cpp_refs` below).
fn check(src: &str, file: &str, dev: &Device, dtype: DType, tol: f64, margin_floor: Option<f32>) -> f64 {
    let e = expected(src);
    let (prompt, generated, want) = (e.prompt_ids, e.generated, e.logits);
    let model = load(file, dev, dtype);
    let mut cache = model.new_cache();
    let t = prompt.len();
    let mut rows = model.forward(&prompt, &mut cache, true).unwrap().to_vec2::<f32>().unwrap();
    for &tok in &generated[..generated.len() - 1] {
        rows.push(model.forward(&[tok], &mut cache, false).unwrap().to_vec2::<f32>().unwrap().remove(0));
    }
    let mut worst = 0.0f64;
    let (mut checked, mut margins) = (0, Vec::new());
    for (i, row) in rows.iter().enumerate() {
        let err = row_err(row, &want[i]);
        worst = worst.max(err);
        assert!(err <= tol, "{file} {dev} {dtype}: row {i} relative error {err:.2e} > {tol:.0e}");
        if i + 1 >= t {
            margins.push(margin(&want[i]));
            if margin_floor.is_some_and(|f| margin(&want[i]) > f) {
                assert_eq!(argmax(row), generated[i + 1 - t], "{file} {dev} {dtype}: greedy token of row {i}");
                checked += 1;
            }
        }
    }
    eprintln!(
        "{file} {dev} {dtype}: worst relative logit error {worst:.2e} (tolerance {tol:.0e}); {checked} of {} \
         greedy tokens checked (reference margins {margins:.2?}, floor {margin_floor:?})",
        margins.len()
    );
    // A floor above every margin would leave the token check silently unused.
    if let Some(f) = margin_floor {
        assert!(checked > 0, "{file} {dev} {dtype}: no reference margin exceeds the floor {f}: {margins:?}");
    }
    worst
}

/// An unquantized (f32) GGUF is the same model: the converter's permutation undone exactly, Llama 3
/// rope scaling from `rope_freqs.weight` (stored f32, so ~1e-7 off the f64 formula), same tolerance
/// as the safetensors f32 test (1e-4).
#[test]
fn f32_gguf_matches_transformers() {
    for dev in devices() {
        check("llama", "llama/model-f32.gguf", &dev, DType::F32, 1e-4, Some(0.0));
    }
}

/// The quantized model (quantized weights through `qlinear`) against the same file with every weight
/// dequantised (dense `linear`), prompt and decode steps: the same numbers up to f32 summation order
/// (measured ~2e-6 of max(1, |row|); tolerance 1e-4 as for f32 models, 2e-2 in f16), and on a GPU up
/// to x's 16-bit rounding in the integer-dot products (`GPU_QUANT`). This is the
/// sharp test of the quantized path; against transformers, the quantization itself adds its error
/// (the next tests).
fn check_against_dequantized(file: &str, dev: &Device, dtype: DType, tol: f64) {
    let e = expected(file.split('/').next().unwrap());
    let (prompt, generated) = (e.prompt_ids, e.generated);
    let m = GgufModel::open(fixture(file)).unwrap();
    let opts = || LoadOptions { dtype, max_context: 64, progress: None };
    let (q, d) = (m.load(dev, opts()).unwrap(), m.load_dequantized(dev, opts()).unwrap());
    let (mut qc, mut dc) = (q.new_cache(), d.new_cache());
    let mut worst = 0.0f64;
    let mut step = |tokens: &[u32], all: bool| {
        let a = q.forward(tokens, &mut qc, all).unwrap().to_vec2::<f32>().unwrap();
        let b = d.forward(tokens, &mut dc, all).unwrap().to_vec2::<f32>().unwrap();
        for (x, y) in a.iter().zip(&b) {
            worst = worst.max(row_err(x, y));
        }
    };
    step(&prompt, true);
    for &tok in &generated[..4] {
        step(&[tok], false);
    }
    eprintln!("{file} {dev} {dtype}: quantized vs dequantised worst relative error {worst:.2e}");
    assert!(worst <= tol, "{file} {dev} {dtype}: quantized vs dequantised {worst:.2e} > {tol:.0e}");
}

#[test]
fn quantized_path_matches_dequantized_weights() {
    for dev in devices() {
        for file in ["llama/model-q8_0.gguf", "llama/model-q4_0.gguf", "qwen2/model-q8_0.gguf"] {
            check_against_dequantized(file, &dev, DType::F32, sharp_quantized(&dev));
        }
        check_against_dequantized("llama/model-q8_0.gguf", &dev, DType::F16, 2e-2);
    }
}

// Against transformers' f32 logits the quantization error shows. The fixtures are random 2-layer
// models initialised with std 0.2 (logits up to ~7): large activations amplify weight rounding far
// more than a trained model does, so these tolerances are the measured worst error of each format on
// these models (CPU and GPU agree to ~1e-6) with about 1.5x headroom, not a property of the format.
// A wrong Q/K permutation is >= 0.5 off even in f32 (`wrong_permutation_is_garbage`).
// The greedy tokens of the quantized files are checked at every step against llama.cpp (below).

/// Q8_0 (every 2-D weight, embedding and LM head included; steps of max|w| / 127 per block of 32):
/// measured worst 6.6e-2 of max(1, |row|); tolerance 0.1, greedy tokens equal where the reference
/// margin exceeds 0.2.
#[test]
fn q8_0_gguf_within_quantization_error() {
    for dev in devices() {
        check("llama", "llama/model-q8_0.gguf", &dev, DType::F32, 0.1, Some(0.2));
    }
}

/// Q4_0 layers (steps of max|w| / 8 per block of 32), f16 embedding, Q8_0 LM head: measured worst
/// 0.64 of max(1, |row|) (16 levels per block are coarse for these weights); tolerance 0.9. No greedy
/// token check against transformers here: an error of 0.64 x max(1, |row|) can swap tokens whose
/// margin is below ~2 x 0.64 x 7, above every fixture margin (at most 1.19), so a floor would never
/// fire; the tokens of this file are checked against llama.cpp's runs of it below instead.
#[test]
fn q4_0_gguf_within_quantization_error() {
    for dev in devices() {
        check("llama", "llama/model-q4_0.gguf", &dev, DType::F32, 0.9, None);
    }
}

/// qwen2: q/k/v biases, no permutation (llama.cpp rotates qwen2 NeoX-style), tied embeddings: the
/// quantized `token_embd` is dequantised for the lookup and kept Q8_0 as the LM head. Measured worst
/// 0.11 of max(1, |row|) (an f32 GGUF of this model matches to 1.3e-6); tolerance 0.17.
#[test]
fn qwen2_q8_0_gguf_tied_embeddings() {
    let m = GgufModel::open(fixture("qwen2/model-q8_0.gguf")).unwrap();
    assert!(m.config.tie_word_embeddings && m.config.qkv_bias && !m.config.o_bias);
    for dev in devices() {
        check("qwen2", "qwen2/model-q8_0.gguf", &dev, DType::F32, 0.17, Some(0.3));
    }
}

// Against llama.cpp itself: `fixtures/make_llama_cpp_refs.py` ran llama.cpp (llama-cpp-python) on each
// GGUF file for three prompts given as token ids (no tokenizer involved) and stored beside the file its
// greedy continuation (8 tokens) and its logits at each of those steps; for a quantized file also the
// same from llama.cpp on an f32 copy of the file holding the dequantized weights (gguf-py's
// dequantization). kiln is fed the prompt and then llama.cpp's tokens, and compared row by row.
//
// - Sharp: the f32 file against llama.cpp on it, a quantized file against llama.cpp on its dequantized
//   copy. Both sides then compute in f32 with the same weight values (kiln's quantized kernels match
//   its dequantized weights to ~2e-6, `quantized_path_matches_dequantized_weights`), so only summation
//   order differs: the greedy token must be llama.cpp's at every step (no margin floor) and every row
//   within `SHARP` = 1e-4 of max(1, |row|), the f32 models' tolerance; measured worst 2.1e-6 (f32) to
//   3.9e-6 (quantized) on the CPU. On a GPU, quantized products of Q8_0/Q4_0/Q4_K/Q6_K weights take
//   integer dot products on x rounded to 16 bits per run of 16 values (docs/GGUF.md): those rows are
//   held to `GPU_QUANT` = 4e-4 (measured 1.2e-4 to 1.5e-4 on lavapipe). The smallest top-2 gap of these
//   rows is 0.014, far above the differences, so the token check is stable.
// - Against llama.cpp on the quantized file itself: llama.cpp rounds the activations to Q8_0 (blocks of
//   32, one f16 scale) before each matmul with a Q8_0 / Q4_0 weight, kiln does not. That rounding moves
//   llama.cpp's own logits by `own` (its quantized run against its dequantized run, over the steps
//   where both chose the same tokens; 5.6e-2 to 6.9e-2 of the row scale here) and changes its own greedy
//   tokens (llama q8_0, first prompt, first step: 21 quantized, 113 on the dequantized weights, as in
//   kiln), so only the logits are compared: within `2 * own` (the same rounding on the other side, and
//   as much again for the later steps that `own` cannot see). A wrong Q/K order is >= 0.5 off.

/// llama.cpp's greedy continuation of a prompt: `logits[i]` is the row that predicts `tokens[i]`
/// (`logits[0]` is the prompt's last row).
struct LlamaCppRun {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    logits: Vec<Vec<f32>>,
}

/// Tolerance of the sharp comparison (f32 on both sides), as for the f32 safetensors models.
const SHARP: f64 = 1e-4;

/// The sharp tolerance for a quantized file on a GPU, whose integer-dot products round x to 16 bits
/// per run of 16 values (a relative 1.5e-5 of each product; the logits of these 2-layer models move
/// by up to 1.5e-4).
const GPU_QUANT: f64 = 4e-4;

/// The sharp tolerance of a model with quantized weights on `dev`.
fn sharp_quantized(dev: &Device) -> f64 {
    if dev.is_gpu() {
        GPU_QUANT
    } else {
        SHARP
    }
}

/// The stored runs of `file` (`key`: "runs" on the file itself, "dequantized" on its f32 copy).
fn llama_cpp_refs(file: &str, key: &str) -> Vec<LlamaCppRun> {
    let path = fixture(&file.replace(".gguf", ".llama_cpp.json"));
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let floats = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    let runs: Vec<LlamaCppRun> = j[key]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: no \"{key}\" in the llama.cpp reference"))
        .iter()
        .map(|r| LlamaCppRun {
            prompt: ids(&r["prompt_ids"]),
            tokens: ids(&r["tokens"]),
            logits: r["logits"].as_array().unwrap().iter().map(floats).collect(),
        })
        .collect();
    assert!(!runs.is_empty() && runs.iter().all(|r| r.tokens.len() == r.logits.len() && !r.tokens.is_empty()));
    runs
}

/// kiln's rows for a run: the prompt, then llama.cpp's tokens one by one through the KV cache (row `i`
/// predicts `tokens[i]`, as in the reference).
fn kiln_rows(model: &Model, run: &LlamaCppRun) -> Vec<Vec<f32>> {
    let mut cache = model.new_cache();
    let mut rows = model.forward(&run.prompt, &mut cache, false).unwrap().to_vec2::<f32>().unwrap();
    for &tok in &run.tokens[..run.tokens.len() - 1] {
        rows.push(model.forward(&[tok], &mut cache, false).unwrap().to_vec2::<f32>().unwrap().remove(0));
    }
    rows
}

/// The comparison with llama.cpp: every row within `tol` of llama.cpp's (`row_err`: max |difference|
/// over max(1, max |logit|)) and, with `tokens`, the greedy token equal to llama.cpp's at every step.
/// The worst error, or what failed.
fn compare_to_llama_cpp(rows: &[Vec<f32>], run: &LlamaCppRun, tol: f64, tokens: bool) -> Result<f64, String> {
    if rows.len() != run.logits.len() {
        return Err(format!("{} rows for {} steps", rows.len(), run.logits.len()));
    }
    let mut worst = 0.0f64;
    for (i, (row, want)) in rows.iter().zip(&run.logits).enumerate() {
        if tokens && argmax(row) != run.tokens[i] {
            return Err(format!("step {i}: greedy token {} where llama.cpp has {}", argmax(row), run.tokens[i]));
        }
        let err = row_err(row, want);
        if err > tol || err.is_nan() {
            return Err(format!("step {i}: logits {err:.2e} off llama.cpp's (tolerance {tol:.1e})"));
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

/// How far llama.cpp's quantized run is from its run on the dequantized weights (its activation
/// rounding), over the steps where both chose the same tokens so far.
fn llama_cpp_own_rounding(file: &str) -> f64 {
    let (q, d) = (llama_cpp_refs(file, "runs"), llama_cpp_refs(file, "dequantized"));
    let mut own = 0.0f64;
    for (q, d) in q.iter().zip(&d) {
        assert_eq!(q.prompt, d.prompt);
        for i in 0..q.tokens.len() {
            own = own.max(row_err(&q.logits[i], &d.logits[i]));
            if q.tokens[i] != d.tokens[i] {
                break;
            }
        }
    }
    own
}

/// Compares `file` on `dev` with the stored llama.cpp runs `key`; the worst error.
fn check_llama_cpp(file: &str, key: &str, dev: &Device, tol: f64, tokens: bool) -> f64 {
    let model = load(file, dev, DType::F32);
    let (mut worst, mut gap) = (0.0f64, f32::INFINITY);
    for (k, run) in llama_cpp_refs(file, key).iter().enumerate() {
        let rows = kiln_rows(&model, run);
        match compare_to_llama_cpp(&rows, run, tol, tokens) {
            Ok(err) => worst = worst.max(err),
            Err(e) => panic!("{file} {dev} against llama.cpp's {key}: prompt {k}: {e}"),
        }
        gap = rows.iter().map(|r| margin(r)).fold(gap, f32::min);
    }
    eprintln!(
        "{file} {dev} against llama.cpp's {key}: worst relative logit difference {worst:.2e} (tolerance {tol:.1e}); \
         smallest top-2 gap {gap:.3}"
    );
    worst
}

const QUANTIZED: [&str; 3] = ["llama/model-q8_0.gguf", "llama/model-q4_0.gguf", "qwen2/model-q8_0.gguf"];

/// The sharp comparison: same greedy tokens at every step, logits within 1e-4.
#[test]
fn same_tokens_and_logits_as_llama_cpp_in_f32() {
    for dev in devices() {
        check_llama_cpp("llama/model-f32.gguf", "runs", &dev, SHARP, true);
        for file in QUANTIZED {
            check_llama_cpp(file, "dequantized", &dev, sharp_quantized(&dev), true);
        }
    }
}

/// The quantized files against llama.cpp's own quantized computation: logits within twice
/// llama.cpp's own activation rounding (module comment above).
#[test]
fn quantized_logits_within_llama_cpp_activation_rounding() {
    for file in QUANTIZED {
        let own = llama_cpp_own_rounding(file);
        eprintln!("{file}: llama.cpp's quantized run against its dequantized run: {own:.2e}");
        assert!(own > 1e-3 && own < 0.15, "{file}: llama.cpp's own rounding {own:.2e} out of the expected range");
        for dev in devices() {
            check_llama_cpp(file, "runs", &dev, 2.0 * own, false);
        }
    }
}

/// The comparisons with llama.cpp fail for wrong results: the llama Q8_0 file loaded without the Q/K
/// un-permutation (relabeled qwen2, as `wrong_permutation_is_garbage`), zeroed logits, rows one step
/// late, one logit moved by twice the tolerance, and a reference whose greedy token is another; the
/// right model passes the same comparisons.
#[test]
fn llama_cpp_comparison_rejects_wrong_results() {
    let file = "llama/model-q8_0.gguf";
    let (sharp, quant, loose) =
        (llama_cpp_refs(file, "dequantized"), llama_cpp_refs(file, "runs"), 2.0 * llama_cpp_own_rounding(file));
    let model = load(file, &Device::cpu(), DType::F32);
    let rows: Vec<_> = sharp.iter().map(|r| kiln_rows(&model, r)).collect();
    for (r, run) in rows.iter().zip(&sharp) {
        compare_to_llama_cpp(r, run, SHARP, true).unwrap();
    }
    let rejected = |what: &str, rows: &[Vec<f32>], run: &LlamaCppRun, tol: f64, tokens: bool| match compare_to_llama_cpp(
        rows, run, tol, tokens,
    ) {
        Ok(err) => panic!("{what}: accepted (worst {err:.2e})"),
        Err(e) => eprintln!("{what}: rejected: {e}"),
    };

    let bytes = std::fs::read(fixture(file)).unwrap();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-q8_0-as-qwen2.gguf");
    std::fs::write(&path, relabel_arch(&bytes, "llama", "qwen2")).unwrap();
    let m = GgufModel::open(&path).unwrap();
    let wrong = m.load(&Device::cpu(), LoadOptions { dtype: DType::F32, max_context: 64, progress: None }).unwrap();
    for (k, (s, q)) in sharp.iter().zip(&quant).enumerate() {
        // Prompt 1 is a single token: it attends only to itself until the second step.
        rejected(&format!("prompt {k}, Q/K rows not un-permuted, sharp"), &kiln_rows(&wrong, s), s, SHARP, true);
        if k != 1 {
            let what = format!("prompt {k}, Q/K rows not un-permuted, against the quantized run");
            rejected(&what, &kiln_rows(&wrong, q), q, loose, false);
        }
    }

    let (r, run) = (&rows[0], &sharp[0]);
    rejected("zeroed logits", &vec![vec![0.0; r[0].len()]; r.len()], run, loose, false);
    let late: Vec<_> = std::iter::once(r[0].clone()).chain(r[..r.len() - 1].iter().cloned()).collect();
    rejected("rows one step late", &late, run, SHARP, true);
    let mut nudged = r.clone();
    let j = (argmax(&nudged[2]) as usize + 1) % nudged[2].len();
    let scale = run.logits[2].iter().fold(1.0f32, |m, x| m.max(x.abs()));
    nudged[2][j] -= 2.0 * SHARP as f32 * scale;
    rejected("one logit moved by twice the tolerance", &nudged, run, SHARP, false);
    let mut other = LlamaCppRun { prompt: run.prompt.clone(), tokens: run.tokens.clone(), logits: run.logits.clone() };
    other.tokens[3] = (other.tokens[3] + 1) % r[0].len() as u32;
    rejected("another greedy token", r, &other, SHARP, true);
}

/// The GGUF config agrees with config.json on everything both state.
#[test]
fn config_from_metadata() {
    let g = GgufModel::open(fixture("llama/model-q8_0.gguf")).unwrap().config;
    let h = ModelDir::open(fixture("llama")).unwrap().config;
    assert_eq!(g.arch, h.arch);
    assert_eq!(
        (g.vocab_size, g.hidden_size, g.intermediate_size, g.num_layers, g.num_heads, g.num_kv_heads, g.head_dim),
        (h.vocab_size, h.hidden_size, h.intermediate_size, h.num_layers, h.num_heads, h.num_kv_heads, h.head_dim)
    );
    assert!((g.rms_norm_eps - h.rms_norm_eps).abs() < 1e-9 && g.rope_theta == h.rope_theta);
    assert_eq!((g.tie_word_embeddings, g.qkv_bias, g.o_bias, g.mlp_bias), (false, false, false, false));
    assert_eq!((g.max_position_embeddings, g.bos_token_id, g.eos_token_ids.clone()), (128, Some(0), vec![1]));
}

/// `load_hf` puts the converter's permuted q/k rows back: bit-equal to the safetensors weights, while
/// the rows as stored differ (so the permutation is real and its inverse is what makes them equal).
#[test]
fn qk_permutation_round_trip() {
    let dev = Device::cpu();
    let st = ModelDir::open(fixture("llama")).unwrap().weights;
    let file = Gguf::open(fixture("llama/model-f32.gguf")).unwrap();
    let floats = |t: GgufTensor| match t {
        GgufTensor::Float(t) => t.to_vec2::<f32>().unwrap(),
        GgufTensor::Quant(_) => panic!("the f32 fixture is not quantized"),
    };
    let mut checked = 0;
    for t in file.load_hf(&dev).unwrap() {
        let (name, t) = t.unwrap();
        if !(name.ends_with("q_proj.weight") || name.ends_with("k_proj.weight")) {
            continue;
        }
        let want = st.load(&name, DType::F32, &dev).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(floats(t), want, "{name} after un-permuting");
        let layer = name.split('.').nth(2).unwrap();
        let gg = format!("blk.{layer}.attn_{}.weight", if name.contains("q_proj") { "q" } else { "k" });
        assert_ne!(floats(file.load(&gg, &dev).unwrap()), want, "{gg} as stored is permuted");
        checked += 1;
    }
    assert_eq!(checked, 4);
}

/// Keeping GGUF's q/k rows but rotating half-split (what forgetting the un-permutation does) is far
/// off: the logit error is of order one, two orders above the Q8_0 tolerance.
#[test]
fn wrong_permutation_is_garbage() {
    let e = expected("llama");
    let (prompt, want) = (e.prompt_ids, e.logits);
    // The qwen2 path loads rows as stored: relabel a copy of the llama f32 file as qwen2.
    let bytes = std::fs::read(fixture("llama/model-f32.gguf")).unwrap();
    let relabeled = relabel_arch(&bytes, "llama", "qwen2");
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-as-qwen2.gguf");
    std::fs::write(&path, relabeled).unwrap();
    let m = GgufModel::open(&path).unwrap();
    let model = m.load(&Device::cpu(), LoadOptions { dtype: DType::F32, max_context: 64, progress: None }).unwrap();
    let rows = model.forward(&prompt, &mut model.new_cache(), true).unwrap().to_vec2::<f32>().unwrap();
    // Row 0 attends only to itself (softmax of one score): the rotation cannot show there.
    let worst = rows.iter().zip(&want).skip(1).map(|(r, w)| row_err(r, w)).fold(0.0, f64::max);
    eprintln!("un-permuted q/k rows: worst relative logit error {worst:.2e}");
    assert!(worst > 0.5, "a wrong q/k row order should be far off, got {worst:.2e}");
}

/// `general.architecture` and every `{old}.` key renamed (same length, so offsets hold).
fn relabel_arch(bytes: &[u8], old: &str, new: &str) -> Vec<u8> {
    assert_eq!(old.len(), new.len());
    let mut out = bytes.to_vec();
    let header_end = find(bytes, b"token_embd.weight").unwrap();
    let mut i = 0;
    while let Some(j) = find(&out[i..header_end], old.as_bytes()) {
        out[i + j..i + j + old.len()].copy_from_slice(new.as_bytes());
        i += j + old.len();
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn unsupported_architecture_is_a_clear_error() {
    let bytes = std::fs::read(fixture("llama/model-q8_0.gguf")).unwrap();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-as-bloom.gguf");
    std::fs::write(&path, relabel_arch(&bytes, "llama", "bloom")).unwrap();
    let err = GgufModel::open(&path).err().expect("bloom is not a Llama").to_string();
    assert!(err.contains("\"bloom\"") && err.contains("llama") && err.contains("qwen2"), "{err}");
    let err = GgufModel::open(fixture("llama/config.json")).err().expect("not a GGUF file").to_string();
    assert!(err.contains("config.json"), "{err}");
}

/// The byte-level BPE tokenizer of the metadata tokenizes like the fixture's tokenizer.json (prompt,
/// special tokens, text with digits and newlines) and decodes back; the chat template and stop tokens
/// come from the metadata too.
#[test]
fn tokenizer_and_chat_template_from_metadata() {
    let prompt_ids = expected("llama").prompt_ids;
    let m = GgufModel::open(fixture("llama/model-q8_0.gguf")).unwrap();
    let dir = ModelDir::open(fixture("llama")).unwrap();
    let (g, h) = (m.tokenizer().unwrap(), dir.tokenizer().unwrap());
    assert_eq!(g.encode("The kiln fires the clay pots", true).unwrap(), prompt_ids);
    for text in ["<|im_start|>user\nHello, kiln 2026!<|im_end|>\n", "  tiles\n\nand  bricks  ", ""] {
        let ids = g.encode(text, true).unwrap();
        assert_eq!(ids, h.encode(text, true).unwrap(), "{text:?}");
        assert_eq!(g.decode(&ids, false).unwrap(), h.decode(&ids, false).unwrap(), "{text:?}");
    }
    assert_eq!(g.vocab_size(), h.vocab_size());
    assert_eq!(m.stop_tokens(), vec![1]);
    let msgs = [Message::new("user", "hi")];
    assert_eq!(
        m.chat_template().unwrap().render(&msgs, true).unwrap(),
        dir.chat_template().unwrap().render(&msgs, true).unwrap()
    );
}

/// Quantized weights stay quantized: the estimate counts Q8_0 bytes, far below the f32 model.
#[test]
fn estimate_counts_quantized_bytes() {
    let q8 = GgufModel::open(fixture("llama/model-q8_0.gguf")).unwrap().estimate(DType::F32, 64);
    let f32 = GgufModel::open(fixture("llama/model-f32.gguf")).unwrap().estimate(DType::F32, 64);
    let st = ModelDir::open(fixture("llama")).unwrap().estimate(DType::F32, 64);
    assert_eq!(f32.weight_bytes, st.weight_bytes);
    assert_eq!(f32.kv_cache_bytes, st.kv_cache_bytes);
    // Q8_0 layers and LM head: 34 bytes per 32 weights; the embedding is dequantised (f32 here).
    let (v, h, layers) = (320u64, 64u64, 2 * (2 * 64 * 64 + 2 * 32 * 64 + 3 * 64 * 128)); // q,o; k,v; mlp
    let want = v * h * 4 + (v * h + layers) / 32 * 34 + (2 * 2 + 1) * h * 4;
    assert_eq!(q8.weight_bytes, want);
    assert!(q8.weight_bytes * 2 < f32.weight_bytes);
}

/// A tokenizer kiln does not build from metadata (here `tokenizer.ggml.model` relabeled `bert`) is an
/// error that names `--tokenizer`, and a tokenizer.json given instead works.
#[test]
fn unsupported_tokenizer_asks_for_tokenizer_json() {
    let bytes = std::fs::read(fixture("llama/model-q8_0.gguf")).unwrap();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("llama-bert-tokenizer.gguf");
    std::fs::write(&path, relabel_arch(&bytes, "gpt2", "bert")).unwrap();
    let m = GgufModel::open(&path).unwrap();
    let err = m.tokenizer().err().expect("bert tokenizers are not built from metadata").to_string();
    assert!(err.contains("\"bert\"") && err.contains("--tokenizer tokenizer.json"), "{err}");
    let tok = kiln_llm::Tokenizer::from_file(&fixture("llama/tokenizer.json")).unwrap();
    assert_eq!(tok.encode("The kiln fires the clay pots", true).unwrap(), expected("llama").prompt_ids);
}

/// The SentencePiece (`llama`) tokenizer of the metadata gives the ids `sentencepiece` itself gives
/// (BOS added, as llama.cpp does for these models; spaces, newlines, digits split one by one, bytes
/// of characters outside the vocabulary) and decodes back to the text.
#[test]
fn sentencepiece_tokenizer_matches_sentencepiece() {
    let m = GgufModel::open(fixture("llama/tokenizer-spm.gguf")).unwrap();
    let tok = m.tokenizer().unwrap();
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama/tokenizer-spm.json")).unwrap()).unwrap();
    for c in cases.as_array().unwrap() {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(text, true).unwrap(), want, "{text:?}");
        assert_eq!(tok.decode(&want, true).unwrap(), c["decoded"].as_str().unwrap(), "{text:?}");
    }
    assert_eq!(m.stop_tokens(), vec![2]);
}
