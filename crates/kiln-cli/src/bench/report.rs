//! Printing a bench report: an aligned table for people, or one JSON document for scripts.

use super::builders::Bound;
use super::{BenchReport, Row};
use crate::sysinfo::{human_bytes, CpuInfo};
use serde_json::{json, Value};

/// Seconds as `812 ns`, `4.21 us`, `12.3 ms` or `1.20 s`.
pub fn human_time(s: f64) -> String {
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.2} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// The throughput column: GB/s for memory-bound ops, GFLOPS for compute-bound ones.
fn throughput(row: &Row) -> String {
    match row.case.bound {
        Bound::Memory => row.gbps().map(|g| format!("{g:.1} GB/s")),
        Bound::Compute => row.gflops().map(|g| format!("{g:.1} GFLOPS")),
        Bound::Launch { ops } => {
            row.outcome.as_ref().ok().map(|s| format!("{} / op", human_time(s.median_s / ops as f64)))
        }
    }
    .unwrap_or_default()
}

/// The limit column: the fraction of the copy bandwidth, or why there is none.
fn limit(row: &Row, report: &BenchReport) -> String {
    if row.outcome.is_err() {
        return String::new();
    }
    match (row.limit_ratio(report.copy.as_ref()), row.case.bound) {
        (Some(r), Bound::Memory) => format!("{:.0}% of copy bw", r * 100.0),
        (Some(r), Bound::Compute) => format!("{:.0}% of copy bw (weights)", r * 100.0),
        (None, Bound::Compute) => "no peak known".into(),
        (None, Bound::Memory) => "unknown".into(),
        (_, Bound::Launch { .. }) => "host time".into(),
    }
}

/// The table's title: the device that ran, named by its GPU adapter or its CPU model.
fn title(report: &BenchReport, cpu: &CpuInfo) -> String {
    let on = match report.device.gpu_info() {
        Some(a) => {
            format!("{} ({}, {} {}; host {})", report.device, a.name, a.backend, a.device_type, cpu.model_or_unknown())
        }
        None => format!("{} ({}, {} threads)", report.device, cpu.model_or_unknown(), cpu.rayon_threads),
    };
    format!("kiln {} bench on {on}{}", env!("CARGO_PKG_VERSION"), if report.quick { " [quick sizes]" } else { "" })
}

/// Prints the header and the aligned table.
pub fn print_table(report: &BenchReport, cpu: &CpuInfo) {
    outln!("{}", title(report, cpu));
    if let Some(c) = &report.copy {
        outln!(
            "limit: copy bandwidth {:.1} GB/s (read+write, {} buffer, best run)",
            c.bytes_per_s / 1e9,
            human_bytes(c.buffer_bytes as u64)
        );
    }
    outln!();
    let header = ["name", "shape", "dtype", "median", "throughput", "limit"];
    let cells: Vec<[String; 6]> = report
        .rows
        .iter()
        .map(|row| {
            let time = match &row.outcome {
                Ok(s) => human_time(s.median_s),
                Err(e) => format!("n/a ({e})"),
            };
            let c = &row.case;
            [c.name.clone(), c.shape.clone(), c.dtype.as_str().into(), time, throughput(row), limit(row, report)]
        })
        .collect();
    // The median column may hold a long error message: it does not set the width of the others.
    let mut width = header.map(str::len);
    for r in &cells {
        for (i, cell) in r.iter().enumerate() {
            if !(i == 3 && cell.starts_with("n/a")) {
                width[i] = width[i].max(cell.len());
            }
        }
    }
    let line = |r: &[String]| {
        let mut s = String::new();
        for (i, cell) in r.iter().enumerate() {
            let w = width[i];
            if i == 3 || i == 4 {
                s += &format!("{cell:>w$}  ");
            } else {
                s += &format!("{cell:<w$}  ");
            }
        }
        outln!("{}", s.trim_end());
    };
    line(&header.map(String::from));
    line(&width.map(|w| "-".repeat(w)));
    for r in &cells {
        line(r);
    }
}

/// One row as JSON.
fn row_json(row: &Row, report: &BenchReport) -> Value {
    let c = &row.case;
    let mut v = json!({
        "name": c.name,
        "shape": c.shape,
        "dtype": c.dtype.as_str(),
        "bound": match c.bound { Bound::Memory => "memory", Bound::Compute => "compute", Bound::Launch { .. } => "launch" },
        "ops": match c.bound { Bound::Launch { ops } => ops, _ => 1 },
        "bytes": c.bytes,
        "flops": c.flops,
    });
    let extra = match &row.outcome {
        Ok(s) => json!({
            "status": "ok",
            "median_s": s.median_s,
            "min_s": s.min_s,
            "runs": s.runs,
            "gpu_timestamps": s.gpu_timestamps,
            "gbps": row.gbps(),
            "gflops": row.gflops(),
            "limit_ratio": row.limit_ratio(report.copy.as_ref()),
        }),
        Err(e) => json!({ "status": "error", "error": e }),
    };
    if let (Value::Object(v), Value::Object(extra)) = (&mut v, extra) {
        v.extend(extra);
    }
    v
}

/// Prints the whole report as one JSON document.
pub fn print_json(report: &BenchReport, cpu: &CpuInfo) {
    let copy =
        report.copy.map(|c| json!({ "buffer_bytes": c.buffer_bytes, "best_s": c.best_s, "gbps": c.bytes_per_s / 1e9 }));
    let doc = json!({
        "kiln_version": env!("CARGO_PKG_VERSION"),
        "device": report.device.name(),
        "adapter": report.device.gpu_info().map(|a| a.name),
        "quick": report.quick,
        "cpu": cpu.to_json(),
        "copy_bandwidth": copy,
        "rows": report.rows.iter().map(|r| row_json(r, report)).collect::<Vec<_>>(),
    });
    outln!("{}", serde_json::to_string_pretty(&doc).expect("JSON values always serialise"));
}

#[cfg(test)]
mod tests {
    use super::human_time;

    #[test]
    fn formats_times() {
        assert_eq!(human_time(5e-7), "500 ns");
        assert_eq!(human_time(4.2e-5), "42.00 us");
        assert_eq!(human_time(0.0123), "12.30 ms");
        assert_eq!(human_time(1.5), "1.50 s");
    }
}
