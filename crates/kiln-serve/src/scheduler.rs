//! The scheduler: one thread that owns the model and runs continuous batching. Requests wait in a
//! bounded queue; at every token boundary finished and cancelled sequences leave the batch and
//! waiting ones join it (while the batch has room and the KV pool has blocks for them). One step
//! runs one [`Model::forward_batch`] over every active sequence: a decode token for each running
//! sequence plus prompt chunks of the ones still prefilling (at most `prefill_chunk` prompt tokens a
//! step, so a long prompt does not stall the running streams). Nothing here knows about HTTP.

use crate::metrics::Metrics;
use kiln::Tensor;
use kiln_llm::paged::{PagedPool, PagedSeq};
use kiln_llm::{BatchSeq, Model, Sampler, SamplingParams, SeqKv};
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

/// What the scheduler sends back for a request, in order: tokens, then one `Done` or `Error`.
#[derive(Debug)]
pub enum Event {
    Token(u32),
    Done { finish: Finish, prompt_tokens: usize, completion_tokens: usize },
    Error(String),
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
}

/// The handle the HTTP layer holds: submits requests, tells the thread to stop.
pub struct Scheduler {
    tx: Mutex<Option<mpsc::Sender<GenRequest>>>,
    metrics: Arc<Metrics>,
    max_queue: usize,
    stopping: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Scheduler {
    /// Starts the scheduler thread, which owns `model` from now on.
    pub fn start(model: Model, opts: SchedulerOptions, metrics: Arc<Metrics>) -> Result<Scheduler, String> {
        if opts.max_batch == 0 || opts.prefill_chunk == 0 || opts.block_size == 0 || opts.kv_blocks == 0 {
            return Err(format!(
                "max batch ({}), prefill chunk ({}), block size ({}) and KV blocks ({}) must be positive",
                opts.max_batch, opts.prefill_chunk, opts.block_size, opts.kv_blocks
            ));
        }
        let pool = PagedPool::new(&model, opts.block_size, opts.kv_blocks).map_err(|e| e.to_string())?;
        metrics.kv_blocks_total.store(opts.kv_blocks as u64, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let max_queue = opts.max_queue;
        let worker = Worker { model, pool, opts, rx, metrics: metrics.clone(), stopping: stopping.clone() };
        let thread = std::thread::Builder::new()
            .name("kiln-scheduler".into())
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start the scheduler thread: {e}"))?;
        Ok(Scheduler { tx: Mutex::new(Some(tx)), metrics, max_queue, stopping, thread: Mutex::new(Some(thread)) })
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
    /// Prompt tokens already through the model.
    fed: usize,
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
}

impl Worker {
    fn run(mut self) {
        let mut waiting: VecDeque<(GenRequest, Instant)> = VecDeque::new();
        let mut active: Vec<Seq> = Vec::new();
        let mut connected = true;
        loop {
            // Intake: block only when there is nothing to run.
            if active.is_empty() && waiting.is_empty() && connected {
                match self.rx.recv_timeout(Duration::from_millis(50)) {
                    Ok(r) => waiting.push_back((r, Instant::now())),
                    Err(mpsc::RecvTimeoutError::Timeout) => continue,
                    Err(mpsc::RecvTimeoutError::Disconnected) => connected = false,
                }
            }
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
                    let _ = r.events.send(Event::Error("the server is shutting down".into()));
                }
                keep
            });
            // Sequences whose client went away leave now (their blocks go back to the pool).
            let before = active.len();
            active.retain(|s| !s.req.events.is_closed());
            self.metrics.cancelled_total.fetch_add((before - active.len()) as u64, Ordering::Relaxed);
            if stopping && self.metrics.past_shutdown_deadline() {
                for s in active.drain(..) {
                    let _ = s.req.events.send(Event::Error("the server shut down before the answer ended".into()));
                }
            }
            if active.is_empty() && waiting.is_empty() && !connected {
                break;
            }
            self.admit(&mut waiting, &mut active);
            self.publish(&active);
            if active.is_empty() {
                if !waiting.is_empty() {
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
    }

    /// Moves waiting requests into the batch while it has room and the pool has their blocks.
    fn admit(&mut self, waiting: &mut VecDeque<(GenRequest, Instant)>, active: &mut Vec<Seq>) {
        while active.len() < self.opts.max_batch {
            let Some((req, _)) = waiting.front() else { break };
            // Every position the sequence can reach: its prompt and answer, within the context.
            let need = (req.prompt.len() + req.max_tokens).min(self.model.max_context());
            if need.div_ceil(self.pool.block_size()) > self.pool.total_blocks() {
                let (req, _) = waiting.pop_front().expect("front");
                self.metrics.queue_depth.fetch_sub(1, Ordering::SeqCst);
                let _ = req.events.send(Event::Error(format!(
                    "the request needs {need} KV positions, the whole pool holds {}",
                    self.pool.total_blocks() * self.pool.block_size()
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
            active.push(Seq { req, kv, sampler, fed: 0, out: Vec::new(), arrived, first_token: None });
        }
    }

    fn publish(&self, active: &[Seq]) {
        self.metrics.active.store(active.len() as u64, Ordering::Relaxed);
        self.metrics.kv_blocks_used.store(self.pool.used_blocks() as u64, Ordering::Relaxed);
    }

    /// One forward pass over the batch; sends each finished prompt's or decode step's next token.
    fn step(&mut self, active: &mut Vec<Seq>) -> kiln_llm::Result<()> {
        let mut budget = self.opts.prefill_chunk;
        // What each sequence feeds this step (None: a prefill waiting for budget).
        let inputs: Vec<Option<Vec<u32>>> = active
            .iter()
            .map(|s| {
                if s.fed < s.req.prompt.len() {
                    let n = (s.req.prompt.len() - s.fed).min(budget);
                    budget -= n;
                    (n > 0).then(|| s.req.prompt[s.fed..s.fed + n].to_vec())
                } else {
                    Some(vec![*s.out.last().expect("a sequence past its prompt has a token")])
                }
            })
            .collect();
        let mut rows = Vec::new(); // index into `active` of each logits row
        let logits = {
            let mut batch = Vec::new();
            for (i, (s, input)) in active.iter_mut().zip(&inputs).enumerate() {
                if let Some(t) = input {
                    rows.push(i);
                    batch.push(BatchSeq { tokens: t, kv: &mut s.kv as &mut dyn SeqKv });
                }
            }
            self.model.forward_batch(&mut batch)?
        };
        let steps = rows.len();
        self.metrics.steps_total.fetch_add(1, Ordering::Relaxed);
        self.metrics.batch_rows_total.fetch_add(steps as u64, Ordering::Relaxed);
        self.metrics.last_batch.store(steps as u64, Ordering::Relaxed);
        // Greedy rows share one argmax (one read-back for the whole batch).
        let greedy = argmax_rows(&logits)?;
        let mut done = vec![false; active.len()];
        for (r, &i) in rows.iter().enumerate() {
            let s = &mut active[i];
            let fed = inputs[i].as_ref().map_or(0, Vec::len);
            if s.fed < s.req.prompt.len() {
                s.fed += fed;
                if s.fed < s.req.prompt.len() {
                    continue; // more prompt to come
                }
            }
            let p = &s.req.sampling;
            let next = if p.temperature == 0.0 && p.repeat_penalty == 1.0 {
                greedy[r]
            } else {
                let mut history = s.req.prompt.clone();
                history.extend_from_slice(&s.out);
                s.sampler.sample(&logits.narrow(0, r, 1)?, &history)?
            };
            s.out.push(next);
            if s.first_token.is_none() {
                let now = Instant::now();
                s.first_token = Some(now);
                self.metrics.observe_ttft(now - s.arrived);
            }
            self.metrics.completion_tokens_total.fetch_add(1, Ordering::Relaxed);
            let _ = s.req.events.send(Event::Token(next));
            let stop = s.req.stop_tokens.contains(&next);
            // As `kiln_llm::generate`: the answer ends at max_tokens, a stop token or a full context.
            if s.out.len() >= s.req.max_tokens || stop || s.kv.len() >= self.model.max_context() {
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
        Ok(())
    }
}

/// The argmax of every row of f32 `logits` `(rows, vocab)`.
fn argmax_rows(logits: &Tensor) -> kiln_llm::Result<Vec<u32>> {
    Ok(logits.argmax(-1, false)?.to_vec::<i64>()?.into_iter().map(|i| i as u32).collect())
}
