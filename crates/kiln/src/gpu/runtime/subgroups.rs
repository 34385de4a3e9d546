//! Whether kernels may use subgroup operations: where the device has `SUBGROUP`, unless a test
//! switched them off on this thread to cover the workgroup-memory variants.

use super::device::Gpu;
use std::cell::Cell;

thread_local! {
    static NO_SUBGROUPS: Cell<bool> = const { Cell::new(false) };
}

/// Whether kernels chosen on this thread may use subgroup operations.
pub(crate) fn use_subgroups(ctx: &Gpu) -> bool {
    ctx.has(wgpu::Features::SUBGROUP) && !NO_SUBGROUPS.with(|c| c.get())
}

/// Runs `f` with the workgroup-memory variants instead of the subgroup ones (on this thread), so
/// that tests cover both on devices with subgroups.
#[cfg(test)]
pub(crate) fn without_subgroups<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            NO_SUBGROUPS.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(NO_SUBGROUPS.with(|c| c.replace(true)));
    f()
}
