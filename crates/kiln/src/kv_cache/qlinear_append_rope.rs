//! `KvCache::qlinear_append_rope`: a decode step's q/k/v projection and its rope + append in one
//! backend op (`ExtOps::qmatmul_rope_append`; on the GPU the integer-dot product kernels rotate
//! their output rows and store k and v straight into the caches, so the step has no q/k/v row in
//! memory and no rope dispatch); `qlinear_fused_cat` then `append_rope` where the backend declines.

use super::KvCache;
use crate::quant::QTensor;
use crate::{LinearInput, Result, Tensor};

impl KvCache {
    /// [`KvCache::append_rope`] of `input(x) @ [w_0; w_1; ..]^T` ([`Tensor::qlinear_fused_cat`]): the
    /// quantized weights `ws` (any formats) side by side are the stacked q/k/v projection
    /// `((nh + 2 nkv) d, k)`. Returns q `(1, nh, t, d)` and views of all cached keys and values.
    #[allow(clippy::too_many_arguments)]
    pub fn qlinear_append_rope(
        &mut self,
        x: &Tensor,
        ws: &[&QTensor],
        input: LinearInput,
        nh: usize,
        nkv: usize,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        if let Some(r) = self.qlinear_append_rope_fused(x, ws, input, nh, nkv, (cos, sin))? {
            return Ok(r);
        }
        self.append_rope(&x.qlinear_fused_cat(ws, input)?, nh, nkv, cos, sin)
    }

    /// The fused op, or `None` where the backend declines or the operands are not those it takes
    /// (the composed path reports bad ones): one row of f32/f16/bf16 x, weights that share x's
    /// input size and device, each of whole heads, and what [`KvCache::append_rope`]'s fused op
    /// takes.
    fn qlinear_append_rope_fused(
        &mut self,
        x: &Tensor,
        ws: &[&QTensor],
        input: LinearInput,
        nh: usize,
        nkv: usize,
        tables: (&Tensor, &Tensor),
    ) -> Result<Option<(Tensor, Tensor, Tensor)>> {
        let op = "kv_cache_qlinear_append_rope";
        let heads = nh + 2 * nkv;
        let Some(first) = ws.first() else { return Ok(None) };
        let k = first.dims()[1];
        let ntot: usize = ws.iter().map(|w| w.dims()[0]).sum();
        let kin = if matches!(input, LinearInput::SiluMul) { 2 * k } else { k };
        if x.rank() != 2 || x.dims() != [1, kin] || heads == 0 || !ntot.is_multiple_of(heads) {
            return Ok(None);
        }
        let d = ntot / heads;
        let same = |w: &&QTensor| w.dims()[1] == k && w.device() == x.device() && w.dims()[0].is_multiple_of(d);
        if !ws.iter().all(same) || x.check_fused_operands(op, input, None, k, ntot).is_err() {
            return Ok(None);
        }
        if !self.fused_buffers(1, nkv, d, x, tables)? {
            return Ok(None);
        }
        let (ck, cv) = self.buffers.as_ref().expect("made by fused_buffers");
        let q = {
            let norm = match input {
                LinearInput::RmsNorm { weight, .. } => Some(weight.storage()),
                _ => None,
            };
            let pro = input.on_storage(norm.as_deref());
            let wsd: Vec<_> = ws.iter().map(|w| w.data().storage()).collect();
            let parts: Vec<_> = ws.iter().zip(&wsd).map(|(w, s)| (&**s, w.qtype(), w.dims()[0])).collect();
            let (cs, ss) = (tables.0.storage(), tables.1.storage());
            let rot = self.rotary((&*cs, tables.0), (&*ss, tables.1), nh, nkv, d);
            let (mut kg, mut vg) = (ck.storage_mut(), cv.storage_mut());
            x.storage().qmatmul_rope_append(
                x.layout(),
                &parts,
                k,
                &pro,
                &rot,
                (&mut *kg, ck.layout()),
                (&mut *vg, cv.layout()),
            )?
        };
        let Some(q) = q else { return Ok(None) };
        self.appended(q, 1, nh, d, x.device()).map(Some)
    }
}
