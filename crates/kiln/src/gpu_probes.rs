//! Tensor-level entries to single GPU kernels, for tests, examples and sweeps: each unwraps GPU
//! tensors into their storage, runs one kernel of a family in `gpu/` with every choice forced (no
//! size threshold, a given tile, the emulated form on adapters without cooperative matrices), and
//! wraps the result. They sit above `Tensor` so that nothing under `gpu/` names it. `None` means
//! the kernel does not apply (other dtypes, CPU tensors, an adapter without the feature).

use crate::gpu::attention::flash_coop::try_flash_coop;
use crate::gpu::matmul_coop::matmul_coop;
use crate::op::AttentionParams;
use crate::storage::Storage;
use crate::SdpaOptions;
use crate::{Error, Result, Tensor};

pub use crate::gpu::matmul_coop::{coop_matmul_support, CoopSpec, CoopTile, Probe, Stage};

/// `a @ b` of two f16 or bf16 GPU tensors with equal batch dims through the cooperative-matrix
/// kernel with preset `tile`, without the size threshold (`gpu/matmul/coop/`). `emulate: Some(s)`
/// runs the emulated kernel with `s x s` tiles (plain WGSL in place of the cooperative ops) on any
/// adapter with SHADER_F16.
pub fn matmul_coop_tensors(a: &Tensor, b: &Tensor, tile: CoopTile, emulate: Option<u32>) -> Option<Result<Tensor>> {
    matmul_coop_spec(a, b, tile, emulate, None)
}

/// [`matmul_coop_tensors`] with every choice of the kernel spelled out (`spec`: tile shape, K slice,
/// staging), for sweeps and for tests of each staging form.
pub fn matmul_coop_spec(
    a: &Tensor,
    b: &Tensor,
    tile: CoopTile,
    emulate: Option<u32>,
    spec: Option<CoopSpec>,
) -> Option<Result<Tensor>> {
    if a.rank() < 2 || b.rank() != a.rank() {
        return Some(Err(Error::arg("matmul_coop", "operands must be matrices of one rank")));
    }
    // One read guard when both view the same storage: taking the same lock twice may deadlock.
    let sa = a.storage();
    let sb = if a.shares_storage_with(b) { None } else { Some(b.storage()) };
    let (ga, gb) = (sa.as_gpu()?, sb.as_deref().unwrap_or(&*sa).as_gpu()?);
    let out = matmul_coop(ga, a.layout(), gb, b.layout(), tile, false, emulate, spec)?;
    let mut dims = a.dims().to_vec();
    *dims.last_mut().unwrap() = b.dims()[b.rank() - 1];
    Some(out.map(|s| Tensor::from_storage(Storage::Gpu(s), dims, a.device())))
}

/// `q.sdpa(k, v)` of f16/bf16 GPU tensors through the cooperative prefill kernel
/// (`gpu/attention/flash_coop/mod.rs`) whatever the number of workgroups; `emulate: Some(s)` runs it
/// with plain WGSL in place of the cooperative ops on any adapter with SHADER_F16.
pub fn sdpa_coop_tensors(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
    scale: Option<f64>,
    emulate: Option<u32>,
) -> Option<Result<Tensor>> {
    sdpa_coop_tensors_with(q, k, v, SdpaOptions { causal, scale, ..SdpaOptions::default() }, emulate)
}

/// [`sdpa_coop_tensors`] with a soft cap and a sliding window (taken as given: no checks, which
/// `Tensor::sdpa_with` makes).
pub fn sdpa_coop_tensors_with(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    opts: SdpaOptions,
    emulate: Option<u32>,
) -> Option<Result<Tensor>> {
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
        return None;
    }
    let d = q.dims()[3];
    let scale = opts.scale.unwrap_or(1.0 / (d.max(1) as f64).sqrt());
    let (sq, sk, sv) = (q.storage(), k.storage(), v.storage());
    let (gq, gk, gv) = (sq.as_gpu()?, sk.as_gpu()?, sv.as_gpu()?);
    let p = AttentionParams { scale, causal: opts.causal, softcap: opts.softcap, window: opts.window };
    let out = try_flash_coop(gq, q.layout(), gk, k.layout(), gv, v.layout(), p, emulate, true)?;
    let dims = vec![q.dims()[0], q.dims()[1], q.dims()[2], v.dims()[3]];
    Some(out.map(|s| Tensor::from_storage(Storage::Gpu(s), dims, q.device())))
}

/// Forces decode attention (query lengths up to 8) onto its folded one-dispatch path (`Some(true)`,
/// Vulkan only) or its two-dispatch path with the combine kernel (`Some(false)`) for calls on this
/// thread; `None` hands the choice back to `KILN_DECODE_FOLD`. Tests running meanwhile on other
/// threads keep their own choice (a test that compares repeated calls bit for bit needs that).
pub fn force_decode_fold(on: Option<bool>) {
    crate::gpu::attention::decode_fold::force(on);
}

/// Forces a decode attention kernel (`"slots"`, `"lanes"`, `"tile"` or `"short"`, each where it
/// applies, else `tile` for `short` and `slots` for the others) for calls on this thread, or hands
/// the choice back to `KILN_DECODE_KERNEL` (`None`). Panics on another name.
pub fn force_decode_kernel(kernel: Option<&str>) {
    use crate::gpu::attention::decode_lanes::{force, DecodeKernel};
    force(kernel.map(|k| DecodeKernel::parse(k).unwrap_or_else(|| panic!("no decode kernel {k:?}"))));
}

/// The decode attention kernel (its pipeline key: `...:lanes:...`, `...:tile:...` or the `slots`
/// kernel's) that a call on the device of GPU tensor `on` with sizes `[b, hq, hkv, tq, tk, d, dv]`,
/// contiguous keys and values of dtype `on.dtype()`, would take; `None` for a CPU tensor.
pub fn decode_attention_kernel(on: &Tensor, sizes: [usize; 7]) -> Option<String> {
    let s = on.storage();
    Some(crate::gpu::attention::decode_variant_name(&s.as_gpu()?.ctx, sizes, on.dtype()))
}
