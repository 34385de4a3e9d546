//! Every kernel the GPU backend can generate is validated by naga and translated to MSL (Metal) and
//! HLSL (DX12). This is how a Metal or DX12 compile error fails CI on a Linux machine without a GPU.

use naga::back::{hlsl, msl};
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn translate(name: &str, src: &str) -> Result<(), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| format!("parse: {}", e.emit_to_string(src)))?;
    // What every Vulkan, Metal and DX12 adapter offers (wgpu's downlevel "f16 in f32" covers
    // pack2x16float/unpack2x16float): the kernels must not need more.
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    // Subgroup variants are only chosen on devices with `wgpu::Features::SUBGROUP`.
    if src.contains("subgroup") {
        caps |= Capabilities::SUBGROUP;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| format!("validate: {}", e.emit_to_string(src)))?;
    let msl_opts = msl::Options { lang_version: (2, 4), fake_missing_bindings: true, ..Default::default() };
    let pipe = msl::PipelineOptions {
        entry_point: Some((naga::ShaderStage::Compute, "main".to_string())),
        ..Default::default()
    };
    let (msl_src, _) = msl::write_string(&module, &info, &msl_opts, &pipe).map_err(|e| format!("msl: {e}"))?;
    if !msl_src.contains("kernel void") {
        return Err(format!("msl output of {name} has no kernel function"));
    }
    let hlsl_opts = hlsl::Options { shader_model: hlsl::ShaderModel::V6_0, ..Default::default() };
    let hlsl_pipe = hlsl::PipelineOptions { entry_point: Some((naga::ShaderStage::Compute, "main".to_string())) };
    let mut hlsl_src = String::new();
    hlsl::Writer::new(&mut hlsl_src, &hlsl_opts, &hlsl_pipe)
        .write(&module, &info, None)
        .map_err(|e| format!("hlsl: {e}"))?;
    if !hlsl_src.contains("[numthreads(") {
        return Err(format!("hlsl output of {name} has no compute entry point"));
    }
    Ok(())
}

#[test]
fn every_kernel_translates_to_msl_and_hlsl() {
    let catalog = kiln::gpu::kernel_catalog();
    assert!(catalog.len() > 500, "the catalog should cover every op x dtype x variant, has {}", catalog.len());
    let failures: Vec<String> =
        catalog.iter().filter_map(|(name, src)| translate(name, src).err().map(|e| format!("{name}: {e}"))).collect();
    assert!(
        failures.is_empty(),
        "{} of {} kernels failed:\n{}",
        failures.len(),
        catalog.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

#[test]
fn a_broken_kernel_is_caught() {
    let err = translate("broken", "@compute @workgroup_size(1) fn main() { let x: f32 = 1u; }").unwrap_err();
    assert!(err.contains("validate") || err.contains("parse"), "{err}");
}
