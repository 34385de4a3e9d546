//! The runtime every kernel family stands on, and which knows none of them: adapters and the opened
//! device (`adapters.rs`, `device.rs`), the context around it (`context.rs`: pool, pipelines,
//! execution, staging), buffers (`pool.rs`, `storage.rs`: `GpuStorage`), batched dispatch
//! (`exec.rs`), uploads and readbacks (`transfer.rs`), the pipeline cache and templates
//! (`kernels.rs`), how dtypes live in u32 words (`wgsl.rs`), fills, subgroup policy
//! (`subgroups.rs`), timing (`profile.rs`), the autotune cache (`autotune.rs`) the copy kernel
//! that measures bandwidth (`bandwidth.rs`) and the device memory wgpu does not report (`vram.rs`).

pub(crate) mod adapters;
pub(crate) mod autotune;
pub(crate) mod bandwidth;
pub(crate) mod context;
pub(crate) mod coop;
pub(crate) mod device;
pub(crate) mod exec;
pub(crate) mod kernels;
pub(crate) mod params;
pub(crate) mod pool;
pub(crate) mod profile;
pub(crate) mod storage;
pub(crate) mod subgroups;
pub(crate) mod transfer;
pub(crate) mod vram;
pub(crate) mod wgsl;

pub use adapters::{list_adapters, AdapterSummary};
pub use context::GpuContext;
pub use device::Gpu;
pub use pool::MemoryStats;
pub use profile::{format_report, KernelTime};
pub use storage::GpuStorage;
pub use vram::VramInfo;
