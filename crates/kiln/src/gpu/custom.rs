//! Custom kernels: user WGSL run on GPU buffers (`Device::custom_kernel` is the tensor-level entry).

use super::runtime::kernels::Kernel;
use super::runtime::{GpuContext, GpuStorage};
use crate::{DType, Error, Result};
use std::sync::Arc;

/// The compiled entry point `entry` of the WGSL `source` for `outputs` and `inputs` buffers
/// (`Device::custom_kernel` documents the binding convention), taking `params` words (at most 64).
/// A shader that fails to compile or to declare every binding returns `Err`.
pub(crate) fn compile(
    ctx: &Arc<GpuContext>,
    source: &str,
    entry: &str,
    (outputs, inputs): (usize, usize),
    params: usize,
) -> Result<Arc<Kernel>> {
    if params > super::runtime::kernels::PARAM_WORDS {
        return Err(Error::arg("custom_kernel", format!("{params} parameter words given, at most 64 fit")));
    }
    ctx.pipelines.get_custom(ctx, source, entry, (outputs, inputs), || check_bindings(source, entry, outputs, inputs))
}

/// Runs `kernel` over `workgroups` on contiguous `inputs` (from element 0, on `ctx`) into fresh
/// outputs of `(dtype, elements)`; output elements the kernel does not write are unspecified.
pub(crate) fn run(
    ctx: &Arc<GpuContext>,
    kernel: &Kernel,
    inputs: &[&GpuStorage],
    outputs: &[(DType, usize)],
    workgroups: [u32; 3],
    params: &[u32],
) -> Result<Vec<GpuStorage>> {
    let outs = outputs.iter().map(|&(dt, n)| GpuStorage::alloc(ctx, dt, n)).collect::<Result<Vec<_>>>()?;
    let bufs: Vec<&wgpu::Buffer> = outs.iter().chain(inputs.iter().copied()).map(|s| s.buffer.raw()).collect();
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, kernel, &bufs, params, workgroups)?;
    Ok(outs)
}

/// Checks that `source` declares a `@group(0)` binding for each of the `outputs + inputs` buffers:
/// wgpu accepts a shader that binds fewer than the layout holds, so a tensor passed for a binding the
/// shader lacks would be ignored without a word. Run once per kernel, before it is compiled; a
/// source that does not parse is left to the compiler's error.
pub(crate) fn check_bindings(source: &str, entry: &str, outputs: usize, inputs: usize) -> Result<()> {
    let Ok(module) = wgpu::naga::front::wgsl::parse_str(source) else { return Ok(()) };
    let mut declared: Vec<u32> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| g.binding.as_ref().filter(|b| b.group == 0).map(|b| b.binding))
        .collect();
    declared.sort_unstable();
    declared.dedup();
    let missing: Vec<usize> = (0..outputs + inputs).filter(|&b| !declared.contains(&(b as u32))).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let role = |b: usize| if b < outputs { format!("output {b}") } else { format!("input {}", b - outputs) };
    Err(Error::arg(
        "custom_kernel",
        format!(
            "{outputs} output(s) and {inputs} input(s) given for entry point `{entry}`, but the shader declares \
             @group(0) bindings {declared:?}: nothing is bound to {} (outputs take bindings 0..{outputs}, \
             inputs the ones after)",
            missing.iter().map(|&b| format!("binding {b} ({})", role(b))).collect::<Vec<_>>().join(", ")
        ),
    ))
}
