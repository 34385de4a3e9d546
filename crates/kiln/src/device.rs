//! Devices: where a tensor's storage lives and where its ops run.

use crate::backend::BackendDevice;
use crate::cpu::{CpuDevice, CpuStorage};
use crate::storage::Storage;
use crate::{Error, Result};
use std::fmt;
use std::sync::OnceLock;

/// A compute device. Cheap to clone; two handles to one device compare equal.
#[derive(Clone, PartialEq, Eq)]
pub struct Device(DeviceKind);

#[derive(Clone, PartialEq, Eq)]
enum DeviceKind {
    Cpu,
}

/// What `KILN_DEVICE` (or a CLI flag) asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRequest {
    Cpu,
    /// The best GPU; a software adapter only if nothing else exists.
    Gpu,
    /// The n-th GPU adapter.
    GpuNth(usize),
    /// The best hardware GPU, else the CPU.
    Auto,
}

impl DeviceRequest {
    /// Parses `cpu`, `gpu`, `gpu:N` or `auto`.
    pub fn parse(s: &str) -> Option<DeviceRequest> {
        match s.trim() {
            "cpu" => Some(DeviceRequest::Cpu),
            "gpu" => Some(DeviceRequest::Gpu),
            "auto" | "" => Some(DeviceRequest::Auto),
            s => s.strip_prefix("gpu:")?.parse().ok().map(DeviceRequest::GpuNth),
        }
    }

    /// The request in `KILN_DEVICE`, `Auto` when unset.
    pub fn from_env() -> Result<DeviceRequest> {
        match std::env::var("KILN_DEVICE") {
            Err(_) => Ok(DeviceRequest::Auto),
            Ok(v) => DeviceRequest::parse(&v).ok_or_else(|| Error::BadEnv {
                var: "KILN_DEVICE",
                value: v.clone(),
                msg: "expected cpu, gpu, gpu:N or auto".into(),
            }),
        }
    }

    pub fn open(self) -> Result<Device> {
        match self {
            DeviceRequest::Cpu => Ok(Device::cpu()),
            DeviceRequest::Gpu => Device::gpu(),
            DeviceRequest::GpuNth(i) => Device::gpu_nth(i),
            DeviceRequest::Auto => Ok(Device::auto()),
        }
    }
}

impl Device {
    /// The CPU backend: multi-threaded (rayon) and SIMD.
    pub fn cpu() -> Device {
        Device(DeviceKind::Cpu)
    }

    /// The best GPU adapter. Until the GPU backend lands this is always an error.
    pub fn gpu() -> Result<Device> {
        Self::gpu_nth(0)
    }

    /// The GPU adapter with index `i` in `kiln info`'s list.
    pub fn gpu_nth(_i: usize) -> Result<Device> {
        Err(Error::BackendUnavailable { backend: "gpu", msg: "kiln was built without a GPU backend".into() })
    }

    /// The best hardware GPU if there is one, else the CPU.
    pub fn auto() -> Device {
        Device::cpu()
    }

    /// The device `KILN_DEVICE` names (`cpu`, `gpu`, `gpu:N`, `auto`; `auto` when unset), opened once
    /// per process.
    pub fn from_env() -> Result<Device> {
        static DEFAULT: OnceLock<Result<Device>> = OnceLock::new();
        DEFAULT.get_or_init(|| DeviceRequest::from_env()?.open()).clone()
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self.0, DeviceKind::Cpu)
    }

    pub fn is_gpu(&self) -> bool {
        !self.is_cpu()
    }

    /// Short name used in messages: `cpu`, `gpu:0`.
    pub fn name(&self) -> String {
        match self.0 {
            DeviceKind::Cpu => "cpu".into(),
        }
    }

    /// Storage of `shape` filled with `value` on this device.
    pub(crate) fn full_storage(&self, shape: &crate::Shape, dtype: crate::DType, value: f64) -> Result<Storage> {
        match self.0 {
            DeviceKind::Cpu => Ok(Storage::Cpu(CpuDevice.full(shape, dtype, value)?)),
        }
    }

    /// Host data moved onto this device.
    pub(crate) fn storage_from_cpu(&self, data: CpuStorage) -> Result<Storage> {
        match self.0 {
            DeviceKind::Cpu => Ok(Storage::Cpu(data)),
        }
    }

    /// Waits until all work queued on this device has finished. A no-op on the CPU.
    pub fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Device({})", self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_requests() {
        assert_eq!(DeviceRequest::parse("gpu:2"), Some(DeviceRequest::GpuNth(2)));
        assert_eq!(DeviceRequest::parse("cpu"), Some(DeviceRequest::Cpu));
        assert_eq!(DeviceRequest::parse("tpu"), None);
        assert!(Device::gpu().unwrap_err().to_string().contains("gpu"));
    }
}
