//! libFuzzer target over kiln's public API: the input bytes are a program for the interpreter shared
//! with the soak test (`crates/kiln/tests/support/interp.rs`). A panic or abort is a crash; an `Err`
//! that names no op, or a CPU/GPU disagreement outside the known list, is turned into a panic too.
//! `KILN_FUZZ_GPU=1` runs every program on the CPU and the GPU in lockstep (slower); `KILN_FUZZ_MODE=full`
//! adds huge sizes and NaN/Inf (known issue-14 crashes, for hand runs).

#![no_main]

#[path = "../../crates/kiln/tests/support/interp.rs"]
mod interp;

use kiln::Device;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn devices() -> &'static [Device] {
    static DEVICES: OnceLock<Vec<Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let mut d = vec![Device::cpu()];
        if std::env::var("KILN_FUZZ_GPU").is_ok_and(|v| v == "1") {
            d.push(Device::gpu().expect("KILN_FUZZ_GPU=1 needs a GPU"));
        }
        d
    })
}

fn mode() -> interp::Mode {
    if std::env::var("KILN_FUZZ_MODE").is_ok_and(|m| m == "full") {
        interp::Mode::Full
    } else {
        interp::Mode::Safe
    }
}

fuzz_target!(|data: &[u8]| {
    let report = interp::run(data, devices(), mode(), 64);
    for f in &report.findings {
        if let interp::Finding::Mismatch { .. } = f {
            if interp::KNOWN_MISMATCHES.contains(&f.what().as_str()) {
                continue;
            }
        }
        panic!("finding: {f:?}");
    }
});
