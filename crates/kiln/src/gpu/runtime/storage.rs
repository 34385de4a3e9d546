//! `GpuStorage`: elements of one dtype in a pooled device buffer, with allocation (poisoned when
//! asked), uploads and fills; and waiting for the device.

use super::context::GpuContext;
use super::kernels::render;
use super::params::params;
use super::pool::GpuBuffer;
use super::wgsl;
use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::{DType, Error, Result};

const FILL: &str = include_str!("fill.wgsl");
use std::sync::Arc;

/// What a fresh buffer holds when poisoning is on, per dtype a value the tested ops do not produce,
/// so that an element no kernel wrote fails the check: NaN for floats, 0xDEADBEEF for 32- and 64-bit
/// integers (not -1, which random data hits often), 0xA5 bytes for u8 (165), i8 (-91), i16/u16
/// (0xA5A5) and bool (neither 0 nor 1: `to_cpu` reports such a bool as an error).
pub(crate) fn poison_word(dtype: DType) -> u32 {
    match dtype {
        DType::I32 | DType::U32 | DType::I64 | DType::U64 => 0xDEAD_BEEF,
        DType::U8 | DType::Bool | DType::I8 | DType::I16 | DType::U16 => 0xA5A5_A5A5,
        _ => u32::MAX,
    }
}

/// A buffer and an element offset in it.
pub(crate) struct At<'a> {
    pub(crate) buf: &'a GpuStorage,
    pub(crate) offset: usize,
}

/// Elements of one dtype in a device buffer.
pub struct GpuStorage {
    pub(crate) ctx: Arc<GpuContext>,
    pub(crate) buffer: GpuBuffer,
    pub(crate) dtype: DType,
    pub(crate) len: usize,
    /// Buffers computed from this one's contents (a bf16 weight's line maxima: `derived`), kept
    /// until the storage is written (`Tensor::storage_mut`, `fill_words`) or dropped.
    derived: std::sync::Mutex<Vec<(Vec<usize>, Arc<GpuStorage>)>>,
}

/// Derived buffers kept per storage (older ones are dropped first).
const DERIVED_KEPT: usize = 4;

impl std::fmt::Debug for GpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuStorage({} x {} on {})", self.len, self.dtype, self.ctx.summary.name)
    }
}

impl GpuStorage {
    /// A fresh buffer for `n` elements (filled with [`poison_word`] when poisoning is on).
    pub(crate) fn alloc(ctx: &Arc<GpuContext>, dtype: DType, n: usize) -> Result<GpuStorage> {
        ctx.check()?;
        wgsl::check_dtype("alloc", dtype)?;
        let bytes = wgsl::buffer_bytes(dtype, n).max(4);
        let max = ctx.max_binding();
        if bytes > max {
            // One tensor lives in one buffer bound whole: beyond the binding limit there is no way
            // to read it in a kernel (docs/PERFORMANCE.md, "Tensors near the binding limit").
            return Err(Error::Gpu {
                op: "alloc",
                msg: format!(
                    "a tensor of {n} {dtype} elements ({bytes} bytes) exceeds the adapter's largest storage \
                     binding of {max} bytes; split it (e.g. an embedding table into row blocks) or keep it on the CPU"
                ),
            });
        }
        let buffer = ctx.pool.alloc(&ctx.device, bytes, max)?;
        let s = GpuStorage { ctx: ctx.clone(), buffer, dtype, len: n, derived: Default::default() };
        if ctx.poison.load(std::sync::atomic::Ordering::Relaxed) && n > 0 {
            s.fill_words(&[poison_word(dtype)])?;
        }
        Ok(s)
    }

    /// Uploads host data.
    pub(crate) fn from_cpu(ctx: &Arc<GpuContext>, data: &CpuStorage) -> Result<GpuStorage> {
        let dtype = data.dtype();
        let n = data.len();
        let s = GpuStorage::alloc(ctx, dtype, n)?;
        let bytes = host_bytes(data);
        ctx.upload(&s.buffer, &bytes)?;
        Ok(s)
    }

    /// The little-endian bytes of `bytes.len() / size` elements of `dtype` (not bool), uploaded as
    /// they are: no typed copy on the host.
    pub(crate) fn from_le_bytes(ctx: &Arc<GpuContext>, dtype: DType, bytes: &[u8]) -> Result<GpuStorage> {
        let s = GpuStorage::alloc(ctx, dtype, bytes.len() / dtype.size_in_bytes())?;
        ctx.upload(&s.buffer, bytes)?;
        Ok(s)
    }

    /// `n` elements all equal to `value` converted to `dtype` like a host cast.
    pub(crate) fn full(ctx: &Arc<GpuContext>, dtype: DType, n: usize, value: f64) -> Result<GpuStorage> {
        let s = GpuStorage::alloc(ctx, dtype, n)?;
        let one = CpuStorage::full(4, dtype, value)?;
        let bytes = host_bytes(&one);
        let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
        let period = if dtype.size_in_bytes() == 8 { 2 } else { 1 };
        if n > 0 {
            s.fill_words(&words[..period])?;
        }
        Ok(s)
    }

    /// The buffer derived from this storage's contents under `key` (which names what was derived
    /// and from which view): `make`'s result, kept until the storage is written or dropped.
    pub(crate) fn derived(
        &self,
        key: Vec<usize>,
        make: impl FnOnce() -> Result<GpuStorage>,
    ) -> Result<Arc<GpuStorage>> {
        let mut kept = self.derived.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, d)) = kept.iter().find(|(k, _)| *k == key) {
            return Ok(d.clone());
        }
        let d = Arc::new(make()?);
        if kept.len() >= DERIVED_KEPT {
            kept.remove(0);
        }
        kept.push((key, d.clone()));
        Ok(d)
    }

    /// Drops the derived buffers: the contents are about to change.
    pub(crate) fn forget_derived(&self) {
        self.derived.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Fills the whole buffer of `s` with the repeating word pattern `words` (1 or 2 words).
    pub(crate) fn fill_words(&self, words: &[u32]) -> Result<()> {
        self.forget_derived();
        let s = self;
        let ctx = &s.ctx;
        let kernel = ctx.pipelines.get(ctx, "fill", 0, fill_source)?;
        let n = (s.buffer.size() / 4) as usize;
        let mut params = FillParams { len: n as u32, period: words.len() as u32, pattern: [0; 2] };
        params.pattern[..words.len()].copy_from_slice(words);
        let groups = wgsl::grid(n, 256, ctx.limits.max_compute_workgroups_per_dimension);
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
            ctx,
            &kernel,
            &[s.buffer.raw()],
            &params.words(),
            groups,
        )
    }

    pub(crate) fn same_ctx(&self, op: &'static str, other: &GpuStorage) -> Result<()> {
        if !Arc::ptr_eq(&self.ctx, &other.ctx) {
            return Err(Error::DeviceMismatch {
                op,
                lhs: format!("gpu:{}", self.ctx.index),
                rhs: format!("gpu:{}", other.ctx.index),
            });
        }
        Ok(())
    }
}

/// The bytes of host data as the GPU stores them (bool as one byte 0/1).
pub(crate) fn host_bytes(data: &CpuStorage) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow::Borrowed;
    match data {
        CpuStorage::F32(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::F16(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::BF16(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::I32(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::U32(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::I64(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::U8(v) => Borrowed(v),
        CpuStorage::I8(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::I16(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::U16(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::U64(v) => Borrowed(bytemuck::cast_slice(v)),
        CpuStorage::Bool(v) => std::borrow::Cow::Owned(v.iter().map(|&b| b as u8).collect()),
        CpuStorage::F64(_) => unreachable!("f64 is refused by alloc before any upload"),
    }
}

/// The 4-byte dtype a kernel accumulates `dtype` in.
pub(crate) fn compute_dtype(dtype: DType) -> DType {
    match wgsl::ct(dtype) {
        "f32" => DType::F32,
        "i32" => DType::I32,
        _ => DType::U32,
    }
}

params! {
    /// The fill kernel's parameters: words to fill, and the repeating pattern (1 or 2 words).
    struct FillParams { len: u32, period: u32, pattern: [u32; 2] }
}

pub(crate) fn fill_source() -> String {
    render(FILL, &[("PARAMS", &FillParams::wgsl())])
}
