//! `KvCache::append_rope`: a decoder layer's stacked q/k/v product split into heads, q and k
//! rotated, k and v appended, in one GPU kernel (`gpu/decode/rope_kv.rs`); the composed ops
//! (views, `rope_with_tables`, `append`) elsewhere and as the reference.

use super::{KvCache, OP};
use crate::gpu::decode::rope_kv::{rope_kv, RopeKv};
use crate::storage::Storage;
use crate::{DType, Error, Result, RopeLayout, Tensor};

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
        if let Some(r) = self.append_rope_gpu(qkv, nh, nkv, d, cos, sin)? {
            return Ok(r);
        }
        let split = |y: Tensor, n: usize| -> Result<Tensor> { y.reshape((1, t, n, d))?.transpose(1, 2) };
        let qk =
            split(qkv.narrow(1, 0, (nh + nkv) * d)?, nh + nkv)?.rope_with_tables(cos, sin, RopeLayout::HalfSplit)?;
        let v = split(qkv.narrow(1, (nh + nkv) * d, nkv * d)?, nkv)?;
        let (k, v) = self.append(&qk.narrow(1, nh, nkv)?, &v)?;
        Ok((qk.narrow(1, 0, nh)?, k, v))
    }

    /// The fused kernel, or `None` where it does not apply (the CPU, layouts it does not take, a
    /// cache of other shape, an append past the end: the composed path reports those).
    fn append_rope_gpu(
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
        let tab_ok =
            |c: &Tensor| c.dtype() == dt && c.is_contiguous() && c.dims() == [t, d / 2] && c.device() == qkv.device();
        if !qkv.device().is_gpu()
            || !matches!(dt, DType::F32 | DType::F16 | DType::BF16)
            || !d.is_multiple_of(4)
            || t == 0
            || !qkv.is_contiguous()
            || !tab_ok(cos)
            || !tab_ok(sin)
            || self.len + t > self.max_len
        {
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
            let ck = Tensor::zeros((1, nkv, self.max_len, d), dt, qkv.device())?;
            let cv = Tensor::zeros((1, nkv, self.max_len, d), dt, qkv.device())?;
            self.buffers = Some((ck, cv));
        }
        let (ck, cv) = self.buffers.as_ref().expect("made above");
        let q = {
            let (ys, cs, ss) = (qkv.storage(), cos.storage(), sin.storage());
            let (mut kg, mut vg) = (ck.storage_mut(), cv.storage_mut());
            let (Storage::Gpu(y), Storage::Gpu(c), Storage::Gpu(s), Storage::Gpu(kc), Storage::Gpu(vc)) =
                (&*ys, &*cs, &*ss, &mut *kg, &mut *vg)
            else {
                return Ok(None);
            };
            let args = RopeKv {
                y,
                y_off: qkv.layout().offset(),
                row: qkv.dims()[1],
                t,
                nh,
                nkv,
                d,
                cos: c,
                cos_off: cos.layout().offset(),
                sin: s,
                sin_off: sin.layout().offset(),
                pos: self.len,
                len: self.max_len,
                k_off: ck.layout().offset(),
                v_off: cv.layout().offset(),
            };
            rope_kv(&args, kc, vc)?
        };
        self.len += t;
        let q = Tensor::from_storage(Storage::Gpu(q), (1, t, nh, d), qkv.device()).transpose(1, 2)?;
        Ok(Some((q, ck.narrow(2, 0, self.len)?, cv.narrow(2, 0, self.len)?)))
    }
}
