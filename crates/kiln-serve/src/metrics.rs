//! Server counters, shared by the HTTP layer and the scheduler, rendered as Prometheus text, and
//! the scheduler's per-step profile ([`StepPhase`]: where the time of a step goes).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The parts of one scheduler step, in order. The profile sums each part's host time over all steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepPhase {
    /// Taking new requests, dropping cancelled ones, admitting waiting ones into the batch.
    Intake,
    /// Choosing each sequence's tokens for the step (decode token or prompt chunk).
    Build,
    /// `Model::forward_batch`: on the GPU, recording (and submitting) the step's kernels.
    Forward,
    /// Waiting for the GPU to finish the step (only split out with `KILN_SERVE_PROFILE=sync`, which
    /// waits right after the forward pass; otherwise it is part of `readback`).
    Gpu,
    /// Reading back the greedy token ids (one transfer) and the logits rows of sampled sequences
    /// (one more transfer).
    Readback,
    /// Sampling on the host (sequences with a temperature or a repeat penalty).
    Sample,
    /// Per-sequence bookkeeping: token events, finished sequences leaving the batch.
    Bookkeeping,
}

impl StepPhase {
    pub const ALL: [StepPhase; 7] = [
        StepPhase::Intake,
        StepPhase::Build,
        StepPhase::Forward,
        StepPhase::Gpu,
        StepPhase::Readback,
        StepPhase::Sample,
        StepPhase::Bookkeeping,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StepPhase::Intake => "intake",
            StepPhase::Build => "build",
            StepPhase::Forward => "forward",
            StepPhase::Gpu => "gpu",
            StepPhase::Readback => "readback",
            StepPhase::Sample => "sample",
            StepPhase::Bookkeeping => "bookkeeping",
        }
    }
}

/// Sums over scheduler steps: host nanoseconds per phase, rows and tokens, GPU dispatches and
/// submissions, kernels compiled while serving. Cheap enough to run always.
#[derive(Default)]
pub struct StepProfile {
    phase_nanos: [AtomicU64; 7],
    /// Sequences that fed one decode token.
    pub decode_rows: AtomicU64,
    /// Sequences that fed a prompt chunk, and the chunks' tokens.
    pub prefill_rows: AtomicU64,
    pub prefill_tokens: AtomicU64,
    /// Steps whose prompt chunks were cut short by the per-step budget.
    pub budget_full_steps: AtomicU64,
    pub gpu_dispatches: AtomicU64,
    pub gpu_submits: AtomicU64,
    /// GPU kernels compiled during steps (a first use of a shape compiles its pipelines).
    pub kernels_compiled: AtomicU64,
    /// Steps that compiled at least one kernel, and their total time.
    pub compile_steps: AtomicU64,
    pub compile_step_nanos: AtomicU64,
}

impl StepProfile {
    pub fn add(&self, phase: StepPhase, d: Duration) {
        self.phase_nanos[phase as usize].fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn phase_secs(&self, phase: StepPhase) -> f64 {
        self.phase_nanos[phase as usize].load(Ordering::Relaxed) as f64 / 1e9
    }

    /// A copy of every counter (for the difference over a burst of load).
    pub fn snapshot(&self) -> ProfileSnapshot {
        let g = |v: &AtomicU64| v.load(Ordering::Relaxed);
        ProfileSnapshot {
            phase_secs: StepPhase::ALL.map(|p| self.phase_secs(p)),
            decode_rows: g(&self.decode_rows),
            prefill_rows: g(&self.prefill_rows),
            prefill_tokens: g(&self.prefill_tokens),
            budget_full_steps: g(&self.budget_full_steps),
            gpu_dispatches: g(&self.gpu_dispatches),
            gpu_submits: g(&self.gpu_submits),
            kernels_compiled: g(&self.kernels_compiled),
            compile_steps: g(&self.compile_steps),
            compile_step_secs: g(&self.compile_step_nanos) as f64 / 1e9,
        }
    }
}

/// [`StepProfile`]'s counters at one moment, plus the steps and tokens of [`Metrics`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ProfileSnapshot {
    pub phase_secs: [f64; 7],
    pub decode_rows: u64,
    pub prefill_rows: u64,
    pub prefill_tokens: u64,
    pub budget_full_steps: u64,
    pub gpu_dispatches: u64,
    pub gpu_submits: u64,
    pub kernels_compiled: u64,
    pub compile_steps: u64,
    pub compile_step_secs: f64,
}

impl ProfileSnapshot {
    /// One line per burst: steps, mean rows, milliseconds per step in each phase, counts.
    pub fn summary(&self, since: &ProfileSnapshot, steps: u64, tokens: u64, wall: Duration) -> String {
        let n = steps.max(1) as f64;
        let mut s = format!(
            "{steps} steps in {:.3} s, {tokens} tokens ({:.1} tok/s), {:.2} decode rows + {:.2} prefill rows \
             ({:.1} prompt tokens) a step; ms/step:",
            wall.as_secs_f64(),
            tokens as f64 / wall.as_secs_f64().max(1e-9),
            (self.decode_rows - since.decode_rows) as f64 / n,
            (self.prefill_rows - since.prefill_rows) as f64 / n,
            (self.prefill_tokens - since.prefill_tokens) as f64 / n,
        );
        let mut total = 0.0;
        for (i, p) in StepPhase::ALL.iter().enumerate() {
            let ms = (self.phase_secs[i] - since.phase_secs[i]) * 1e3 / n;
            total += ms;
            let _ = write!(s, " {} {ms:.3}", p.name());
        }
        let _ = write!(
            s,
            " (sum {total:.3}); {:.0} dispatches, {:.1} submits a step; {} kernels compiled in {} steps ({:.3} s); \
             {} steps at the prefill budget",
            (self.gpu_dispatches - since.gpu_dispatches) as f64 / n,
            (self.gpu_submits - since.gpu_submits) as f64 / n,
            self.kernels_compiled - since.kernels_compiled,
            self.compile_steps - since.compile_steps,
            self.compile_step_secs - since.compile_step_secs,
            self.budget_full_steps - since.budget_full_steps,
        );
        s
    }
}

#[derive(Default)]
struct Rate {
    /// (time, completion tokens so far) of the last two samples.
    last: Option<(Instant, u64)>,
    value: f64,
}

pub struct Metrics {
    pub started: Instant,
    /// Requests answered, by (endpoint, HTTP status).
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub prompt_tokens_total: AtomicU64,
    pub completion_tokens_total: AtomicU64,
    /// Requests waiting for a place in the batch.
    pub queue_depth: AtomicU64,
    /// Sequences in the batch.
    pub active: AtomicU64,
    /// Rows (sequences) of the last forward pass.
    pub last_batch: AtomicU64,
    pub steps_total: AtomicU64,
    pub batch_rows_total: AtomicU64,
    pub cancelled_total: AtomicU64,
    /// Sequences preempted (their KV blocks returned, recomputed later) because the pool ran out.
    pub preemptions_total: AtomicU64,
    pub kv_blocks_total: AtomicU64,
    pub kv_blocks_used: AtomicU64,
    ttft_micros_sum: AtomicU64,
    ttft_count: AtomicU64,
    rate: Mutex<Rate>,
    /// Milliseconds after `started` when running streams are cancelled (0: not shutting down).
    pub shutdown_deadline_ms: AtomicU64,
    /// Where the scheduler's steps spend their time.
    pub profile: StepProfile,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            started: Instant::now(),
            requests: Mutex::default(),
            prompt_tokens_total: AtomicU64::new(0),
            completion_tokens_total: AtomicU64::new(0),
            queue_depth: AtomicU64::new(0),
            active: AtomicU64::new(0),
            last_batch: AtomicU64::new(0),
            steps_total: AtomicU64::new(0),
            batch_rows_total: AtomicU64::new(0),
            cancelled_total: AtomicU64::new(0),
            preemptions_total: AtomicU64::new(0),
            kv_blocks_total: AtomicU64::new(0),
            kv_blocks_used: AtomicU64::new(0),
            ttft_micros_sum: AtomicU64::new(0),
            ttft_count: AtomicU64::new(0),
            rate: Mutex::default(),
            shutdown_deadline_ms: AtomicU64::new(0),
            profile: StepProfile::default(),
        }
    }
}

impl Metrics {
    pub fn count_request(&self, endpoint: &str, status: u16) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((endpoint.to_string(), status)).or_default() += 1;
        }
    }

    pub fn observe_ttft(&self, d: Duration) {
        self.ttft_micros_sum.fetch_add(d.as_micros() as u64, Ordering::Relaxed);
        self.ttft_count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn past_shutdown_deadline(&self) -> bool {
        let d = self.shutdown_deadline_ms.load(Ordering::SeqCst);
        d > 0 && self.started.elapsed().as_millis() as u64 >= d
    }

    /// Completion tokens per second since the previous scrape (over at least a second).
    fn tokens_per_sec(&self) -> f64 {
        let now = Instant::now();
        let total = self.completion_tokens_total.load(Ordering::Relaxed);
        let Ok(mut r) = self.rate.lock() else { return 0.0 };
        match r.last {
            Some((t, n)) if now.duration_since(t) >= Duration::from_secs(1) => {
                r.value = (total - n) as f64 / now.duration_since(t).as_secs_f64();
                r.last = Some((now, total));
            }
            Some(_) => {}
            None => {
                r.value = total as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
                r.last = Some((now, total));
            }
        }
        r.value
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let g = |v: &AtomicU64| v.load(Ordering::Relaxed);
        let _ = writeln!(s, "# HELP kiln_requests_total HTTP requests answered, by endpoint and status.");
        let _ = writeln!(s, "# TYPE kiln_requests_total counter");
        if let Ok(m) = self.requests.lock() {
            for ((e, code), n) in m.iter() {
                let _ = writeln!(s, "kiln_requests_total{{endpoint=\"{e}\",status=\"{code}\"}} {n}");
            }
        }
        let mut one = |name: &str, kind: &str, help: &str, v: String| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        one(
            "kiln_prompt_tokens_total",
            "counter",
            "Prompt tokens of accepted requests.",
            g(&self.prompt_tokens_total).to_string(),
        );
        one(
            "kiln_completion_tokens_total",
            "counter",
            "Tokens generated.",
            g(&self.completion_tokens_total).to_string(),
        );
        one(
            "kiln_queue_depth",
            "gauge",
            "Requests waiting for a place in the batch.",
            g(&self.queue_depth).to_string(),
        );
        one("kiln_batch_size", "gauge", "Sequences in the running batch.", g(&self.active).to_string());
        one("kiln_last_step_rows", "gauge", "Sequences in the last forward pass.", g(&self.last_batch).to_string());
        one("kiln_steps_total", "counter", "Batched forward passes.", g(&self.steps_total).to_string());
        one(
            "kiln_step_sequences_total",
            "counter",
            "Sequences over all forward passes (divide by steps for the mean batch).",
            g(&self.batch_rows_total).to_string(),
        );
        one(
            "kiln_cancelled_total",
            "counter",
            "Sequences freed because their client went away.",
            g(&self.cancelled_total).to_string(),
        );
        one(
            "kiln_preemptions_total",
            "counter",
            "Sequences preempted when the KV pool ran out (blocks returned, recomputed later).",
            g(&self.preemptions_total).to_string(),
        );
        one("kiln_kv_blocks_total", "gauge", "Blocks in the paged KV pool.", g(&self.kv_blocks_total).to_string());
        one("kiln_kv_blocks_used", "gauge", "KV blocks held by sequences.", g(&self.kv_blocks_used).to_string());
        let _ = writeln!(s, "# HELP kiln_time_to_first_token_seconds From arrival to the first generated token.");
        let _ = writeln!(s, "# TYPE kiln_time_to_first_token_seconds summary");
        let _ = writeln!(s, "kiln_time_to_first_token_seconds_sum {}", g(&self.ttft_micros_sum) as f64 / 1e6);
        let _ = writeln!(s, "kiln_time_to_first_token_seconds_count {}", g(&self.ttft_count));
        let _ = writeln!(s, "# HELP kiln_step_phase_seconds_total Scheduler host time by step phase (gpu: waiting for the device, split out only with KILN_SERVE_PROFILE=sync).");
        let _ = writeln!(s, "# TYPE kiln_step_phase_seconds_total counter");
        for p in StepPhase::ALL {
            let _ =
                writeln!(s, "kiln_step_phase_seconds_total{{phase=\"{}\"}} {}", p.name(), self.profile.phase_secs(p));
        }
        let pr = &self.profile;
        let mut two = |name: &str, help: &str, v: u64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        two("kiln_step_decode_rows_total", "Decode rows (one token each) over all steps.", g(&pr.decode_rows));
        two("kiln_step_prefill_rows_total", "Prompt chunks over all steps.", g(&pr.prefill_rows));
        two("kiln_step_prefill_tokens_total", "Prompt tokens prefilled over all steps.", g(&pr.prefill_tokens));
        two(
            "kiln_step_budget_full_total",
            "Steps whose prompt chunks were cut by the per-step prefill budget.",
            g(&pr.budget_full_steps),
        );
        two("kiln_gpu_dispatches_total", "GPU kernel dispatches recorded by steps.", g(&pr.gpu_dispatches));
        two("kiln_gpu_submits_total", "GPU command submissions made by steps.", g(&pr.gpu_submits));
        two("kiln_kernels_compiled_total", "GPU kernels compiled during steps.", g(&pr.kernels_compiled));
        let tps = self.tokens_per_sec();
        let _ = writeln!(s, "# HELP kiln_tokens_per_second Generated tokens per second since the previous scrape.");
        let _ = writeln!(s, "# TYPE kiln_tokens_per_second gauge\nkiln_tokens_per_second {tps}");
        s
    }
}
