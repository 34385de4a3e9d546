//! What the machine's CPU offers: model, cores, threads, SIMD features detected at run time, memory.
//! Reads `/proc/cpuinfo` and `/proc/meminfo` where they exist and falls back to "unknown" elsewhere.

use serde_json::{json, Value};
use std::collections::HashSet;

/// The host CPU as kiln's CPU backend sees it.
#[derive(Debug, Clone)]
pub struct CpuInfo {
    /// Marketing name (`model name` in /proc/cpuinfo), if it could be read.
    pub model: Option<String>,
    /// `std::env::consts::ARCH`: `x86_64`, `aarch64`, ...
    pub arch: &'static str,
    /// Distinct physical cores, if the OS tells.
    pub physical_cores: Option<usize>,
    /// Logical CPUs this process may run on.
    pub logical_cores: usize,
    /// Threads in rayon's global pool (what kiln's kernels use).
    pub rayon_threads: usize,
    /// SIMD extensions detected at run time.
    pub simd: Vec<&'static str>,
    /// Total physical memory in bytes, if readable.
    pub memory_bytes: Option<u64>,
}

impl CpuInfo {
    /// Probes the host.
    pub fn detect() -> CpuInfo {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok();
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok();
        let logical_cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        CpuInfo {
            model: cpuinfo.as_deref().and_then(parse_model),
            arch: std::env::consts::ARCH,
            physical_cores: cpuinfo.as_deref().and_then(parse_physical_cores),
            logical_cores,
            rayon_threads: rayon::current_num_threads(),
            simd: simd_features(),
            memory_bytes: meminfo.as_deref().and_then(parse_mem_total),
        }
    }

    /// The model name, or "unknown <arch> CPU".
    pub fn model_or_unknown(&self) -> String {
        self.model.clone().unwrap_or_else(|| format!("unknown {} CPU", self.arch))
    }

    /// Machine-readable form used by `kiln info --json` and `kiln bench --json`.
    pub fn to_json(&self) -> Value {
        json!({
            "model": self.model,
            "arch": self.arch,
            "physical_cores": self.physical_cores,
            "logical_cores": self.logical_cores,
            "rayon_threads": self.rayon_threads,
            "simd": self.simd,
            "memory_bytes": self.memory_bytes,
        })
    }
}

/// The value of the first `key : value` line whose key is one of `keys`.
fn field<'a>(text: &'a str, keys: &[&str]) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        keys.contains(&k.trim()).then(|| v.trim()).filter(|v| !v.is_empty())
    })
}

fn parse_model(cpuinfo: &str) -> Option<String> {
    // x86: "model name"; some ARM kernels: "Model" or "Hardware"; s390/ppc: "cpu model" / "cpu".
    field(cpuinfo, &["model name", "Model", "Hardware", "cpu model", "cpu"]).map(str::to_string)
}

/// Counts distinct (physical id, core id) pairs; falls back to `cpu cores` per socket times sockets.
fn parse_physical_cores(cpuinfo: &str) -> Option<usize> {
    let mut pairs = HashSet::new();
    for block in cpuinfo.split("\n\n").filter(|b| b.contains("processor")) {
        let core = field(block, &["core id"]);
        let socket = field(block, &["physical id"]).unwrap_or("0");
        if let Some(core) = core {
            pairs.insert((socket.to_string(), core.to_string()));
        }
    }
    if !pairs.is_empty() {
        return Some(pairs.len());
    }
    let per_socket: usize = field(cpuinfo, &["cpu cores"])?.parse().ok()?;
    let sockets = cpuinfo
        .lines()
        .filter_map(|l| l.split_once(':').filter(|(k, _)| k.trim() == "physical id").map(|(_, v)| v.trim()))
        .collect::<HashSet<_>>()
        .len()
        .max(1);
    Some(per_socket * sockets)
}

fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let v = field(meminfo, &["MemTotal"])?;
    let kib: u64 = v.trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// SIMD extensions the running CPU supports (run-time detection, not what the binary was compiled for).
#[cfg(target_arch = "x86_64")]
fn simd_features() -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => { $( if std::arch::is_x86_feature_detected!($f) { out.push($f); } )* };
    }
    probe!(
        "sse2",
        "sse3",
        "ssse3",
        "sse4.1",
        "sse4.2",
        "popcnt",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "bmi2",
        "avx512f",
        "avx512cd",
        "avx512dq",
        "avx512bw",
        "avx512vl",
        "avx512vnni",
        "avx512bf16",
        "avx512fp16",
        "avxvnni"
    );
    out
}

/// SIMD extensions the running CPU supports (run-time detection, not what the binary was compiled for).
#[cfg(target_arch = "aarch64")]
fn simd_features() -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => { $( if std::arch::is_aarch64_feature_detected!($f) { out.push($f); } )* };
    }
    probe!("neon", "fp16", "dotprod", "sve");
    out
}

/// SIMD extensions the running CPU supports: none are probed on this architecture.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn simd_features() -> Vec<&'static str> {
    Vec::new()
}

/// Bytes as `23.4 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nmodel name\t: Test CPU 9000\nphysical id\t: 0\ncore id\t: 0\n\
                           cpu cores\t: 2\n\nprocessor\t: 1\nmodel name\t: Test CPU 9000\nphysical id\t: 0\n\
                           core id\t: 0\ncpu cores\t: 2\n\nprocessor\t: 2\nmodel name\t: Test CPU 9000\n\
                           physical id\t: 0\ncore id\t: 1\ncpu cores\t: 2\n";

    #[test]
    fn parses_cpuinfo() {
        assert_eq!(parse_model(CPUINFO).as_deref(), Some("Test CPU 9000"));
        // Three logical CPUs on two (socket, core) pairs: hyper-threads count once.
        assert_eq!(parse_physical_cores(CPUINFO), Some(2));
        assert_eq!(parse_model("processor : 0\n"), None);
        assert_eq!(parse_physical_cores("processor : 0\n"), None);
    }

    #[test]
    fn parses_meminfo() {
        assert_eq!(parse_mem_total("MemTotal:       1024 kB\nMemFree: 3 kB\n"), Some(1024 * 1024));
        assert_eq!(parse_mem_total("nothing here"), None);
    }

    #[test]
    fn formats_bytes() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
    }
}
