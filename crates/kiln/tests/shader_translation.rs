//! Every kernel the GPU backend can generate is validated by naga and translated to MSL (Metal) and
//! HLSL (DX12). This is how a Metal or DX12 compile error fails CI on a Linux machine without a GPU.
//! Kernels that enable `f16` are built only on devices with SHADER_F16 and are validated with it (and
//! also translated to SPIR-V). Cooperative-matrix kernels (`enable wgpu_cooperative_matrix;`) go to
//! SPIR-V, and to MSL when their matrices are 8x8 (Metal's simdgroup matrices are 8x8 only; naga
//! would write a `simdgroup_half16x16` that Metal lacks); never to HLSL, whose naga backend has no
//! cooperative matrix (`hlsl_has_no_cooperative_matrix` checks that this is still so).

use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

const COOP: &str = "enable wgpu_cooperative_matrix;";

fn parse_and_validate(src: &str) -> Result<(naga::Module, ModuleInfo), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| format!("parse: {}", e.emit_to_string(src)))?;
    // What every Vulkan, Metal and DX12 adapter offers (wgpu's downlevel "f16 in f32" covers
    // pack2x16float/unpack2x16float): the kernels must not need more, unless they enable more.
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if src.contains("enable f16;") {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    // Subgroup variants are only chosen on devices with `wgpu::Features::SUBGROUP`.
    if src.contains("subgroup") {
        caps |= Capabilities::SUBGROUP;
    }
    if src.contains(COOP) {
        // The cooperative kernel also needs SUBGROUP (for `subgroup_id`); it is only built where
        // the device has EXPERIMENTAL_COOPERATIVE_MATRIX, SHADER_F16 and SUBGROUP.
        caps |= Capabilities::COOPERATIVE_MATRIX | Capabilities::SUBGROUP;
    }
    let info = Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .map_err(|e| format!("validate: {}", e.emit_to_string(src)))?;
    Ok((module, info))
}

fn translate(name: &str, src: &str) -> Result<(), String> {
    let (module, info) = parse_and_validate(src)?;
    let coop = src.contains(COOP);
    if coop || src.contains("enable f16;") {
        // SPIR-V as wgpu writes it for a Vulkan 1.3 device.
        let opts = spv::Options { lang_version: (1, 6), ..Default::default() };
        let pipe = spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
        let words = spv::write_vec(&module, &info, &opts, Some(&pipe)).map_err(|e| format!("spv: {e}"))?;
        // OpCapability CooperativeMatrixKHR (6022): the cooperative ops really are there.
        if coop && !words.windows(2).any(|w| w == [(2 << 16) | 17, 6022]) {
            return Err(format!("spir-v of {name} declares no CooperativeMatrixKHR capability"));
        }
    }
    if coop && src.contains("coop_mat16x16") {
        return Ok(());
    }
    let msl_opts = msl::Options { lang_version: (2, 4), fake_missing_bindings: true, ..Default::default() };
    let pipe = msl::PipelineOptions {
        entry_point: Some((naga::ShaderStage::Compute, "main".to_string())),
        ..Default::default()
    };
    let (msl_src, _) = msl::write_string(&module, &info, &msl_opts, &pipe).map_err(|e| format!("msl: {e}"))?;
    if !msl_src.contains("kernel void") {
        return Err(format!("msl output of {name} has no kernel function"));
    }
    if coop {
        if !msl_src.contains("simdgroup_multiply_accumulate") {
            return Err(format!("msl output of {name} has no simdgroup matrix product"));
        }
        return Ok(());
    }
    // f16 arithmetic in HLSL needs shader model 6.2.
    let shader_model = if src.contains("enable f16;") { hlsl::ShaderModel::V6_2 } else { hlsl::ShaderModel::V6_0 };
    let hlsl_opts = hlsl::Options { shader_model, ..Default::default() };
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

/// The cooperative kernels skip HLSL because naga 30's HLSL writer cannot write them; once it can,
/// this fails and the skip in `translate` should go.
#[test]
fn hlsl_has_no_cooperative_matrix() {
    let catalog = kiln::gpu::kernel_catalog();
    let coop: Vec<_> = catalog.iter().filter(|(_, src)| src.contains(COOP)).collect();
    assert!(coop.len() >= 8, "the catalog should hold the cooperative matmul variants, has {}", coop.len());
    assert!(
        coop.iter().any(|(_, s)| s.contains("coop_mat8x8")) && coop.iter().any(|(_, s)| s.contains("coop_mat16x16"))
    );
    for (name, src) in coop.iter().take(2) {
        let (module, info) = parse_and_validate(src).unwrap();
        let opts = hlsl::Options { shader_model: hlsl::ShaderModel::V6_2, ..Default::default() };
        let pipe = hlsl::PipelineOptions { entry_point: Some((naga::ShaderStage::Compute, "main".to_string())) };
        let written = std::panic::catch_unwind(|| {
            let mut out = String::new();
            hlsl::Writer::new(&mut out, &opts, &pipe).write(&module, &info, None).map(|_| ())
        });
        assert!(!matches!(written, Ok(Ok(()))), "naga now writes HLSL for {name}: translate it too");
    }
}

#[test]
fn a_broken_kernel_is_caught() {
    let err = translate("broken", "@compute @workgroup_size(1) fn main() { let x: f32 = 1u; }").unwrap_err();
    assert!(err.contains("validate") || err.contains("parse"), "{err}");
}

/// The workgroup variables of a cooperative kernel whose size is not a multiple of 16 bytes, as
/// `name (N bytes)`. Drivers order workgroup variables as they like, and NVIDIA's cooperative loads
/// from rows whose stride is a multiple of 16 bytes assume a 16-byte aligned start: an 8-byte flag
/// array placed before the staged tiles shifted each of them by 4 halves on an H100 (wrong attention
/// everywhere, docs/RELIABILITY.md). With every variable a multiple of 16 bytes long, any order keeps
/// every variable 16-byte aligned. The emulated kernels cannot show this, so it is checked here.
fn misaligned_workgroup_variables(src: &str) -> Vec<String> {
    let (module, _) = parse_and_validate(src).expect("kernel validates");
    module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .filter_map(|(_, v)| {
            let size = module.types[v.ty].inner.size(module.to_ctx());
            (size % 16 != 0).then(|| format!("{} ({size} bytes)", v.name.as_deref().unwrap_or("?")))
        })
        .collect()
}

#[test]
fn cooperative_kernels_keep_workgroup_variables_16_byte_aligned() {
    let catalog = kiln::gpu::kernel_catalog();
    let coop: Vec<_> = catalog.iter().filter(|(_, src)| src.contains(COOP)).collect();
    assert!(coop.iter().any(|(name, _)| name.contains("attention")), "the catalog holds cooperative attention");
    let bad: Vec<String> = coop
        .iter()
        .filter_map(|(name, src)| {
            let v = misaligned_workgroup_variables(src);
            (!v.is_empty()).then(|| format!("{name}: {}", v.join(", ")))
        })
        .collect();
    assert!(bad.is_empty(), "workgroup variables not a multiple of 16 bytes:\n{}", bad.join("\n"));
    // Negative control: the 8-byte flag array that broke the attention kernel is caught.
    let flags = format!(
        "{COOP}\nenable f16;\nvar<workgroup> flags: array<atomic<u32>, 2>;\nvar<workgroup> tile: array<f16, 256>;\n\
         @compute @workgroup_size(32) fn main() {{\n    atomicStore(&flags[0], 0u);\n    \
         let a = coopLoad<coop_mat16x16<f16, A>>(&tile[0], 16u);\n}}"
    );
    assert_eq!(misaligned_workgroup_variables(&flags), ["flags (8 bytes)"]);
}
