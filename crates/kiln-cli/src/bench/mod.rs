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

//!
//! Modules: `builders` holds the `Case` type and the builders every set shares; the sets (`cases`
//! for the CPU, `gpu_cases`, `realistic_cases`, `quant_cases`) use only `builders`; this module
//! puts them together ([`all`]) and times them; `report` prints what [`run`] returns.

mod bandwidth;
mod builders;
mod cases;
mod fusion_cases;
mod gpu_cases;
mod quant_cases;
mod realistic_cases;
pub mod report;

use kiln::Device;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

pub use bandwidth::CopyBandwidth;
pub use builders::{Bound, Case, Op};

/// Every case for a device, in display order: the CPU set, or on a GPU the GPU set with the
/// realistic layouts; then the quantized matrix-vector cases.
pub fn all(quick: bool, gpu: bool) -> Vec<Case> {
    let mut v = if gpu {
        let mut v = gpu_cases::all(quick);
        v.extend(realistic_cases::all(quick));
        v
    } else {
        cases::all(quick)
    };
    v.extend(fusion_cases::all(quick || !gpu));
    v.extend(quant_cases::all(quick, gpu));
    v
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
    let selected: Vec<Case> = all(cfg.quick, device.is_gpu())
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
    let mut inputs = builders::Inputs::new(device);
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

#[cfg(test)]
mod tests {
    use super::all;

    #[test]
    fn names_are_unique_and_stable() {
        let full = all(false, false);
        let names: Vec<&str> = full.iter().map(|c| c.name.as_str()).collect();
        let mut dedup = names.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(dedup.len(), names.len());
        assert!(names.contains(&"matmul_f32_1024") && names.contains(&"matmul_f32_2048"));
        assert_eq!(all(true, false).len(), full.len());
        let gpu: Vec<String> = all(false, true).into_iter().map(|c| c.name).collect();
        let mut g = gpu.clone();
        g.sort();
        g.dedup();
        assert_eq!(g.len(), gpu.len());
        // `--quick` keeps every row but the `_dram` ones (its shapes fit in L2), and nothing else.
        let quick: Vec<String> = all(true, true).into_iter().map(|c| c.name).collect();
        let dram = gpu.iter().filter(|n| n.ends_with("_dram")).count();
        assert!(dram > 0 && quick.iter().all(|n| !n.ends_with("_dram")));
        assert_eq!(quick.len() + dram, gpu.len());
    }
}
