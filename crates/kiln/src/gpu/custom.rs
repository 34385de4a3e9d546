//! Custom kernels: user WGSL run on kiln tensors.

use super::runtime::GpuStorage;
use crate::device::Device;
use crate::storage::Storage;
use crate::{DType, Error, Result, Shape, Tensor};

/// Runs the compute entry point `entry` of the WGSL `source` over `workgroups`.
///
/// Binding convention: `@group(0)` holds the outputs at bindings `0..outputs.len()` (read-write
/// storage) followed by the inputs (read-only storage), each a contiguous copy of the tensor's
/// elements (declare them `array<f32>`, `array<u32>`, ... to match the dtype; 16- and 8-bit dtypes
/// as packed `array<u32>`). `@group(1) @binding(0)` may declare `var<storage, read> p: array<u32, 64>`
/// to receive `params` (at most 64 words). Output elements the kernel does not write are
/// unspecified. A shader that fails to compile returns `Err` with the compiler's message.
pub(crate) fn custom_kernel(
    device: &Device,
    source: &str,
    entry: &str,
    inputs: &[&Tensor],
    outputs: &[(Shape, DType)],
    workgroups: [u32; 3],
    params: &[u32],
) -> Result<Vec<Tensor>> {
    let ctx = device.gpu_context().ok_or_else(|| Error::arg("custom_kernel", "custom kernels need a GPU device"))?;
    if params.len() > super::runtime::kernels::PARAM_WORDS {
        return Err(Error::arg("custom_kernel", format!("{} parameter words given, at most 64 fit", params.len())));
    }
    let kernel = ctx.pipelines.get_custom(ctx, source, entry, (outputs.len(), inputs.len()), || {
        check_bindings(source, entry, outputs.len(), inputs.len())
    })?;
    let ins: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if t.is_contiguous() && t.layout().offset() == 0 {
                Ok((*t).clone())
            } else {
                let s = t.storage().copy_contiguous(t.layout())?;
                Ok(Tensor::from_storage(s, t.shape().clone(), t.device()))
            }
        })
        .collect::<Result<_>>()?;
    let mut outs = Vec::with_capacity(outputs.len());
    for (shape, dt) in outputs {
        let n = Tensor::check_size("custom_kernel", shape, *dt)?;
        outs.push(GpuStorage::alloc(ctx, *dt, n)?);
    }
    {
        let guards: Vec<_> = ins.iter().map(|t| t.storage()).collect();
        let mut bufs: Vec<&wgpu::Buffer> = outs.iter().map(|s| s.buffer.raw()).collect();
        for (g, t) in guards.iter().zip(&ins) {
            match &**g {
                Storage::Gpu(s) if std::sync::Arc::ptr_eq(&s.ctx, ctx) => {
                    let _ = t;
                    bufs.push(s.buffer.raw());
                }
                _ => {
                    return Err(Error::DeviceMismatch {
                        op: "custom_kernel",
                        lhs: device.name(),
                        rhs: t.device().name(),
                    })
                }
            }
        }
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, params, workgroups)?;
    }
    Ok(outs
        .into_iter()
        .zip(outputs)
        .map(|(s, (shape, _))| Tensor::from_storage(Storage::Gpu(s), shape.clone(), device))
        .collect())
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
