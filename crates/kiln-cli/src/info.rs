//! `kiln info`: version, compiled-in backends and the devices found.

use crate::sysinfo::{human_bytes, CpuInfo};
use kiln::gpu::{list_adapters, AdapterSummary};
use kiln::Device;
use serde_json::{json, Value};

/// Status of each backend this binary knows about.
fn backends() -> Vec<(&'static str, String)> {
    let n = list_adapters().len();
    let gpu = if n == 0 {
        "built (wgpu: Vulkan, Metal, DX12); no adapter found".to_string()
    } else {
        format!("built (wgpu: Vulkan, Metal, DX12); {n} adapter(s)")
    };
    vec![("cpu", "built".to_string()), ("gpu", gpu)]
}

fn adapter_json(a: &AdapterSummary) -> Value {
    json!({
        "name": format!("gpu:{}", a.index),
        "kind": "gpu",
        "adapter": a.name,
        "backend": a.backend,
        "device_type": a.device_type,
        "driver": a.driver,
        "software": a.software,
        "unified_memory": a.unified_memory,
        "memory_bytes": a.vram.map(|v| v.total),
        "memory_free_bytes": a.vram.and_then(|v| v.free),
        "features": a.features,
        "max_buffer_size": a.max_buffer_size,
        "max_storage_binding": a.max_storage_binding,
        "workgroup_memory": a.workgroup_memory,
        "max_workgroup_invocations": a.max_workgroup_invocations,
        "subgroup_size": [a.subgroup_size.0, a.subgroup_size.1],
    })
}

/// `KILN_DEVICE` as it is set (`None` when unset).
fn env_value() -> Option<String> {
    std::env::var("KILN_DEVICE").ok()
}

/// The device commands use without `--device` (`KILN_DEVICE`, else `auto`), or why there is none.
fn default_device() -> Result<String, String> {
    crate::open_device(None).map(|d| d.name())
}

/// The machine-readable report.
pub fn info_json(cpu: &CpuInfo) -> Value {
    let backends: serde_json::Map<String, Value> =
        backends().into_iter().map(|(k, v)| (k.to_string(), Value::String(v))).collect();
    json!({
        "kiln_version": env!("CARGO_PKG_VERSION"),
        "backends": backends,
        "kiln_device_env": env_value(),
        "default_device": default_device().unwrap_or_else(|e| format!("none: {e}")),
        "devices": std::iter::once(json!({ "name": Device::cpu().name(), "kind": "cpu", "cpu": cpu.to_json() }))
            .chain(list_adapters().iter().map(adapter_json))
            .collect::<Vec<_>>(),
    })
}

/// Prints the report, as JSON or as text.
pub fn run(json: bool) {
    let cpu = CpuInfo::detect();
    if json {
        outln!("{}", serde_json::to_string_pretty(&info_json(&cpu)).expect("JSON values always serialise"));
        return;
    }
    outln!("kiln {}", env!("CARGO_PKG_VERSION"));
    outln!();
    outln!("backends:");
    for (name, status) in backends() {
        outln!("  {name:<4} {status}");
    }
    let source = match env_value() {
        Some(v) => format!("KILN_DEVICE={v}"),
        None => "KILN_DEVICE unset: auto".into(),
    };
    match default_device() {
        Ok(d) => outln!("default device: {d} ({source})"),
        Err(e) => outln!("default device: none ({e})"),
    }
    outln!();
    outln!("devices:");
    outln!("  cpu: {}", cpu.model_or_unknown());
    outln!("    arch:           {}", cpu.arch);
    let physical = cpu.physical_cores.map_or("unknown".to_string(), |n| n.to_string());
    outln!("    cores:          {physical} physical, {} logical", cpu.logical_cores);
    outln!("    rayon threads:  {}", cpu.rayon_threads);
    let simd = if cpu.simd.is_empty() { "none detected".to_string() } else { cpu.simd.join(" ") };
    outln!("    simd:           {simd}");
    outln!("    memory:         {}", cpu.memory_bytes.map_or("unknown".to_string(), human_bytes));
    for a in list_adapters() {
        outln!("  gpu:{}: {}{}", a.index, a.name, if a.software { " (software)" } else { "" });
        outln!("    backend:        {} ({}), driver {}", a.backend, a.device_type, a.driver);
        let size = match a.vram {
            Some(v) => match v.free {
                Some(f) => format!(", {} ({} free)", human_bytes(v.total), human_bytes(f)),
                None => format!(", {}", human_bytes(v.total)),
            },
            None => String::new(),
        };
        outln!("    memory:         {}{size}", if a.unified_memory { "unified with the host" } else { "dedicated" });
        outln!("    max buffer:     {}", human_bytes(a.max_buffer_size));
        outln!("    max binding:    {}", human_bytes(a.max_storage_binding));
        outln!(
            "    workgroup mem:  {} ({} invocations)",
            human_bytes(a.workgroup_memory as u64),
            a.max_workgroup_invocations
        );
        outln!("    subgroup size:  {}..{}", a.subgroup_size.0, a.subgroup_size.1);
        let f = if a.features.is_empty() { "none of kiln's optional ones".to_string() } else { a.features.join(" ") };
        outln!("    features:       {f}");
    }
}
