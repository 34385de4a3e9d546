//! Per-kernel GPU timing. With `KILN_PROFILE=1` (or `Device::set_profiling(true)`) every dispatch gets
//! its own compute pass with timestamp writes and its own submission, and the times are summed per
//! kernel. Without TIMESTAMP_QUERY the wall-clock time from submit to completion is used instead.
//! Profiling serialises the GPU: use it to find hot kernels, not to measure throughput.

use super::device::{read_mapped, wait, Gpu};
use crate::Result;
use std::collections::HashMap;
use std::time::Instant;

/// Time spent in one kernel.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelTime {
    pub kernel: String,
    pub dispatches: u64,
    pub total_ms: f64,
    /// True when measured with GPU timestamps, false for the wall-clock fallback.
    pub gpu_timestamps: bool,
}

struct Queries {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
}

pub(crate) struct Profiler {
    enabled: bool,
    queries: Option<Queries>,
    current: Option<(String, Instant)>,
    table: HashMap<String, (u64, f64, bool)>,
}

impl Profiler {
    pub(crate) fn new(_device: &wgpu::Device) -> Profiler {
        let enabled = crate::settings::PROFILE.is_one();
        Profiler { enabled, queries: None, current: None, table: HashMap::new() }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
    }

    /// In profile mode each dispatch is its own batch.
    pub(crate) fn full(&self) -> bool {
        self.enabled && self.current.is_some()
    }

    /// Starts timing `name`; returns the timestamp writes for its pass when the device has them.
    pub(crate) fn writes(
        &mut self,
        ctx_device: &wgpu::Device,
        has_ts: bool,
        name: &str,
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        self.current = Some((name.to_string(), Instant::now()));
        if !has_ts {
            return None;
        }
        let q = self.queries.get_or_insert_with(|| Queries {
            set: ctx_device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kiln ts"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            }),
            resolve: ctx_device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln ts resolve"),
                size: 16,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            read: ctx_device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln ts read"),
                size: 16,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        });
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &q.set,
            beginning_of_pass_write_index: Some(0),
            end_of_pass_write_index: Some(1),
        })
    }

    /// Adds the query resolve to the batch; true when there is a measurement to collect.
    pub(crate) fn resolve(&mut self, encoder: &mut wgpu::CommandEncoder) -> bool {
        if self.current.is_none() {
            return false;
        }
        if let Some(q) = &self.queries {
            encoder.resolve_query_set(&q.set, 0..2, &q.resolve, 0);
            encoder.copy_buffer_to_buffer(&q.resolve, 0, &q.read, 0, 16);
        }
        true
    }

    /// Waits for the measured dispatch and records its time.
    pub(crate) fn collect(&mut self, ctx: &Gpu) -> Result<()> {
        let Some((name, start)) = self.current.take() else { return Ok(()) };
        wait(ctx, None)?;
        let (ms, ts) = match &self.queries {
            Some(q) => {
                let ticks = read_mapped(ctx, &q.read, 16)?;
                let t: &[u64] = bytemuck::cast_slice(&ticks);
                let ns = t[1].wrapping_sub(t[0]) as f64 * ctx.queue.get_timestamp_period() as f64;
                (ns / 1e6, true)
            }
            None => (start.elapsed().as_secs_f64() * 1e3, false),
        };
        let e = self.table.entry(name).or_insert((0, 0.0, ts));
        e.0 += 1;
        e.1 += ms;
        Ok(())
    }

    /// The table so far, slowest kernel first.
    pub(crate) fn report(&self) -> Vec<KernelTime> {
        let mut rows: Vec<KernelTime> = self
            .table
            .iter()
            .map(|(k, &(n, ms, ts))| KernelTime { kernel: k.clone(), dispatches: n, total_ms: ms, gpu_timestamps: ts })
            .collect();
        rows.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
        rows
    }

    pub(crate) fn reset(&mut self) {
        self.table.clear();
    }
}

/// A printable per-kernel table.
pub fn format_report(rows: &[KernelTime]) -> String {
    let mut s = format!("{:<48} {:>10} {:>12} {:>12}\n", "kernel", "dispatches", "total ms", "mean us");
    for r in rows {
        s += &format!(
            "{:<48} {:>10} {:>12.3} {:>12.2}{}\n",
            r.kernel,
            r.dispatches,
            r.total_ms,
            r.total_ms * 1e3 / r.dispatches.max(1) as f64,
            if r.gpu_timestamps { "" } else { " (wall clock)" }
        );
    }
    s
}

/// Passes one span can time; a span with more falls back to the wall clock.
const SPAN_PASSES: u32 = 256;

/// GPU time of a stretch of work (`Device::measure`): every compute pass begun inside the span writes
/// a timestamp at its start and end, and the span lasts from the first start to the last end, gaps
/// between passes included.
pub(crate) struct Span {
    set: Option<wgpu::QuerySet>,
    passes: u32,
    overflow: bool,
}

impl Span {
    pub(crate) fn new(device: &wgpu::Device, has_ts: bool) -> Span {
        let set = has_ts.then(|| {
            device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kiln span"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * SPAN_PASSES,
            })
        });
        Span { set, passes: 0, overflow: false }
    }

    /// The timestamp writes of the next pass, if the span still has room.
    pub(crate) fn writes(&mut self) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let set = self.set.as_ref()?;
        if self.passes == SPAN_PASSES {
            self.overflow = true;
            return None;
        }
        let i = 2 * self.passes;
        self.passes += 1;
        Some(wgpu::ComputePassTimestampWrites {
            query_set: set,
            beginning_of_pass_write_index: Some(i),
            end_of_pass_write_index: Some(i + 1),
        })
    }

    /// Seconds from the first pass's start to the last pass's end, once the span's work was submitted;
    /// `None` when it cannot tell (no timestamps, no pass, too many passes).
    pub(crate) fn finish(self, ctx: &Gpu) -> Result<Option<f64>> {
        let Some(set) = self.set.filter(|_| self.passes > 0 && !self.overflow) else { return Ok(None) };
        let bytes = 16 * self.passes as u64;
        let usage =
            |u| wgpu::BufferDescriptor { label: Some("kiln span"), size: bytes, usage: u, mapped_at_creation: false };
        let resolve =
            ctx.device.create_buffer(&usage(wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC));
        let read = ctx.device.create_buffer(&usage(wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST));
        let mut encoder =
            ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kiln span") });
        encoder.resolve_query_set(&set, 0..2 * self.passes, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, &read, 0, bytes);
        ctx.queue.submit([encoder.finish()]);
        let raw = read_mapped(ctx, &read, bytes)?;
        let t: &[u64] = bytemuck::cast_slice(&raw);
        let ticks = t[t.len() - 1].wrapping_sub(t[0]);
        Ok(Some(ticks as f64 * ctx.queue.get_timestamp_period() as f64 * 1e-9))
    }
}
