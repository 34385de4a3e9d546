//! The tiny Llama / Qwen2 / Mistral / Qwen3 / Gemma 2 / Phi-3 fixtures, and Mistral and Qwen2 with
//! sliding windows that the test sequence passes (made by `fixtures/make_fixtures.py` with
//! transformers)
//! on the CPU and the GPU: prefill logits, the greedy continuation token by token through the KV
//! cache (logits of every step too), the generation loop, f16/bf16 against the f32 reference, the
//! tokenizer and the chat template.

mod common;
use common::{argmax, devices, expected, fixture, margin, row_err};
use kiln::{DType, Device};
use kiln_llm::{generate, GenerateOptions, LoadOptions, Message, Model, ModelDir, SamplingParams};

const ARCHS: [&str; 8] = ["llama", "qwen2", "mistral", "qwen3", "gemma2", "phi3", "mistral_window", "qwen2_window"];

fn load(name: &str, dev: &Device, dtype: DType) -> Model {
    let dir = ModelDir::open(fixture(name)).unwrap();
    dir.load(dev, LoadOptions { dtype, max_context: 64, progress: None }).unwrap()
}

/// Prefill rows, then each continuation token through the cache: logits within `tol` of transformers
/// and the greedy token equal wherever transformers' margin exceeds `margin_floor`.
fn check(name: &str, dev: &Device, dtype: DType, tol: f64, margin_floor: f32) {
    let e = expected(name);
    let model = load(name, dev, dtype);
    let mut cache = model.new_cache();
    let t = e.prompt_ids.len();
    let got = model.forward(&e.prompt_ids, &mut cache, true).unwrap().to_vec2::<f32>().unwrap();
    assert_eq!(got.len(), t);
    let mut worst = 0.0f64;
    for (i, row) in got.iter().enumerate() {
        let err = row_err(row, &e.logits[i]);
        worst = worst.max(err);
        assert!(err <= tol, "{name} {dev} {dtype}: prefill row {i} relative error {err:.2e} > {tol:.0e}");
    }
    let greedy_ok = |row: &[f32], want: &[f32], tok: u32, step: usize| {
        if margin(want) > margin_floor {
            assert_eq!(argmax(row), tok, "{name} {dev} {dtype}: greedy token {step}");
        }
    };
    greedy_ok(&got[t - 1], &e.logits[t - 1], e.generated[0], 0);
    for (step, &tok) in e.generated[..e.generated.len() - 1].iter().enumerate() {
        let row = model.forward(&[tok], &mut cache, false).unwrap().to_vec2::<f32>().unwrap().remove(0);
        let want = &e.logits[t + step];
        let err = row_err(&row, want);
        worst = worst.max(err);
        assert!(err <= tol, "{name} {dev} {dtype}: decode step {step} relative error {err:.2e} > {tol:.0e}");
        greedy_ok(&row, want, e.generated[step + 1], step + 1);
    }
    eprintln!("{name} {dev} {dtype}: worst relative logit error {worst:.2e} (tolerance {tol:.0e})");
}

#[test]
fn f32_logits_and_greedy_match_transformers() {
    for dev in devices() {
        for name in ARCHS {
            check(name, &dev, DType::F32, 1e-4, 0.0);
        }
    }
}

/// f16 and bf16 weights, activations and KV cache (computed in f32 inside each op) against the f32
/// transformers reference: logits within 2e-2 (f16) and 8e-2 (bf16) of max(1, |row|); greedy tokens
/// equal wherever the reference margin exceeds twice that.
#[test]
fn half_precision_within_documented_tolerance() {
    for dev in devices() {
        for name in ARCHS {
            check(name, &dev, DType::F16, 2e-2, 0.2);
            check(name, &dev, DType::BF16, 8e-2, 0.8);
        }
    }
}

#[test]
fn generation_loop_reproduces_greedy_continuation() {
    for dev in devices() {
        for name in ARCHS {
            let e = expected(name);
            let dir = ModelDir::open(fixture(name)).unwrap();
            let tok = dir.tokenizer().unwrap();
            assert_eq!(tok.encode(&e.prompt, true).unwrap(), e.prompt_ids, "{name}: tokenizer");
            let model = load(name, &dev, DType::F32);
            let opts = GenerateOptions {
                max_tokens: e.generated.len(),
                sampling: SamplingParams::default(),
                seed: 0,
                stop_tokens: vec![],
            };
            let mut streamed = Vec::new();
            let (ids, stats) = generate(&model, &mut model.new_cache(), &e.prompt_ids, &opts, |t| {
                streamed.push(t);
                Ok(())
            })
            .unwrap();
            assert_eq!(ids, e.generated, "{name} {dev}");
            assert_eq!(streamed, ids);
            assert_eq!(
                (stats.prompt_tokens, stats.generated_tokens, stats.decode_steps),
                (e.prompt_ids.len(), ids.len(), ids.len() - 1)
            );
            assert_eq!(stats.peak_gpu_bytes.is_some(), dev.is_gpu());
        }
    }
}

/// Greedy decoding records each step before it reads the token before (`decode_greedy`): a stop
/// token's step, recorded ahead, is taken back from the cache, which then continues as if it had
/// never run (the next forward pass of the stop token gives transformers' logits at its position);
/// an error from the callback takes it back too.
#[test]
fn greedy_stop_takes_back_the_step_recorded_ahead() {
    for dev in devices() {
        let e = expected("llama");
        let model = load("llama", &dev, DType::F32);
        let t = e.prompt_ids.len();
        let stop = e.generated[3];
        let first = e.generated.iter().position(|&x| x == stop).unwrap();
        let opts =
            GenerateOptions { max_tokens: 10, sampling: SamplingParams::default(), seed: 0, stop_tokens: vec![stop] };
        let mut cache = model.new_cache();
        let (ids, stats) = generate(&model, &mut cache, &e.prompt_ids, &opts, |_| Ok(())).unwrap();
        assert_eq!(ids, e.generated[..=first].to_vec(), "{dev}");
        assert_eq!(stats.decode_steps, first, "{dev}: the step recorded ahead of the stop is not counted");
        assert_eq!(cache.len(), t + first, "{dev}: the stop token's step is taken back");
        let row = model.forward(&[stop], &mut cache, false).unwrap().to_vec2::<f32>().unwrap().remove(0);
        let err = row_err(&row, &e.logits[t + first]);
        assert!(err <= 1e-4, "{dev}: the cache after the stop continues with relative error {err:.1e}");
        // A callback that fails on its third token leaves two tokens' steps in the cache, not three.
        let mut cache = model.new_cache();
        let mut n = 0;
        let fail = generate(&model, &mut cache, &e.prompt_ids, &opts, |_| {
            n += 1;
            if n == 3 {
                return Err(kiln_llm::LlmError::Arg("stop here".into()));
            }
            Ok(())
        });
        assert!(fail.is_err());
        assert_eq!(cache.len(), t + 2, "{dev}: the step recorded ahead of the failed token is taken back");
    }
}

/// The negative control of the windowed fixtures: with the window taken out of `config.json`, the
/// prefill logits past the window leave the f32 tolerance by far, so the tests above check the
/// windows (transformers applied them, and so must kiln).
#[test]
fn windowed_fixtures_fail_without_their_window() {
    for name in ["mistral_window", "qwen2_window"] {
        let tmp = std::env::temp_dir().join(format!("kiln-{name}-nowindow-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        for f in std::fs::read_dir(fixture(name)).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, tmp.join(f.file_name().unwrap())).unwrap();
        }
        let mut cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(tmp.join("config.json")).unwrap()).unwrap();
        cfg["sliding_window"] = serde_json::Value::Null;
        std::fs::write(tmp.join("config.json"), cfg.to_string()).unwrap();
        let dir = ModelDir::open(&tmp).unwrap();
        let model =
            dir.load(&Device::cpu(), LoadOptions { dtype: DType::F32, max_context: 64, progress: None }).unwrap();
        let e = expected(name);
        let got = model.forward(&e.prompt_ids, &mut model.new_cache(), true).unwrap().to_vec2::<f32>().unwrap();
        let worst = got.iter().zip(&e.logits).map(|(g, w)| row_err(g, w)).fold(0.0, f64::max);
        std::fs::remove_dir_all(&tmp).unwrap();
        assert!(worst > 1e-2, "{name} without its window is within {worst:.1e} of transformers");
    }
}

#[test]
fn sampling_is_seeded_and_stops_at_stop_tokens() {
    let dev = Device::cpu();
    let e = expected("llama");
    let model = load("llama", &dev, DType::F32);
    let sampling = SamplingParams {
        temperature: 1.0,
        top_k: Some(20),
        top_p: Some(0.9),
        repeat_penalty: 1.1,
        ..Default::default()
    };
    let run = |seed: u64, stop: Vec<u32>| {
        let opts = GenerateOptions { max_tokens: 10, sampling: sampling.clone(), seed, stop_tokens: stop };
        generate(&model, &mut model.new_cache(), &e.prompt_ids, &opts, |_| Ok(())).unwrap().0
    };
    let a = run(7, vec![]);
    assert_eq!(a, run(7, vec![]), "same seed, same tokens");
    let others: Vec<Vec<u32>> = (8..12).map(|s| run(s, vec![])).collect();
    assert!(others.iter().any(|o| *o != a), "different seeds should give different samples");
    let stopped = run(7, vec![a[3]]);
    let first = a.iter().position(|&t| t == a[3]).unwrap();
    assert_eq!(stopped, a[..=first].to_vec());
}

#[test]
fn cache_length_is_bounded_by_the_context() {
    let dev = Device::cpu();
    let dir = ModelDir::open(fixture("qwen2")).unwrap();
    let model = dir.load(&dev, LoadOptions { dtype: DType::F32, max_context: 12, progress: None }).unwrap();
    let mut cache = model.new_cache();
    let err = model.forward(&[5; 13], &mut cache, false).unwrap_err().to_string();
    assert!(err.contains("context of 12"), "{err}");
    let err = model.forward(&[5000], &mut cache, false).unwrap_err().to_string();
    assert!(err.contains("outside the vocabulary"), "{err}");
    let opts = GenerateOptions { max_tokens: 50, sampling: SamplingParams::default(), seed: 0, stop_tokens: vec![] };
    let (ids, _) = generate(&model, &mut cache, &[3, 4, 5, 6, 7, 8, 9, 10], &opts, |_| Ok(())).unwrap();
    assert_eq!(ids.len(), 5, "8 prompt + 4 decoded positions fill 12, the 5th token is sampled from the last");
}

#[test]
fn chat_template_renders_and_tokenizes() {
    let dir = ModelDir::open(fixture("qwen2")).unwrap();
    let tmpl = dir.chat_template().unwrap();
    let text = tmpl.render(&[Message::new("user", "hello kiln")], true).unwrap();
    assert_eq!(text, "<|im_start|>user\nhello kiln<|im_end|>\n<|im_start|>assistant\n");
    let tok = dir.tokenizer().unwrap();
    let ids = tok.encode(&text, false).unwrap();
    assert_eq!(ids[0], tok.token_to_id("<|im_start|>").unwrap());
    assert_eq!(tok.decode(&ids, false).unwrap(), text);
    let stops = dir.stop_tokens(&tok).unwrap();
    assert_eq!(stops, vec![tok.token_to_id("</s>").unwrap()]);
}

#[test]
fn streaming_decoder_rebuilds_the_text() {
    let dir = ModelDir::open(fixture("llama")).unwrap();
    let tok = dir.tokenizer().unwrap();
    let text = "The kiln cools — slowly, für a day.";
    let ids = tok.encode(text, false).unwrap();
    let mut stream = kiln_llm::TokenStream::new(&tok);
    let pieces: String = ids.iter().map(|&i| stream.push(i).unwrap()).collect();
    assert_eq!(pieces, text);
}

/// The logits checks above can fail: `row_err` (their measure) flags NaN and real differences.
#[test]
fn row_err_flags_nan_and_differences() {
    assert!(row_err(&[f32::NAN, 0.0], &[0.0, 0.0]).is_infinite());
    assert!(row_err(&[0.0, 0.0], &[f32::NAN, 0.0]).is_infinite());
    assert!(row_err(&[1.0, 2.0], &[1.0, 2.5]) > 0.1);
    assert_eq!(row_err(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
}

/// The qwen2 fixture split into two shards with a `model.safetensors.index.json` gives the same logits
/// as the single file.
#[test]
fn sharded_weights_load_like_one_file() {
    use safetensors::tensor::{SafeTensors, TensorView};
    let src = fixture("qwen2");
    let tmp = std::env::temp_dir().join(format!("kiln-llm-shards-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), tmp.join(f)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut map = serde_json::Map::new();
    for (shard, pick) in [("a.safetensors", true), ("b.safetensors", false)] {
        let part: Vec<(String, TensorView)> =
            st.tensors().into_iter().filter(|(n, _)| n.contains("layers.0.") == pick).collect();
        for (n, _) in &part {
            map.insert(n.clone(), serde_json::Value::String(shard.into()));
        }
        safetensors::serialize_to_file(part, None, &tmp.join(shard)).unwrap();
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    std::fs::write(tmp.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let dev = Device::cpu();
    let opts = || LoadOptions { dtype: DType::F32, max_context: 16, progress: None };
    let one = ModelDir::open(&src).unwrap().load(&dev, opts()).unwrap();
    let sharded = ModelDir::open(&tmp).unwrap().load(&dev, opts()).unwrap();
    let ids = [3, 50, 7, 99];
    let a = one.forward(&ids, &mut one.new_cache(), true).unwrap().to_vec::<f32>().unwrap();
    let b = sharded.forward(&ids, &mut sharded.new_cache(), true).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a, b);
    // A shard named in the index but missing is an error naming the file.
    std::fs::remove_file(tmp.join("b.safetensors")).unwrap();
    let e = ModelDir::open(&tmp).err().unwrap().to_string();
    assert!(e.contains("b.safetensors"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// `Model::quantize`: every projection (stacked q/k/v and gate/up included) to Q8_0: the weights
/// shrink; the logits stay within Q8_0's error of the f32 model (up to 7e-2 of the row maximum on
/// these random 2-layer models, whose weights have no outliers for 8 bits to spare; bound 0.1), and the GPU's quantized model gives the CPU's logits
/// (same quantized weights, f32 sums in another order, and on the GPU x rounded to 16 bits per run of
/// 16 values for the integer-dot products, docs/GGUF.md; measured up to 1.0e-4) to 4e-4. llama, qwen2
/// (biases), gemma2 (the composed path) and phi3 (projections stored stacked).
#[test]
fn quantized_projections_track_the_f32_model() {
    for name in ["llama", "qwen2", "gemma2", "phi3"] {
        let e = expected(name);
        let mut first: Option<Vec<Vec<f32>>> = None;
        for dev in devices() {
            let dense = load(name, &dev, DType::F32);
            let want = dense.forward(&e.prompt_ids, &mut dense.new_cache(), true).unwrap().to_vec2::<f32>().unwrap();
            let mut q = load(name, &dev, DType::F32);
            let n = q.quantize(kiln::quant::QuantType::Q8_0).unwrap();
            assert!(n > 2 * q.config.num_layers, "{name}: {n} weights quantized");
            assert!(
                q.weight_bytes() < dense.weight_bytes() * 2 / 3,
                "{name}: {} vs {}",
                q.weight_bytes(),
                dense.weight_bytes()
            );
            let got = q.forward(&e.prompt_ids, &mut q.new_cache(), true).unwrap().to_vec2::<f32>().unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let err = row_err(g, w);
                assert!(err < 0.1, "{name} {dev}: row {i} off by {err:.2e} after Q8_0");
            }
            if let Some(cpu) = &first {
                for (i, (g, c)) in got.iter().zip(cpu).enumerate() {
                    let err = row_err(g, c);
                    assert!(err < 4e-4, "{name} {dev}: quantized row {i} differs from the CPU's by {err:.2e}");
                }
            }
            first.get_or_insert(got);
        }
    }
}
