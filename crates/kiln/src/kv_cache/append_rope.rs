//! `KvCache::append_rope`: a decoder layer's stacked q/k/v product split into heads, q and k
//! rotated, k and v appended, in one backend op (`ExtOps::rope_append`; on the GPU one kernel,
//! `gpu/kv/mod.rs`); the composed ops (views, `rope_with_tables`, `append`) where the
//! backend declines, and as the reference.

use super::{KvCache, OP};
use crate::backend::{RopeAppend, Rotary};
use crate::storage::Storage;
use crate::{Device, Error, Result, RopeLayout, Tensor};

impl KvCache {
    /// Splits `qkv` (`(t, (nh + 2 nkv) d)`: the q, k and v projections of `t` new positions of one
    /// sequence side by side) into `nh` q heads and `nkv` k and v heads, rotates q and k (half-split
    /// layout, `cos`/`sin` rows `(t, d / 2)`), appends k and v, and returns q `(1, nh, t, d)` and
    /// views of all cached keys and values, as `rope_with_tables` and [`KvCache::append`] would.
    pub fn append_rope(
        &mut self,
        qkv: &Tensor,
        nh: usize,
        nkv: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let heads = nh + 2 * nkv;
        if qkv.rank() != 2 || heads == 0 || !qkv.dims()[1].is_multiple_of(heads) {
            return Err(Error::shape(
                OP,
                format!("qkv of shape {} is not (t, (nh + 2 nkv) d) for nh {nh}, nkv {nkv}", qkv.shape()),
            ));
        }
        let (t, d) = (qkv.dims()[0], qkv.dims()[1] / heads);
        let fresh = self.buffers.is_none();
        if let Some(r) = self.append_rope_fused(qkv, nh, nkv, d, cos, sin)? {
            return Ok(r);
        }
        let r = self.append_rope_composed(qkv, nh, nkv, (t, d), cos, sin);
        if r.is_err() && fresh {
            self.buffers = None;
        }
        r
    }

    fn append_rope_composed(
        &mut self,
        qkv: &Tensor,
        nh: usize,
        nkv: usize,
        (t, d): (usize, usize),
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let split = |y: Tensor, n: usize| -> Result<Tensor> { y.reshape((1, t, n, d))?.transpose(1, 2) };
        let qk =
            split(qkv.narrow(1, 0, (nh + nkv) * d)?, nh + nkv)?.rope_with_tables(cos, sin, RopeLayout::HalfSplit)?;
        let v = split(qkv.narrow(1, (nh + nkv) * d, nkv * d)?, nkv)?;
        let (k, v) = self.append(&qk.narrow(1, nh, nkv)?, &v)?;
        Ok((qk.narrow(1, 0, nh)?, k, v))
    }

    /// The fused kernel (`ExtOps::rope_append`), or `None` where the backend declines or the
    /// operands are not those it takes (tables of another shape, dtype or device, a cache of other
    /// shape, an append past the end: the composed path reports those).
    fn append_rope_fused(
        &mut self,
        qkv: &Tensor,
        nh: usize,
        nkv: usize,
        d: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<Option<(Tensor, Tensor, Tensor)>> {
        let t = qkv.dims()[0];
        if !self.fused_buffers(t, nkv, d, qkv, (cos, sin))? {
            return Ok(None);
        }
        let (ck, cv) = self.buffers.as_ref().expect("made by fused_buffers");
        let q = {
            let (ys, cs, ss) = (qkv.storage(), cos.storage(), sin.storage());
            let (mut kg, mut vg) = (ck.storage_mut(), cv.storage_mut());
            let rot = self.rotary((&*cs, cos), (&*ss, sin), nh, nkv, d);
            let args = RopeAppend { qkv: (&*ys, qkv.layout()), rot };
            kg.rope_append(ck.layout(), (&mut *vg, cv.layout()), &args)?
        };
        let Some(q) = q else { return Ok(None) };
        self.appended(q, t, nh, d, qkv.device()).map(Some)
    }

    /// Whether `t` positions of `nkv` heads of `d` values in `like`'s dtype and device can be appended
    /// by a fused op: tables `(t, d / 2)` of that dtype and device, room in the cache, and cache
    /// buffers of that shape, dtype and device (made here on a first append; if the backend then
    /// declines, the composed path takes them, and `append_rope` lets them go again if it fails).
    pub(super) fn fused_buffers(
        &mut self,
        t: usize,
        nkv: usize,
        d: usize,
        like: &Tensor,
        (cos, sin): (&Tensor, &Tensor),
    ) -> Result<bool> {
        let dt = like.dtype();
        let tab_ok = |c: &Tensor| c.dtype() == dt && c.dims() == [t, d / 2] && c.device() == like.device();
        if t == 0 || !tab_ok(cos) || !tab_ok(sin) || self.len + t > self.max_len {
            return Ok(false);
        }
        if let Some((ck, cv)) = &self.buffers {
            let want = [1, nkv, self.max_len, d];
            let fits =
                |c: &Tensor| c.dims() == want && c.dtype() == dt && c.device() == like.device() && c.is_contiguous();
            return Ok(fits(ck) && fits(cv));
        }
        let ck = Tensor::zeros((1, nkv, self.max_len, d), dt, like.device())?;
        let cv = Tensor::zeros((1, nkv, self.max_len, d), dt, like.device())?;
        self.buffers = Some((ck, cv));
        Ok(true)
    }

    /// The tables and heads of a fused append at the cache's length.
    pub(super) fn rotary<'a>(
        &self,
        (cs, cos): (&'a Storage, &'a Tensor),
        (ss, sin): (&'a Storage, &'a Tensor),
        nh: usize,
        nkv: usize,
        d: usize,
    ) -> Rotary<'a, Storage> {
        Rotary { cos: (cs, cos.layout()), sin: (ss, sin.layout()), nh, nkv, d, pos: self.len, max_len: self.max_len }
    }

    /// After a fused append of `t` positions that returned q `(t, nh, d)`: the cache's new length,
    /// and q `(1, nh, t, d)` with views of all cached keys and values.
    pub(super) fn appended(
        &mut self,
        q: Storage,
        t: usize,
        nh: usize,
        d: usize,
        dev: &Device,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        self.len += t;
        let (ck, cv) = self.buffers.as_ref().expect("a fused append had the buffers");
        let q = Tensor::from_storage(q, (1, t, nh, d), dev).transpose(1, 2)?;
        Ok((q, ck.narrow(2, 0, self.len)?, cv.narrow(2, 0, self.len)?))
    }
}
