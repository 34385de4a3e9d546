//! Moving bytes between host and device. On unified memory (MAPPABLE_PRIMARY_BUFFERS: Apple Silicon,
//! integrated GPUs, lavapipe) uploads and readbacks map the storage buffer itself, with no staging
//! copy: the map waits until earlier work using the buffer is done. Elsewhere uploads first submit any
//! pending batch, then go through `queue.write_buffer`, which the queue orders after all earlier
//! submissions (a buffer recycled from the pool is never overwritten while earlier work still reads
//! it), and readbacks copy into a reused MAP_READ staging buffer, submit, wait, and copy out.
//! A readback started early (`download_later`, every memory kind) copies into staging and submits at
//! once, and waits only when asked, and only for its own submission: work recorded in between runs
//! while the host waits (a decode step recorded before the previous token is read).

use super::device::{read_mapped, wait, write_mapped, Gpu};
use super::exec::Exec;
use super::pool::{size_class, GpuBuffer};
use crate::{Error, Result};
use std::sync::mpsc::Receiver;
use std::sync::Mutex;

/// Staging buffers kept for readbacks, smallest first.
pub(crate) struct Staging(Mutex<Vec<wgpu::Buffer>>);

impl Staging {
    pub(crate) fn new() -> Staging {
        Staging(Mutex::new(Vec::new()))
    }

    fn take(&self, device: &wgpu::Device, bytes: u64) -> wgpu::Buffer {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = list.iter().position(|b| b.size() >= bytes && b.size() <= 2 * size_class(bytes)) {
            return list.swap_remove(i);
        }
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kiln readback"),
            size: size_class(bytes),
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn give(&self, b: wgpu::Buffer) {
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if list.len() < 8 {
            list.push(b);
        }
    }
}

/// Uploads of at least this many bytes are submitted at once (their staging memory is then freed as
/// the copy completes).
const FLUSH_BYTES: usize = 16 << 20;

/// Writes `bytes` at the start of `dst`.
pub(crate) fn upload(ctx: &Gpu, exec: &Mutex<Exec>, dst: &GpuBuffer, bytes: &[u8]) -> Result<()> {
    let mut exec = exec.lock().unwrap_or_else(|e| e.into_inner());
    exec.flush(ctx)?;
    if ctx.has(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS) {
        // The exec lock is held until the buffer is unmapped, so no work is recorded on it meanwhile.
        write_mapped(ctx, dst.raw(), bytes)?;
        drop(exec);
        return ctx.check();
    }
    let n = bytes.len() & !3;
    if n > 0 {
        ctx.queue.write_buffer(dst.raw(), 0, &bytes[..n]);
    }
    if n < bytes.len() {
        let mut tail = [0u8; 4];
        tail[..bytes.len() - n].copy_from_slice(&bytes[n..]);
        ctx.queue.write_buffer(dst.raw(), n as u64, &tail);
    }
    // `write_buffer` stages the bytes in host-visible memory until the next submission: a model's
    // weights uploaded one after another with no work between them would all be staged at once.
    if bytes.len() >= FLUSH_BYTES {
        ctx.queue.submit(std::iter::empty());
    }
    ctx.check()
}

/// The first `bytes` bytes of `src` (rounded up to 4 internally).
pub(crate) fn download(
    ctx: &Gpu,
    exec: &Mutex<Exec>,
    staging: &Staging,
    src: &GpuBuffer,
    bytes: u64,
) -> Result<Vec<u8>> {
    let padded = bytes.div_ceil(4) * 4;
    if padded == 0 {
        return Ok(Vec::new());
    }
    if ctx.has(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS) {
        // Unified memory: map the storage buffer itself, no staging copy. The exec lock is held
        // until it is unmapped, so no other thread records work on a mapped buffer.
        let mut exec = exec.lock().unwrap_or_else(|e| e.into_inner());
        exec.flush(ctx)?;
        let mut out = read_mapped(ctx, src.raw(), padded)?;
        drop(exec);
        out.truncate(bytes as usize);
        return Ok(out);
    }
    download_later(ctx, exec, staging, src, bytes)?.finish(ctx, staging)
}

/// A readback queued behind the work submitted before it (`download_later`); `finish` waits for it.
/// `download` is the two at once.
pub(crate) struct Download {
    buffer: wgpu::Buffer,
    bytes: u64,
    /// `bytes` rounded up to whole words (at least one): what is copied and mapped.
    padded: u64,
    index: Option<wgpu::SubmissionIndex>,
    mapped: Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
}

/// Copies the first `bytes` bytes of `src` into a staging buffer, submits the copy with the pending
/// batch and asks for the staging buffer's mapping, without waiting.
pub(crate) fn download_later(
    ctx: &Gpu,
    exec: &Mutex<Exec>,
    staging: &Staging,
    src: &GpuBuffer,
    bytes: u64,
) -> Result<Download> {
    let padded = bytes.div_ceil(4).max(1) * 4;
    let buffer = staging.take(&ctx.device, padded);
    let index = {
        let mut exec = exec.lock().unwrap_or_else(|e| e.into_inner());
        exec.copy(ctx, src.raw(), 0, &buffer, 0, padded);
        exec.flush(ctx)?
    };
    let (tx, mapped) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, 0..padded, move |r| {
        let _ = tx.send(r);
    });
    Ok(Download { buffer, bytes, padded, index, mapped })
}

impl Download {
    /// Waits for the copy's submission (not for work submitted after it) and returns the bytes.
    pub(crate) fn finish(self, ctx: &Gpu, staging: &Staging) -> Result<Vec<u8>> {
        let fail = |e: String| Error::Gpu { op: "readback", msg: e };
        wait(ctx, self.index)?;
        self.mapped.recv().map_err(|e| fail(e.to_string()))?.map_err(|e| fail(e.to_string()))?;
        let out = {
            let view = self.buffer.get_mapped_range(0..self.padded).map_err(|e| fail(e.to_string()))?;
            view[..self.bytes as usize].to_vec()
        };
        self.buffer.unmap();
        staging.give(self.buffer);
        Ok(out)
    }
}
