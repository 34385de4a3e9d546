//! Batched execution. Dispatches are recorded into one pending command encoder and one open compute
//! pass; their parameters go into a per-batch arena buffer (one 256-byte slot each, bound at a dynamic
//! offset). The batch is submitted when data is read back, on `synchronize`, before an upload, or when
//! it reaches a size that starts at `FIRST_FLUSH` dispatches after each of those and doubles with
//! each submission up to the arena's `SLOTS`: the GPU starts on a long chain of ops (an LLM decode
//! step: ~400 dispatches) while the host is still recording it, instead of idling until the whole
//! chain is recorded, and a chain still takes few submissions. Never once per op, and the host never
//! waits except for a readback.

use super::device::{wait, Gpu};
use super::kernels::{Kernel, Pipelines, PARAM_WORDS};
use super::profile::{Profiler, Span};
use crate::{Error, Result};

/// Dispatches per batch (arena slots).
const SLOTS: usize = 512;
/// Dispatches of the first batch after the GPU was last waited for (see the module docs).
const FIRST_FLUSH: usize = 8;

/// Bind groups kept for reuse, and the largest buffer they may hold: a chain of small ops cycles
/// through a few pooled buffers, so its bind groups repeat, while a cached bind group keeps its
/// buffers alive, so large ones are never cached.
const BIND_GROUPS: usize = 256;
const BIND_GROUP_MAX_BUFFER: u64 = 1 << 20;

/// Bind groups by (layout, buffers).
type BindGroups = std::collections::HashMap<(wgpu::BindGroupLayout, Vec<wgpu::Buffer>), wgpu::BindGroup>;

pub(crate) struct Exec {
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    arena: Option<(wgpu::Buffer, wgpu::BindGroup)>,
    params: Vec<u32>,
    slot_words: usize,
    dispatches: usize,
    /// Dispatches at which the open batch is submitted.
    flush_at: usize,
    /// Dispatches recorded since the device was opened.
    pub(crate) total_dispatches: u64,
    /// Batches submitted since the device was opened.
    pub(crate) submits: u64,
    pub(crate) profiler: Profiler,
    /// The open timing span of `Device::measure`, if any.
    span: Option<Span>,
    bind_groups: BindGroups,
    /// The layout of the params arena's bind group (group 1 of every kernel).
    params_layout: wgpu::BindGroupLayout,
}

impl Exec {
    pub(crate) fn new(device: &wgpu::Device, limits: &wgpu::Limits, pipelines: &Pipelines) -> Exec {
        let align = limits.min_storage_buffer_offset_alignment.max(256) as usize;
        Exec {
            encoder: None,
            pass: None,
            arena: None,
            params: Vec::new(),
            slot_words: align / 4,
            dispatches: 0,
            flush_at: FIRST_FLUSH,
            total_dispatches: 0,
            submits: 0,
            profiler: Profiler::new(device),
            span: None,
            bind_groups: BindGroups::new(),
            params_layout: pipelines.params_layout.clone(),
        }
    }

    fn begin(&mut self, ctx: &Gpu) {
        if self.encoder.is_none() {
            self.encoder =
                Some(ctx.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("kiln") }));
        }
        if self.arena.is_none() {
            let size = (SLOTS * self.slot_words * 4) as u64;
            let buffer = ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln params"),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("kiln params"),
                layout: &self.params_layout,
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer: &buffer,
                        offset: 0,
                        size: wgpu::BufferSize::new((PARAM_WORDS * 4) as u64),
                    }),
                }],
            });
            self.arena = Some((buffer, group));
            self.params.clear();
        }
    }

    /// Records one dispatch of `kernel` over `groups` workgroups with `buffers` (output first).
    pub(crate) fn dispatch(
        &mut self,
        ctx: &Gpu,
        kernel: &Kernel,
        buffers: &[&wgpu::Buffer],
        params: &[u32],
        groups: [u32; 3],
    ) -> Result<()> {
        assert!(params.len() <= PARAM_WORDS, "kernel {} passes too many parameters", kernel.name);
        if groups.contains(&0) {
            return Ok(());
        }
        let max = ctx.limits.max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max) {
            return Err(Error::Gpu {
                op: "dispatch",
                msg: format!("kernel {} needs a grid of {groups:?} workgroups, above the limit of {max}", kernel.name),
            });
        }
        self.begin(ctx);
        let slot = self.dispatches;
        self.params.resize(slot * self.slot_words, 0);
        self.params.extend_from_slice(params);
        self.params.resize((slot + 1) * self.slot_words, 0);
        let group = self.bind_group(ctx, kernel, buffers);
        let profiling = self.profiler.enabled();
        if profiling || self.pass.is_none() {
            self.pass = None;
            let has_ts = ctx.has(wgpu::Features::TIMESTAMP_QUERY);
            let writes = match (&mut self.span, profiling) {
                (_, true) => self.profiler.writes(&ctx.device, has_ts, &kernel.name),
                (Some(span), false) => span.writes(),
                (None, false) => None,
            };
            let pass = self
                .encoder
                .as_mut()
                .expect("encoder begun")
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("kiln"), timestamp_writes: writes })
                .forget_lifetime();
            self.pass = Some(pass);
        }
        let pass = self.pass.as_mut().expect("pass begun");
        let arena_group = &self.arena.as_ref().expect("arena begun").1;
        pass.set_pipeline(&kernel.pipeline);
        pass.set_bind_group(0, &group, &[]);
        pass.set_bind_group(1, arena_group, &[(slot * self.slot_words * 4) as u32]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
        if profiling {
            self.pass = None;
        }
        self.dispatches += 1;
        self.total_dispatches += 1;
        if self.dispatches >= self.flush_at || self.profiler.full() {
            let next = (self.flush_at * 2).min(SLOTS);
            self.flush(ctx)?;
            self.flush_at = next;
        }
        Ok(())
    }

    /// The bind group of `buffers` for `kernel`, reused when all buffers are small.
    fn bind_group(&mut self, ctx: &Gpu, kernel: &Kernel, buffers: &[&wgpu::Buffer]) -> wgpu::BindGroup {
        let create = || {
            let entries: Vec<wgpu::BindGroupEntry> = buffers
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry { binding: i as u32, resource: b.as_entire_binding() })
                .collect();
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(&kernel.name),
                layout: &kernel.layout,
                entries: &entries,
            })
        };
        if buffers.iter().any(|b| b.size() > BIND_GROUP_MAX_BUFFER) {
            return create();
        }
        let key = (kernel.layout.clone(), buffers.iter().map(|&b| b.clone()).collect());
        if let Some(g) = self.bind_groups.get(&key) {
            return g.clone();
        }
        if self.bind_groups.len() >= BIND_GROUPS {
            self.bind_groups.clear();
        }
        let group = create();
        self.bind_groups.insert(key, group.clone());
        group
    }

    /// Forgets the cached bind groups (and so the buffers they hold).
    pub(crate) fn clear_bind_groups(&mut self) {
        self.bind_groups.clear();
    }

    /// Records a buffer-to-buffer copy (ends the open compute pass).
    pub(crate) fn copy(
        &mut self,
        ctx: &Gpu,
        src: &wgpu::Buffer,
        src_off: u64,
        dst: &wgpu::Buffer,
        dst_off: u64,
        bytes: u64,
    ) {
        self.begin(ctx);
        self.pass = None;
        self.encoder.as_mut().expect("encoder begun").copy_buffer_to_buffer(src, src_off, dst, dst_off, bytes);
    }

    /// Submits the pending batch (without waiting) and returns its submission index. The next batch
    /// is submitted after `FIRST_FLUSH` dispatches (callers flush before they wait, or upload).
    pub(crate) fn flush(&mut self, ctx: &Gpu) -> Result<Option<wgpu::SubmissionIndex>> {
        self.pass = None;
        self.flush_at = FIRST_FLUSH;
        let Some(encoder) = self.encoder.take() else { return Ok(None) };
        let mut encoder = encoder;
        if let Some((arena, _)) = self.arena.take() {
            if !self.params.is_empty() {
                ctx.queue.write_buffer(&arena, 0, bytemuck::cast_slice(&self.params));
            }
        }
        let resolved = self.profiler.resolve(&mut encoder);
        let index = ctx.queue.submit([encoder.finish()]);
        self.dispatches = 0;
        self.params.clear();
        self.submits += 1;
        if resolved {
            self.profiler.collect(ctx)?;
        }
        ctx.check()?;
        Ok(Some(index))
    }

    /// Starts timing the work recorded from now on (after submitting what is pending).
    pub(crate) fn begin_span(&mut self, ctx: &Gpu) -> Result<()> {
        self.flush(ctx)?;
        let has_ts = ctx.has(wgpu::Features::TIMESTAMP_QUERY) && !self.profiler.enabled();
        self.span = Some(Span::new(&ctx.device, has_ts));
        Ok(())
    }

    /// Submits the span's work, waits for it, and returns its GPU time in seconds (`None` when the
    /// device cannot time it with timestamps).
    pub(crate) fn end_span(&mut self, ctx: &Gpu) -> Result<Option<f64>> {
        self.flush(ctx)?;
        match self.span.take() {
            Some(span) => span.finish(ctx),
            None => Ok(None),
        }
    }

    /// Submits pending work and waits until the device is idle.
    pub(crate) fn synchronize(&mut self, ctx: &Gpu) -> Result<()> {
        self.flush(ctx)?;
        wait(ctx, None)
    }
}
