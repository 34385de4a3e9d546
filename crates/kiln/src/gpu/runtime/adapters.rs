//! Adapters: which GPUs exist, how kiln ranks them, and what it knows about each (`kiln info`).

use std::sync::OnceLock;

/// What kiln knows about one adapter, for `kiln info` and for choosing.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    pub index: usize,
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    pub software: bool,
    /// Integrated GPUs, software adapters and Apple GPUs share memory with the host.
    pub unified_memory: bool,
    /// The device memory when the summary was made ([`super::vram`]; `None` where the backend does
    /// not say). `Device::vram` reads what is free now.
    pub vram: Option<super::vram::VramInfo>,
    pub features: Vec<&'static str>,
    pub max_buffer_size: u64,
    pub max_storage_binding: u64,
    pub workgroup_memory: u32,
    pub max_workgroup_invocations: u32,
    pub subgroup_size: (u32, u32),
}

/// The features kiln uses when an adapter has them.
pub(crate) const WANTED: [(wgpu::Features, &str); 7] = [
    (wgpu::Features::SHADER_F16, "SHADER_F16"),
    (wgpu::Features::SUBGROUP, "SUBGROUP"),
    (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
    (wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS, "TIMESTAMP_QUERY_INSIDE_ENCODERS"),
    (wgpu::Features::MAPPABLE_PRIMARY_BUFFERS, "MAPPABLE_PRIMARY_BUFFERS"),
    (wgpu::Features::SHADER_F64, "SHADER_F64"),
    (wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX, "EXPERIMENTAL_COOPERATIVE_MATRIX"),
];

fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends: wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12,
            flags: wgpu::InstanceFlags::empty(),
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        })
    })
}

/// Every adapter wgpu finds, in a stable order: hardware first (discrete, integrated, other), then
/// software. The index is what `Device::gpu_nth` and `KILN_DEVICE=gpu:N` take.
pub(crate) fn adapters() -> &'static [wgpu::Adapter] {
    static ADAPTERS: OnceLock<Vec<wgpu::Adapter>> = OnceLock::new();
    ADAPTERS.get_or_init(|| {
        let mut list = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::all()));
        list.sort_by_key(|a| rank(&a.get_info()));
        list
    })
}

pub(crate) fn is_software(info: &wgpu::AdapterInfo) -> bool {
    let n = info.name.to_lowercase();
    info.device_type == wgpu::DeviceType::Cpu
        || n.contains("llvmpipe")
        || n.contains("lavapipe")
        || n.contains("swiftshader")
        || n.contains("warp")
}

fn rank(info: &wgpu::AdapterInfo) -> u8 {
    if is_software(info) {
        return 4;
    }
    match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        _ => 2,
    }
}

/// Summaries of all adapters for `kiln info`.
pub fn list_adapters() -> Vec<AdapterSummary> {
    adapters().iter().enumerate().map(|(i, a)| summarize(i, a)).collect()
}

pub(crate) fn summarize(index: usize, a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    let limits = a.limits();
    let feats = a.features();
    let software = is_software(&info);
    AdapterSummary {
        index,
        name: info.name.clone(),
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        software,
        unified_memory: software
            || info.device_type == wgpu::DeviceType::IntegratedGpu
            || info.backend == wgpu::Backend::Metal,
        vram: super::vram::query(a),
        features: WANTED.iter().filter(|(f, _)| feats.contains(*f)).map(|(_, n)| *n).collect(),
        max_buffer_size: limits.max_buffer_size,
        max_storage_binding: limits.max_storage_buffer_binding_size,
        workgroup_memory: limits.max_compute_workgroup_storage_size,
        max_workgroup_invocations: limits.max_compute_invocations_per_workgroup,
        subgroup_size: (info.subgroup_min_size, info.subgroup_max_size),
    }
}

/// Index of the adapter `Device::gpu()` uses: the best hardware adapter, else a software one.
pub(crate) fn best_index() -> Option<usize> {
    (!adapters().is_empty()).then_some(0)
}

/// Index of the best hardware adapter, for `Device::auto()` (which prefers the CPU to software GPUs).
pub(crate) fn best_hardware_index() -> Option<usize> {
    adapters().first().filter(|a| !is_software(&a.get_info())).map(|_| 0)
}
