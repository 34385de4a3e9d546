//! f16 matmul on cooperative matrices (issue 4): tensor cores through `VK_KHR_cooperative_matrix`
//! (16x16x16 on NVIDIA), simdgroup matrices on Apple GPUs (8x8x8), both reached through wgpu's
//! `EXPERIMENTAL_COOPERATIVE_MATRIX` and naga's `coop_mat` WGSL types.
//!
//! [`try_matmul_coop`] is the entry the generic matmul calls first for f16: it answers `None` when
//! this path does not apply (adapter without the feature, SHADER_F16 or SUBGROUP; no f16 x f16 -> f32
//! configuration of size 16 or 8; a varying subgroup size; shapes too small or too large for the
//! grid) and otherwise runs the kernel in `coop.wgsl`, described there.
//!
//! Tiles: each subgroup keeps `tm x tn` accumulators of `s x s` f32; `wm x wn` subgroups make a
//! workgroup tile of `(wm*tm*s) x (wn*tn*s)`; K advances `bk` at a time through two workgroup buffers.
//! `Large` (16x16: 128x128 tile, 4 subgroups of 64x64, 16 accumulators each) is for big outputs;
//! `Wide` is the same tile over 8 subgroups of 64x32; `Small` (16x16: 64x64, 4 subgroups of 32x32)
//! keeps enough workgroups in flight when the output is small. `KILN_COOP=0` turns the path off;
//! `KILN_COOP_TILE=large|wide|small` forces a preset (for benchmarks).
//!
//! On Vulkan (issue 22) tiles are staged as `vec4<f16>` (`Stage::H4`, `KILN_COOP_STAGE=h1|h4`);
//! interior workgroups run a copy of the K loop with unchecked reads (`fast`), and the automatic
//! choice takes 8 subgroups of 4x4 accumulators (128x256 tiles, 16-deep K slices, four in flight)
//! where the output has 1.5 waves of them, else 4 subgroups of 4x4 (128x128, 32-deep slices, two in
//! flight), else the presets (docs/PERFORMANCE.md, session 8: 1.5x the session-6 choice on an H200).
//! Up to 128 rows (batched decode, serving) it takes one row of 4 subgroups over 32 or 64 rows with
//! four slices in flight, and splits a deep K over several workgroups whose f32 partial products a
//! second pass sums (`splitsum.wgsl`; `KILN_COOP_SPLIT=0` turns the split off).
//! Every choice can be spelled out with [`CoopSpec`] (tests, `examples/coop_sweep.rs`).
//!
//! Files: `config.rs` (the specialisations and their sizes), `spec.rs` (the settings and sweep specs),
//! `plan.rs` (whether the path applies, which kernel runs), `emit.rs` (the WGSL of one kernel, on
//! `coop.wgsl`), `emulation.rs` (the plain-WGSL stand-ins), `launch.rs` (parameters and dispatch),
//! `catalog.rs` (every variant, for the translation test), `splitsum.wgsl` (the sum of a split's
//! partial products). The tensor-level entries for tests and
//! sweeps are `kiln::gpu_probes` (gpu_probes.rs).

mod catalog;
mod config;
mod emit;
mod emulation;
mod launch;
mod plan;
mod spec;
#[cfg(test)]
mod tests;

pub(crate) use catalog::catalog;
pub use config::{CoopTile, Probe, Stage};
pub(crate) use plan::matmul_coop;
pub use spec::CoopSpec;

use crate::gpu::runtime::coop::support;
use crate::gpu::runtime::GpuStorage;
use crate::{Layout, Result};
use spec::{disabled_by_env, tile_from_env};

/// `a @ b` for f16 on cooperative matrices, or `None` when this path does not apply (see the module
/// docs); the layouts are `matmul`'s: same batch dims (broadcast already applied), `(.., M, K)` and
/// `(.., K, N)`, any strides. The result is contiguous f16 `(batch.., M, N)`, each element the f32
/// sum of products rounded once to f16.
// The f16 branch of `matmul::matmul` calls this first (`matmul/mod.rs`).
#[allow(dead_code)]
pub(crate) fn try_matmul_coop(a: &GpuStorage, al: &Layout, b: &GpuStorage, bl: &Layout) -> Option<Result<GpuStorage>> {
    if disabled_by_env() {
        return None;
    }
    matmul_coop(a, al, b, bl, tile_from_env(), true, None, None)
}

/// The cooperative matrix configurations of `device`'s adapter as `MxNxK ab->cr` strings, and the
/// size the f16 matmul runs with (`None`: the path is unavailable there).
pub fn coop_matmul_support(device: &crate::Device) -> (Vec<String>, Option<u32>) {
    let Some(ctx) = device.gpu_context() else { return (vec![], None) };
    let configs = ctx
        .coop_matrix
        .iter()
        .map(|p| format!("{}x{}x{} {:?}->{:?}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type))
        .collect();
    (configs, support(ctx).map(|(s, _)| s))
}
