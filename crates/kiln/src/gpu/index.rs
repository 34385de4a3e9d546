//! Fills, strided copies into existing buffers, `index_select` and `gather`.

use super::elementwise::{Elementwise, FUNCS};
use super::kernels::render;
use super::wgsl;
use super::GpuStorage;
use crate::layout::collapse;
use crate::{DType, Error, Layout, Result};

const FILL: &str = include_str!("fill.wgsl");
const COPY_INTO: &str = include_str!("copy_into.wgsl");

/// Fills the whole buffer of `s` with the repeating word pattern `words` (1 or 2 words).
pub(crate) fn fill_words(s: &GpuStorage, words: &[u32]) -> Result<()> {
    let ctx = &s.ctx;
    let kernel = ctx.pipelines.get(ctx, "fill", 0, fill_source)?;
    let n = (s.buffer.size() / 4) as usize;
    let mut params = vec![n as u32, words.len() as u32];
    params.extend_from_slice(words);
    let groups = wgsl::grid(n, 256, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &[s.buffer.raw()], &params, groups)
}

pub(crate) fn copy_into(src: &GpuStorage, l: &Layout, dst: &mut GpuStorage, dl: &Layout) -> Result<()> {
    let n = l.elem_count();
    if n == 0 {
        return Ok(());
    }
    let (dims, strides) = collapse(l.dims(), &[l.strides(), dl.strides()]);
    if dims.len() > 8 {
        return Err(Error::Gpu { op: "copy_into", msg: format!("rank {} views are not supported", dims.len()) });
    }
    let dt = src.dtype;
    let ctx = src.ctx.clone();
    let key = format!("copy_into:{}", dt.size_in_bytes());
    let kernel = ctx.pipelines.get(&ctx, &key, 1, || copy_into_source(dt.size_in_bytes()))?;
    let mut params = vec![0u32; 36];
    params[0] = n as u32;
    params[1] = dims.len() as u32;
    for (k, &d) in dims.iter().enumerate() {
        params[2 + k] = d as u32;
        params[10 + k] = strides[0][k] as u32;
        params[18 + k] = strides[1][k] as u32;
    }
    params[34] = l.offset() as u32;
    params[35] = dl.offset() as u32;
    let groups = wgsl::grid(n, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let bufs = [dst.buffer.raw(), src.buffer.raw()];
    let mut exec = ctx.exec.lock().unwrap_or_else(|e| e.into_inner());
    exec.dispatch(&ctx, &kernel, &bufs, &params, groups)
}

/// The strided-scatter kernel for elements of `size` bytes.
pub(crate) fn copy_into_source(size: usize) -> String {
    let body = match size {
        4 => "atomicStore(&dst[d], src[s]);".to_string(),
        8 => "atomicStore(&dst[2u * d], src[2u * s]); atomicStore(&dst[2u * d + 1u], src[2u * s + 1u]);".to_string(),
        sz => {
            let (per, mask) = if sz == 2 { (2, "0xffffu") } else { (4, "0xffu") };
            format!(
                "let bits = (src[s / {per}u] >> ({b}u * (s % {per}u))) & {mask}; let sh = {b}u * (d % {per}u); \
                 atomicAnd(&dst[d / {per}u], ~({mask} << sh)); atomicOr(&dst[d / {per}u], bits << sh);",
                b = 8 * sz
            )
        }
    };
    render(COPY_INTO, &[("BODY", &body)])
}

pub(crate) fn fill_source() -> String {
    FILL.to_string()
}

/// Reads index `j` of the ids buffer as u32.
fn id_expr(ids: DType) -> &'static str {
    match wgsl::ct(ids) {
        "i32" => "u32(ld1(p[35] + j))",
        _ => "ld1(p[35] + j)",
    }
}

pub(crate) fn index_select_body(ids: DType) -> String {
    format!(
        "let inner = p[37]; let nid = p[38]; let dim = p[39]; let i = e % inner; let j = (e / inner) % nid; \
         let o = e / (inner * nid); let id = {}; return ld0(p[34] + (o * dim + id) * inner + i);",
        id_expr(ids)
    )
}

pub(crate) fn gather_body(ids: DType) -> String {
    format!(
        "let j = e; let id = {}; var rem = e; var off = p[34]; \
         for (var d = p[37]; d > 0u; d--) {{ let k = d - 1u; let idx = rem % p[39u + k]; rem /= p[39u + k]; \
         off += select(idx, id, k == p[38]) * p[47u + k]; }} return ld0(off);",
        id_expr(ids)
    )
}

pub(crate) fn index_select(
    src: &GpuStorage,
    l: &Layout,
    ids: &GpuStorage,
    il: &Layout,
    axis: usize,
) -> Result<GpuStorage> {
    let src_c;
    let src = if l.is_contiguous() {
        src
    } else {
        src_c = super::BackendStorage::copy_contiguous(src, l)?;
        &src_c
    };
    let base = if l.is_contiguous() { l.offset() } else { 0 };
    let ids_c = super::BackendStorage::copy_contiguous(ids, il)?;
    let dims = l.dims();
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let nid = il.elem_count();
    let n = outer * nid * inner;
    let body = index_select_body(ids.dtype);
    let l0 = Layout::new(vec![n].into(), vec![0], base);
    let l1 = Layout::new(vec![n].into(), vec![0], 0);
    Elementwise {
        name: "index_select".into(),
        inputs: vec![(src, &l0), (&ids_c, &l1)],
        out: src.dtype,
        body,
        funcs: FUNCS,
        consts: vec![inner as u32, nid as u32, dims[axis] as u32],
        raw: Some(n),
    }
    .run()
}

pub(crate) fn gather(src: &GpuStorage, l: &Layout, ids: &GpuStorage, il: &Layout, axis: usize) -> Result<GpuStorage> {
    let ids_c = super::BackendStorage::copy_contiguous(ids, il)?;
    let rank = l.rank();
    if rank > 8 {
        return Err(Error::Gpu { op: "gather", msg: format!("rank {rank} is not supported (max 8)") });
    }
    let n = il.elem_count();
    let mut consts = vec![rank as u32, axis as u32];
    consts.extend(il.dims().iter().map(|&d| d as u32));
    consts.resize(10, 0);
    consts.extend(l.strides().iter().map(|&s| s as u32));
    consts.resize(18, 0);
    let body = gather_body(ids.dtype);
    let l0 = Layout::new(vec![n].into(), vec![0], l.offset());
    let l1 = Layout::new(vec![n].into(), vec![0], 0);
    Elementwise {
        name: "gather".into(),
        inputs: vec![(src, &l0), (&ids_c, &l1)],
        out: src.dtype,
        body,
        funcs: FUNCS,
        consts,
        raw: Some(n),
    }
    .run()
}
