//! GGUF tensor names of Llama-family models and their Hugging Face (safetensors) names, and the
//! inverse of the row permutation llama.cpp's converter applies to the query and key weights.
//!
//! | GGUF | Hugging Face |
//! |---|---|
//! | `token_embd.weight` | `model.embed_tokens.weight` |
//! | `output_norm.weight` | `model.norm.weight` |
//! | `output.weight` | `lm_head.weight` (absent when tied to the embedding) |
//! | `blk.N.attn_norm.weight` | `model.layers.N.input_layernorm.weight` |
//! | `blk.N.attn_q.weight` | `model.layers.N.self_attn.q_proj.weight` (rows permuted, below) |
//! | `blk.N.attn_k.weight` | `model.layers.N.self_attn.k_proj.weight` (rows permuted, below) |
//! | `blk.N.attn_v.weight` | `model.layers.N.self_attn.v_proj.weight` |
//! | `blk.N.attn_output.weight` | `model.layers.N.self_attn.o_proj.weight` |
//! | `blk.N.ffn_norm.weight` | `model.layers.N.post_attention_layernorm.weight` |
//! | `blk.N.ffn_gate.weight` | `model.layers.N.mlp.gate_proj.weight` |
//! | `blk.N.ffn_up.weight` | `model.layers.N.mlp.up_proj.weight` |
//! | `blk.N.ffn_down.weight` | `model.layers.N.mlp.down_proj.weight` |
//!
//! (`.bias` tensors map like their `.weight`; `rope_freqs.weight` has no HF name.)
//!
//! **The Q/K permutation.** Hugging Face Llama weights rotate with `rope_half` (pairs `(i, i + d/2)`
//! of each head), GGML with interleaved pairs `(2i, 2i + 1)`. So `convert_hf_to_gguf.py` permutes
//! the rows of `q_proj` (with `n_head`) and `k_proj` (with `n_head_kv`) within each head:
//! `w.reshape(n_head, 2, d/2, in).swapaxes(1, 2).reshape(out, in)`, i.e. GGUF row `h*d + 2i + j`
//! is HF row `h*d + j*d/2 + i`. [`unpermute_rows`] undoes it (HF row `h*d + j*d/2 + i` = GGUF row
//! `h*d + 2i + j`), so HF-style `rope` (half split) gives the model's results; a loader that keeps
//! GGUF's rows must use interleaved rope instead. Whole rows move, so quantized rows (whole blocks)
//! are permuted as bytes without dequantising.

/// The Hugging Face name of a Llama-family GGUF tensor name, if it has one.
pub fn hf_name(gguf: &str) -> Option<String> {
    let (base, kind) = gguf.rsplit_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let top = match base {
        "token_embd" => Some("model.embed_tokens"),
        "output_norm" => Some("model.norm"),
        "output" => Some("lm_head"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(format!("{t}.{kind}"));
    }
    let rest = base.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{kind}"))
}

/// Which head count un-permutes a GGUF tensor: `Some(n_head)` for `attn_q.weight`,
/// `Some(n_head_kv)` for `attn_k.weight`, `None` for every other tensor.
pub fn qk_heads(gguf: &str, n_head: usize, n_head_kv: usize) -> Option<usize> {
    let part = gguf.strip_prefix("blk.")?.split_once('.')?.1;
    match part {
        "attn_q.weight" => Some(n_head),
        "attn_k.weight" => Some(n_head_kv),
        _ => None,
    }
}

/// GGUF's rows back in Hugging Face order: `data` holds `rows` rows of `row_bytes` bytes each (any
/// dtype or quantized blocks), `n_head` heads of `rows / n_head` rows. `None` when the rows do not
/// split into heads of an even size.
pub fn unpermute_rows(data: &[u8], rows: usize, row_bytes: usize, n_head: usize) -> Option<Vec<u8>> {
    if n_head == 0
        || !rows.is_multiple_of(n_head)
        || !(rows / n_head).is_multiple_of(2)
        || data.len() != rows.checked_mul(row_bytes)?
    {
        return None;
    }
    let d = rows / n_head;
    let half = d / 2;
    let mut out = vec![0u8; data.len()];
    for h in 0..n_head {
        for j in 0..2 {
            for i in 0..half {
                let hf = h * d + j * half + i;
                let gg = h * d + 2 * i + j;
                out[hf * row_bytes..(hf + 1) * row_bytes].copy_from_slice(&data[gg * row_bytes..(gg + 1) * row_bytes]);
            }
        }
    }
    Some(out)
}
