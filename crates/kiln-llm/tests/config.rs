//! config.json parsing: the switches of each architecture, and errors that name the field or file.

use kiln_llm::{Activation, Arch, Gemma2Params, LlamaConfig, ModelDir, RopeScaling};
use serde_json::json;

fn base() -> serde_json::Value {
    json!({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "max_position_embeddings": 256, "eos_token_id": [7, 9], "torch_dtype": "bfloat16",
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192}
    })
}

fn err(v: serde_json::Value) -> String {
    LlamaConfig::from_json(&v).unwrap_err().to_string()
}

#[test]
fn llama3_fields() {
    let c = LlamaConfig::from_json(&base()).unwrap();
    assert_eq!((c.arch, c.head_dim, c.num_kv_heads, c.eos_token_ids.clone()), (Arch::Llama, 16, 2, vec![7, 9]));
    assert_eq!(c.rope_theta, 500000.0);
    assert!(matches!(c.rope_scaling, Some(RopeScaling::Llama3 { original_max_position_embeddings: 8192, .. })));
    assert_eq!(c.saved_dtype, Some(kiln::DType::BF16));
    assert!(!c.qkv_bias && !c.tie_word_embeddings);
}

#[test]
fn qwen2_has_qkv_bias_and_mistral_a_window() {
    let mut v = base();
    v["architectures"] = json!(["Qwen2ForCausalLM"]);
    assert!(LlamaConfig::from_json(&v).unwrap().qkv_bias);
    v["architectures"] = json!(["MistralForCausalLM"]);
    v["sliding_window"] = json!(32);
    let c = LlamaConfig::from_json(&v).unwrap();
    assert_eq!(c.sliding_window, Some(32));
    // Every layer slides; the window masks inside the context, which it does not cap.
    assert!((0..c.num_layers).all(|l| c.layer_window(l) == Some(32)));
    assert_eq!(kiln_llm::model::effective_context(&c, 4096), c.max_position_embeddings);
}

#[test]
fn qwen2_slides_from_max_window_layers_when_asked() {
    let mut v = base();
    v["architectures"] = json!(["Qwen2ForCausalLM"]);
    v["num_hidden_layers"] = json!(4);
    v["sliding_window"] = json!(64);
    v["max_window_layers"] = json!(2);
    let windows = |v: &serde_json::Value| {
        let c = LlamaConfig::from_json(v).unwrap();
        (0..4).map(|l| c.layer_window(l)).collect::<Vec<_>>()
    };
    // transformers ignores the window without `use_sliding_window`.
    assert_eq!(windows(&v), [None; 4]);
    v["use_sliding_window"] = json!(true);
    assert_eq!(windows(&v), [None, None, Some(64), Some(64)]);
    v["layer_types"] = json!(["sliding_attention", "full_attention", "full_attention", "sliding_attention"]);
    assert_eq!(windows(&v), [Some(64), None, None, Some(64)]);
}

#[test]
fn errors_name_the_field() {
    let mut v = base();
    v["architectures"] = json!(["GPT2LMHeadModel"]);
    assert!(err(v).contains("unsupported architecture 'GPT2LMHeadModel'"));
    let mut v = base();
    v.as_object_mut().unwrap().remove("hidden_size");
    assert!(err(v).contains("field `hidden_size`: missing"));
    let mut v = base();
    v["num_key_value_heads"] = json!(3);
    assert!(err(v).contains("`num_key_value_heads`"));
    let mut v = base();
    v["rope_scaling"]["rope_type"] = json!("yarn");
    assert!(err(v).contains("rope_scaling.rope_type"));
    let mut v = base();
    v["rope_scaling"].as_object_mut().unwrap().remove("low_freq_factor");
    assert!(err(v).contains("rope_scaling.low_freq_factor"));
    let mut v = base();
    v["hidden_act"] = json!("gelu");
    assert!(err(v).contains("hidden_act"));
}

/// Qwen3 (q/k norms, head_dim from the config), Gemma 2 (its own switches, tied embeddings by
/// default, sliding layers from `layer_types` or every even layer) and Phi-3 (silu; long-context rope
/// refused by name).
#[test]
fn qwen3_gemma2_and_phi3_switches() {
    let mut v = base();
    v["architectures"] = json!(["Qwen3ForCausalLM"]);
    v["head_dim"] = json!(32);
    let c = LlamaConfig::from_json(&v).unwrap();
    assert!(c.qk_norm && !c.qkv_bias && c.gemma2.is_none());
    assert_eq!((c.arch, c.head_dim), (Arch::Qwen3, 32));

    let mut v = base();
    v.as_object_mut().unwrap().remove("architectures");
    v["model_type"] = json!("gemma2");
    v["hidden_activation"] = json!("gelu_pytorch_tanh");
    v["hidden_act"] = json!("gelu_pytorch_tanh");
    v["num_hidden_layers"] = json!(3);
    v["attn_logit_softcapping"] = json!(50.0);
    v["final_logit_softcapping"] = json!(null);
    v["query_pre_attn_scalar"] = json!(144);
    v["sliding_window"] = json!(4096);
    let c = LlamaConfig::from_json(&v).unwrap();
    assert_eq!((c.arch, c.hidden_act, c.tie_word_embeddings), (Arch::Gemma2, Activation::GeluTanh, true));
    let g = c.gemma2.clone().unwrap();
    assert_eq!(
        g,
        Gemma2Params {
            query_pre_attn_scalar: 144.0,
            attn_logit_softcapping: Some(50.0),
            final_logit_softcapping: None,
            sliding_window: Some(4096),
            sliding_layers: vec![true, false, true],
        }
    );
    // The window masks (some layers only): the context is not capped at it.
    assert_eq!(kiln_llm::model::effective_context(&c, 8192), 256);
    assert_eq!((0..3).map(|l| c.layer_window(l)).collect::<Vec<_>>(), [Some(4096), None, Some(4096)]);
    v["layer_types"] = json!(["full_attention", "sliding_attention", "full_attention"]);
    assert_eq!(LlamaConfig::from_json(&v).unwrap().gemma2.unwrap().sliding_layers, [false, true, false]);
    v["layer_types"] = json!(["full_attention"]);
    assert!(err(v.clone()).contains("`layer_types`"));
    v["layer_types"] = json!(null);
    v["hidden_activation"] = json!("gelu");
    assert!(err(v.clone()).contains("`hidden_activation`: only \"gelu_pytorch_tanh\""));
    v["hidden_activation"] = json!("gelu_pytorch_tanh");
    v["use_bidirectional_attention"] = json!(true);
    assert!(err(v).contains("use_bidirectional_attention"));

    let mut v = base();
    v["architectures"] = json!(["Phi3ForCausalLM"]);
    v.as_object_mut().unwrap().remove("rope_scaling");
    let c = LlamaConfig::from_json(&v).unwrap();
    assert_eq!((c.arch, c.hidden_act, c.qk_norm), (Arch::Phi3, Activation::Silu, false));
    v["rope_scaling"] = json!({"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]});
    let e = err(v.clone());
    assert!(e.contains("rope_scaling.rope_type") && e.contains("\"longrope\"") && e.contains("not supported"), "{e}");
    v["rope_scaling"] = json!({"type": "su", "short_factor": [1.0], "long_factor": [1.0]});
    assert!(err(v.clone()).contains("\"su\""));
    v.as_object_mut().unwrap().remove("rope_scaling");
    v["rope_parameters"] = json!({"rope_theta": 10000.0, "rope_type": "default", "partial_rotary_factor": 0.75});
    assert!(err(v).contains("rope_parameters.partial_rotary_factor"));
}

#[test]
fn unsupported_architectures_list_the_supported_ones() {
    let mut v = base();
    v["architectures"] = json!(["Gemma3ForCausalLM"]);
    let e = err(v);
    for name in [
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Gemma2ForCausalLM",
        "Phi3ForCausalLM",
    ] {
        assert!(e.contains(name), "{e}");
    }
}

#[test]
fn missing_files_are_named() {
    let tmp = std::env::temp_dir().join(format!("kiln-llm-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let e = ModelDir::open(&tmp).err().unwrap().to_string();
    assert!(e.contains("config.json"), "{e}");
    std::fs::write(tmp.join("config.json"), base().to_string()).unwrap();
    let e = ModelDir::open(&tmp).err().unwrap().to_string();
    assert!(e.contains("model.safetensors"), "{e}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[test]
fn llama3_inverse_frequencies() {
    // Wavelengths below original/high_freq_factor stay, above original/low_freq_factor are divided by
    // the factor, between they blend (transformers' _compute_llama3_parameters).
    let s = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_max_position_embeddings: 64,
    };
    let plain = kiln_llm::rope::inv_freq(16, 10000.0, None);
    let scaled = kiln_llm::rope::inv_freq(16, 10000.0, Some(&s));
    for (p, q) in plain.iter().zip(&scaled) {
        let wavelen = 2.0 * std::f64::consts::PI / p;
        if wavelen < 16.0 {
            assert_eq!(p, q);
        } else if wavelen > 64.0 {
            assert!((q - p / 8.0).abs() < 1e-15);
        } else {
            let smooth = (64.0 / wavelen - 1.0) / 3.0;
            assert!((q - ((1.0 - smooth) * p / 8.0 + smooth * p)).abs() < 1e-15);
        }
    }
    assert!(plain.iter().zip(&scaled).any(|(p, q)| p != q));
}

#[test]
fn a_model_that_cannot_fit_is_an_error() {
    let est =
        kiln_llm::MemoryEstimate { weight_bytes: 1 << 60, kv_cache_bytes: 1 << 40, largest_tensor_bytes: 1 << 30 };
    let e = kiln_llm::memory::check_fits(&est, &kiln::Device::cpu());
    if std::path::Path::new("/proc/meminfo").exists() {
        let e = e.unwrap_err().to_string();
        assert!(e.contains("out of memory") && e.contains("KV cache"), "{e}");
    }
    let small =
        kiln_llm::MemoryEstimate { weight_bytes: 1 << 20, kv_cache_bytes: 1 << 20, largest_tensor_bytes: 1 << 20 };
    kiln_llm::memory::check_fits(&small, &kiln::Device::cpu()).unwrap();
}
