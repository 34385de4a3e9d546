//! `KvCache::append_rope`: a decoder layer's stacked q/k/v product split into heads, q and k
//! rotated, k and v appended, in one backend op (`ExtOps::rope_append`; on the GPU one kernel,
//! `gpu/kv/mod.rs`); the composed ops (views, `rope_with_tables`, `append`) where the
//! backend declines, and as the reference.

use super::{KvCache, OP};
use crate::backend::RopeAppend;
use crate::{Error, Result, RopeLayout, Tensor};

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
        let dt = qkv.dtype();
        let tab_ok = |c: &Tensor| c.dtype() == dt && c.dims() == [t, d / 2] && c.device() == qkv.device();
        if t == 0 || !tab_ok(cos) || !tab_ok(sin) || self.len + t > self.max_len {
            return Ok(None);
        }
        if let Some((ck, cv)) = &self.buffers {
            let want = [1, nkv, self.max_len, d];
            let fits =
                |c: &Tensor| c.dims() == want && c.dtype() == dt && c.device() == qkv.device() && c.is_contiguous();
            if !fits(ck) || !fits(cv) {
                return Ok(None);
            }
        } else {
            // The buffers `append` makes on a first append: if the backend declines, the composed
            // path takes them (and `append_rope` lets them go again if that path fails).
            let ck = Tensor::zeros((1, nkv, self.max_len, d), dt, qkv.device())?;
            let cv = Tensor::zeros((1, nkv, self.max_len, d), dt, qkv.device())?;
            self.buffers = Some((ck, cv));
        }
        let (ck, cv) = self.buffers.as_ref().expect("made above");
        let q = {
            let (ys, cs, ss) = (qkv.storage(), cos.storage(), sin.storage());
            let (mut kg, mut vg) = (ck.storage_mut(), cv.storage_mut());
            let args = RopeAppend {
                qkv: (&*ys, qkv.layout()),
                cos: (&*cs, cos.layout()),
                sin: (&*ss, sin.layout()),
                nh,
                nkv,
                d,
                pos: self.len,
                max_len: self.max_len,
            };
            kg.rope_append(ck.layout(), (&mut *vg, cv.layout()), &args)?
        };
        let Some(q) = q else { return Ok(None) };
        self.len += t;
        let q = Tensor::from_storage(q, (1, t, nh, d), qkv.device()).transpose(1, 2)?;
        Ok(Some((q, ck.narrow(2, 0, self.len)?, cv.narrow(2, 0, self.len)?)))
    }
}
