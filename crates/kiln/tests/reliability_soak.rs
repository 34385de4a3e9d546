//! The property soak over the public API: random programs of often invalid calls (the interpreter in
//! `support/interp.rs`, shared with the fuzz target) run in lockstep on the CPU and the GPU under
//! `catch_unwind` and a watchdog. Asserted: no panic, every `Err` names its op, and where both devices
//! answer they agree (`Ok` with the same shape, dtype and values within the dtype's tolerance, or both
//! `Err`), except the disagreements listed in `interp::KNOWN_MISMATCHES` (owned by other changes, see
//! docs/RELIABILITY.md). `KILN_SOAK_PROGRAMS` scales the run (CI: the default).

mod support;

use kiln::Device;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};
use support::interp::{self, Mode};

const STEPS: usize = 48;

/// `KILN_SOAK_MODE=full` adds huge sizes and NaN/Inf (hand runs; see docs/RELIABILITY.md);
/// `KILN_SOAK_MODE=nonfinite` NaN/Inf only.
fn mode() -> Mode {
    match std::env::var("KILN_SOAK_MODE").as_deref() {
        Ok("full") => Mode::Full,
        Ok("nonfinite") => Mode::NonFinite,
        _ => Mode::Safe,
    }
}

fn program(seed: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let len = rng.random_range(64..1600);
    (0..len).map(|_| rng.random::<u8>()).collect()
}

fn soak(devices: &[Device], programs: usize, seed0: u64) {
    soak_in(devices, programs, seed0, mode())
}

fn soak_in(devices: &[Device], programs: usize, seed0: u64, mode: Mode) {
    let _dog = support::Watchdog::new("the reliability soak", Duration::from_secs(600));
    let start = Instant::now();
    let (mut calls, mut ok, mut known) = (0, 0, 0);
    let mut failures = Vec::new();
    let mut groups = std::collections::BTreeMap::<String, (usize, String)>::new();
    for p in 0..programs {
        let seed = seed0 + p as u64;
        let bytes = program(seed);
        let report = match catch_unwind(AssertUnwindSafe(|| interp::run(&bytes, devices, mode, STEPS))) {
            Ok(r) => r,
            Err(e) => {
                let msg =
                    e.downcast_ref::<String>().cloned().or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()));
                failures.push(format!("program {seed}: panic: {}", msg.unwrap_or_default()));
                continue;
            }
        };
        calls += report.calls;
        ok += report.ok;
        for f in report.findings {
            if interp::is_known(&f, mode) {
                known += 1;
                eprintln!("known (program {seed}): {f:?}");
            } else {
                let e = groups.entry(f.what()).or_insert((0, format!("program {seed}: {f:?}")));
                e.0 += 1;
                failures.push(format!("program {seed}: {f:?}"));
            }
        }
    }
    let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
    eprintln!(
        "soak on {names:?}: {programs} programs, {calls} calls ({ok} Ok), {known} known mismatches, {} failures, {:.1} s",
        failures.len(),
        start.elapsed().as_secs_f64()
    );
    for (what, (n, first)) in &groups {
        eprintln!("{what}: {n} findings, first: {first}");
    }
    assert!(failures.is_empty(), "{} failures, first: {}", failures.len(), failures[0]);
}

#[test]
fn random_programs_on_the_cpu_never_panic_and_name_their_op() {
    soak(&[Device::cpu()], support::env_count("KILN_SOAK_PROGRAMS", 3000), 1);
}

#[test]
fn random_programs_agree_between_cpu_and_gpu() {
    let Some(gpu) = support::gpu() else { return };
    soak(&[Device::cpu(), gpu], support::env_count("KILN_SOAK_PROGRAMS", 3000) / 3, 100_000);
}

/// The same with NaN, infinities and -0 among the inputs (`Mode::NonFinite`), on both backends.
#[test]
fn random_programs_with_nan_and_inf_agree_between_cpu_and_gpu() {
    let Some(gpu) = support::gpu() else { return };
    soak_in(&[Device::cpu(), gpu], support::env_count("KILN_SOAK_PROGRAMS", 3000) / 6, 200_000, Mode::NonFinite);
}
