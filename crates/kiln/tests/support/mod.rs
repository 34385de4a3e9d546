//! Helpers of the reliability tests: the random-program interpreter (shared with the fuzz target) and
//! a watchdog that turns a hang into a failure.

#![allow(dead_code)]

pub mod interp;

use kiln::Device;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The GPU with output poisoning on (unwritten elements read back as NaN, 0xDEADBEEF or an invalid
/// bool), or `None` (with a note) when there is no adapter; with `KILN_REQUIRE_GPU=1` a missing
/// adapter is a failure.
pub fn gpu() -> Option<Device> {
    match Device::gpu() {
        Ok(d) => {
            d.set_poison(true);
            Some(d)
        }
        Err(e) => {
            assert!(!std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1"), "KILN_REQUIRE_GPU=1 but no GPU: {e}");
            eprintln!("no GPU, GPU part skipped: {e}");
            None
        }
    }
}

/// Aborts the process with `what` if it is still alive after `limit` (a hung test fails CI instead
/// of stalling it). Dropping the guard disarms it.
pub struct Watchdog(Arc<AtomicBool>);

impl Watchdog {
    pub fn new(what: &'static str, limit: Duration) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while start.elapsed() < limit {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            eprintln!("watchdog: {what} still running after {limit:?}: aborting");
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A number from the environment variable `var`, else `default` (lets a hand run scale a test up).
pub fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The process's resident set size in bytes (Linux), else `None`.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
