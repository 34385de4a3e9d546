//! What the Vulkan driver made of kiln's kernels: registers, spills, shared memory and the rest of
//! the statistics a driver reports through `VK_KHR_pipeline_executable_properties` (NVIDIA:
//! register count, local memory, ...), for every kernel of `kiln::gpu::kernel_catalog()` whose key
//! contains one of the arguments, and for every WGSL file in the folders among the arguments
//! (`KILN_DUMP_WGSL=dir` writes there the kernels a run compiles). This is the profiler the device
//! machine lacks: a kernel's registers say how many of its workgroups an SM holds, and a spill is
//! local memory traffic.
//!
//! The SPIR-V is naga's, written as wgpu writes it for kiln's trusted kernels (SPIR-V 1.6, no
//! bounds checks, no loop bounding, no division checks); the pipeline is made on a Vulkan device of
//! its own (the first discrete GPU, else the first device), with every feature the device reports.
//! Where the driver lacks the extension (lavapipe), each pipeline is still made (`made=1`): a
//! check that the driver takes the SPIR-V. One line a kernel: `key<TAB>stat=value ...`.
//!
//! Run: `cargo run --release -p kiln --example pipeline_stats -- attention_flash_coop quant_i8`.

use ash::vk;
use naga::back::spv;
use naga::valid::{Capabilities, ValidationFlags, Validator};
use std::error::Error;
use std::ffi::CStr;

type Res<T> = std::result::Result<T, Box<dyn Error>>;
/// A kernel's SPIR-V words and its (group, binding) pairs.
type Spirv = (Vec<u32>, Vec<(u32, u32)>);

/// The device and what its pipelines need.
struct Gpu {
    device: ash::Device,
    /// None where the driver lacks the extension (lavapipe): the pipelines are still made.
    pep: Option<ash::khr::pipeline_executable_properties::Device>,
    name: String,
}

fn open() -> Res<(ash::Entry, ash::Instance, Gpu)> {
    let entry = unsafe { ash::Entry::load()? };
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let instance = unsafe { entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)? };
    let pds = unsafe { instance.enumerate_physical_devices()? };
    let props = |pd| unsafe { instance.get_physical_device_properties(pd) };
    let pd = pds
        .iter()
        .copied()
        .find(|&pd| props(pd).device_type == vk::PhysicalDeviceType::DISCRETE_GPU)
        .or_else(|| pds.first().copied())
        .ok_or("no Vulkan device")?;
    let name = props(pd).device_name_as_c_str()?.to_string_lossy().into_owned();
    let have: Vec<_> = unsafe { instance.enumerate_device_extension_properties(pd)? }
        .iter()
        .filter_map(|e| e.extension_name_as_c_str().ok().map(CStr::to_owned))
        .collect();
    let pep_name = ash::khr::pipeline_executable_properties::NAME;
    let has_pep = have.iter().any(|e| e.as_c_str() == pep_name);
    let coop_name = ash::khr::cooperative_matrix::NAME;
    let coop = have.iter().any(|e| e.as_c_str() == coop_name);
    let mut exts = vec![];
    if has_pep {
        exts.push(pep_name.as_ptr());
    }
    if coop {
        exts.push(coop_name.as_ptr());
    }
    let family = unsafe { instance.get_physical_device_queue_family_properties(pd) }
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .ok_or("no compute queue")? as u32;
    // Every feature the device has, as reported.
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut fpep = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut fcoop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12).push_next(&mut f13);
    if has_pep {
        f2 = f2.push_next(&mut fpep);
    }
    if coop {
        f2 = f2.push_next(&mut fcoop);
    }
    unsafe { instance.get_physical_device_features2(pd, &mut f2) };
    let prio = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(family).queue_priorities(&prio)];
    let info =
        vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts).push_next(&mut f2);
    let device = unsafe { instance.create_device(pd, &info, None)? };
    let pep = has_pep.then(|| ash::khr::pipeline_executable_properties::Device::new(&instance, &device));
    Ok((entry, instance, Gpu { device, pep, name }))
}

/// SPIR-V of a kernel as wgpu writes it for a trusted module on a Vulkan 1.3 device.
fn spirv(src: &str) -> Res<Spirv> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::all())
        .validate(&module)
        .map_err(|e| e.emit_to_string(src))?;
    let unchecked = naga::proc::BoundsCheckPolicy::Unchecked;
    let opts = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::empty(),
        // Without a binding map, the WGSL group and binding become the descriptor set and binding.
        fake_missing_bindings: true,
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: unchecked,
            buffer: unchecked,
            image_load: unchecked,
            binding_array: unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Native,
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..Default::default()
    };
    let pipe = spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    let words = spv::write_vec(&module, &info, &opts, Some(&pipe))?;
    // Every (group, binding) the kernel declares: kiln binds only storage buffers.
    let bindings =
        module.global_variables.iter().filter_map(|(_, g)| g.binding.as_ref()).map(|b| (b.group, b.binding)).collect();
    Ok((words, bindings))
}

/// The driver's statistics of one kernel's pipeline, as `name=value` pairs.
fn stats(gpu: &Gpu, (words, bindings): &Spirv) -> Res<Vec<String>> {
    let d = &gpu.device;
    let groups = bindings.iter().map(|b| b.0 + 1).max().unwrap_or(0);
    let mut layouts = vec![];
    for g in 0..groups {
        let set: Vec<_> = bindings
            .iter()
            .filter(|b| b.0 == g)
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b.1)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        layouts.push(unsafe {
            d.create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&set), None)?
        });
    }
    let layout =
        unsafe { d.create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts), None)? };
    let module = unsafe { d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)? };
    let mut flags = vk::PipelineCreateFlags::empty();
    if gpu.pep.is_some() {
        flags |= vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR;
    }
    let stage =
        vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(c"main");
    let info = vk::ComputePipelineCreateInfo::default().flags(flags).stage(stage).layout(layout);
    let made = unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) };
    let out = match made {
        Ok(p) => read(gpu, p[0]),
        Err((_, e)) => Err(format!("pipeline: {e}").into()),
    };
    unsafe {
        d.destroy_shader_module(module, None);
        d.destroy_pipeline_layout(layout, None);
        for l in layouts {
            d.destroy_descriptor_set_layout(l, None);
        }
    }
    out
}

fn read(gpu: &Gpu, pipeline: vk::Pipeline) -> Res<Vec<String>> {
    let mut out = vec![];
    if let Some(pep) = &gpu.pep {
        let execs =
            unsafe { pep.get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(pipeline))? };
        for index in 0..execs.len() as u32 {
            let info = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(index);
            for s in unsafe { pep.get_pipeline_executable_statistics(&info)? } {
                let name = s.name_as_c_str()?.to_string_lossy().replace(' ', "_");
                let v = unsafe {
                    match s.format {
                        vk::PipelineExecutableStatisticFormatKHR::BOOL32 => s.value.b32.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                        vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                        _ => format!("{:.3}", s.value.f64),
                    }
                };
                out.push(format!("{name}={v}"));
            }
        }
    } else {
        out.push("made=1".into());
    }
    unsafe { gpu.device.destroy_pipeline(pipeline, None) };
    Ok(out)
}

fn main() -> Res<()> {
    // Folders (of `KILN_DUMP_WGSL`'s files: the kernels a run compiled) and key filters.
    let (dirs, filters): (Vec<String>, Vec<String>) =
        std::env::args().skip(1).partition(|a| std::path::Path::new(a).is_dir());
    let mut kernels = vec![];
    for dir in &dirs {
        let mut files: Vec<_> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "wgsl"))
            .collect();
        files.sort();
        for f in files {
            kernels
                .push((f.file_name().unwrap_or_default().to_string_lossy().into_owned(), std::fs::read_to_string(&f)?));
        }
    }
    if dirs.is_empty() || !filters.is_empty() {
        kernels.extend(
            kiln::gpu::kernel_catalog()
                .into_iter()
                .filter(|(key, _)| filters.is_empty() || filters.iter().any(|f| key.contains(f.as_str()))),
        );
    }
    let (_entry, instance, gpu) = open()?;
    let how = if gpu.pep.is_some() {
        "statistics by VK_KHR_pipeline_executable_properties"
    } else {
        "no statistics: pipelines made only"
    };
    println!("# {} ({how})", gpu.name);
    for (key, src) in &kernels {
        match spirv(src).and_then(|sp| stats(&gpu, &sp)) {
            Ok(stats) => println!("{key}\t{}", stats.join(" ")),
            Err(e) => println!("{key}\terror: {}", e.to_string().lines().next().unwrap_or("")),
        }
    }
    unsafe {
        gpu.device.destroy_device(None);
        instance.destroy_instance(None);
    }
    eprintln!("{} kernels", kernels.len());
    Ok(())
}
