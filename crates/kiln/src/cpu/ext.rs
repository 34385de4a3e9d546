//! The CPU face of the extension ops: the quantized products (`quant/cpu.rs`) and paged decode
//! attention (`paged.rs`). The fused ops (`linear_fused`, rope + append, fused groups) keep the
//! defaults: the tensor layer runs their composed ops, which on the CPU are the fast path.

use super::paged::{self, Geometry, Table};
use super::CpuStorage;
use crate::backend::{BackendStorage, ExtOps, Paged, View};
use crate::quant::QuantType;
use crate::{DType, Error, Layout, Result};

impl CpuStorage {
    /// The view `l` as contiguous f32 and the element it starts at: no copy for contiguous f32.
    fn f32_rows(&self, l: &Layout) -> Result<(std::borrow::Cow<'_, [f32]>, usize)> {
        if let (CpuStorage::F32(x), true) = (self, l.is_contiguous()) {
            return Ok((std::borrow::Cow::Borrowed(x), l.offset()));
        }
        let c = if self.dtype() == DType::F32 { self.copy_contiguous(l)? } else { self.cast(l, DType::F32)? };
        match c {
            CpuStorage::F32(v) => Ok((std::borrow::Cow::Owned(v), 0)),
            other => Err(Error::dtype("cast", other.dtype(), "expected f32")),
        }
    }
}

/// The planar words of a quantized weight as bytes.
fn words<'a>(op: &'static str, w: &'a CpuStorage) -> Result<&'a [u8]> {
    match w {
        CpuStorage::U32(w) => Ok(bytemuck::cast_slice(w)),
        other => Err(Error::dtype(op, other.dtype(), "quantized data is u32 words")),
    }
}

impl ExtOps for CpuStorage {
    const NAME: &'static str = "cpu";

    /// f32 values.
    fn dequantize(&self, qt: QuantType, blocks: usize, _dtype: DType) -> Result<Self> {
        Ok(CpuStorage::F32(crate::quant::cpu::dequantize(qt, words("dequantize", self)?, blocks)))
    }

    /// In f32; the addend is left to the caller.
    fn qmatmul(
        &self,
        l: &Layout,
        w: &Self,
        qt: QuantType,
        n: usize,
        k: usize,
        _add: Option<(View<Self>, usize)>,
    ) -> Result<(Self, bool)> {
        let m = l.elem_count() / k.max(1);
        let (x, off) = self.f32_rows(l)?;
        let y = crate::quant::cpu::qmatmul(qt, words("qlinear", w)?, n, k, &x[off..off + m * k], m);
        Ok((CpuStorage::F32(y), false))
    }

    fn sdpa_paged(&self, l: &Layout, (k, kl): View<Self>, (v, vl): View<Self>, t: &Paged<Self>) -> Result<Self> {
        let (q, off) = self.f32_rows(l)?;
        let (qd, kd) = (l.dims(), kl.dims());
        let g = Geometry {
            hq: qd[1],
            hkv: kd[1],
            d: qd[3],
            dv: vl.dims()[3],
            bs: t.block_size,
            scale: t.scale as f32,
            softcap: t.softcap.map(|c| c as f32),
            window: t.window,
        };
        let CpuStorage::U32(ids) = t.table else {
            return Err(Error::dtype("sdpa_paged", t.table.dtype(), "block ids are u32"));
        };
        let table = Table { ids, max_blocks: t.max_blocks, lens: t.host_lens };
        let q = &q[off..off + l.elem_count()];
        let out = CpuStorage::F32(paged::paged(self.dtype(), q, (k, kl.offset()), (v, vl.offset()), &table, g)?);
        if self.dtype() == DType::F32 {
            return Ok(out);
        }
        out.cast(&Layout::contiguous((qd[0], qd[1], 1, g.dv)), self.dtype())
    }
}
