//! The caching allocator. Buffers come in size classes (powers of two split in four steps, at least
//! 256 bytes); a request is served by the smallest cached buffer between its class and twice it, else
//! by a new device allocation. Dropped buffers go back to the cache at once: every later use of a
//! buffer is ordered after earlier uses on the one queue (dispatches in recording order; uploads only
//! after pending work is submitted), so reuse never races pending work. The cache is trimmed least
//! recently freed first when it passes its limit. On an allocation failure the cache is dropped and
//! the allocation retried once before `Err(OutOfMemory)`.

use crate::{Error, Result};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Memory statistics of one GPU device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live tensors and in-flight work.
    pub active_bytes: u64,
    /// Bytes kept in the cache for reuse.
    pub cached_bytes: u64,
    /// Largest `active_bytes` seen (reset with `reset_peak`).
    pub peak_bytes: u64,
    /// Live buffers (active and cached).
    pub live_buffers: u64,
    /// Requests served from the cache.
    pub cache_hits: u64,
    /// Requests that made a new device allocation.
    pub device_allocations: u64,
}

struct State {
    free: BTreeMap<(u64, u64), wgpu::Buffer>,
    seq: u64,
    stats: MemoryStats,
    cache_limit: u64,
    memory_limit: u64,
}

pub(crate) struct Pool {
    state: Arc<Mutex<State>>,
    /// Usages beyond STORAGE | COPY_SRC | COPY_DST: MAP_READ where storage buffers can be mapped.
    extra_usage: wgpu::BufferUsages,
}

/// A device buffer that returns to its pool when dropped.
pub(crate) struct GpuBuffer {
    buffer: Option<wgpu::Buffer>,
    size: u64,
    state: Arc<Mutex<State>>,
}

impl GpuBuffer {
    pub(crate) fn raw(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("buffer present until drop")
    }
    pub(crate) fn size(&self) -> u64 {
        self.size
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if let Some(buffer) = self.buffer.take() {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.stats.active_bytes -= self.size;
            s.stats.cached_bytes += self.size;
            s.seq += 1;
            let key = (self.size, s.seq);
            s.free.insert(key, buffer);
            trim(&mut s);
        }
    }
}

/// Drops least recently freed buffers until the cache fits its limit.
fn trim(s: &mut State) {
    while s.stats.cached_bytes > s.cache_limit {
        let Some(&key) = s.free.keys().min_by_key(|(_, seq)| *seq) else { break };
        // Dropped, not destroyed: recorded but unsubmitted work may still use it, and wgpu frees
        // the memory once that work is done.
        s.free.remove(&key);
        s.stats.cached_bytes -= key.0;
        s.stats.live_buffers -= 1;
    }
}

/// The size class of a request: at least 256 bytes, then powers of two in quarter steps.
pub(crate) fn size_class(bytes: u64) -> u64 {
    let b = bytes.max(256);
    let p = 63 - b.leading_zeros() as u64; // floor(log2 b)
    let step = (1u64 << p) / 4;
    b.div_ceil(step) * step
}

/// The size class of a request of at most `max_binding` bytes, capped so that it stays bindable: a
/// request that fits the binding limit is always served, by a buffer rounded down to 16 bytes below
/// the limit where that still holds it (16-byte vector bindings), else to exactly the limit.
pub(crate) fn capped_class(bytes: u64, max_binding: u64) -> u64 {
    let cap = max_binding / 16 * 16;
    let class = size_class(bytes);
    if class <= cap {
        class
    } else if bytes <= cap {
        cap
    } else {
        max_binding / 4 * 4
    }
}

const DEFAULT_CACHE_LIMIT: u64 = 4 << 30;

impl Pool {
    pub(crate) fn new(extra_usage: wgpu::BufferUsages) -> Pool {
        let cache_limit =
            crate::settings::GPU_CACHE_LIMIT.get().ok().and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_CACHE_LIMIT);
        Pool {
            state: Arc::new(Mutex::new(State {
                free: BTreeMap::new(),
                seq: 0,
                stats: MemoryStats::default(),
                cache_limit,
                memory_limit: u64::MAX,
            })),
            extra_usage,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn stats(&self) -> MemoryStats {
        self.lock().stats
    }

    pub(crate) fn reset_peak(&self) {
        let mut s = self.lock();
        s.stats.peak_bytes = s.stats.active_bytes;
    }

    pub(crate) fn set_cache_limit(&self, bytes: u64) {
        let mut s = self.lock();
        s.cache_limit = bytes;
        trim(&mut s);
    }

    pub(crate) fn set_memory_limit(&self, bytes: u64) {
        self.lock().memory_limit = bytes;
    }

    pub(crate) fn clear_cache(&self) {
        let mut s = self.lock();
        let limit = s.cache_limit;
        s.cache_limit = 0;
        trim(&mut s);
        s.cache_limit = limit;
    }

    /// A buffer of at least `bytes` bytes (STORAGE | COPY_SRC | COPY_DST, and MAP_READ on unified
    /// memory).
    pub(crate) fn alloc(&self, device: &wgpu::Device, bytes: u64, max_binding: u64) -> Result<GpuBuffer> {
        if bytes > max_binding {
            return Err(Error::Gpu {
                op: "alloc",
                msg: format!(
                    "a buffer of {bytes} bytes exceeds the adapter's largest storage binding of {max_binding} bytes"
                ),
            });
        }
        let class = capped_class(bytes, max_binding);
        {
            let mut s = self.lock();
            let hit = s.free.range((class, 0)..(class.saturating_mul(2), u64::MAX)).next().map(|(k, _)| *k);
            if let Some(key) = hit {
                let buffer = s.free.remove(&key).expect("key from the map");
                s.stats.cached_bytes -= key.0;
                s.stats.active_bytes += key.0;
                s.stats.peak_bytes = s.stats.peak_bytes.max(s.stats.active_bytes);
                s.stats.cache_hits += 1;
                return Ok(GpuBuffer { buffer: Some(buffer), size: key.0, state: self.state.clone() });
            }
        }
        let buffer = match self.create(device, class) {
            Ok(b) => b,
            Err(_) => {
                self.clear_cache();
                self.create(device, class).map_err(|_| {
                    let s = self.stats();
                    Error::OutOfMemory { requested: bytes, active: s.active_bytes, cached: s.cached_bytes }
                })?
            }
        };
        let mut s = self.lock();
        s.stats.active_bytes += class;
        s.stats.peak_bytes = s.stats.peak_bytes.max(s.stats.active_bytes);
        s.stats.live_buffers += 1;
        s.stats.device_allocations += 1;
        Ok(GpuBuffer { buffer: Some(buffer), size: class, state: self.state.clone() })
    }

    fn create(&self, device: &wgpu::Device, size: u64) -> std::result::Result<wgpu::Buffer, ()> {
        {
            let s = self.lock();
            if s.stats.active_bytes + s.stats.cached_bytes + size > s.memory_limit {
                return Err(());
            }
        }
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kiln"),
            size,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST
                | self.extra_usage,
            mapped_at_creation: false,
        });
        match pollster::block_on(scope.pop()) {
            Some(_) => Err(()),
            None => Ok(buffer),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{capped_class, size_class};

    #[test]
    fn classes_near_the_binding_limit_stay_bindable() {
        // Issue 9: a (128256, 4096) f32 table under a 2^31 - 4 byte binding limit.
        let max = 2_147_483_644u64;
        let table = 128_256u64 * 4096 * 4;
        assert!(size_class(table) > max);
        assert_eq!(capped_class(table, max), max / 16 * 16);
        assert_eq!(capped_class(max, max), max);
        assert_eq!(capped_class(max - 8, max), max);
        assert_eq!(capped_class(1000, max), 1024);
        for b in [1u64, 255, 4096, 1 << 20, max / 2 + 1, max - 16, max] {
            let c = capped_class(b, max);
            assert!(c >= b && c <= max && c.is_multiple_of(4), "{b} -> {c}");
        }
    }

    #[test]
    fn size_classes_waste_at_most_a_quarter() {
        assert_eq!(size_class(1), 256);
        assert_eq!(size_class(256), 256);
        assert_eq!(size_class(257), 320);
        assert_eq!(size_class(1000), 1024);
        for b in [300u64, 5000, 123_457, 1 << 30] {
            let c = size_class(b);
            assert!(c >= b && c <= b + b / 4 + 1, "{b} -> {c}");
        }
    }
}
