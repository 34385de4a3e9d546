//! The generation loop: one prefill pass over the whole prompt, then one cached decode step per token,
//! each token handed to a callback as soon as it is sampled; prefill and decode timed apart.

use crate::model::{Cache, Model};
use crate::sampling::{Sampler, SamplingParams};
use crate::{LlmError, Result};
use kiln::{PendingRead, Tensor};
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
    if sampler.is_greedy() {
        // The prefill's time runs to the first token; the decode's from there.
        let mut first_at = None;
        let (tokens, steps) = decode_greedy(model, cache, &logits, opts.max_tokens, &opts.stop_tokens, |t| {
            first_at.get_or_insert_with(Instant::now);
            on_token(t)
        })?;
        let first_at = first_at.expect("decode_greedy hands over at least one token");
        stats.prefill_secs = (first_at - start).as_secs_f64();
        stats.decode_secs = first_at.elapsed().as_secs_f64();
        stats.decode_steps = steps;
        stats.generated_tokens = tokens.len();
        stats.peak_gpu_bytes = peak_gpu_bytes(model);
        return Ok((tokens, stats));
    }
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
    stats.peak_gpu_bytes = peak_gpu_bytes(model);
    Ok((out, stats))
}

/// Peak bytes of the GPU pools, summed over the GPUs of a split model (None on the CPU).
fn peak_gpu_bytes(model: &Model) -> Option<u64> {
    let peaks = model.placement().devices().iter().filter_map(|d| d.memory_stats()).map(|m| m.peak_bytes);
    peaks.reduce(|a, b| a + b)
}

/// Greedy decoding after a forward pass whose logits `(1, vocab)` are `logits`: tokens handed to
/// `on_token` one by one, at most `max_tokens` (at least one), ending after a stop token (returned,
/// not passed through the model) or at the end of the context, as [`generate`] does. Returns the
/// tokens and the decode steps (forward passes) whose token was used.
///
/// Each step is recorded before the previous token is read back (`KILN_DECODE_AHEAD`, on by
/// default): its embedding reads the argmax on the device, so the GPU goes from one token to the
/// next without waiting for the host to read, and the host records a step while the GPU runs the
/// one before. A step recorded ahead of a stop token (or of an error from `on_token`) is taken
/// back from the cache.
pub fn decode_greedy(
    model: &Model,
    cache: &mut Cache,
    logits: &Tensor,
    max_tokens: usize,
    stop_tokens: &[u32],
    mut on_token: impl FnMut(u32) -> Result<()>,
) -> Result<(Vec<u32>, usize)> {
    let ahead = decode_ahead();
    // The argmax of the logits as the next step's ids `(1,)` on the embedding's device (a split
    // model's last device hands them over through the host), and its read started.
    let argmax = |logits: &Tensor| -> Result<(Tensor, PendingRead<i64>)> {
        let ids = logits.argmax(-1, false)?.reshape(1)?;
        let read = ids.read_later::<i64>()?;
        Ok((ids.to_device(model.device())?, read))
    };
    let (mut ids, mut read) = argmax(logits)?;
    let (mut out, mut steps) = (Vec::new(), 0);
    loop {
        // A step follows this token unless it is the last one allowed (or a stop token: unknown yet).
        let more = out.len() + 1 < max_tokens.max(1) && cache.len() < model.max_context();
        let recorded = if ahead && more { Some(argmax(&model.forward_ids(&ids, cache)?)?) } else { None };
        let token = read.wait()?[0] as u32;
        out.push(token);
        let stop = stop_tokens.contains(&token);
        let handed = on_token(token);
        if (stop || handed.is_err()) && recorded.is_some() {
            cache.truncate(cache.len() - 1);
        }
        handed?;
        if stop || !more {
            return Ok((out, steps));
        }
        (ids, read) = match recorded {
            Some(next) => next,
            None => argmax(&model.forward_ids(&ids, cache)?)?,
        };
        steps += 1;
    }
}

/// Whether [`decode_greedy`] records each step before reading the token before it
/// (`KILN_DECODE_AHEAD`, default 1; 0 reads first, for comparison).
fn decode_ahead() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| kiln::settings::DECODE_AHEAD.is_not_zero())
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
