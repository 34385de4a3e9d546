//! The RoPE launcher (softmax and the norms are in `rowwise/`).
//!
//! One elementwise kernel reads `x` through its strides (a `(b, t, h, d)` projection viewed as
//! `(b, h, t, d)` needs no copy first) and the cos/sin tables at their offsets (rows of a cached
//! table, see `ops/rotary_embedding.rs`), so a call is one dispatch.

use crate::gpu::pointwise::Elementwise;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::GpuStorage;
use crate::{Layout, Result};

params! {
    /// The op constants (`p.op`): head dim, positions, heads, and the strides of x along (b, h, t, d).
    pub(crate) struct RopeOp { d: u32, t: u32, h: u32, strides: [u32; 4] }
}

/// Element `e` of the contiguous output is position `(e / d) % t` of row `e / d`.
const ROW: &str = "let d = p.op.d; let t = p.op.t; let half = d / 2u; let j = e % d; let r = e / d; let pos = r % t; \
     let row = p.offsets[0] + (r / (t * p.op.h)) * p.op.strides[0] + ((r / t) % p.op.h) * p.op.strides[1] + pos * p.op.strides[2]; let sd = p.op.strides[3]; \
     let c = ld1(p.offsets[1] + pos * half + i); let s = ld2(p.offsets[2] + pos * half + i);";

pub(crate) fn rope_body(interleaved: bool) -> String {
    // `i` is needed by the table reads in ROW: bind it first.
    if interleaved {
        format!(
            "let i = (e % p.op.d) / 2u; {ROW} let x1 = ld0(row + 2u * i * sd); let x2 = ld0(row + (2u * i + 1u) * sd); \
             return select(x1 * s + x2 * c, x1 * c - x2 * s, (j & 1u) == 0u);"
        )
    } else {
        format!(
            "let i = (e % p.op.d) % (p.op.d / 2u); {ROW} let x1 = ld0(row + i * sd); let x2 = ld0(row + (i + half) * sd); \
             return select(x2 * c + x1 * s, x1 * c - x2 * s, j < half);"
        )
    }
}

pub(crate) fn rope(
    x: &GpuStorage,
    l: &Layout,
    cos: &GpuStorage,
    cl: &Layout,
    sin: &GpuStorage,
    sl: &Layout,
    interleaved: bool,
) -> Result<GpuStorage> {
    // Tables are (t, d/2); a contiguous one (a row range of a cached table) is read in place.
    let (cos_c, sin_c);
    let (cos, co) = if cl.is_contiguous() {
        (cos, cl.offset())
    } else {
        cos_c = cos.copy_contiguous(cl)?;
        (&cos_c, 0)
    };
    let (sin, so) = if sl.is_contiguous() {
        (sin, sl.offset())
    } else {
        sin_c = sin.copy_contiguous(sl)?;
        (&sin_c, 0)
    };
    let n = l.elem_count();
    let (dims, st) = (l.dims(), l.strides());
    let (h, t, d) = (dims[1], dims[2], dims[3]);
    let l0 = Layout::new(vec![n].into(), vec![0], l.offset());
    let l1 = Layout::new(vec![n].into(), vec![0], co);
    let l2 = Layout::new(vec![n].into(), vec![0], so);
    let op = RopeOp { d: d as u32, t: t as u32, h: h as u32, strides: [st[0], st[1], st[2], st[3]].map(|s| s as u32) };
    Elementwise {
        name: format!("rope:{interleaved}"),
        inputs: vec![(x, &l0), (cos, &l1), (sin, &l2)],
        out: x.dtype,
        body: rope_body(interleaved),
        funcs: "",
        op: Some(op.block()),
        raw: Some(n),
    }
    .run()
}
