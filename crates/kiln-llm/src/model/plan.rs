//! What a model's weights are (names and shapes, in load order) and what loading will hold on the
//! device: the plan [`Model::load`](super::Model::load) follows and the memory estimate made from it.

use crate::config::{Arch, LlamaConfig};
use crate::weights::WeightSource;
use kiln::DType;

/// What loading will hold on the device.
#[derive(Debug, Clone, Copy)]
pub struct MemoryEstimate {
    pub weight_bytes: u64,
    pub kv_cache_bytes: u64,
    /// The largest single tensor (weights or one layer's K or V cache).
    pub largest_tensor_bytes: u64,
}

impl MemoryEstimate {
    pub fn total(&self) -> u64 {
        self.weight_bytes + self.kv_cache_bytes
    }
}

/// The names and expected shapes of every weight, in load order.
pub(crate) fn weight_plan(cfg: &LlamaConfig, src: &dyn WeightSource) -> Vec<(String, Vec<usize>)> {
    let (h, hd, i) = (cfg.hidden_size, cfg.head_dim, cfg.intermediate_size);
    let (q_out, kv_out) = (cfg.num_heads * hd, cfg.num_kv_heads * hd);
    let mut plan = vec![("model.embed_tokens.weight".to_string(), vec![cfg.vocab_size, h])];
    for l in 0..cfg.num_layers {
        let p = format!("model.layers.{l}");
        plan.push((format!("{p}.input_layernorm.weight"), vec![h]));
        if cfg.arch == Arch::Phi3 {
            plan.push((format!("{p}.self_attn.qkv_proj.weight"), vec![q_out + 2 * kv_out, h]));
            if cfg.qkv_bias {
                plan.push((format!("{p}.self_attn.qkv_proj.bias"), vec![q_out + 2 * kv_out]));
            }
        } else {
            for (n, out) in [("q", q_out), ("k", kv_out), ("v", kv_out)] {
                plan.push((format!("{p}.self_attn.{n}_proj.weight"), vec![out, h]));
                if cfg.qkv_bias {
                    plan.push((format!("{p}.self_attn.{n}_proj.bias"), vec![out]));
                }
            }
        }
        if cfg.qk_norm {
            plan.push((format!("{p}.self_attn.q_norm.weight"), vec![hd]));
            plan.push((format!("{p}.self_attn.k_norm.weight"), vec![hd]));
        }
        plan.push((format!("{p}.self_attn.o_proj.weight"), vec![h, q_out]));
        if cfg.o_bias {
            plan.push((format!("{p}.self_attn.o_proj.bias"), vec![h]));
        }
        plan.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        if cfg.gemma2.is_some() {
            plan.push((format!("{p}.pre_feedforward_layernorm.weight"), vec![h]));
            plan.push((format!("{p}.post_feedforward_layernorm.weight"), vec![h]));
        }
        let mlp: &[(&str, Vec<usize>)] = if cfg.arch == Arch::Phi3 {
            &[("gate_up", vec![2 * i, h]), ("down", vec![h, i])]
        } else {
            &[("gate", vec![i, h]), ("up", vec![i, h]), ("down", vec![h, i])]
        };
        for (n, shape) in mlp {
            plan.push((format!("{p}.mlp.{n}_proj.weight"), shape.clone()));
            if cfg.mlp_bias {
                plan.push((format!("{p}.mlp.{n}_proj.bias"), vec![shape[0]]));
            }
        }
    }
    plan.push(("model.norm.weight".to_string(), vec![h]));
    if !cfg.tie_word_embeddings || src.meta("lm_head.weight").is_some() {
        plan.push(("lm_head.weight".to_string(), vec![cfg.vocab_size, h]));
    }
    plan
}

/// Weights plus a KV cache of `max_context` positions, both in `dtype`.
pub fn estimate_memory(cfg: &LlamaConfig, src: &dyn WeightSource, dtype: DType, max_context: usize) -> MemoryEstimate {
    let size = dtype.size_in_bytes() as u64;
    let plan = weight_plan(cfg, src);
    let elems = |s: &Vec<usize>| s.iter().product::<usize>() as u64;
    let per_layer_kv = (cfg.num_kv_heads * cfg.head_dim * max_context) as u64 * size;
    MemoryEstimate {
        weight_bytes: plan.iter().map(|(_, s)| elems(s) * size).sum(),
        kv_cache_bytes: per_layer_kv * 2 * cfg.num_layers as u64,
        largest_tensor_bytes: plan.iter().map(|(_, s)| elems(s) * size).max().unwrap_or(0).max(per_layer_kv),
    }
}
