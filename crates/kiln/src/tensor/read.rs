//! Reading a tensor back without waiting at once: [`Tensor::read_later`] queues the read behind the
//! work recorded so far and returns; [`PendingRead::wait`] waits for that work only. A decode loop
//! records the next step (fed by the token still on the device) before it waits for the last token.

use super::Tensor;
use crate::cpu::CpuStorage;
use crate::gpu::PendingGpuRead;
use crate::storage::Storage;
use crate::{Error, Result, WithDType};
use std::marker::PhantomData;

/// A read of a tensor's elements started by [`Tensor::read_later`].
pub struct PendingRead<T> {
    host: Host,
    _t: PhantomData<T>,
}

enum Host {
    /// Read already (a CPU tensor).
    Ready(CpuStorage),
    Gpu(PendingGpuRead),
}

impl Tensor {
    /// Starts reading the elements in row-major order and returns without waiting. On a GPU the read
    /// is submitted behind the work recorded so far; work recorded after this call runs while
    /// [`PendingRead::wait`] waits, and is not waited for. On the CPU the elements are read at once.
    /// `T` must be the tensor's dtype.
    pub fn read_later<T: WithDType>(&self) -> Result<PendingRead<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch { op: "read_later", lhs: self.dtype(), rhs: T::DTYPE });
        }
        let host = match &*self.storage() {
            Storage::Gpu(g) => Host::Gpu(g.read_later(self.layout())?),
            s => Host::Ready(s.to_cpu(self.layout())?),
        };
        Ok(PendingRead { host, _t: PhantomData })
    }
}

impl<T: WithDType> PendingRead<T> {
    /// The elements, once the work recorded before [`Tensor::read_later`] is done.
    pub fn wait(self) -> Result<Vec<T>> {
        let host = match self.host {
            Host::Ready(h) => h,
            Host::Gpu(g) => g.finish()?,
        };
        Ok(T::storage_slice(&host).expect("dtype checked by read_later").to_vec())
    }
}

impl<T> std::fmt::Debug for PendingRead<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.host {
            Host::Ready(_) => "read",
            Host::Gpu(_) => "in flight",
        };
        f.debug_struct("PendingRead").field("state", &state).finish()
    }
}
