//! libFuzzer target over kiln's public API: the input bytes are a program for the interpreter shared
//! with the soak test (`crates/kiln/tests/support/interp.rs`). A panic or abort is a crash; an `Err`
//! that names no op, or a CPU/GPU disagreement outside the known list, is turned into a panic too.
//! `KILN_FUZZ_GPU=1` runs every program on the CPU and the GPU in lockstep (slower, with the GPU's
//! output poisoning on); `KILN_FUZZ_MODE=nonfinite` adds NaN/Inf inputs (by hand for now: see fuzz/ci.sh), `KILN_FUZZ_MODE=full`
//! also huge sizes (known issue-14 crashes, for hand runs).

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
            let gpu = Device::gpu().expect("KILN_FUZZ_GPU=1 needs a GPU");
            gpu.set_poison(true);
            d.push(gpu);
        }
        d
    })
}

fn mode() -> interp::Mode {
    match std::env::var("KILN_FUZZ_MODE").as_deref() {
        Ok("full") => interp::Mode::Full,
        Ok("nonfinite") => interp::Mode::NonFinite,
        _ => interp::Mode::Safe,
    }
}

fuzz_target!(|data: &[u8]| {
    let report = interp::run(data, devices(), mode(), 64);
    for f in &report.findings {
        if interp::is_known(f, mode()) {
            continue;
        }
        panic!("finding: {f:?}");
    }
});
