//! How much memory a GPU has and how much of it is free, which wgpu does not report: on Vulkan,
//! from the adapter's largest device-local heap, with `VK_EXT_memory_budget` for what is free
//! (what the driver lets this process allocate now: other processes' use counts against it). Other
//! backends (Metal, DX12) report `None` here; unified-memory GPUs share the host's memory, which
//! callers read from the host.

/// One adapter's device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VramInfo {
    /// Bytes of the largest device-local heap.
    pub total: u64,
    /// Bytes this process may still allocate there (`None` without `VK_EXT_memory_budget`).
    pub free: Option<u64>,
}

/// The adapter's device memory (`None` where the backend does not say).
pub(crate) fn query(adapter: &wgpu::Adapter) -> Option<VramInfo> {
    vulkan(adapter)
}

#[cfg(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn vulkan(adapter: &wgpu::Adapter) -> Option<VramInfo> {
    use ash::vk;
    if adapter.get_info().backend != wgpu::Backend::Vulkan {
        return None;
    }
    // SAFETY: the hal adapter is only read (two physical-device queries through the instance that
    // owns it); nothing is created or destroyed, and the guard lives until the end of this call.
    unsafe {
        let hal = adapter.as_hal::<wgpu::hal::api::Vulkan>()?;
        let shared = hal.shared_instance();
        let instance = shared.raw_instance();
        let phys = hal.raw_physical_device();
        let base = instance.get_physical_device_memory_properties(phys);
        let heaps = &base.memory_heaps[..base.memory_heap_count as usize];
        let (index, heap) = heaps
            .iter()
            .enumerate()
            .filter(|(_, h)| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .max_by_key(|(_, h)| h.size)?;
        let has_budget = shared.instance_api_version() >= vk::API_VERSION_1_1
            && instance
                .enumerate_device_extension_properties(phys)
                .ok()?
                .iter()
                .any(|e| e.extension_name_as_c_str() == Ok(ash::ext::memory_budget::NAME));
        let free = has_budget.then(|| {
            let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
            let mut props = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
            instance.get_physical_device_memory_properties2(phys, &mut props);
            budget.heap_budget[index].saturating_sub(budget.heap_usage[index])
        });
        Some(VramInfo { total: heap.size, free })
    }
}

#[cfg(not(any(windows, target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn vulkan(_adapter: &wgpu::Adapter) -> Option<VramInfo> {
    None
}
