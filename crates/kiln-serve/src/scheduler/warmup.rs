//! The warm-up: synthetic bursts through the serving path before the first request (GPU only).

use super::{GenRequest, Seq, Worker};
use crate::metrics::Metrics;
use kiln_llm::{Sampler, SamplingParams};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

impl Worker {
    /// Runs bursts of synthetic requests through the serving path (admission, [`Worker::step`])
    /// before the first real one, so that the GPU kernels of the shapes a server meets are compiled
    /// now and not while a burst of clients waits for its first tokens: a kernel variant's first use
    /// compiles its pipeline, which takes seconds on some drivers (lavapipe, NVIDIA's for large
    /// kernels). Bursts of 1, 2, 4, 8, 16, 32, 64, 128 and `max_batch` requests (the row blocks of the
    /// matmul and fused decode kernels, the switch to composed ops past 8 rows, the cooperative
    /// matmul's tiles for up to 32, 64 and 128 rows), so prompt chunks up to the step's budget, one prompt longer than a paged chunk
    /// and long enough for split decode attention, and one sampled request. The sequences' blocks
    /// go back to the pool and the counters stay untouched. Returns a line saying what it did.
    pub(super) fn warm_up(&mut self) -> Result<String, String> {
        let device = self.model.device().clone();
        let (start, kernels) = (Instant::now(), device.compiled_kernels());
        let real = std::mem::replace(&mut self.metrics, Arc::new(Metrics::default()));
        let result = self.warm_up_bursts();
        let steps = self.metrics.steps_total.load(Ordering::Relaxed);
        self.metrics = real;
        // A kernel profile (KILN_PROFILE=1) starts with the first real burst.
        device.reset_profile();
        result.map_err(|e| e.to_string())?;
        Ok(format!(
            "warmed up in {:.2} s ({steps} steps, {} kernels compiled)",
            start.elapsed().as_secs_f64(),
            device.compiled_kernels().saturating_sub(kernels)
        ))
    }

    fn warm_up_bursts(&mut self) -> kiln_llm::Result<()> {
        let vocab = self.model.config.vocab_size as u32;
        let ctx = self.model.max_context();
        let max_batch = self.opts.max_batch;
        if ctx < 4 {
            return Ok(());
        }
        let mut sizes = vec![1, 2, 4, 8, 16, 32, 64, 128, max_batch];
        sizes.retain(|&n| n <= max_batch);
        sizes.sort_unstable();
        sizes.dedup();
        for (b, &n) in sizes.iter().enumerate() {
            let mut active = Vec::new();
            let mut receivers = Vec::new();
            for i in 0..n {
                let len = if i == 0 { kiln_llm::model::PAGED_CHUNK + 16 } else { 32 };
                let (len, max_tokens) = (len.min(ctx - 3), 3);
                let prompt = (0..len).map(|j| ((i * 131 + j * 7 + b + 3) as u32) % vocab).collect();
                let sampling = if i == 1 {
                    SamplingParams { temperature: 1.0, ..Default::default() }
                } else {
                    SamplingParams::default()
                };
                let Some(kv) = self.pool.reserve((len + max_tokens).min(ctx)) else { break };
                let (events, rx) = tokio::sync::mpsc::unbounded_channel();
                receivers.push(rx);
                let req =
                    GenRequest { prompt, max_tokens, sampling: sampling.clone(), seed: 0, stop_tokens: vec![], events };
                let sampler = Sampler::new(sampling, 0)?;
                let arrived = Instant::now();
                active.push(Seq {
                    req,
                    kv,
                    sampler,
                    replay: None,
                    fed: 0,
                    out: Vec::new(),
                    arrived,
                    first_token: None,
                });
            }
            while !active.is_empty() {
                self.step(&mut active)?;
            }
        }
        Ok(())
    }
}
