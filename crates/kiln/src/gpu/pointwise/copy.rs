//! Strided copies: into an existing view (`copy_into`, the KV-cache append) and out of a strided view
//! into a contiguous buffer, in whole 4/8/16-byte units with plain stores where rows allow, else with
//! atomics for sub-word elements.

use super::strided::Strided;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl;
use crate::gpu::runtime::GpuStorage;
use crate::layout::collapse;
use crate::{Error, Layout, Result};

const COPY_INTO: &str = include_str!("copy_into.wgsl");

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
    let sz = dt.size_in_bytes();
    let offsets = [l.offset(), dl.offset()];
    let bufs = [src.buffer.size(), dst.buffer.size()];
    let (kernel, dims, strides, offsets) = match unit_plan(sz, &dims, &strides, offsets, bufs) {
        Some((unit, dims, strides, offsets)) => (
            ctx.pipelines.get(&ctx, &format!("copy_units:{unit}"), 1, || copy_units_source(unit))?,
            dims,
            strides,
            offsets,
        ),
        None => {
            let kernel = ctx.pipelines.get(&ctx, &format!("copy_into:{sz}"), 1, || copy_into_source(sz))?;
            (kernel, dims, [strides[0].clone(), strides[1].clone()], offsets)
        }
    };
    let count: usize = dims.iter().product();
    let mut params = Strided { n: count as u32, rank: dims.len() as u32, ..Strided::default() };
    for (k, &d) in dims.iter().enumerate() {
        params.dims[k] = d as u32;
        params.strides[k] = strides[0][k] as u32;
        params.strides[8 + k] = strides[1][k] as u32;
    }
    params.offsets[0] = offsets[0] as u32;
    params.offsets[1] = offsets[1] as u32;
    let groups = wgsl::grid(count, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let bufs = [dst.buffer.raw(), src.buffer.raw()];
    let mut exec = ctx.exec.lock().unwrap_or_else(|e| e.into_inner());
    exec.dispatch(&ctx, &kernel, &bufs, &params.words(), groups)
}

/// A contiguous copy of the strided view `l` of `src` through the unit copy, where one applies (rows
/// of a KV-cache slice, a narrowed or permuted view keeping whole words together); `None` otherwise.
pub(crate) fn copy_strided(src: &GpuStorage, l: &Layout) -> Result<Option<GpuStorage>> {
    let n = l.elem_count();
    let (dims, strides) = collapse(l.dims(), &[l.strides()]);
    if n == 0 || dims.len() > 8 {
        return Ok(None);
    }
    let mut dst = GpuStorage::alloc(&src.ctx, src.dtype, n)?;
    let mut contiguous = vec![1; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        contiguous[k] = contiguous[k + 1] * dims[k + 1];
    }
    let both = [strides[0].clone(), contiguous];
    if unit_plan(src.dtype.size_in_bytes(), &dims, &both, [l.offset(), 0], [src.buffer.size(), dst.buffer.size()])
        .is_none()
    {
        return Ok(None);
    }
    let dl = Layout::new(dims.clone().into(), both[1].clone(), 0);
    let sl = Layout::new(dims.into(), both[0].clone(), l.offset());
    copy_into(src, &sl, &mut dst, &dl)?;
    Ok(Some(dst))
}

/// The copy in whole units, if one applies: `(unit bytes, dims, [src, dst] strides, offsets)` in
/// units. Elements of 4 or 8 bytes are units of their own, any strides; wider units (up to 16 bytes)
/// need the innermost dim contiguous in both views and every size, stride, offset and buffer size in
/// bytes a multiple of the unit. `None` for sub-word elements that do not fill whole words.
#[allow(clippy::type_complexity)]
pub(crate) fn unit_plan(
    sz: usize,
    dims: &[usize],
    strides: &[Vec<usize>],
    offsets: [usize; 2],
    bufs: [u64; 2],
) -> Option<(usize, Vec<usize>, [Vec<usize>; 2], [usize; 2])> {
    let last = dims.len().checked_sub(1)?;
    let inner_unit = strides[0][last] == 1 && strides[1][last] == 1;
    let fits = |u: usize| {
        if u < sz {
            return false;
        }
        if u == sz {
            return true;
        }
        inner_unit
            && (dims[last] * sz).is_multiple_of(u)
            && offsets.iter().all(|o| (o * sz).is_multiple_of(u))
            && strides.iter().all(|s| s[..last].iter().all(|st| (st * sz).is_multiple_of(u)))
            && bufs.iter().all(|b| b.is_multiple_of(u as u64))
    };
    let unit = [16usize, 8, 4].into_iter().find(|&u| fits(u))?;
    if unit == sz {
        return Some((unit, dims.to_vec(), [strides[0].clone(), strides[1].clone()], offsets));
    }
    let mut d = dims.to_vec();
    d[last] = dims[last] * sz / unit;
    let scale = |s: &Vec<usize>| -> Vec<usize> {
        s.iter().enumerate().map(|(k, &st)| if k == last { 1 } else { st * sz / unit }).collect()
    };
    Some((unit, d, [scale(&strides[0]), scale(&strides[1])], [offsets[0] * sz / unit, offsets[1] * sz / unit]))
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
    render(COPY_INTO, &[("DST", "atomic<u32>"), ("SRC", "u32"), ("PARAMS", &Strided::wgsl()), ("BODY", &body)])
}

/// The strided copy in units of `unit` bytes (4, 8 or 16), plain stores.
pub(crate) fn copy_units_source(unit: usize) -> String {
    let ty = unit_type(unit);
    render(COPY_INTO, &[("DST", ty), ("SRC", ty), ("PARAMS", &Strided::wgsl()), ("BODY", "dst[d] = src[s];")])
}

/// The WGSL type of a raw-bit unit of `bytes` bytes.
pub(crate) fn unit_type(bytes: usize) -> &'static str {
    match bytes {
        4 => "u32",
        8 => "vec2<u32>",
        16 => "vec4<u32>",
        _ => unreachable!("index units are 4, 8 or 16 bytes"),
    }
}
