//! A key/value cache for autoregressive attention: keys and values are appended into preallocated
//! storage along the sequence axis, and attention gets views of the valid prefix, so a decode step
//! copies only the new entries.
//!
//! Views handed out by [`KvCache::append`] stay valid: later appends only write positions past the
//! prefix those views cover, and [`KvCache::reset`] lets go of the storage rather than overwrite it.

use crate::{Error, Result, Tensor};

mod append_rope;
mod qlinear_append_rope;

/// Keys `(b, h, t, d)` and values `(b, h, t, dv)` grown along `t` up to `max_len`.
pub struct KvCache {
    max_len: usize,
    len: usize,
    /// `(b, h, max_len, d)` and `(b, h, max_len, dv)` storage, made on the first append.
    buffers: Option<(Tensor, Tensor)>,
}

const OP: &str = "kv_cache_append";

impl KvCache {
    /// An empty cache that holds at most `max_len` positions.
    pub fn new(max_len: usize) -> KvCache {
        KvCache { max_len, len: 0, buffers: None }
    }

    /// Appends `k` (`(b, h, t_new, d)`) and `v` (`(b, h, t_new, dv)`) and returns views of all cached
    /// keys and values (`(b, h, len, d)` and `(b, h, len, dv)`). The first append fixes `b`, `h`, `d`,
    /// `dv`, the dtype and the device; later ones must match them. Appending past `max_len` is an
    /// error and leaves the cache unchanged.
    pub fn append(&mut self, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let shapes = || format!("k {}, v {}", k.shape(), v.shape());
        if k.rank() != 4 || v.rank() != 4 {
            return Err(Error::shape(OP, format!("expected k (b, h, t, d) and v (b, h, t, dv), got {}", shapes())));
        }
        k.same_device(OP, v)?;
        k.same_dtype(OP, v)?;
        if k.dims()[..3] != v.dims()[..3] {
            return Err(Error::shape(OP, format!("k and v must agree in batch, heads and length: {}", shapes())));
        }
        let t_new = k.dims()[2];
        if let Some((ck, cv)) = &self.buffers {
            k.same_device(OP, ck)?;
            k.same_dtype(OP, ck)?;
            let fits = |c: &Tensor, x: &Tensor| {
                c.dims()[0] == x.dims()[0] && c.dims()[1] == x.dims()[1] && c.dims()[3] == x.dims()[3]
            };
            if !fits(ck, k) || !fits(cv, v) {
                return Err(Error::shape(
                    OP,
                    format!(
                        "the cache holds k (b, h, d) = ({}, {}, {}) and v dv = {}, got {}",
                        ck.dims()[0],
                        ck.dims()[1],
                        ck.dims()[3],
                        cv.dims()[3],
                        shapes()
                    ),
                ));
            }
        }
        if self.len + t_new > self.max_len {
            return Err(Error::OutOfRange {
                op: OP,
                msg: format!(
                    "appending {t_new} positions to {} cached would exceed max_len {} ({})",
                    self.len,
                    self.max_len,
                    shapes()
                ),
            });
        }
        if self.buffers.is_none() {
            let (kd, vd) = (k.dims(), v.dims());
            let ck = Tensor::zeros((kd[0], kd[1], self.max_len, kd[3]), k.dtype(), k.device())?;
            let cv = Tensor::zeros((vd[0], vd[1], self.max_len, vd[3]), v.dtype(), v.device())?;
            self.buffers = Some((ck, cv));
        }
        let (ck, cv) = self.buffers.as_ref().expect("made above");
        if t_new > 0 {
            write_at(ck, k, self.len)?;
            write_at(cv, v, self.len)?;
        }
        self.len += t_new;
        Ok((ck.narrow(2, 0, self.len)?, cv.narrow(2, 0, self.len)?))
    }

    /// Views of the cached keys and values, `None` before the first append.
    pub fn current(&self) -> Option<(Tensor, Tensor)> {
        let (k, v) = self.buffers.as_ref()?;
        Some((k.narrow(2, 0, self.len).ok()?, v.narrow(2, 0, self.len).ok()?))
    }

    /// Number of positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions the cache holds.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Forgets the positions from `len` on (none when `len` is past the end): later appends write
    /// there, so views handed out before that cover those positions see the new entries.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Forgets all cached positions. The storage is released (the next append allocates anew and may
    /// have other shapes), so views handed out before keep their values.
    pub fn reset(&mut self) {
        self.len = 0;
        self.buffers = None;
    }
}

/// Writes `src` `(b, h, t, d)` into positions `at..at + t` of the cache buffer `dst` in place.
fn write_at(dst: &Tensor, src: &Tensor, at: usize) -> Result<()> {
    let dst_l = dst.layout().narrow(OP, 2, at, src.dims()[2])?;
    if src.shares_storage_with(dst) {
        // A view of the cache itself (reading and writing one storage would deadlock): copy it out.
        let copy = src.storage().copy_contiguous(src.layout())?;
        let copy = Tensor::from_storage(copy, src.shape(), src.device());
        return write_at(dst, &copy, at);
    }
    let s = src.storage();
    let mut d = dst.storage_mut();
    s.copy_into(src.layout(), &mut d, &dst_l)
}
