//! The scheduler: one thread that owns the model and runs continuous batching. Requests wait in a
//! bounded queue; at every token boundary finished and cancelled sequences leave the batch and
//! waiting ones join it (while the batch has room and the KV pool has blocks for their prompt and a
//! first block of answer). Before each step a running sequence whose blocks are full gets another;
//! when the pool has none left, the youngest running sequence is preempted: its blocks go back, and
//! it waits, ahead of new requests, to be recomputed from its prompt and the tokens it already sent
//! (as vLLM preempts by recompute), then goes on where it stopped. One step
//! runs one [`Model::forward_batch`] over every active sequence: a decode token for each running
//! sequence plus prompt chunks of the ones still prefilling (at most `prefill_chunk` prompt tokens a
//! step, so a long prompt does not stall the running streams). Nothing here knows about HTTP.
//!
//! A step reads back as little as it can: one transfer of token ids for the greedy sequences (the
//! argmax runs on the device) and, only when some sequence samples, one transfer of those
//! sequences' logits rows. Every step is timed by phase into [`crate::metrics::StepProfile`]
//! (`/metrics`). `KILN_SERVE_PROFILE=1` prints a summary line on stderr whenever the batch drains
//! (a burst of load), with the per-kernel table when `KILN_PROFILE=1` times kernels;
//! `KILN_SERVE_PROFILE=sync` also waits for the device right after each forward pass, so that the
//! GPU's time shows apart from the host's recording (`forward`) and the transfers (`readback`);
//! `KILN_SERVE_PROFILE=steps` does that and prints one line per step (rows, phases, compiles).

mod step;
mod warmup;

use crate::metrics::{Metrics, ProfileSnapshot, StepPhase};
use kiln_llm::paged::{PagedPool, PagedSeq};
use kiln_llm::{Model, Sampler, SamplingParams, SeqKv};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token (or, found by the HTTP layer, a stop string).
    Stop,
    /// `max_tokens` or the end of the context.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// What the scheduler sends back for a request, in order: tokens, then one `Done` or `Error`; or,
/// for a request that never started, one `Refused`.
#[derive(Debug)]
pub enum Event {
    Token(u32),
    Done {
        finish: Finish,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    Error(String),
    /// The request was still waiting when the server began to shut down (HTTP 503).
    Refused(String),
}

/// A generation request, already tokenized and validated.
pub struct GenRequest {
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    pub seed: u64,
    pub stop_tokens: Vec<u32>,
    /// Dropping the receiver cancels the request (its sequence leaves at the next token boundary).
    pub events: UnboundedSender<Event>,
}

/// Why a request was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The waiting queue is at its bound (HTTP 429).
    QueueFull,
    /// The server is shutting down or the scheduler has stopped (HTTP 503).
    Unavailable,
}

#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Most sequences in one batch.
    pub max_batch: usize,
    /// Most requests waiting for a place in the batch.
    pub max_queue: usize,
    /// Most prompt tokens prefilled in one step (over all sequences).
    pub prefill_chunk: usize,
    /// KV positions per block of the paged cache.
    pub block_size: usize,
    /// Blocks in the KV pool (all sequences together).
    pub kv_blocks: usize,
    /// Run synthetic bursts through the model before taking requests (GPU only), so that the
    /// kernels of the batch shapes are compiled before clients wait on them ([`Scheduler::start`]).
    pub warmup: bool,
}

/// The handle the HTTP layer holds: submits requests, tells the thread to stop.
pub struct Scheduler {
    tx: Mutex<Option<mpsc::Sender<GenRequest>>>,
    metrics: Arc<Metrics>,
    max_queue: usize,
    pool_positions: usize,
    stopping: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts the scheduler thread, which owns `model` from now on. With `opts.warmup` on a GPU,
    /// first runs the warm-up bursts (see `Worker::warm_up`) and says on stderr what they took.
    pub fn start(model: Model, opts: SchedulerOptions, metrics: Arc<Metrics>) -> Result<Scheduler, String> {
        if opts.max_batch == 0 || opts.prefill_chunk == 0 || opts.block_size == 0 || opts.kv_blocks == 0 {
            return Err(format!(
                "max batch ({}), prefill chunk ({}), block size ({}) and KV blocks ({}) must be positive",
                opts.max_batch, opts.prefill_chunk, opts.block_size, opts.kv_blocks
            ));
        }
        let (tx, rx) = mpsc::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let max_queue = opts.max_queue;
        let warmup = opts.warmup && model.device().is_gpu();
        let pool_positions = opts.block_size * opts.kv_blocks;
        let mut worker = Worker::new(model, opts, rx, metrics.clone(), stopping.clone())?;
        if warmup {
            match worker.warm_up() {
                Ok(done) => eprintln!("kiln serve: {done}"),
                Err(e) => eprintln!("kiln serve: warm-up failed ({e}); serving anyway"),
            }
        }
        let thread = std::thread::Builder::new()
            .name("kiln-scheduler".into())
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start the scheduler thread: {e}"))?;
        Ok(Scheduler {
            tx: Mutex::new(Some(tx)),
            metrics,
            max_queue,
            pool_positions,
            stopping,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues `req`, or says why not (the queue is full, or the server is stopping).
    pub fn submit(&self, req: GenRequest) -> Result<(), Rejected> {
        if self.stopping.load(Ordering::SeqCst) {
            return Err(Rejected::Unavailable);
        }
        let queued = &self.metrics.queue_depth;
        // Reserve a place in the queue; give it back if the bound is passed.
        if queued.fetch_add(1, Ordering::SeqCst) >= self.max_queue as u64 {
            queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Rejected::QueueFull);
        }
        let sent = match self.tx.lock() {
            Ok(tx) => tx.as_ref().is_some_and(|tx| tx.send(req).is_ok()),
            Err(_) => false,
        };
        if !sent {
            queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Rejected::Unavailable);
        }
        Ok(())
    }

    /// Stops taking requests: new and waiting ones are refused (503), running ones go on for at
    /// most `grace`, then end with an error event.
    pub fn begin_shutdown(&self, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let at = (self.metrics.started.elapsed() + grace).as_millis().max(1) as u64;
        self.metrics.shutdown_deadline_ms.store(at, Ordering::SeqCst);
    }

    /// The most positions one sequence can hold: the whole KV pool (a longer prompt can never run).
    pub fn pool_positions(&self) -> usize {
        self.pool_positions
    }

    /// Waits for the scheduler thread to finish what it runs and end.
    pub fn join(&self) {
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

/// One sequence in the batch.
struct Seq {
    req: GenRequest,
    kv: PagedSeq,
    sampler: Sampler,
    /// After a preemption: the prompt and every answer token but the last, to prefill again.
    replay: Option<Vec<u32>>,
    /// Tokens of [`Seq::prefill`] already through the model.
    fed: usize,
    out: Vec<u32>,
    arrived: Instant,
    first_token: Option<Instant>,
}

impl Seq {
    /// The tokens to prefill before decoding: the prompt, or after a preemption the prompt and the
    /// answer so far but its last token (which the next decode step feeds).
    fn prefill(&self) -> &[u32] {
        self.replay.as_deref().unwrap_or(&self.req.prompt)
    }
}

/// A preempted sequence, without KV blocks, waiting to be recomputed.
struct Parked {
    req: GenRequest,
    sampler: Sampler,
    out: Vec<u32>,
    arrived: Instant,
    first_token: Option<Instant>,
}

struct Worker {
    model: Model,
    pool: PagedPool,
    opts: SchedulerOptions,
    rx: mpsc::Receiver<GenRequest>,
    metrics: Arc<Metrics>,
    stopping: Arc<AtomicBool>,
    /// `KILN_SERVE_PROFILE=1` (or `sync`): print a profile line whenever the batch drains.
    profile: bool,
    /// `KILN_SERVE_PROFILE=sync`: also wait for the device right after each forward pass, so that
    /// GPU time shows apart from the readback.
    sync: bool,
    /// `KILN_SERVE_PROFILE=steps`: as `sync`, and one line per step on stderr.
    trace: bool,
    /// Since the batch last went from empty to busy: (start, profile counters, steps, tokens).
    burst: Option<(Instant, ProfileSnapshot, u64, u64)>,
}

/// What one sequence feeds a step.
#[derive(Clone, Copy)]
enum Feed {
    /// A prefill waiting for the step's prompt budget.
    Wait,
    /// Prompt tokens `start..end`.
    Prompt(usize, usize),
    /// Its last generated token.
    Decode,
}

impl Worker {
    fn new(
        model: Model,
        opts: SchedulerOptions,
        rx: mpsc::Receiver<GenRequest>,
        metrics: Arc<Metrics>,
        stopping: Arc<AtomicBool>,
    ) -> Result<Worker, String> {
        let pool = PagedPool::new(&model, opts.block_size, opts.kv_blocks).map_err(|e| e.to_string())?;
        metrics.kv_blocks_total.store(opts.kv_blocks as u64, Ordering::Relaxed);
        let mode = std::env::var("KILN_SERVE_PROFILE").unwrap_or_default();
        let (profile, sync, trace) = match mode.as_str() {
            "1" => (true, false, false),
            "sync" => (true, true, false),
            "steps" => (true, true, true),
            _ => (false, false, false),
        };
        Ok(Worker { model, pool, opts, rx, metrics, stopping, profile, sync, trace, burst: None })
    }

    fn run(mut self) {
        let mut waiting: VecDeque<(GenRequest, Instant)> = VecDeque::new();
        let mut active: Vec<Seq> = Vec::new();
        // Preempted sequences, in the order they were preempted; they rejoin before new requests.
        let mut parked: VecDeque<Parked> = VecDeque::new();
        let mut connected = true;
        loop {
            let idle = active.is_empty() && waiting.is_empty() && parked.is_empty();
            if idle {
                self.end_burst();
            }
            // Intake: block only when there is nothing to run.
            if idle && connected {
                match self.rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(r) => waiting.push_back((r, Instant::now())),
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => connected = false,
                }
            }
            let intake = Instant::now();
            while connected {
                match self.rx.try_recv() {
                    Ok(r) => waiting.push_back((r, Instant::now())),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => connected = false,
                }
            }
            let stopping = self.stopping.load(Ordering::SeqCst);
            // Waiting requests that were cancelled, or that a stopping server refuses.
            waiting.retain(|(r, _)| {
                let keep = !r.events.is_closed() && !stopping;
                if !keep {
                    self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
                    let _ = r.events.send(Event::Refused("the server is shutting down".into()));
                }
                keep
            });
            // Sequences whose client went away leave now (their blocks go back to the pool).
            let before = active.len() + parked.len();
            active.retain(|s| !s.req.events.is_closed());
            parked.retain(|s| !s.req.events.is_closed());
            let cancelled = before - active.len() - parked.len();
            self.metrics.cancelled_total.fetch_add(cancelled as u64, Ordering::Relaxed);
            if stopping && self.metrics.past_shutdown_deadline() {
                let late = "the server shut down before the answer ended";
                for s in active.drain(..) {
                    let _ = s.req.events.send(Event::Error(late.into()));
                }
                for s in parked.drain(..) {
                    let _ = s.req.events.send(Event::Error(late.into()));
                }
            }
            if active.is_empty() && waiting.is_empty() && parked.is_empty() && !connected {
                break;
            }
            // The running sequences' next positions first; admission takes what is left.
            self.grow(&mut active, &mut parked);
            self.admit(&mut waiting, &mut parked, &mut active);
            self.publish(&active);
            if !active.is_empty() {
                self.start_burst();
                self.metrics.profile.add(StepPhase::Intake, intake.elapsed());
            }
            if active.is_empty() {
                if !waiting.is_empty() || !parked.is_empty() {
                    // Nothing fits (cannot happen: a request that fits an empty pool was checked on
                    // arrival); avoid spinning.
                    std::thread::sleep(Duration::from_millis(5));
                }
                continue;
            }
            if let Err(e) = self.step(&mut active) {
                // A failed step fails the sequences in it, never the server.
                for s in active.drain(..) {
                    let _ = s.req.events.send(Event::Error(format!("generation failed: {e}")));
                }
            }
            self.publish(&active);
        }
        self.publish(&active);
        self.end_burst();
    }

    /// Notes the start of a burst of load (the batch was empty).
    fn start_burst(&mut self) {
        if self.burst.is_none() {
            let m = &self.metrics;
            self.burst = Some((
                Instant::now(),
                m.profile.snapshot(),
                m.steps_total.load(Ordering::Relaxed),
                m.completion_tokens_total.load(Ordering::Relaxed),
            ));
        }
    }

    /// Ends the burst (the batch drained); with `KILN_SERVE_PROFILE=1`, prints its profile.
    fn end_burst(&mut self) {
        let Some((start, since, steps0, tokens0)) = self.burst.take() else { return };
        if !self.profile {
            return;
        }
        let m = &self.metrics;
        let steps = m.steps_total.load(Ordering::Relaxed) - steps0;
        let tokens = m.completion_tokens_total.load(Ordering::Relaxed) - tokens0;
        eprintln!("kiln serve: profile: {}", m.profile.snapshot().summary(&since, steps, tokens, start.elapsed()));
        let kernels = self.model.device().profile();
        if !kernels.is_empty() {
            let top: Vec<_> = kernels.into_iter().take(25).collect();
            eprintln!("kiln serve: kernel profile of the burst (KILN_PROFILE=1):\n{}", kiln::gpu::format_report(&top));
            self.model.device().reset_profile();
        }
    }

    /// Positions a sequence gets on admission: the `prefill` tokens and a first block of answer
    /// (at most `max_tokens`, the context and the whole pool); it grows from there.
    fn first_span(&self, prefill: usize, max_tokens: usize) -> usize {
        let first = self.pool.block_size().min(max_tokens);
        (prefill + first).min(self.model.max_context()).min(self.pool_positions())
    }

    fn pool_positions(&self) -> usize {
        self.pool.total_blocks() * self.pool.block_size()
    }

    /// Moves preempted sequences, then waiting requests, into the batch while it has room and the
    /// pool has blocks for their prefill and a first block of answer. A preempted sequence that does
    /// not fit holds back the new requests (so that it cannot starve).
    fn admit(
        &mut self,
        waiting: &mut VecDeque<(GenRequest, Instant)>,
        parked: &mut VecDeque<Parked>,
        active: &mut Vec<Seq>,
    ) {
        while active.len() < self.opts.max_batch {
            let Some(p) = parked.front() else { break };
            // Its KV held the prompt and every answer token but the last.
            let kept = &p.out[..p.out.len().saturating_sub(1)];
            let replay: Vec<u32> = p.req.prompt.iter().chain(kept).copied().collect();
            let Some(kv) = self.pool.reserve(self.first_span(replay.len(), p.req.max_tokens - p.out.len())) else {
                return;
            };
            let Parked { req, sampler, out, arrived, first_token } = parked.pop_front().expect("front");
            active.push(Seq { req, kv, sampler, replay: Some(replay), fed: 0, out, arrived, first_token });
        }
        while active.len() < self.opts.max_batch {
            let Some((req, _)) = waiting.front() else { break };
            let pool = self.pool_positions();
            let need = self.first_span(req.prompt.len(), req.max_tokens);
            if req.prompt.len() >= pool {
                // The HTTP layer refuses such prompts (400) before they get here.
                let (req, _) = waiting.pop_front().expect("front");
                self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
                let _ = req.events.send(Event::Error(format!(
                    "the prompt has {} tokens, the whole KV pool holds {pool} positions",
                    req.prompt.len()
                )));
                continue;
            }
            let Some(kv) = self.pool.reserve(need) else { break };
            let (req, arrived) = waiting.pop_front().expect("front");
            self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
            let sampler = match Sampler::new(req.sampling.clone(), req.seed) {
                Ok(s) => s,
                Err(e) => {
                    let _ = req.events.send(Event::Error(e.to_string()));
                    continue;
                }
            };
            active.push(Seq { req, kv, sampler, replay: None, fed: 0, out: Vec::new(), arrived, first_token: None });
        }
    }

    /// Gives every sequence of `active` the blocks its next step writes (all of its prefill, or
    /// one more position), oldest first; a sequence just admitted has them already. When the pool
    /// has none left, the youngest running sequence (possibly the one growing) is preempted into
    /// `parked`, its blocks back in the pool. A sequence alone always fits: `deliver` ends an
    /// answer whose positions fill the whole pool.
    fn grow(&self, active: &mut Vec<Seq>, parked: &mut VecDeque<Parked>) {
        let mut i = 0;
        while i < active.len() {
            let s = &mut active[i];
            let need = s.prefill().len().max(s.kv.len() + 1);
            if self.pool.grow(&mut s.kv, need) {
                i += 1;
                continue;
            }
            // Its blocks go back to the pool as `kv` drops.
            let Seq { req, sampler, out, arrived, first_token, .. } = active.pop().expect("a sequence to preempt");
            parked.push_back(Parked { req, sampler, out, arrived, first_token });
            self.metrics.preemptions_total.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn publish(&self, active: &[Seq]) {
        self.metrics.active.store(active.len() as u64, Ordering::Relaxed);
        self.metrics.kv_blocks_used.store(self.pool.used_blocks() as u64, Ordering::Relaxed);
    }

    /// Sends each sequence's new token (and the end of its answer), records the prompt tokens fed,
    /// and removes the sequences that finished.
    fn deliver(&self, active: &mut Vec<Seq>, feeds: &[Feed], next: &[Option<u32>]) {
        let metrics = &self.metrics;
        let mut done = vec![false; active.len()];
        for (i, s) in active.iter_mut().enumerate() {
            if let Feed::Prompt(_, b) = feeds[i] {
                s.fed = b;
            }
            let Some(next) = next[i] else { continue };
            s.out.push(next);
            if s.first_token.is_none() {
                let now = Instant::now();
                s.first_token = Some(now);
                metrics.observe_ttft(now - s.arrived);
            }
            metrics.completion_tokens_total.fetch_add(1, Ordering::Relaxed);
            let _ = s.req.events.send(Event::Token(next));
            let stop = s.req.stop_tokens.contains(&next);
            // As `kiln_llm::generate`: the answer ends at max_tokens, a stop token or a full context
            // (here also: when its positions would outgrow the whole pool, which no growth can give).
            let full = s.kv.len() >= self.model.max_context().min(self.pool_positions());
            if s.out.len() >= s.req.max_tokens || stop || full {
                let finish = if stop { Finish::Stop } else { Finish::Length };
                let _ = s.req.events.send(Event::Done {
                    finish,
                    prompt_tokens: s.req.prompt.len(),
                    completion_tokens: s.out.len(),
                });
                done[i] = true;
            }
        }
        let mut i = 0;
        active.retain(|_| {
            i += 1;
            !done[i - 1]
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::{DType, Device};
    use kiln_llm::{GenerateOptions, LoadOptions, ModelDir};
    use tokio::sync::mpsc::UnboundedReceiver;

    fn devices() -> Vec<Device> {
        let mut devs = vec![Device::cpu()];
        match Device::gpu() {
            Ok(d) => devs.push(d),
            Err(e) => eprintln!("GPU half skipped: {e}"),
        }
        devs
    }

    fn load(dev: &Device) -> Model {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-llm/tests/fixtures/llama");
        let dir = ModelDir::open(dir).unwrap();
        dir.load(dev, LoadOptions { dtype: DType::F32, max_context: 128, progress: None }).unwrap()
    }

    fn prompt(seed: u32, n: usize) -> Vec<u32> {
        (0..n as u32).map(|i| (seed * 31 + i * seed * 7 + 1) % 320).collect()
    }

    fn request(
        prompt: Vec<u32>,
        max_tokens: usize,
        sampling: SamplingParams,
    ) -> (GenRequest, UnboundedReceiver<Event>) {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        (GenRequest { prompt, max_tokens, sampling, seed: 7, stop_tokens: vec![], events }, rx)
    }

    /// Runs a scheduler over `requests`, all queued before its thread starts (as a burst that
    /// arrives together), until every answer is done; returns the answers and the metrics.
    fn serve_burst(
        model: Model,
        opts: SchedulerOptions,
        requests: Vec<(Vec<u32>, usize, SamplingParams)>,
    ) -> (Vec<Vec<u32>>, Arc<Metrics>, Vec<Finish>) {
        let metrics = Arc::new(Metrics::default());
        let (tx, rx) = mpsc::channel();
        let mut outs = Vec::new();
        for (p, n, s) in requests {
            let (req, out) = request(p, n, s);
            metrics.queue_depth.fetch_add(1, Ordering::SeqCst);
            tx.send(req).unwrap();
            outs.push(out);
        }
        drop(tx);
        let worker = Worker::new(model, opts, rx, metrics.clone(), Arc::new(AtomicBool::new(false))).unwrap();
        let thread = std::thread::spawn(move || worker.run());
        let (answers, finishes) = outs
            .into_iter()
            .map(|mut rx| {
                let mut toks = Vec::new();
                loop {
                    match rx.blocking_recv() {
                        Some(Event::Token(t)) => toks.push(t),
                        Some(Event::Done { completion_tokens, finish, .. }) => {
                            assert_eq!(completion_tokens, toks.len());
                            break (toks, finish);
                        }
                        Some(Event::Error(e) | Event::Refused(e)) => panic!("generation failed: {e}"),
                        None => panic!("the scheduler stopped before the answer ended"),
                    }
                }
            })
            .unzip();
        thread.join().unwrap();
        (answers, metrics, finishes)
    }

    fn options(prefill_chunk: usize) -> SchedulerOptions {
        SchedulerOptions {
            max_batch: 16,
            max_queue: 64,
            prefill_chunk,
            block_size: 4,
            kv_blocks: 16 * 32,
            warmup: false,
        }
    }

    /// Prompts that arrive together are prefilled in one step (with a budget that holds them all),
    /// so every answer gets its first token from the first step and the burst takes max_tokens steps.
    #[test]
    fn simultaneous_prompts_share_one_step() {
        for dev in devices() {
            let reqs: Vec<_> =
                (0..8).map(|i| (prompt(3 + i, 5 + 3 * i as usize), 6, SamplingParams::default())).collect();
            let tokens: u64 = reqs.iter().map(|r| r.0.len() as u64).sum();
            let (answers, m, _) = serve_burst(load(&dev), options(512), reqs);
            assert!(answers.iter().all(|a| a.len() == 6), "{answers:?}");
            let steps = m.steps_total.load(Ordering::Relaxed);
            assert_eq!(steps, 6, "8 prompts arriving together took {steps} steps for 6 tokens each ({dev:?})");
            let p = &m.profile;
            assert_eq!(p.prefill_rows.load(Ordering::Relaxed), 8);
            assert_eq!(p.prefill_tokens.load(Ordering::Relaxed), tokens);
            assert_eq!(p.decode_rows.load(Ordering::Relaxed), 8 * 5);
            assert_eq!(p.budget_full_steps.load(Ordering::Relaxed), 0);
        }
    }

    /// The warm-up bursts give back every KV block, leave the counters at zero, and change no
    /// answer that follows.
    #[test]
    fn warm_up_leaves_nothing_behind() {
        for dev in devices() {
            let reqs: Vec<_> = (0..3).map(|i| (prompt(9 + i, 4 + i as usize), 5, SamplingParams::default())).collect();
            let (cold, ..) = serve_burst(load(&dev), options(512), reqs.clone());
            let metrics = Arc::new(Metrics::default());
            let (_tx, rx) = mpsc::channel();
            let mut w =
                Worker::new(load(&dev), options(512), rx, metrics.clone(), Arc::new(AtomicBool::new(false))).unwrap();
            let said = w.warm_up().unwrap();
            assert!(said.starts_with("warmed up in"), "{said}");
            assert_eq!(w.pool.used_blocks(), 0);
            assert_eq!(metrics.steps_total.load(Ordering::Relaxed), 0);
            assert_eq!(metrics.completion_tokens_total.load(Ordering::Relaxed), 0);
            let (warm, ..) = serve_burst(w.model, options(512), reqs);
            assert_eq!(warm, cold, "{dev:?}");
        }
    }

    /// Greedy and seeded sampled answers under concurrency (prompts chunked by a small budget, one
    /// longer than a paged chunk, sequences finishing at different steps) equal each prompt
    /// generated alone by `kiln_llm::generate`.
    #[test]
    fn concurrent_answers_equal_generate_alone() {
        for dev in devices() {
            let sampled = SamplingParams { temperature: 0.8, top_p: Some(0.9), ..Default::default() };
            let mut reqs: Vec<_> = (0..6)
                .map(|i| {
                    (prompt(5 + i, [3, 9, 1, 70, 17, 30][i as usize]), 4 + 2 * i as usize, SamplingParams::default())
                })
                .collect();
            reqs.push((prompt(41, 12), 9, sampled.clone()));
            reqs.push((prompt(43, 2), 7, sampled));
            let model = load(&dev);
            let alone: Vec<Vec<u32>> = reqs
                .iter()
                .map(|(p, n, s)| {
                    let opts = GenerateOptions { max_tokens: *n, sampling: s.clone(), seed: 7, stop_tokens: vec![] };
                    kiln_llm::generate(&model, &mut model.new_cache(), p, &opts, |_| Ok(())).unwrap().0
                })
                .collect();
            let (answers, m, _) = serve_burst(model, options(48), reqs);
            assert_eq!(answers, alone, "{dev:?}");
            assert!(m.profile.budget_full_steps.load(Ordering::Relaxed) > 0, "the budget should cut prompts");
        }
    }

    /// Requests without `max_tokens` (their answers may run to the end of the context) are admitted
    /// by their prompt and a first block, not by the whole span: four fit a pool of 8 blocks at once
    /// (a pool that holds one such span). As they generate, their blocks grow until the pool runs
    /// out, and the youngest is preempted and later recomputed: every answer runs until its
    /// positions fill the whole pool (`length`), token for token the answer it gets alone, and every
    /// block comes back.
    #[test]
    fn open_ended_requests_share_a_small_pool() {
        for dev in devices() {
            let opts = SchedulerOptions { max_batch: 8, block_size: 8, kv_blocks: 8, ..options(512) };
            let pool = opts.block_size * opts.kv_blocks;
            let model = load(&dev);
            // Without max_tokens the HTTP layer asks for the rest of the context.
            let ctx = model.max_context();
            assert!(ctx > pool);
            let reqs: Vec<_> = (0..4)
                .map(|i| {
                    let p = prompt(7 + i, 3 + i as usize);
                    let n = ctx - p.len();
                    (p, n, SamplingParams::default())
                })
                .collect();

            // All four join the batch at once.
            let metrics = Arc::new(Metrics::default());
            let (_tx, rx) = mpsc::channel();
            let mut w = Worker::new(model, opts.clone(), rx, metrics, Arc::new(AtomicBool::new(false))).unwrap();
            let mut waiting: VecDeque<_> =
                reqs.iter().map(|(p, n, s)| (request(p.clone(), *n, s.clone()).0, Instant::now())).collect();
            let (mut parked, mut active) = (VecDeque::new(), Vec::new());
            w.admit(&mut waiting, &mut parked, &mut active);
            assert_eq!((active.len(), waiting.len()), (4, 0), "{dev:?}");
            drop(active);
            assert_eq!(w.pool.used_blocks(), 0);

            // Alone, an answer never needs a preemption.
            let alone: Vec<Vec<u32>> = reqs
                .iter()
                .map(|r| {
                    let (mut a, m, _) = serve_burst(load(&dev), opts.clone(), vec![r.clone()]);
                    assert_eq!(m.preemptions_total.load(Ordering::Relaxed), 0, "{dev:?}");
                    a.remove(0)
                })
                .collect();
            let (answers, m, finishes) = serve_burst(w.model, opts.clone(), reqs.clone());
            for ((a, (p, ..)), f) in alone.iter().zip(&reqs).zip(&finishes) {
                // Positions 0..pool hold the prompt and every token but the last.
                assert_eq!(a.len(), pool + 1 - p.len(), "{dev:?}");
                assert_eq!(*f, Finish::Length);
            }
            assert_eq!(answers, alone, "{dev:?}");
            assert_eq!(m.kv_blocks_used.load(Ordering::Relaxed), 0);
            // Together they outgrew the pool: some were preempted, and /metrics counts them.
            let preempted = m.preemptions_total.load(Ordering::Relaxed);
            assert!(preempted > 0, "{dev:?}: four open-ended answers in a pool of one span, no preemption");
            assert!(m.render().contains(&format!("kiln_preemptions_total {preempted}\n")));
            let steps = m.steps_total.load(Ordering::Relaxed) as usize;
            let serial: usize = alone.iter().map(Vec::len).sum();
            assert!(steps < serial, "{steps} steps: the answers did not run together ({serial} one by one)");
        }
    }
}
