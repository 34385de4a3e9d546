//! `kiln bench`: times a fixed set of ops on one device and reports time, throughput and the fraction
//! of the machine's limit reached.
//!
//! Method: inputs are random (`Tensor::randn` with a fixed seed) and made before timing. Each op runs
//! once or more to warm up (on a GPU it is then queued back to back for a second, so the GPU reaches
//! its working clocks), then repeatedly; a run is timed with `Device::measure` (GPU timestamps where
//! the device has them, else until `Device::synchronize` returns), and the result is dropped after
//! the clock stops. The median run is
//! reported. Bytes are the minimal traffic (every input read once, the output written once); FLOPs are
//! the useful arithmetic (`2*M*N*K` for a matmul). An op that returns an error (or panics) gives a row
//! saying why instead of aborting the set.

mod bandwidth;
mod cases;
mod gpu_cases;
mod quant_cases;
mod realistic_cases;
mod report;

use kiln::{DType, Device, Shape, Tensor};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

pub use bandwidth::CopyBandwidth;
pub use report::{print_json, print_table};

/// What limits an op: memory traffic or arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Reported in GB/s, compared with the measured copy bandwidth.
    Memory,
    /// Reported in GFLOPS; no peak is known, so no ratio unless the case also counts bytes.
    Compute,
    /// The host's cost of issuing `ops` dependent ops: timed on the host without waiting for the device,
    /// reported per op.
    Launch {
        /// Ops issued per run.
        ops: usize,
    },
}

/// A timed op: called once per run.
pub type Op = Box<dyn Fn() -> kiln::Result<Tensor>>;

/// Makes a case's op from the shared inputs.
pub type Builder = Box<dyn Fn(&mut Inputs) -> kiln::Result<Op>>;

/// One benchmark: its description and how to build the op from cached inputs.
pub struct Case {
    /// Stable name used by `--filter` and in JSON (`add`, `matmul_f32_1024`, ...).
    pub name: String,
    /// Human-readable shape(s) of the inputs.
    pub shape: String,
    /// Element type of the (main) input.
    pub dtype: DType,
    /// What bounds the op.
    pub bound: Bound,
    /// Minimal bytes moved (inputs read once + output written once), when meaningful.
    pub bytes: Option<f64>,
    /// Useful floating-point operations, when meaningful.
    pub flops: Option<f64>,
    /// Builds the op (creating inputs through the cache) before timing starts.
    pub build: Builder,
}

/// Random inputs, made once per (shape, dtype, seed) and shared between cases.
pub struct Inputs {
    device: Device,
    cache: HashMap<(Vec<usize>, DType, u64), Tensor>,
}

impl Inputs {
    /// An empty cache for `device`.
    pub fn new(device: &Device) -> Inputs {
        Inputs { device: device.clone(), cache: HashMap::new() }
    }

    /// The device the inputs live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Standard-normal values of `shape` and `dtype`, the same for one seed on every device.
    pub fn randn(&mut self, shape: impl Into<Shape>, dtype: DType, seed: u64) -> kiln::Result<Tensor> {
        let shape = shape.into();
        let key = (shape.dims().to_vec(), dtype, seed);
        if let Some(t) = self.cache.get(&key) {
            return Ok(t.clone());
        }
        let t = Tensor::randn(0.0, 1.0, shape, dtype, seed, &self.device)?;
        self.cache.insert(key, t.clone());
        Ok(t)
    }
}

/// How many runs to time.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Untimed runs first.
    pub warmup: usize,
    /// At least this many timed runs...
    pub min_runs: usize,
    /// ...and at most this many...
    pub max_runs: usize,
    /// ...stopping after `min_runs` once this much time has been spent.
    pub budget: Duration,
    /// Wall time the device is kept busy with the op after the warm-up runs, before timing.
    pub busy: Duration,
}

impl Timing {
    /// Defaults: thorough, or `quick` (CI smoke: small shapes, few runs).
    pub fn new(quick: bool, runs: Option<usize>) -> Timing {
        let mut t = if quick {
            Timing { warmup: 1, min_runs: 3, max_runs: 3, budget: Duration::from_millis(200), busy: Duration::ZERO }
        } else {
            Timing {
                warmup: 2,
                min_runs: 5,
                max_runs: 50,
                budget: Duration::from_millis(1500),
                busy: Duration::from_millis(1000),
            }
        };
        if let Some(n) = runs {
            t.min_runs = n.max(1);
            t.max_runs = n.max(1);
        }
        t
    }
}

/// Timings of the runs of one op.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Median run in seconds.
    pub median_s: f64,
    /// Fastest run in seconds.
    pub min_s: f64,
    /// Timed runs.
    pub runs: usize,
    /// True when the runs were timed with GPU timestamps, false for the wall clock.
    pub gpu_timestamps: bool,
}

/// A case and how it went.
pub struct Row {
    /// The benchmark.
    pub case: Case,
    /// Timings, or why the op could not run.
    pub outcome: Result<Stats, String>,
}

impl Row {
    /// Throughput in GB/s from the median, if the case counts bytes and ran.
    pub fn gbps(&self) -> Option<f64> {
        Some(self.case.bytes? / self.outcome.as_ref().ok()?.median_s / 1e9)
    }

    /// Throughput in GFLOPS from the median, if the case counts FLOPs and ran.
    pub fn gflops(&self) -> Option<f64> {
        Some(self.case.flops? / self.outcome.as_ref().ok()?.median_s / 1e9)
    }

    /// Achieved bandwidth over the measured copy bandwidth.
    pub fn limit_ratio(&self, copy: Option<&CopyBandwidth>) -> Option<f64> {
        Some(self.gbps()? * 1e9 / copy?.bytes_per_s)
    }
}

/// The message of a caught panic.
fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f`, turning a kiln error or a panic into a message.
fn guarded<T>(f: impl FnOnce() -> kiln::Result<T>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(format!("panicked: {}", panic_message(p))),
    }
}

/// Times `op` on `device` per `timing`: each run through [`Device::measure`] (GPU timestamps where the
/// device has them), or for a [`Bound::Launch`] case the host time of issuing the ops, the wait for the
/// device left out of the clock.
fn measure(op: &Op, bound: Bound, device: &Device, timing: Timing) -> Result<Stats, String> {
    let once = || -> Result<(f64, bool), String> {
        if let Bound::Launch { .. } = bound {
            guarded(|| device.synchronize())?;
            let t0 = Instant::now();
            let out = guarded(op)?;
            let dt = t0.elapsed().as_secs_f64();
            guarded(|| device.synchronize())?;
            drop(out);
            return Ok((dt, false));
        }
        let m = guarded(|| device.measure(op))?;
        Ok((m.seconds, m.gpu_timestamps))
    };
    let mut gpu_timestamps = false;
    for _ in 0..timing.warmup {
        once()?;
    }
    // A GPU idles at low clocks and needs about half a second of load to reach full speed
    // (docs/PERFORMANCE.md), so every case is timed at working clocks, as PyTorch's side is.
    if device.is_gpu() && !matches!(bound, Bound::Launch { .. }) {
        guarded(|| device.keep_busy(timing.busy.as_secs_f64(), op))?;
    }
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < timing.max_runs && (times.len() < timing.min_runs || start.elapsed() < timing.budget) {
        let (t, ts) = once()?;
        times.push(t);
        gpu_timestamps = ts;
    }
    times.sort_by(f64::total_cmp);
    let mid = times.len() / 2;
    let median_s = if times.len() % 2 == 1 { times[mid] } else { 0.5 * (times[mid - 1] + times[mid]) };
    Ok(Stats { median_s, min_s: times[0], runs: times.len(), gpu_timestamps })
}

/// Options of one `kiln bench` invocation.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Small shapes and few runs.
    pub quick: bool,
    /// Only cases whose name contains this (or one of its comma-separated parts).
    pub filter: Option<String>,
    /// Fixed number of timed runs per case.
    pub runs: Option<usize>,
}

/// Everything one `kiln bench` run measured.
pub struct BenchReport {
    /// The device benchmarked.
    pub device: Device,
    /// Whether the quick shapes were used.
    pub quick: bool,
    /// The copy bandwidth, when a memory-bound case was selected.
    pub copy: Option<CopyBandwidth>,
    /// One row per selected case.
    pub rows: Vec<Row>,
}

/// Runs the selected cases on `device`, calling `progress` before each (for stderr progress).
pub fn run(device: &Device, cfg: &BenchConfig, mut progress: impl FnMut(&str)) -> BenchReport {
    let timing = Timing::new(cfg.quick, cfg.runs);
    let selected: Vec<Case> = cases::all(cfg.quick, device.is_gpu())
        .into_iter()
        .filter(|c| cfg.filter.as_deref().is_none_or(|f| f.split(',').any(|f| c.name.contains(f))))
        .collect();
    let copy = selected.iter().any(|c| c.bytes.is_some()).then(|| {
        progress("copy bandwidth");
        let bytes = if cfg.quick { 64 << 20 } else { 1 << 30 };
        let runs = if cfg.quick { 3 } else { 20 };
        match device.is_gpu() {
            // On a GPU the limit is a copy kernel on the device, not the host's memcpy.
            true => match kiln::gpu::copy_bandwidth(device, bytes as u64, runs) {
                Ok(bps) => CopyBandwidth { buffer_bytes: bytes, best_s: 2.0 * bytes as f64 / bps, bytes_per_s: bps },
                Err(_) => bandwidth::measure(bytes, runs),
            },
            false => bandwidth::measure(bytes, runs),
        }
    });
    let mut inputs = Inputs::new(device);
    let rows = selected
        .into_iter()
        .map(|case| {
            progress(&case.name);
            let outcome = guarded(|| (case.build)(&mut inputs)).and_then(|op| measure(&op, case.bound, device, timing));
            Row { case, outcome }
        })
        .collect();
    BenchReport { device: device.clone(), quick: cfg.quick, copy, rows }
}
