//! config.json parsing: the switches of each architecture, and errors that name the field or file.

use kiln_llm::{Arch, LlamaConfig, ModelDir, RopeScaling};
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
    assert_eq!(kiln_llm::model::effective_context(&c, 4096), 32);
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
