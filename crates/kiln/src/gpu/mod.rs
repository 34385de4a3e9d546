//! The GPU backend on wgpu: Metal on Apple GPUs, Vulkan and DX12 elsewhere.
//!
//! Four layers, each using only those below it:
//! - `runtime/`: adapters, the device context, buffers (`GpuStorage`), batched dispatch, transfers,
//!   the pipeline cache, typed kernel parameters, profiling; it knows no kernel family;
//! - `pointwise/`: the strided per-element launcher, copies and casts;
//! - `kit/`: kernel pieces several families build on (the quantized formats' units);
//! - the kernel families, one folder each with its launchers and `.wgsl` files: `elementwise/`
//!   (unary, binary, compare, rope), `index/`, `reduce/`, `rowwise/` (softmax, norms), `matmul/`,
//!   `matvec/` (few-row dense and quantized products), `dequant/`, `kv/` (rope + KV append),
//!   `attention/`, `fused/`, and `custom.rs` (user WGSL). No family imports another.
//!
//! This file is the face on top: `impl BackendStorage for GpuStorage` forwards each op to its family,
//! and `ext.rs` does the same for the extension ops (`impl ExtOps`: fused, quantized, paged);
//! `catalog.rs` lists every kernel variant of every family for the shader-translation test.

pub(crate) mod attention;
mod catalog;
mod custom;
mod dequant;
mod elementwise;
mod ext;
pub(crate) mod fused;
mod index;
mod kit;
mod kv;
mod matmul;
mod matvec;
mod pointwise;
mod reduce;
mod rowwise;
pub(crate) mod runtime;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod variant_tests;

pub use catalog::kernel_catalog;
pub use matmul::coop as matmul_coop;
pub use runtime::bandwidth::copy_bandwidth;
pub use runtime::{
    format_report, list_adapters, AdapterSummary, Gpu, GpuContext, GpuStorage, KernelTime, MemoryStats, VramInfo,
};

pub(crate) use custom::{compile as compile_custom, run as run_custom};
pub(crate) use pointwise::PendingGpuRead;
pub(crate) use runtime::adapters::{best_hardware_index, best_index};
pub(crate) use runtime::autotune;
pub(crate) use runtime::context::{keep_busy, synchronize};

use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::op::{AttentionParams, BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Layout, Result};
use elementwise::{rope, FUNCS, SILU_MUL_BODY};
use pointwise::{copy, Elementwise, WHERE_BODY};

impl BackendStorage for GpuStorage {
    fn dtype(&self) -> DType {
        self.dtype
    }

    fn len(&self) -> usize {
        self.len
    }

    fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        GpuStorage::to_cpu(self, l)
    }

    fn unary(&self, l: &Layout, op: UnaryOp) -> Result<Self> {
        if is_wide(self.dtype) {
            return on_host(&[(self, l)], |h, hl| h[0].unary(&hl[0], op));
        }
        let mut k = Elementwise::new(
            &format!("unary_{}", op.name()),
            vec![(self, l)],
            self.dtype,
            elementwise::unary_body(op, self.dtype),
        )
        .with_funcs(FUNCS);
        k.op = elementwise::unary_params(op, self.dtype);
        k.run()
    }

    fn binary(&self, l: &Layout, rhs: &Self, rl: &Layout, op: BinaryOp) -> Result<Self> {
        self.same_ctx(op.name(), rhs)?;
        if is_wide(self.dtype) {
            return on_host(&[(self, l), (rhs, rl)], |h, hl| h[0].binary(&hl[0], &h[1], &hl[1], op));
        }
        let body = elementwise::binary_body(op, self.dtype);
        Elementwise::new(&format!("binary_{}", op.name()), vec![(self, l), (rhs, rl)], self.dtype, body)
            .with_funcs(FUNCS)
            .run()
    }

    fn signbit(&self, l: &Layout) -> Result<Self> {
        if is_wide(self.dtype) {
            return on_host(&[(self, l)], |h, hl| h[0].signbit(&hl[0]));
        }
        let body = elementwise::signbit_body(self.dtype);
        Elementwise::new("signbit", vec![(self, l)], DType::Bool, body).run()
    }

    fn cmp(&self, l: &Layout, rhs: &Self, rl: &Layout, op: CmpOp) -> Result<Self> {
        self.same_ctx(op.name(), rhs)?;
        if is_wide(self.dtype) {
            return on_host(&[(self, l), (rhs, rl)], |h, hl| h[0].cmp(&hl[0], &h[1], &hl[1], op));
        }
        let body = elementwise::cmp_body(op);
        Elementwise::new(&format!("cmp_{}", op.name()), vec![(self, l), (rhs, rl)], DType::Bool, body).run()
    }

    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        self.same_ctx("where", t)?;
        self.same_ctx("where", f)?;
        Elementwise::new("where", vec![(self, l), (t, tl), (f, fl)], t.dtype, WHERE_BODY.into()).run()
    }

    fn cast(&self, l: &Layout, dtype: DType) -> Result<Self> {
        GpuStorage::cast(self, l, dtype)
    }

    fn copy_contiguous(&self, l: &Layout) -> Result<Self> {
        GpuStorage::copy_contiguous(self, l)
    }

    fn copy_into(&self, l: &Layout, dst: &mut Self, dst_l: &Layout) -> Result<()> {
        self.same_ctx("copy_into", dst)?;
        copy::copy_into(self, l, dst, dst_l)
    }

    fn reduce(&self, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<Self> {
        if is_wide(self.dtype) {
            return on_host(&[(self, l)], |h, hl| h[0].reduce(&hl[0], op, axes));
        }
        reduce::reduce(self, l, op, axes)
    }

    fn cumsum(&self, l: &Layout, axis: usize) -> Result<Self> {
        reduce::cumsum(self, l, axis)
    }

    fn matmul(&self, l: &Layout, rhs: &Self, rl: &Layout) -> Result<Self> {
        self.same_ctx("matmul", rhs)?;
        if is_wide(self.dtype) {
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
        rope::rope(self, l, cos, cl, sin, sl, interleaved)
    }

    fn attention(&self, l: &Layout, k: &Self, kl: &Layout, v: &Self, vl: &Layout, p: AttentionParams) -> Result<Self> {
        self.same_ctx("attention", k)?;
        self.same_ctx("attention", v)?;
        attention::attention(self, l, k, kl, v, vl, p)
    }

    fn silu_mul(&self, l: &Layout, up: &Self, ul: &Layout) -> Result<Self> {
        self.same_ctx("silu_mul", up)?;
        Elementwise::new("silu_mul", vec![(self, l), (up, ul)], self.dtype, SILU_MUL_BODY.into())
            .with_funcs(FUNCS)
            .run()
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

/// The elementwise family's op expressions, for the kernels `kiln::compile` generates (`fused/`;
/// no family imports another, so the face hands them over).
pub(crate) fn fused_exprs() -> fused::Exprs {
    fused::Exprs {
        unary: elementwise::unary_expr,
        binary: elementwise::binary_expr,
        cmp: elementwise::cmp_expr,
        funcs: FUNCS,
    }
}

/// i64 and u64: 64-bit integers, which WGSL lacks, so their arithmetic runs on the host.
fn is_wide(dt: DType) -> bool {
    matches!(dt, DType::I64 | DType::U64)
}

/// Runs a CPU op on host copies of `inputs` and uploads the result. i64 arithmetic, comparisons,
/// reductions and matmul take this path (u64 too): WGSL has no 64-bit integers, and a 32-bit kernel would give
/// wrong answers past 2^31. Moving i64 data (copies, casts, `where`) stays on the GPU, exactly.
fn on_host(
    inputs: &[(&GpuStorage, &Layout)],
    f: impl FnOnce(&[CpuStorage], &[Layout]) -> Result<CpuStorage>,
) -> Result<GpuStorage> {
    let host = inputs.iter().map(|(s, l)| s.to_cpu(l)).collect::<Result<Vec<_>>>()?;
    let layouts: Vec<Layout> = inputs.iter().map(|(_, l)| Layout::contiguous(l.shape().clone())).collect();
    GpuStorage::from_cpu(&inputs[0].0.ctx, &f(&host, &layouts)?)
}
