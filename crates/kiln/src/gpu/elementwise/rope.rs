//! The RoPE launcher (softmax and the norms are in `rowwise.rs`).
//!
//! One elementwise kernel reads `x` through its strides (a `(b, t, h, d)` projection viewed as
//! `(b, h, t, d)` needs no copy first) and the cos/sin tables at their offsets (rows of a cached
//! table, see `ops/rope.rs`), so a call is one dispatch.

use crate::gpu::pointwise::Elementwise;
use crate::gpu::runtime::GpuStorage;
use crate::{Layout, Result};

/// Params after the elementwise block: p[37] d, p[38] t, p[39] h, p[40..44] strides of x along
/// (b, h, t, d). Element `e` of the contiguous output is position `(e / d) % t` of row `e / d`.
const ROW: &str = "let d = p[37]; let t = p[38]; let half = d / 2u; let j = e % d; let r = e / d; let pos = r % t; \
     let row = p[34] + (r / (t * p[39])) * p[40] + ((r / t) % p[39]) * p[41] + pos * p[42]; let sd = p[43]; \
     let c = ld1(p[35] + pos * half + i); let s = ld2(p[36] + pos * half + i);";

pub(crate) fn rope_body(interleaved: bool) -> String {
    // `i` is needed by the table reads in ROW: bind it first.
    if interleaved {
        format!(
            "let i = (e % p[37]) / 2u; {ROW} let x1 = ld0(row + 2u * i * sd); let x2 = ld0(row + (2u * i + 1u) * sd); \
             return select(x1 * s + x2 * c, x1 * c - x2 * s, (j & 1u) == 0u);"
        )
    } else {
        format!(
            "let i = (e % p[37]) % (p[37] / 2u); {ROW} let x1 = ld0(row + i * sd); let x2 = ld0(row + (i + half) * sd); \
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
    let mut consts = vec![d as u32, t as u32, h as u32];
    consts.extend(st.iter().map(|&s| s as u32));
    Elementwise {
        name: format!("rope:{interleaved}"),
        inputs: vec![(x, &l0), (cos, &l1), (sin, &l2)],
        out: x.dtype,
        body: rope_body(interleaved),
        funcs: "",
        consts,
        raw: Some(n),
    }
    .run()
}
