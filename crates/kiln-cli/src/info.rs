//! `kiln info`: version, compiled-in backends and the devices found.

use crate::sysinfo::{human_bytes, CpuInfo};
use kiln::{Device, DeviceRequest};
use serde_json::{json, Value};

/// Status of each backend this binary knows about.
fn backends() -> Vec<(&'static str, String)> {
    let gpu = match Device::gpu() {
        Ok(d) => format!("available ({d})"),
        Err(_) => "not built".to_string(),
    };
    vec![("cpu", "built".to_string()), ("gpu", gpu)]
}

/// What `KILN_DEVICE` asks for (or why it cannot be read).
fn env_request() -> String {
    match DeviceRequest::from_env() {
        Ok(r) => format!("{r:?}").to_lowercase(),
        Err(e) => format!("invalid: {e}"),
    }
}

/// The machine-readable report.
pub fn info_json(cpu: &CpuInfo) -> Value {
    let backends: serde_json::Map<String, Value> =
        backends().into_iter().map(|(k, v)| (k.to_string(), Value::String(v))).collect();
    json!({
        "kiln_version": env!("CARGO_PKG_VERSION"),
        "backends": backends,
        "kiln_device_env": env_request(),
        "default_device": Device::auto().name(),
        "devices": [ { "name": Device::cpu().name(), "kind": "cpu", "cpu": cpu.to_json() } ],
    })
}

/// Prints the report, as JSON or as text.
pub fn run(json: bool) {
    let cpu = CpuInfo::detect();
    if json {
        println!("{}", serde_json::to_string_pretty(&info_json(&cpu)).expect("JSON values always serialise"));
        return;
    }
    println!("kiln {}", env!("CARGO_PKG_VERSION"));
    println!();
    println!("backends:");
    for (name, status) in backends() {
        println!("  {name:<4} {status}");
    }
    println!("default device: {} (KILN_DEVICE: {})", Device::auto(), env_request());
    println!();
    println!("devices:");
    println!("  cpu: {}", cpu.model_or_unknown());
    println!("    arch:           {}", cpu.arch);
    let physical = cpu.physical_cores.map_or("unknown".to_string(), |n| n.to_string());
    println!("    cores:          {physical} physical, {} logical", cpu.logical_cores);
    println!("    rayon threads:  {}", cpu.rayon_threads);
    let simd = if cpu.simd.is_empty() { "none detected".to_string() } else { cpu.simd.join(" ") };
    println!("    simd:           {simd}");
    println!("    memory:         {}", cpu.memory_bytes.map_or("unknown".to_string(), human_bytes));
}
