//! Server counters, shared by the HTTP layer and the scheduler, rendered as Prometheus text.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
    pub kv_blocks_total: AtomicU64,
    pub kv_blocks_used: AtomicU64,
    ttft_micros_sum: AtomicU64,
    ttft_count: AtomicU64,
    rate: Mutex<Rate>,
    /// Milliseconds after `started` when running streams are cancelled (0: not shutting down).
    pub shutdown_deadline_ms: AtomicU64,
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
            kv_blocks_total: AtomicU64::new(0),
            kv_blocks_used: AtomicU64::new(0),
            ttft_micros_sum: AtomicU64::new(0),
            ttft_count: AtomicU64::new(0),
            rate: Mutex::default(),
            shutdown_deadline_ms: AtomicU64::new(0),
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
        one("kiln_kv_blocks_total", "gauge", "Blocks in the paged KV pool.", g(&self.kv_blocks_total).to_string());
        one("kiln_kv_blocks_used", "gauge", "KV blocks held by sequences.", g(&self.kv_blocks_used).to_string());
        let _ = writeln!(s, "# HELP kiln_time_to_first_token_seconds From arrival to the first generated token.");
        let _ = writeln!(s, "# TYPE kiln_time_to_first_token_seconds summary");
        let _ = writeln!(s, "kiln_time_to_first_token_seconds_sum {}", g(&self.ttft_micros_sum) as f64 / 1e6);
        let _ = writeln!(s, "kiln_time_to_first_token_seconds_count {}", g(&self.ttft_count));
        let tps = self.tokens_per_sec();
        let _ = writeln!(s, "# HELP kiln_tokens_per_second Generated tokens per second since the previous scrape.");
        let _ = writeln!(s, "# TYPE kiln_tokens_per_second gauge\nkiln_tokens_per_second {tps}");
        s
    }
}
