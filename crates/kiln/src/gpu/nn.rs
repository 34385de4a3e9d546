//! The RoPE launcher (softmax and the norms are in `rowwise.rs`).

use super::elementwise::{Elementwise, FUNCS};
use super::{BackendStorage, GpuStorage};
use crate::{Layout, Result};

pub(crate) fn rope_body(interleaved: bool) -> String {
    if interleaved {
        "let d = p[37]; let t = p[38]; let half = d / 2u; let j = e % d; let pos = (e / d) % t; \
         let row = p[34] + e - j; let i = j / 2u; let x1 = ld0(row + 2u * i); let x2 = ld0(row + 2u * i + 1u); \
         let c = ld1(p[35] + pos * half + i); let s = ld2(p[36] + pos * half + i); \
         return select(x1 * s + x2 * c, x1 * c - x2 * s, (j & 1u) == 0u);"
            .into()
    } else {
        "let d = p[37]; let t = p[38]; let half = d / 2u; let j = e % d; let pos = (e / d) % t; \
         let row = p[34] + e - j; let i = j % half; let x1 = ld0(row + i); let x2 = ld0(row + i + half); \
         let c = ld1(p[35] + pos * half + i); let s = ld2(p[36] + pos * half + i); \
         return select(x2 * c + x1 * s, x1 * c - x2 * s, j < half);"
            .into()
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
    let (copy, off, _, d) = super::rowwise::rows(x, l)?;
    let src = copy.as_ref().unwrap_or(x);
    let cos_c = cos.copy_contiguous(cl)?;
    let sin_c = sin.copy_contiguous(sl)?;
    let n = l.elem_count();
    let t = l.dims()[l.rank() - 2];
    let body = rope_body(interleaved);
    let l0 = Layout::new(vec![n].into(), vec![0], off);
    let l1 = Layout::new(vec![n].into(), vec![0], 0);
    Elementwise {
        name: format!("rope:{interleaved}"),
        inputs: vec![(src, &l0), (&cos_c, &l1), (&sin_c, &l1)],
        out: x.dtype,
        body,
        funcs: FUNCS,
        consts: vec![d as u32, t as u32],
        raw: Some(n),
    }
    .run()
}
