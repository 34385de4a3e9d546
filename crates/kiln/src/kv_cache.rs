//! A key/value cache for autoregressive attention: keys and values are appended into preallocated
//! storage along the sequence axis, and attention gets views of the valid prefix, so a decode step
//! copies only the new entries.

use crate::{Error, Result, Tensor};

/// Keys and values of shape `(b, h, t, d)` grown along `t` up to `max_len`.
pub struct KvCache {
    max_len: usize,
}

impl KvCache {
    /// An empty cache that holds at most `max_len` positions.
    pub fn new(max_len: usize) -> KvCache {
        KvCache { max_len }
    }

    /// Appends `k` and `v` (`(b, h, t_new, d)`) and returns views of all cached keys and values.
    pub fn append(&mut self, _k: &Tensor, _v: &Tensor) -> Result<(Tensor, Tensor)> {
        Err(Error::NotImplemented { op: "kv_cache_append", backend: "api" })
    }

    /// Number of positions cached.
    pub fn len(&self) -> usize {
        0
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Forgets all cached positions (keeps the storage).
    pub fn reset(&mut self) {}
}
