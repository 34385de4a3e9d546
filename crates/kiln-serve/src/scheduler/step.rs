//! One step of the scheduler: what each sequence feeds it, the batched forward pass, the next
//! tokens (greedy ones' argmax on the device, sampled ones on the host), each phase timed into the
//! step profile.

use super::{Feed, Seq, Worker};
use crate::metrics::{StepPhase, StepProfile};
use kiln::Tensor;
use kiln_llm::{BatchSeq, SeqKv};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Worker {
    /// One forward pass over the batch; sends each finished prompt's or decode step's next token.
    /// The phases, each timed into the profile: build the batch, forward, (sync,) read back, sample,
    /// bookkeeping.
    pub(super) fn step(&mut self, active: &mut Vec<Seq>) -> kiln_llm::Result<()> {
        let metrics = self.metrics.clone();
        let device = self.model.device().clone();
        let before =
            StepStart { counters: device.gpu_counters(), compiled: device.compiled_kernels(), at: Instant::now() };
        let mut laps = Laps { prof: &metrics.profile, clock: before.at, laps: [Duration::ZERO; StepPhase::ALL.len()] };
        let (feeds, cut) = self.feeds(active);
        let (mut batch, rows, counts) = batch_of(active, &feeds);
        laps.lap(StepPhase::Build);
        let logits = self.model.forward_batch(&mut batch)?;
        drop(batch);
        laps.lap(StepPhase::Forward);
        if self.sync {
            // Every device of a split model.
            self.model.placement().devices().iter().try_for_each(kiln::Device::synchronize)?;
            laps.lap(StepPhase::Gpu);
        }
        let next = next_tokens(&logits, active, &feeds, &rows, &mut laps)?;
        metrics.steps_total.fetch_add(1, Ordering::Relaxed);
        metrics.batch_rows_total.fetch_add(rows.len() as u64, Ordering::Relaxed);
        metrics.last_batch.store(rows.len() as u64, Ordering::Relaxed);
        self.deliver(active, &feeds, &next);
        laps.lap(StepPhase::Bookkeeping);
        self.record(&before, &laps.laps, &feeds, counts, cut);
        Ok(())
    }

    /// What each sequence feeds this step: every decode token, and prompt chunks in arrival order
    /// while the step's prompt budget lasts (prompts that arrive together share a step). Also
    /// whether the budget cut a prompt short.
    fn feeds(&self, active: &[Seq]) -> (Vec<Feed>, bool) {
        let mut budget = self.opts.prefill_chunk;
        let mut cut = false;
        let feeds = active
            .iter()
            .map(|s| {
                let left = s.prefill().len() - s.fed;
                if left == 0 {
                    return Feed::Decode;
                }
                let n = left.min(budget);
                budget -= n;
                cut |= n < left;
                if n == 0 {
                    Feed::Wait
                } else {
                    Feed::Prompt(s.fed, s.fed + n)
                }
            })
            .collect();
        (feeds, cut)
    }

    /// Adds the step's rows, GPU dispatches and submissions and compiled kernels to the profile;
    /// with `KILN_SERVE_PROFILE=steps`, prints the step's line.
    fn record(&self, before: &StepStart, laps: &[Duration], feeds: &[Feed], rows: RowCounts, cut: bool) {
        let prof = &self.metrics.profile;
        let device = self.model.device();
        let count = |v: u64, c: &std::sync::atomic::AtomicU64| c.fetch_add(v, Ordering::Relaxed);
        count(rows.decode, &prof.decode_rows);
        count(rows.prefill, &prof.prefill_rows);
        count(rows.prefill_tokens, &prof.prefill_tokens);
        count(cut as u64, &prof.budget_full_steps);
        if let (Some((d0, s0)), Some((d1, s1))) = (before.counters, device.gpu_counters()) {
            count(d1 - d0, &prof.gpu_dispatches);
            count(s1 - s0, &prof.gpu_submits);
        }
        let new_kernels = device.compiled_kernels().saturating_sub(before.compiled) as u64;
        if new_kernels > 0 {
            count(new_kernels, &prof.kernels_compiled);
            count(1, &prof.compile_steps);
            count(before.at.elapsed().as_nanos() as u64, &prof.compile_step_nanos);
        }
        if self.trace {
            let RowCounts { decode, prefill, prefill_tokens } = rows;
            let mut line = format!(
                "kiln serve: step {}: {decode} decode + {prefill} prefill rows ({prefill_tokens} prompt tokens), {} \
                 waiting for budget; ms:",
                self.metrics.steps_total.load(Ordering::Relaxed),
                feeds.iter().filter(|f| matches!(f, Feed::Wait)).count()
            );
            for p in StepPhase::ALL.into_iter().filter(|&p| p != StepPhase::Intake) {
                line += &format!(" {} {:.3}", p.name(), laps[p as usize].as_secs_f64() * 1e3);
            }
            if new_kernels > 0 {
                line += &format!("; {new_kernels} kernels compiled");
            }
            eprintln!("{line}");
        }
    }
}

/// The device's counters when a step began.
struct StepStart {
    counters: Option<(u64, u64)>,
    compiled: usize,
    at: Instant,
}

/// A step's phase times: each added to the profile as it ends, and kept for the step's trace line.
struct Laps<'a> {
    prof: &'a StepProfile,
    clock: Instant,
    laps: [Duration; StepPhase::ALL.len()],
}

impl Laps<'_> {
    /// Ends `phase` now.
    fn lap(&mut self, phase: StepPhase) {
        let now = Instant::now();
        self.prof.add(phase, now - self.clock);
        self.laps[phase as usize] += now - self.clock;
        self.clock = now;
    }
}

/// The rows of one step, by kind.
struct RowCounts {
    decode: u64,
    prefill: u64,
    prefill_tokens: u64,
}

/// The step's batch: the tokens each fed sequence brings (its prompt chunk or its last token) with
/// its KV store, the index into `active` of each logits row, and the rows by kind.
fn batch_of<'a>(active: &'a mut [Seq], feeds: &[Feed]) -> (Vec<BatchSeq<'a>>, Vec<usize>, RowCounts) {
    let mut rows = Vec::new();
    let mut counts = RowCounts { decode: 0, prefill: 0, prefill_tokens: 0 };
    let mut batch = Vec::with_capacity(active.len());
    for (i, (s, feed)) in active.iter_mut().zip(feeds).enumerate() {
        let Seq { req, kv, out, replay, .. } = s;
        let tokens: &[u32] = match *feed {
            Feed::Wait => continue,
            Feed::Prompt(a, b) => {
                counts.prefill += 1;
                counts.prefill_tokens += (b - a) as u64;
                &replay.as_deref().unwrap_or(&req.prompt)[a..b]
            }
            Feed::Decode => {
                counts.decode += 1;
                std::slice::from_ref(out.last().expect("a sequence past its prompt has a token"))
            }
        };
        rows.push(i);
        batch.push(BatchSeq { tokens, kv: kv as &mut dyn SeqKv });
    }
    (batch, rows, counts)
}

/// The next token of each sequence of `active` that produces one now (decode rows and prompts whose
/// last chunk this was), from the step's `logits` (one row per entry of `rows`): the greedy ones'
/// argmax on the device in one transfer (the `Readback` phase), the sampled ones from their rows on
/// the host (`Sample`).
fn next_tokens(
    logits: &Tensor,
    active: &mut [Seq],
    feeds: &[Feed],
    rows: &[usize],
    laps: &mut Laps,
) -> kiln_llm::Result<Vec<Option<u32>>> {
    let produces = |i: usize| match feeds[i] {
        Feed::Decode => true,
        // A recomputed sequence (preempted) already has the token its prefill's last row gives.
        Feed::Prompt(_, b) => b == active[i].prefill().len() && active[i].out.is_empty(),
        Feed::Wait => false,
    };
    let (mut greedy, mut sampled) = (Vec::new(), Vec::new()); // (logits row, active index)
    for (r, &i) in rows.iter().enumerate() {
        if produces(i) {
            if active[i].sampler.is_greedy() {
                greedy.push((r, i));
            } else {
                sampled.push((r, i));
            }
        }
    }
    let greedy_ids = read_argmax(logits, &greedy, rows.len())?;
    let sampled_rows = read_rows(logits, &sampled)?;
    laps.lap(StepPhase::Readback);
    let mut next: Vec<Option<u32>> = vec![None; active.len()];
    for (&(_, i), &id) in greedy.iter().zip(&greedy_ids) {
        next[i] = Some(id);
    }
    for (&(_, i), row) in sampled.iter().zip(sampled_rows) {
        let s = &mut active[i];
        let mut history = s.req.prompt.clone();
        history.extend_from_slice(&s.out);
        next[i] = Some(s.sampler.sample_host(row, &history)?);
    }
    laps.lap(StepPhase::Sample);
    Ok(next)
}

/// The argmax of rows `rows[..].0` of f32 `logits` `(total, vocab)`, computed on the device and read
/// back in one transfer of ids (the logits stay on the device).
fn read_argmax(logits: &Tensor, rows: &[(usize, usize)], total: usize) -> kiln_llm::Result<Vec<u32>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let ids = if rows.len() == total {
        logits.argmax(-1, false)?
    } else {
        logits.index_select(&row_ids(logits, rows)?, 0)?.argmax(-1, false)?
    };
    Ok(ids.to_vec::<i64>()?.into_iter().map(|i| i as u32).collect())
}

/// Rows `rows[..].0` of f32 `logits` `(total, vocab)`, read back in one transfer.
fn read_rows(logits: &Tensor, rows: &[(usize, usize)]) -> kiln_llm::Result<Vec<Vec<f32>>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let vocab = logits.dims()[1];
    let all = logits.index_select(&row_ids(logits, rows)?, 0)?.to_vec::<f32>()?;
    Ok(all.chunks(vocab).map(<[f32]>::to_vec).collect())
}

fn row_ids(logits: &Tensor, rows: &[(usize, usize)]) -> kiln_llm::Result<Tensor> {
    let ids: Vec<i64> = rows.iter().map(|&(r, _)| r as i64).collect();
    Ok(Tensor::from_vec(ids, rows.len(), logits.device())?)
}
