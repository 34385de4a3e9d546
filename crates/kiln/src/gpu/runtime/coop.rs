//! Which cooperative matrices (tensor cores, simdgroup matrices) the f16 kernels of the matmul and
//! attention families can use on a context.

use super::GpuContext;

/// The cooperative matrix size this context can run f16 kernels with (16 preferred, else 8), and
/// its fixed subgroup size; `None` when the path is unavailable.
pub(crate) fn support(ctx: &GpuContext) -> Option<(u32, u32)> {
    let needed =
        wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX | wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP;
    if !ctx.has(needed) {
        return None;
    }
    // The workgroup is built from a whole number of subgroups, so their size must be known: fixed
    // on the adapter (NVIDIA: 32), or Apple silicon's SIMD width of 32 (wgpu reports Metal's
    // subgroups as 4..64 for every Mac GPU).
    let sg = match ctx.summary.subgroup_size {
        (min, max) if min == max && (8..=128).contains(&max) => max,
        _ if ctx.summary.backend == "Metal" && ctx.summary.name.starts_with("Apple") => 32,
        _ => return None,
    };
    let size = [16, 8].into_iter().find(|&s| {
        ctx.coop_matrix.iter().any(|p| {
            p.m_size == s
                && p.n_size == s
                && p.k_size == s
                && p.ab_type == wgpu::CooperativeScalarType::F16
                && p.cr_type == wgpu::CooperativeScalarType::F32
        })
    })?;
    Some((size, sg))
}
