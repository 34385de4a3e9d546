//! Whether a model fits before it is loaded: the estimate against the device's memory.

use crate::model::MemoryEstimate;
use crate::{LlmError, Result};
use kiln::Device;

/// The bytes a model may take on `device`: the host's available memory for the CPU and for
/// unified-memory GPUs; for a discrete GPU what it has free (`Device::vram`: Vulkan's memory budget,
/// else the heap's size). `None` where nothing says (a discrete GPU on Metal or DX12).
pub fn capacity(device: &Device) -> Option<u64> {
    match device.gpu_info() {
        Some(info) if !info.unified_memory => device.vram().map(|v| v.free.unwrap_or(v.total)),
        _ => available_host_memory(),
    }
}

/// An error (not a crash later) when the weights and KV cache cannot fit on `device`: their total
/// against [`capacity`], and on any GPU every tensor against the adapter's largest buffer. (Where no
/// capacity is known, an allocation that fails later is an `Err` from kiln's pool.)
pub fn check_fits(est: &MemoryEstimate, device: &Device) -> Result<()> {
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    if let Some(info) = device.gpu_info() {
        let limit = info.max_buffer_size.min(info.max_storage_binding);
        if est.largest_tensor_bytes > limit {
            return Err(LlmError::Memory(format!(
                "a {:.2} GiB tensor exceeds the adapter's largest buffer ({:.2} GiB, {}): use a smaller --dtype or --max-context",
                gib(est.largest_tensor_bytes),
                gib(limit),
                info.name
            )));
        }
    }
    if let Some(avail) = capacity(device) {
        if est.total() > avail {
            let what = match device.gpu_info() {
                Some(info) if !info.unified_memory => format!("{device} ({}) has", info.name),
                _ => "the host has".to_string(),
            };
            return Err(LlmError::Memory(format!(
                "the model needs {:.2} GiB (weights {:.2} + KV cache {:.2}) but {what} {:.2} GiB free: split it over several devices (--devices), or use a smaller --dtype or --max-context",
                gib(est.total()),
                gib(est.weight_bytes),
                gib(est.kv_cache_bytes),
                gib(avail)
            )));
        }
    }
    Ok(())
}

/// `MemAvailable` of `/proc/meminfo` (Linux), else `None`.
fn available_host_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
