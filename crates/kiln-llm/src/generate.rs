//! The generation loop: one prefill pass over the whole prompt, then one cached decode step per token,
//! each token handed to a callback as soon as it is sampled; prefill and decode timed apart.

use crate::model::{Cache, Model};
use crate::sampling::{Sampler, SamplingParams};
use crate::{LlmError, Result};
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub seed: u64,
    /// Generation ends after one of these (it is returned but not passed through the model).
    pub stop_tokens: Vec<u32>,
}

/// Token counts and times of one generation.
#[derive(Debug, Clone, Default)]
pub struct GenerateStats {
    pub prompt_tokens: usize,
    pub prefill_secs: f64,
    pub generated_tokens: usize,
    /// Decode steps (forward passes after the prefill) and their time.
    pub decode_steps: usize,
    pub decode_secs: f64,
    /// Peak bytes of the GPU pool, summed over the GPUs of a split model (None on the CPU).
    pub peak_gpu_bytes: Option<u64>,
}

impl GenerateStats {
    pub fn prefill_tokens_per_sec(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill_secs.max(1e-12)
    }
    pub fn decode_tokens_per_sec(&self) -> f64 {
        self.decode_steps as f64 / self.decode_secs.max(1e-12)
    }
}

/// Checks the logits of the first step: NaN or infinite logits sample nothing meaningful (a greedy
/// argmax of NaNs is token 0 forever), and they come from weights, not from the prompt.
fn check_finite(logits: &[f32]) -> Result<()> {
    let bad = logits.iter().filter(|x| !x.is_finite()).count();
    if bad == 0 {
        return Ok(());
    }
    Err(LlmError::NonFinite(format!(
        "the model's first logits hold {bad} of {} values that are NaN or infinite: the weights are likely \
         corrupt (a damaged or truncated download; check the file's checksum), or f16 overflowed (try \
         --dtype f32)",
        logits.len()
    )))
}

/// Generates up to `opts.max_tokens` tokens after `prompt` (positions `cache.len()..` of the
/// sequence), calling `on_token` with each. Stops early at a stop token or at the end of the context.
pub fn generate(
    model: &Model,
    cache: &mut Cache,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<(Vec<u32>, GenerateStats)> {
    let mut sampler = Sampler::new(opts.sampling.clone(), opts.seed)?;
    let mut history: Vec<u32> = prompt.to_vec();
    let mut out = Vec::new();
    let mut stats = GenerateStats { prompt_tokens: prompt.len(), ..Default::default() };
    if opts.max_tokens == 0 || prompt.is_empty() {
        return Ok((out, stats));
    }
    let start = Instant::now();
    let logits = model.forward(prompt, cache, false)?;
    check_finite(&logits.to_vec::<f32>()?)?;
    let mut next = sampler.sample(&logits, &history)?; // reading the token waits for the GPU
    stats.prefill_secs = start.elapsed().as_secs_f64();
    let decode_start = Instant::now();
    loop {
        out.push(next);
        history.push(next);
        on_token(next)?;
        if out.len() >= opts.max_tokens || opts.stop_tokens.contains(&next) || cache.len() >= model.max_context() {
            break;
        }
        let logits = model.forward(&[next], cache, false)?;
        next = sampler.sample(&logits, &history)?;
        stats.decode_steps += 1;
    }
    stats.decode_secs = decode_start.elapsed().as_secs_f64();
    stats.generated_tokens = out.len();
    let peaks = model.placement().devices().iter().filter_map(|d| d.memory_stats()).map(|m| m.peak_bytes);
    stats.peak_gpu_bytes = peaks.reduce(|a, b| a + b);
    Ok((out, stats))
}

#[cfg(test)]
mod tests {
    use super::check_finite;

    #[test]
    fn non_finite_logits_name_the_likely_cause() {
        assert!(check_finite(&[0.0, -3.5, 1e30]).is_ok());
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let e = check_finite(&[1.0, bad, 2.0]).unwrap_err().to_string();
            assert!(e.contains("1 of 3") && e.contains("corrupt"), "{e}");
        }
    }
}
