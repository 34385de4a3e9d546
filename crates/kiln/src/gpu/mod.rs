//! The GPU backend on wgpu: Metal on Apple GPUs, Vulkan and DX12 elsewhere. WGSL kernels (one family
//! per `.wgsl` file, specialised by text substitution and cached per device), a caching buffer pool
//! with statistics, batched submission, timestamp profiling and custom kernels.

mod attention;
pub(crate) mod autotune;
mod bandwidth;
mod catalog;
mod context;
mod custom;
pub(crate) mod decode_fused;
pub(crate) mod decode_rope_kv;
mod elementwise;
mod elementwise_vec;
mod exec;
mod index;
mod kernels;
mod matmul;
pub mod matmul_coop;
mod matmul_plan;
mod matmul_skinny;
mod matmul_tiled;
mod nn;
mod pool;
mod profile;
pub(crate) mod quant;
mod reduce;
mod rowwise;
mod transfer;
pub use bandwidth::copy_bandwidth;
pub use catalog::kernel_catalog;
mod wgsl;

#[cfg(test)]
mod matmul_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod variant_tests;

pub use context::{list_adapters, AdapterSummary, GpuContext};
pub use pool::MemoryStats;
pub use profile::{format_report, KernelTime};

pub(crate) use context::{best_hardware_index, best_index};

use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Error, Layout, Result};
use elementwise::{Elementwise, COPY_BODY, FUNCS, SILU_MUL_BODY, WHERE_BODY};
use half::{bf16, f16};
use pool::GpuBuffer;
use std::sync::Arc;

/// Elements of one dtype in a device buffer.
pub struct GpuStorage {
    pub(crate) ctx: Arc<GpuContext>,
    pub(crate) buffer: GpuBuffer,
    pub(crate) dtype: DType,
    pub(crate) len: usize,
}

impl std::fmt::Debug for GpuStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuStorage({} x {} on {})", self.len, self.dtype, self.ctx.summary.name)
    }
}

impl GpuStorage {
    /// A fresh buffer for `n` elements (filled with all-ones bits when poisoning is on).
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
        let s = GpuStorage { ctx: ctx.clone(), buffer, dtype, len: n };
        if ctx.poison.load(std::sync::atomic::Ordering::Relaxed) && n > 0 {
            index::fill_words(&s, &[u32::MAX])?;
        }
        Ok(s)
    }

    /// Uploads host data.
    pub(crate) fn from_cpu(ctx: &Arc<GpuContext>, data: &CpuStorage) -> Result<GpuStorage> {
        let dtype = data.dtype();
        let n = data.len();
        let s = GpuStorage::alloc(ctx, dtype, n)?;
        let bytes = host_bytes(data);
        transfer::upload(ctx, &s.buffer, &bytes)?;
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
            index::fill_words(&s, &words[..period])?;
        }
        Ok(s)
    }

    fn same_ctx(&self, op: &'static str, other: &GpuStorage) -> Result<()> {
        if !Arc::ptr_eq(&self.ctx, &other.ctx) {
            return Err(Error::DeviceMismatch {
                op,
                lhs: format!("gpu:{}", self.ctx.index),
                rhs: format!("gpu:{}", other.ctx.index),
            });
        }
        Ok(())
    }

    fn ew<'a>(
        &'a self,
        name: String,
        inputs: Vec<(&'a GpuStorage, &'a Layout)>,
        out: DType,
        body: String,
    ) -> Elementwise<'a> {
        Elementwise { name, inputs, out, body, funcs: FUNCS, consts: vec![], raw: None }
    }

    /// Converts a 4-byte compute-type result (f32/i32/u32) into `dtype` when they differ.
    pub(crate) fn finish(self, dtype: DType) -> Result<GpuStorage> {
        if self.dtype == dtype {
            return Ok(self);
        }
        let l = Layout::contiguous(self.len);
        self.cast(&l, dtype)
    }
}

/// The bytes of host data as the GPU stores them (bool as one byte 0/1).
fn host_bytes(data: &CpuStorage) -> Vec<u8> {
    match data {
        CpuStorage::F32(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::F16(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::BF16(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::I32(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::U32(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::I64(v) => bytemuck::cast_slice(v).to_vec(),
        CpuStorage::U8(v) => v.clone(),
        CpuStorage::Bool(v) => v.iter().map(|&b| b as u8).collect(),
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

impl BackendStorage for GpuStorage {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn len(&self) -> usize {
        self.len
    }

    fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        let c;
        let src = if l.is_contiguous() && l.offset() == 0 {
            self
        } else {
            c = self.copy_contiguous(l)?;
            &c
        };
        let n = l.elem_count();
        let bytes = transfer::download(&self.ctx, &src.buffer, (n * self.dtype.size_in_bytes()) as u64)?;
        Ok(match self.dtype {
            DType::F32 => CpuStorage::F32(bytemuck::pod_collect_to_vec(&bytes)),
            DType::F16 => CpuStorage::F16(bytemuck::pod_collect_to_vec::<u8, f16>(&bytes)),
            DType::BF16 => CpuStorage::BF16(bytemuck::pod_collect_to_vec::<u8, bf16>(&bytes)),
            DType::I32 => CpuStorage::I32(bytemuck::pod_collect_to_vec(&bytes)),
            DType::U32 => CpuStorage::U32(bytemuck::pod_collect_to_vec(&bytes)),
            DType::I64 => CpuStorage::I64(bytemuck::pod_collect_to_vec(&bytes)),
            DType::U8 => CpuStorage::U8(bytes),
            DType::Bool => CpuStorage::Bool(bytes.iter().map(|&b| b != 0).collect()),
            DType::F64 => return Err(wgsl::check_dtype("to_cpu", DType::F64).unwrap_err()),
        })
    }

    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        if self.dtype == DType::I64 {
            return on_host(&[(self, l)], |h, hl| h[0].unary(&hl[0], op));
        }
        let t = wgsl::ct(self.dtype);
        let mut k = self.ew(
            format!("unary_{}", op.name()),
            vec![(self, l)],
            self.dtype,
            elementwise::unary_body(op, self.dtype),
        );
        if let UnaryOp::Clamp { min, max } = op {
            // Integer bounds round inward, as on the CPU (clamp of u8 to [0.5, 2.5] is [1, 2]).
            let (min, max) = if t == "f32" { (min, max) } else { (min.ceil(), max.floor()) };
            k.consts = vec![wgsl::param_bits(t, min), wgsl::param_bits(t, max)];
        }
        k.run()
    }

    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        self.same_ctx(op.name(), rhs)?;
        if self.dtype == DType::I64 {
            return on_host(&[(self, l), (rhs, rl)], |h, hl| h[0].binary(&hl[0], &h[1], &hl[1], op));
        }
        let body = elementwise::binary_body(op, self.dtype);
        self.ew(format!("binary_{}", op.name()), vec![(self, l), (rhs, rl)], self.dtype, body).run()
    }

    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self> {
        self.same_ctx(op.name(), rhs)?;
        if self.dtype == DType::I64 {
            return on_host(&[(self, l), (rhs, rl)], |h, hl| h[0].cmp(&hl[0], &h[1], &hl[1], op));
        }
        let body = elementwise::cmp_body(op);
        self.ew(format!("cmp_{}", op.name()), vec![(self, l), (rhs, rl)], DType::Bool, body).run()
    }

    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        self.same_ctx("where", t)?;
        self.same_ctx("where", f)?;
        self.ew("where".into(), vec![(self, l), (t, tl), (f, fl)], t.dtype, WHERE_BODY.into()).run()
    }

    fn cast(&self, l: &Layout, dtype: DType) -> Result<Self> {
        wgsl::check_dtype("cast", dtype)?;
        self.ew("cast".into(), vec![(self, l)], dtype, elementwise::cast_body(self.dtype, dtype)).run()
    }

    fn copy_contiguous(&self, l: &Layout) -> Result<Self> {
        // Strided views that keep whole words together copy in words or 16-byte units.
        if !l.is_contiguous() {
            if let Some(s) = index::copy_strided(self, l)? {
                return Ok(s);
            }
        }
        self.ew("copy".into(), vec![(self, l)], self.dtype, COPY_BODY.into()).run()
    }

    fn copy_into(&self, l: &Layout, dst: &mut Self, dst_l: &Layout) -> Result<()> {
        self.same_ctx("copy_into", dst)?;
        index::copy_into(self, l, dst, dst_l)
    }

    fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Self> {
        if self.dtype == DType::I64 {
            return on_host(&[(self, l)], |h, hl| h[0].reduce(&hl[0], op, axes));
        }
        reduce::reduce(self, l, op, axes)
    }

    fn cumsum(&self, l: &Layout, axis: usize) -> Result<Self> {
        reduce::cumsum(self, l, axis)
    }

    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        self.same_ctx("matmul", rhs)?;
        if self.dtype == DType::I64 {
            return on_host(&[(self, l), (rhs, rl)], |h, hl| h[0].matmul(&hl[0], &h[1], &hl[1]));
        }
        matmul::matmul(self, l, rhs, rl)
    }

    fn softmax_last(&self, l: &Layout, log: bool) -> Result<Self> {
        rowwise::softmax_last(self, l, log)
    }

    fn rms_norm(&self, l: &Layout, w: &Self, wl: &Layout, eps: f64) -> Result<Self> {
        self.same_ctx("rms_norm", w)?;
        rowwise::norm(self, l, w, wl, None, eps, true)
    }

    fn layer_norm(&self, l: &Layout, w: &Self, wl: &Layout, b: Option<(&Self, &Layout)>, eps: f64) -> Result<Self> {
        self.same_ctx("layer_norm", w)?;
        rowwise::norm(self, l, w, wl, b, eps, false)
    }

    fn rope(&self, l: &Layout, cos: &Self, cl: &Layout, sin: &Self, sl: &Layout, interleaved: bool) -> Result<Self> {
        self.same_ctx("rope", cos)?;
        nn::rope(self, l, cos, cl, sin, sl, interleaved)
    }

    fn attention(&self, l: &Layout, k: &Self, kl: &Layout, v: &Self, vl: &Layout, p: AttentionParams) -> Result<Self> {
        self.same_ctx("attention", k)?;
        self.same_ctx("attention", v)?;
        attention::attention(self, l, k, kl, v, vl, p)
    }

    fn silu_mul(&self, l: &Layout, up: &Self, ul: &Layout) -> Result<Self> {
        self.same_ctx("silu_mul", up)?;
        self.ew("silu_mul".into(), vec![(self, l), (up, ul)], self.dtype, SILU_MUL_BODY.into()).run()
    }

    fn index_select(&self, l: &Layout, ids: &Self, il: &Layout, axis: usize) -> Result<Self> {
        self.same_ctx("index_select", ids)?;
        // Every dtype, i64 included, moves as raw bits (two words an element) with ids checked on the
        // device: no host copy, and an out-of-range id gives zeros here too.
        index::index_select(self, l, ids, il, axis)
    }

    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, axis: usize) -> Result<Self> {
        self.same_ctx("gather", ids)?;
        // Every dtype, i64 included, moves as raw bits (two words an element) with ids checked on the
        // device: no host copy, and an out-of-range id gives zeros here too.
        index::gather(self, l, ids, il, axis)
    }
}

/// Runs a CPU op on host copies of `inputs` and uploads the result. i64 arithmetic, comparisons,
/// reductions and matmul take this path: WGSL has no 64-bit integers, and a 32-bit kernel would give
/// wrong answers past 2^31. Moving i64 data (copies, casts, `where`) stays on the GPU, exactly.
fn on_host(
    inputs: &[(&GpuStorage, &Layout)],
    f: impl FnOnce(&[CpuStorage], &[Layout]) -> Result<CpuStorage>,
) -> Result<GpuStorage> {
    let host = inputs.iter().map(|(s, l)| s.to_cpu(l)).collect::<Result<Vec<_>>>()?;
    let layouts: Vec<Layout> = inputs.iter().map(|(_, l)| Layout::contiguous(l.shape().clone())).collect();
    GpuStorage::from_cpu(&inputs[0].0.ctx, &f(&host, &layouts)?)
}

/// Submits pending work and waits for the device to finish it.
pub(crate) fn synchronize(ctx: &GpuContext) -> Result<()> {
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).synchronize(ctx)
}

/// Runs `record` (which queues GPU work) over and over for `seconds` of wall time without waiting
/// between runs (a `synchronize` every 16 bounds the queue), then waits. An idle GPU runs at low
/// clocks and needs about half a second of load to reach full speed (H200 through Vulkan: a 1 GiB
/// read takes 575 us cold, 243 us after ~0.6 s; docs/PERFORMANCE.md), so timing starts after this.
pub(crate) fn keep_busy(ctx: &GpuContext, seconds: f64, mut record: impl FnMut() -> Result<()>) -> Result<()> {
    let start = std::time::Instant::now();
    let mut runs = 0usize;
    while start.elapsed().as_secs_f64() < seconds {
        record()?;
        runs += 1;
        if runs.is_multiple_of(16) {
            synchronize(ctx)?;
        }
    }
    synchronize(ctx)
}

pub(crate) use custom::custom_kernel;
