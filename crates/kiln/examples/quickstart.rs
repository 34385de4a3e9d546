//! A tiny Llama-style decoder layer run token by token with a KV cache, on the device `KILN_DEVICE`
//! names (the CPU by default): embedding, RMSNorm, RoPE, grouped-query causal attention, SwiGLU MLP and
//! a softmax over the vocabulary. Checks the cached decode against one full-sequence pass.
//!
//! Run: `cargo run --release -p kiln --example quickstart`

use kiln::{DType, Device, KvCache, Result, RopeLayout, Tensor};

const VOCAB: usize = 512;
const DIM: usize = 256;
const HEADS: usize = 8;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = DIM / HEADS;
const HIDDEN: usize = 688;

struct Layer {
    embed: Tensor,
    norm1: Tensor,
    wq: Tensor,
    wk: Tensor,
    wv: Tensor,
    wo: Tensor,
    norm2: Tensor,
    w_gate: Tensor,
    w_up: Tensor,
    w_down: Tensor,
    lm_head: Tensor,
}

impl Layer {
    fn new(dev: &Device) -> Result<Layer> {
        let w = |rows: usize, cols: usize, seed: u64| {
            Tensor::randn(0.0, 1.0 / (cols as f64).sqrt(), (rows, cols), DType::F32, seed, dev)
        };
        Ok(Layer {
            embed: w(VOCAB, DIM, 1)?,
            norm1: Tensor::ones(DIM, DType::F32, dev)?,
            wq: w(HEADS * HEAD_DIM, DIM, 2)?,
            wk: w(KV_HEADS * HEAD_DIM, DIM, 3)?,
            wv: w(KV_HEADS * HEAD_DIM, DIM, 4)?,
            wo: w(DIM, HEADS * HEAD_DIM, 5)?,
            norm2: Tensor::ones(DIM, DType::F32, dev)?,
            w_gate: w(HIDDEN, DIM, 6)?,
            w_up: w(HIDDEN, DIM, 7)?,
            w_down: w(DIM, HIDDEN, 8)?,
            lm_head: w(VOCAB, DIM, 9)?,
        })
    }

    /// Next-token probabilities `(t, VOCAB)` for `tokens` at positions `offset..`, using and filling `cache`.
    fn forward(&self, tokens: &Tensor, offset: usize, cache: &mut KvCache) -> Result<Tensor> {
        let t = tokens.elem_count();
        let x = self.embed.embedding(tokens)?; // (t, DIM)
        let h = x.rms_norm(&self.norm1, 1e-5)?;
        let heads = |w: &Tensor, n: usize| -> Result<Tensor> {
            h.linear(w, None)?.reshape((1, t, n, HEAD_DIM))?.transpose(1, 2)
        };
        let q = heads(&self.wq, HEADS)?.rope(offset, 10_000.0, RopeLayout::HalfSplit)?;
        let k = heads(&self.wk, KV_HEADS)?.rope(offset, 10_000.0, RopeLayout::HalfSplit)?;
        let v = heads(&self.wv, KV_HEADS)?;
        let (k, v) = cache.append(&k, &v)?;
        let att = q.sdpa(&k, &v, true, None)?; // (1, HEADS, t, HEAD_DIM)
        let att = att.transpose(1, 2)?.reshape((t, DIM))?;
        let x = x.add(&att.linear(&self.wo, None)?)?;
        let h = x.rms_norm(&self.norm2, 1e-5)?;
        let mlp = h.linear(&self.w_gate, None)?.silu_mul(&h.linear(&self.w_up, None)?)?;
        let x = x.add(&mlp.linear(&self.w_down, None)?)?;
        x.linear(&self.lm_head, None)?.softmax(-1)
    }
}

/// Errors are printed with `Display` (`error: environment variable KILN_DEVICE=... is not valid: ...`),
/// not the `Debug` form a `main` returning `Result` would print.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let dev = Device::from_env()?;
    println!("device: {dev}");
    let layer = Layer::new(&dev)?;
    let prompt: Vec<i64> = vec![3, 141, 59, 26, 5, 358, 97, 93];
    let tokens = Tensor::from_vec(prompt.clone(), prompt.len(), &dev)?;

    // One pass over the whole prompt.
    let mut cache = KvCache::new(64);
    let full = layer.forward(&tokens, 0, &mut cache)?;

    // The same prompt one token at a time through the cache.
    let mut cache = KvCache::new(64);
    let mut steps = Vec::new();
    for (pos, &tok) in prompt.iter().enumerate() {
        let one = Tensor::from_vec(vec![tok], 1, &dev)?;
        steps.push(layer.forward(&one, pos, &mut cache)?);
    }
    let refs: Vec<&Tensor> = steps.iter().collect();
    let stepped = Tensor::concat(&refs, 0)?;

    let diff = full.sub(&stepped)?.abs()?.max_all()?.to_scalar::<f32>()?;
    let next = full.narrow(0, prompt.len() - 1, 1)?.argmax(-1, false)?.to_vec::<i64>()?;
    println!(
        "probabilities {} (rows sum to {})",
        full.shape(),
        full.sum(&[-1], false)?.mean_all()?.to_scalar::<f32>()?
    );
    println!("cached decode vs full pass: max |diff| = {diff:.2e}");
    println!("predicted next token: {}", next[0]);
    println!("last row, first 8 probabilities:\n{}", full.narrow(0, prompt.len() - 1, 1)?.narrow(1, 0, 8)?);
    assert!(diff < 1e-4, "cached decode disagrees with the full pass");
    Ok(())
}
