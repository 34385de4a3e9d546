//! The Vulkan driver's own statistics of kiln's WGSL kernels (VK_KHR_pipeline_executable_properties):
//! registers per invocation, spills, workgroup memory, and the internal representations the driver
//! offers, so a kernel's occupancy and spills are read, not guessed.
//!
//! Usage: `pipeline-stats DIR [OUT]`: every `DIR/*.wgsl` (kiln writes them with
//! `KILN_DUMP_WGSL=DIR`) is translated by naga to SPIR-V and compiled by the driver with the capture
//! flags; one line of statistics per kernel is printed, and with `OUT` the internal representations
//! are written to `OUT/NAME.N.txt`.
use ash::vk;
use std::ffi::CStr;
use std::path::Path;

fn spirv(src: &str) -> Result<(Vec<u32>, Vec<(u32, u32)>), String> {
    let module = naga::front::wgsl::parse_str(src).map_err(|e| e.emit_to_string(src))?;
    let info = naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
        .validate(&module)
        .map_err(|e| format!("{e:?}"))?;
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: naga::proc::BoundsCheckPolicies::default(),
        ..Default::default()
    };
    let pipeline = naga::back::spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    let words = naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline)).map_err(|e| format!("{e:?}"))?;
    let bindings = module
        .global_variables
        .iter()
        .filter_map(|(_, v)| v.binding.as_ref().map(|b| (b.group, b.binding)))
        .collect();
    Ok((words, bindings))
}

fn value(s: &vk::PipelineExecutableStatisticKHR) -> String {
    unsafe {
        match s.format {
            vk::PipelineExecutableStatisticFormatKHR::BOOL32 => format!("{}", s.value.b32),
            vk::PipelineExecutableStatisticFormatKHR::INT64 => format!("{}", s.value.i64),
            vk::PipelineExecutableStatisticFormatKHR::UINT64 => format!("{}", s.value.u64),
            _ => format!("{}", s.value.f64),
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = args.first().expect("usage: pipeline-stats DIR [OUT]");
    let out = args.get(1);
    unsafe { run(Path::new(dir), out.map(Path::new)) }
}

unsafe fn run(dir: &Path, out: Option<&Path>) {
    let entry = ash::Entry::load().expect("no Vulkan loader");
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let instance = entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None).unwrap();
    let pds = instance.enumerate_physical_devices().unwrap();
    // The first device that has the extension (a discrete GPU before a software one).
    let want = c"VK_KHR_pipeline_executable_properties";
    let mut chosen = None;
    for &pd in &pds {
        let exts = instance.enumerate_device_extension_properties(pd).unwrap();
        let names: Vec<std::ffi::CString> = exts.iter().map(|e| e.extension_name_as_c_str().unwrap().to_owned()).collect();
        let props = instance.get_physical_device_properties(pd);
        let name = props.device_name_as_c_str().unwrap().to_string_lossy().into_owned();
        let found = names.iter().any(|n| n.as_c_str() == want);
        println!("adapter {name}: pipeline executable properties {found}");
        if found && (chosen.is_none() || props.device_type == vk::PhysicalDeviceType::DISCRETE_GPU) {
            chosen = Some((pd, names));
        }
    }
    let (pd, ext_names) = chosen.expect("no adapter with VK_KHR_pipeline_executable_properties");
    // Every feature the device has (f16, 16-bit storage, cooperative matrices, memory model, ...).
    let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut coop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut exec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let has = |n: &CStr| ext_names.iter().any(|e| &**e == n);
    let with_coop = has(c"VK_KHR_cooperative_matrix");
    {
        let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut v11).push_next(&mut v12).push_next(&mut v13).push_next(&mut exec);
        if with_coop {
            f2 = f2.push_next(&mut coop);
        }
        instance.get_physical_device_features2(pd, &mut f2);
    }
    let mut f2 = vk::PhysicalDeviceFeatures2::default();
    f2.features = instance.get_physical_device_features(pd);
    let mut f2 = f2.push_next(&mut v11).push_next(&mut v12).push_next(&mut v13).push_next(&mut exec);
    if with_coop {
        f2 = f2.push_next(&mut coop);
    }
    let mut exts = vec![want.as_ptr()];
    if with_coop {
        exts.push(c"VK_KHR_cooperative_matrix".as_ptr());
    }
    let prio = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default().queue_family_index(0).queue_priorities(&prio)];
    let device = instance
        .create_device(pd, &vk::DeviceCreateInfo::default().queue_create_infos(&queues).enabled_extension_names(&exts).push_next(&mut f2), None)
        .unwrap();
    let pep = ash::khr::pipeline_executable_properties::Device::new(&instance, &device);

    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "wgsl")).collect();
    files.sort();
    for path in files {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let src = std::fs::read_to_string(&path).unwrap();
        let (words, bindings) = match spirv(&src) {
            Ok(x) => x,
            Err(e) => {
                println!("{name}: naga: {}", e.lines().next().unwrap_or(""));
                continue;
            }
        };
        // One set layout per group, every binding a storage buffer.
        let groups = bindings.iter().map(|b| b.0).max().map_or(0, |g| g + 1);
        let mut layouts = Vec::new();
        for g in 0..groups {
            let entries: Vec<_> = bindings
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
            layouts.push(device.create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&entries), None).unwrap());
        }
        let layout = device.create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&layouts), None).unwrap();
        let module = device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None).unwrap();
        let stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(module).name(c"main");
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)
            .flags(vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR);
        let pipeline = match device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) {
            Ok(p) => p[0],
            Err((_, e)) => {
                println!("{name}: pipeline creation failed: {e:?}");
                continue;
            }
        };
        let pinfo = vk::PipelineInfoKHR::default().pipeline(pipeline);
        let execs = pep.get_pipeline_executable_properties(&pinfo).unwrap_or_default();
        for (i, _) in execs.iter().enumerate() {
            let einfo = vk::PipelineExecutableInfoKHR::default().pipeline(pipeline).executable_index(i as u32);
            let stats = pep.get_pipeline_executable_statistics(&einfo).unwrap_or_default();
            let line: Vec<String> = stats
                .iter()
                .map(|s| format!("{}={}", s.name_as_c_str().unwrap().to_string_lossy(), value(s)))
                .collect();
            println!("{name}: {}", line.join(" "));
            if let Some(out) = out {
                // Two calls: sizes first, then the text.
                let mut reps = pep.get_pipeline_executable_internal_representations(&einfo).unwrap_or_default();
                let mut bufs: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
                for (r, b) in reps.iter_mut().zip(bufs.iter_mut()) {
                    r.p_data = b.as_mut_ptr().cast();
                }
                let count = reps.len() as u32;
                let mut n = count;
                let _ = (pep.fp().get_pipeline_executable_internal_representations_khr)(device.handle(), &einfo, &mut n, reps.as_mut_ptr());
                std::fs::create_dir_all(out).unwrap();
                for (k, (r, b)) in reps.iter().zip(bufs.iter()).enumerate() {
                    let title = r.name_as_c_str().unwrap().to_string_lossy().into_owned();
                    let text = String::from_utf8_lossy(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())]).into_owned();
                    let _ = std::fs::write(out.join(format!("{name}.{i}.{k}.txt")), format!("{title}\n{text}"));
                }
            }
        }
        device.destroy_pipeline(pipeline, None);
        device.destroy_shader_module(module, None);
        device.destroy_pipeline_layout(layout, None);
        for l in layouts {
            device.destroy_descriptor_set_layout(l, None);
        }
    }
}
