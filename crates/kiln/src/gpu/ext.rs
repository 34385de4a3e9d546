//! The GPU face of the extension ops: `impl ExtOps for GpuStorage` decides, per call, whether a
//! family kernel takes the operands (row counts, alignment, layouts) and forwards to the family's
//! launcher (`matvec/`, `dequant/`, `kv/`, `attention/`, `fused/`); where none does it declines, and the
//! tensor layer runs the composed ops.

use super::attention::paged_decode::{self, PagedArgs};
use super::attention::paged_write;
use super::dequant::dequantize;
use super::kv::{rope_kv, RopeKv};
use super::matvec::dense::{self, MatvecArgs};
use super::matvec::quant::{self as qk, Addend};
use super::matvec::quant_i8::{qmatmul_i8, Out, RopeAt};
use super::pointwise::Pro;
use super::runtime::storage::At;
use super::{fused, fused_exprs, GpuStorage};
use crate::backend::{ExtOps, Paged, Prologue, RopeAppend, Rotary, View};
use crate::fusion::plan::Group;
use crate::quant::QuantType;
use crate::{DType, Layout, Result};

/// Rows of `l` when its last axis holds `k` values per row.
fn rows(l: &Layout) -> (usize, usize) {
    let kin = l.dims().last().copied().unwrap_or(1);
    (l.elem_count() / kin.max(1), kin)
}

/// Whether x and the norm weight lie in whole 16-byte units, as the quantized products read them.
fn aligned(l: &Layout) -> bool {
    l.is_contiguous() && l.offset().is_multiple_of(16)
}

/// The op whose kernels the q/k/v product with rope + append runs (`qmatmul_rope_append`).
const ROPE_OP: &str = "kv_cache_qlinear_append_rope";

/// Whether [`ExtOps::qmatmul_fused_cat`]'s kernels take these operands: up to 8 rows of x aligned
/// for them, every format with integer dots, even 16-bit output column ranges, 32-bit indices.
/// `(rows, prologue, output dtype)`: x's dtype, or f32 for f32 x.
fn cat_plan<'a>(
    x: &GpuStorage,
    l: &Layout,
    ws: &[(&GpuStorage, QuantType, usize)],
    k: usize,
    pro: &Prologue<'a, GpuStorage>,
) -> Option<(usize, qk::Prologue<'a>, DType)> {
    let (m, kin) = rows(l);
    let ntot: usize = ws.iter().map(|w| w.2).sum();
    let wide = x.dtype != DType::F32;
    if m == 0
        || m > 8
        || !aligned(l)
        || !kin.is_multiple_of(16)
        || ntot == 0
        || (m * kin + l.offset()) > u32::MAX as usize
    {
        return None;
    }
    if ws.iter().any(|&(w, qt, n)| {
        !super::matvec::quant_i8::applies(qt)
            || (wide && n % 2 == 1)
            || n * k > u32::MAX as usize
            || w.same_ctx("qlinear_fused_cat", x).is_err()
    }) {
        return None;
    }
    let pro = quant_prologue(pro, kin)?;
    Some((m, pro, if wide { x.dtype } else { DType::F32 }))
}

/// The quantized products' form of a prologue over rows of `kin` values; `None` when its norm weight
/// is not aligned for them.
fn quant_prologue<'a>(pro: &Prologue<'a, GpuStorage>, kin: usize) -> Option<qk::Prologue<'a>> {
    let (p, norm) = match *pro {
        Prologue::Plain => (Pro::Plain, None),
        Prologue::RmsNorm((g, gl), eps) => {
            if !aligned(gl) {
                return None;
            }
            (Pro::RmsNorm, Some((At { buf: g, offset: gl.offset() }, eps)))
        }
        Prologue::SiluMul => (Pro::SiluMul, None),
    };
    Some(qk::Prologue { pro: p, x_stride: kin, norm })
}

impl ExtOps for GpuStorage {
    const NAME: &'static str = "gpu";

    /// One `matvec/dense.rs` kernel for up to `dense::MAX_ROWS` rows whose operands lie in whole 16-byte
    /// units (x is copied when it does not), with an even 16-bit output row.
    fn linear_fused(
        &self,
        l: &Layout,
        (w, wl): View<Self>,
        pro: &Prologue<Self>,
        residual: Option<View<Self>>,
    ) -> Result<Option<Self>> {
        let (n, k) = (wl.dims()[0], wl.dims()[1]);
        let (m, kin) = rows(l);
        if m == 0 || m > dense::MAX_ROWS || n == 0 || k == 0 {
            return Ok(None);
        }
        let vals = dense::unit_values(self.dtype);
        let unit = |l: &Layout| l.is_contiguous() && l.offset().is_multiple_of(vals);
        let wide = self.dtype != DType::F32;
        let norm_ok = match pro {
            Prologue::RmsNorm((_, gl), _) => unit(gl),
            _ => true,
        };
        let res_ok = residual.is_none_or(|(_, rl)| rl.is_contiguous() && (!wide || rl.offset().is_multiple_of(2)));
        if !k.is_multiple_of(vals) || !unit(wl) || !norm_ok || !res_ok || (wide && !n.is_multiple_of(2)) {
            return Ok(None);
        }
        let copy;
        let x = if unit(l) {
            At { buf: self, offset: l.offset() }
        } else {
            copy = self.copy_contiguous(l)?;
            At { buf: &copy, offset: 0 }
        };
        let norm = match *pro {
            Prologue::RmsNorm((g, gl), eps) => Some((At { buf: g, offset: gl.offset() }, eps)),
            _ => None,
        };
        let dst = dense::matvec(&MatvecArgs {
            x,
            x_stride: kin,
            w: At { buf: w, offset: wl.offset() },
            norm,
            silu_mul: matches!(pro, Prologue::SiluMul),
            residual: residual.map(|(r, rl)| At { buf: r, offset: rl.offset() }),
            m,
            n,
            k,
        })?;
        Ok(Some(dst))
    }

    fn dequantize(&self, qt: QuantType, blocks: usize, dtype: DType) -> Result<Self> {
        dequantize(self, qt, blocks, dtype)
    }

    /// The `quant/` matvec on x made contiguous, adding a contiguous addend where the kernel can.
    fn qmatmul(
        &self,
        l: &Layout,
        w: &Self,
        qt: QuantType,
        n: usize,
        k: usize,
        add: Option<(View<Self>, usize)>,
    ) -> Result<(Self, bool)> {
        let m = l.elem_count() / k.max(1);
        let copy;
        let (x, off) = if l.is_contiguous() {
            (self, l.offset())
        } else {
            copy = self.copy_contiguous(l)?;
            (&copy, 0)
        };
        let run = |add| qk::qmatmul(x, off, w, qt, n, k, m, add);
        if let Some(((a, al), row_stride)) = add.filter(|((_, al), _)| al.is_contiguous()) {
            if let Some(y) = run(Some(Addend { buf: a, offset: al.offset(), row_stride }))? {
                return Ok((y, true));
            }
        }
        Ok((run(None)?.expect("no addend to refuse"), false))
    }

    /// The `quant/` matvec with its prologue for up to 8 rows: x and the norm weight contiguous from a
    /// multiple of 16 values, rows of a multiple of 16 values, a contiguous residual.
    fn qmatmul_fused(
        &self,
        l: &Layout,
        w: &Self,
        qt: QuantType,
        n: usize,
        k: usize,
        pro: &Prologue<Self>,
        residual: Option<View<Self>>,
    ) -> Result<Option<Self>> {
        let (m, kin) = rows(l);
        if m == 0 || m > 8 || n == 0 || !aligned(l) || !kin.is_multiple_of(16) {
            return Ok(None);
        }
        let Some(pro) = quant_prologue(pro, kin) else {
            return Ok(None);
        };
        if residual.is_some_and(|(_, rl)| !rl.is_contiguous()) {
            return Ok(None);
        }
        let add = residual.map(|(r, rl)| Addend { buf: r, offset: rl.offset(), row_stride: n });
        qk::qmatmul_fused(self, l.offset(), w, qt, n, k, m, add, pro)
    }

    /// One `matvec/quant_i8.rs` dispatch per weight into column ranges of one output, for up to 8
    /// rows when every format takes integer dots (each workgroup normalises or gates x itself).
    fn qmatmul_fused_cat(
        &self,
        l: &Layout,
        ws: &[(&Self, QuantType, usize)],
        k: usize,
        pro: &Prologue<Self>,
    ) -> Result<Option<Self>> {
        let Some((m, pro, odt)) = cat_plan(self, l, ws, k, pro) else {
            return Ok(None);
        };
        let ntot: usize = ws.iter().map(|w| w.2).sum();
        let dst = GpuStorage::alloc(&self.ctx, odt, m * ntot)?;
        let mut off = 0;
        for &(w, qt, n) in ws {
            let out = Out::Into { buf: &dst, off, stride: ntot };
            qmatmul_i8(self, l.offset(), w, qt, odt, (n, k, m), None, &pro, out)?;
            off += n;
        }
        Ok(Some(dst))
    }

    /// [`Self::qmatmul_fused_cat`] of one row whose kernels rotate their output rows and store k and
    /// v into the caches (`Out::Rope`): x's dtype throughout (caches and tables too), heads of a
    /// multiple of 4 values, each weight whole heads, contiguous caches and tables, and room for the
    /// kernels' nine storage buffers (the parameters' among them).
    fn qmatmul_rope_append(
        &self,
        l: &Layout,
        ws: &[(&Self, QuantType, usize)],
        k: usize,
        pro: &Prologue<Self>,
        rot: &Rotary<Self>,
        (kc, kl): (&mut Self, &Layout),
        (vc, vl): (&mut Self, &Layout),
    ) -> Result<Option<Self>> {
        let Some((m, pro, odt)) = cat_plan(self, l, ws, k, pro) else {
            return Ok(None);
        };
        let ((cos, cl), (sin, sl)) = (rot.cos, rot.sin);
        let dt = self.dtype;
        let ours = |s: &Self, sl: &Layout| s.dtype == dt && sl.is_contiguous() && s.same_ctx(ROPE_OP, self).is_ok();
        let even = |o: usize| dt == DType::F32 || o.is_multiple_of(2);
        if m != 1
            || odt != dt
            || self.ctx.limits.max_storage_buffers_per_shader_stage < 9
            || !rot.d.is_multiple_of(4)
            || ws.iter().any(|w| !w.2.is_multiple_of(rot.d))
            || ![(&*kc, kl), (&*vc, vl), (cos, cl), (sin, sl)].into_iter().all(|(s, sl)| ours(s, sl))
            || !even(kl.offset())
            || !even(vl.offset())
            || kc.len.max(vc.len) > u32::MAX as usize
        {
            return Ok(None);
        }
        let q = GpuStorage::alloc(&self.ctx, dt, rot.nh * rot.d)?;
        let mut at = RopeAt {
            kc,
            vc,
            r0: 0,
            d: rot.d,
            nh: rot.nh,
            nkv: rot.nkv,
            pos: rot.pos,
            len: rot.max_len,
            k_off: kl.offset(),
            v_off: vl.offset(),
            cos: At { buf: cos, offset: cl.offset() },
            sin: At { buf: sin, offset: sl.offset() },
        };
        for &(w, qt, n) in ws {
            qmatmul_i8(self, l.offset(), w, qt, odt, (n, k, 1), None, &pro, Out::Rope { q: &q, at: &at })?;
            at.r0 += n;
        }
        Ok(Some(q))
    }

    fn sdpa_paged(&self, l: &Layout, k: View<Self>, v: View<Self>, t: &Paged<Self>) -> Result<Self> {
        paged_decode::paged_decode(&PagedArgs {
            q: (self, l),
            k,
            v,
            table: t.table,
            lens: t.lens,
            max_blocks: t.max_blocks,
            max_len: t.host_lens.iter().copied().max().unwrap_or(0),
            scale: t.scale,
            softcap: t.softcap,
            window: t.window,
        })
    }

    /// One kernel per pool, when both pools' rows fit its word layout.
    fn paged_write(
        (kp, kpl): (&mut Self, &Layout),
        (vp, vpl): (&mut Self, &Layout),
        (k, kl): View<Self>,
        (v, vl): View<Self>,
        slots: &Self,
    ) -> Result<bool> {
        let fits = |p: &Self, pl: &Layout| paged_write::fits(p.dtype, pl.dims()[3], pl.offset());
        if !fits(kp, kpl) || !fits(vp, vpl) {
            return Ok(false);
        }
        paged_write::write_rows(kp, kpl, k, kl, slots)?;
        paged_write::write_rows(vp, vpl, v, vl, slots)?;
        Ok(true)
    }

    /// The `kv/` rope + append kernel: float dtypes, `d` a multiple of 4, the product and the
    /// tables contiguous.
    fn rope_append(
        a: &RopeAppend<Self>,
        (kc, kl): (&mut Self, &Layout),
        (vc, vl): (&mut Self, &Layout),
    ) -> Result<Option<Self>> {
        let ((y, yl), (cos, cl), (sin, sl), r) = (a.qkv, a.rot.cos, a.rot.sin, &a.rot);
        if !matches!(y.dtype, DType::F32 | DType::F16 | DType::BF16)
            || !r.d.is_multiple_of(4)
            || !yl.is_contiguous()
            || !cl.is_contiguous()
            || !sl.is_contiguous()
        {
            return Ok(None);
        }
        let args = RopeKv {
            y,
            y_off: yl.offset(),
            row: yl.dims()[1],
            t: yl.dims()[0],
            nh: r.nh,
            nkv: r.nkv,
            d: r.d,
            cos,
            cos_off: cl.offset(),
            sin,
            sin_off: sl.offset(),
            pos: r.pos,
            len: r.max_len,
            k_off: kl.offset(),
            v_off: vl.offset(),
        };
        rope_kv(&args, kc, vc).map(Some)
    }

    /// One generated kernel (`fused/`) for a program the generator handles over a non-empty shape.
    fn fused(g: &Group, leaves: &[View<Self>]) -> Result<Option<Vec<Self>>> {
        if g.shape.iter().product::<usize>() == 0 || !g.spec.supported() {
            return Ok(None);
        }
        fused::run(&g.spec, fused_exprs(), &g.key, &g.shape, leaves, &g.what).map(Some)
    }
}
