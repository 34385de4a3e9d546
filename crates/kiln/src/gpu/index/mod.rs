//! Fills, strided copies into existing buffers, `index_select` and `gather`.

use crate::gpu::pointwise::copy::unit_type;
use crate::gpu::pointwise::Elementwise;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl;
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Error, Layout, Result};

const INDEX_ROWS: &str = include_str!("index_rows.wgsl");

/// `id_at(j)` of `index_rows.wgsl`: id `j` of the ids buffer as u32, out-of-range values (negative,
/// or an i64 with a nonzero high word) as 0xffffffff.
fn id_load(ids: DType) -> &'static str {
    match ids {
        DType::I64 => "let lo = ids[2u * j]; return select(0xffffffffu, lo, ids[2u * j + 1u] == 0u);",
        DType::U8 => "return (ids[j >> 2u] >> (8u * (j & 3u))) & 0xffu;",
        // A negative i32 reads as a u32 of at least 2^31, past any axis a binding can hold.
        _ => "return ids[j];",
    }
}

/// The same read inside an elementwise kernel (ids are its input 1), at element `x`.
fn id_expr(ids: DType, x: &str) -> String {
    match ids {
        DType::I64 => format!("select(0xffffffffu, in1[2u * ({x})], in1[2u * ({x}) + 1u] == 0u)"),
        DType::I32 => format!("bitcast<u32>(ld1({x}))"),
        _ => format!("ld1({x})"),
    }
}

const ROWS_BODY: &str = "let inner = p.inner; let i = w % inner; let r = w / inner; let j = r % p.nid; let o = r / p.nid; \
     let id = id_at(p.ids_off + j); if (id >= p.dim) { return 0xffffffffu; } return p.src_off + (o * p.dim + id) * inner + i;";
const GATHER_BODY: &str = "let id = id_at(p.ids_off + w); if (id >= p.dim) { return 0xffffffffu; } var rem = w; \
     var off = p.src_off; for (var d = p.rank; d > 0u; d--) { let k = d - 1u; let idx = rem % p.dims[k]; \
     rem /= p.dims[k]; off += select(idx, id, k == p.axis) * p.strides[k]; } return off;";

params! {
    /// index_select in units: units out, units per row inside the axis, ids, the axis length, the
    /// source offset (units) and the ids' offset.
    struct RowsParams { units: u32, inner: u32, nid: u32, dim: u32, src_off: u32, ids_off: u32 }
}

params! {
    /// gather, one unit per element: elements, rank, axis, the axis length, the source offset
    /// (units), the ids' offset, the ids' (= output) dims and the source strides (units).
    struct GatherParams {
        units: u32,
        rank: u32,
        axis: u32,
        dim: u32,
        src_off: u32,
        ids_off: u32,
        dims: [u32; 8],
        strides: [u32; 8],
    }
}

params! {
    /// The op constants of index_select's elementwise fallback: units per row inside the axis,
    /// ids, the axis length.
    pub(crate) struct SelectOp { inner: u32, nid: u32, dim: u32 }
}

params! {
    /// The op constants of gather's elementwise fallback: rank, axis, the axis length, the output
    /// dims and the source strides.
    pub(crate) struct GatherOp { rank: u32, axis: u32, dim: u32, dims: [u32; 8], strides: [u32; 8] }
}

/// The raw-bit kernel of `index_rows.wgsl`: rows (index_select) or elements (gather) in units of
/// `unit` bytes, ids of dtype `ids`.
pub(crate) fn rows_source(unit: usize, ids: DType, gather: bool) -> String {
    let (body, params) = if gather { (GATHER_BODY, GatherParams::wgsl()) } else { (ROWS_BODY, RowsParams::wgsl()) };
    render(INDEX_ROWS, &[("UNIT", unit_type(unit)), ("PARAMS", &params), ("ID", id_load(ids)), ("BODY", body)])
}

/// The elementwise fallback for rows of sub-word elements that do not fill whole words.
pub(crate) fn index_select_body(out: DType, ids: DType) -> String {
    format!(
        "let inner = p.op.inner; let nid = p.op.nid; let dim = p.op.dim; let i = e % inner; let j = (e / inner) % nid; \
         let o = e / (inner * nid); let id = {}; if (id >= dim) {{ return {}(0); }} \
         return ld0(p.offsets[0] + (o * dim + id) * inner + i);",
        id_expr(ids, "p.offsets[1] + j"),
        wgsl::ct(out)
    )
}

/// The elementwise fallback of `gather` for elements narrower than a word.
pub(crate) fn gather_body(out: DType, ids: DType) -> String {
    format!(
        "let j = e; let id = {}; if (id >= p.op.dim) {{ return {}(0); }} var rem = e; var off = p.offsets[0]; \
         for (var d = p.op.rank; d > 0u; d--) {{ let k = d - 1u; let idx = rem % p.op.dims[k]; rem /= p.op.dims[k]; \
         off += select(idx, id, k == p.op.axis) * p.op.strides[k]; }} return ld0(off);",
        id_expr(ids, "p.offsets[1] + j"),
        wgsl::ct(out)
    )
}

/// The ids as a contiguous buffer and the element offset of the first id (no copy when they are
/// contiguous already).
fn contiguous_ids(ids: &GpuStorage, il: &Layout) -> Result<(Option<GpuStorage>, usize)> {
    if il.is_contiguous() {
        Ok((None, il.offset()))
    } else {
        Ok((Some(GpuStorage::copy_contiguous(ids, il)?), 0))
    }
}

/// Launches `index_rows.wgsl` writing `units` units of `unit` bytes into `out`.
fn run_rows(
    src: &GpuStorage,
    ids: &GpuStorage,
    out: GpuStorage,
    unit: usize,
    gather: bool,
    (units, params): (usize, &[u32]),
) -> Result<GpuStorage> {
    let ctx = src.ctx.clone();
    let key = format!("index_rows:{}:{unit}:{}", if gather { "gather" } else { "rows" }, ids.dtype);
    let idt = ids.dtype;
    let kernel = ctx.pipelines.get(&ctx, &key, 2, || rows_source(unit, idt, gather))?;
    let groups = wgsl::grid(units, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let bufs = [out.buffer.raw(), src.buffer.raw(), ids.buffer.raw()];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, params, groups)?;
    Ok(out)
}

/// An error unless `count` units (or elements) can be indexed in 32 bits.
fn check_count(op: &'static str, count: usize) -> Result<()> {
    if count >= u32::MAX as usize {
        return Err(Error::Gpu { op, msg: format!("{count} output elements exceed the 32-bit index range") });
    }
    Ok(())
}

/// The widest unit (16, 8 or 4 bytes) dividing every byte count in `bytes` and the size of every
/// buffer in `bufs`; `None` when not even a word does.
fn widest_unit(bytes: &[usize], bufs: &[u64]) -> Option<usize> {
    [16usize, 8, 4]
        .into_iter()
        .find(|&u| bytes.iter().all(|b| b.is_multiple_of(u)) && bufs.iter().all(|b| b.is_multiple_of(u as u64)))
}

/// Entries of `axis` picked by `ids`. Ids are read on the device (no host round trip); an id outside
/// the axis gives zeros (the host-side API checks ids only on the CPU backend, see `ops/index.rs`).
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
        src_c = GpuStorage::copy_contiguous(src, l)?;
        &src_c
    };
    let base = if l.is_contiguous() { l.offset() } else { 0 };
    let (ids_c, id_off) = contiguous_ids(ids, il)?;
    let ids = ids_c.as_ref().unwrap_or(ids);
    let dims = l.dims();
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    let nid = il.elem_count();
    let n = outer * nid * inner;
    let dt = src.dtype;
    let sz = dt.size_in_bytes();
    check_count("index_select", n)?;
    let out = GpuStorage::alloc(&src.ctx, dt, n)?;
    if let Some(unit) = widest_unit(&[inner * sz, base * sz], &[src.buffer.size(), out.buffer.size()]) {
        let units = (n * sz) / unit;
        let params = RowsParams {
            units: units as u32,
            inner: ((inner * sz) / unit) as u32,
            nid: nid as u32,
            dim: dims[axis] as u32,
            src_off: ((base * sz) / unit) as u32,
            ids_off: id_off as u32,
        };
        return run_rows(src, ids, out, unit, false, (units, &params.words()));
    }
    drop(out);
    let l0 = Layout::new(vec![n].into(), vec![0], base);
    let l1 = Layout::new(vec![n].into(), vec![0], id_off);
    Elementwise {
        name: "index_select".into(),
        inputs: vec![(src, &l0), (ids, &l1)],
        out: dt,
        body: index_select_body(dt, ids.dtype),
        funcs: "",
        op: Some(SelectOp { inner: inner as u32, nid: nid as u32, dim: dims[axis] as u32 }.block()),
        raw: Some(n),
    }
    .run()
}

/// PyTorch `gather` along `axis`, ids read on the device; an id outside the axis gives zero.
pub(crate) fn gather(src: &GpuStorage, l: &Layout, ids: &GpuStorage, il: &Layout, axis: usize) -> Result<GpuStorage> {
    let (ids_c, id_off) = contiguous_ids(ids, il)?;
    let ids = ids_c.as_ref().unwrap_or(ids);
    let rank = l.rank();
    if rank > 8 {
        return Err(Error::Gpu { op: "gather", msg: format!("rank {rank} is not supported (max 8)") });
    }
    let n = il.elem_count();
    let dt = src.dtype;
    let sz = dt.size_in_bytes();
    let dim = l.dims()[axis] as u32;
    check_count("gather", n)?;
    if sz >= 4 {
        // One unit per element: strides and offset in elements are strides in units.
        let mut params = GatherParams {
            units: n as u32,
            rank: rank as u32,
            axis: axis as u32,
            dim,
            src_off: l.offset() as u32,
            ids_off: id_off as u32,
            ..GatherParams::default()
        };
        fill(&mut params.dims, il.dims());
        fill(&mut params.strides, l.strides());
        let out = GpuStorage::alloc(&src.ctx, dt, n)?;
        return run_rows(src, ids, out, sz, true, (n, &params.words()));
    }
    let mut op = GatherOp { rank: rank as u32, axis: axis as u32, dim, ..GatherOp::default() };
    fill(&mut op.dims, il.dims());
    fill(&mut op.strides, l.strides());
    let l0 = Layout::new(vec![n].into(), vec![0], l.offset());
    let l1 = Layout::new(vec![n].into(), vec![0], id_off);
    Elementwise {
        name: "gather".into(),
        inputs: vec![(src, &l0), (ids, &l1)],
        out: dt,
        body: gather_body(dt, ids.dtype),
        funcs: "",
        op: Some(op.block()),
        raw: Some(n),
    }
    .run()
}

/// Writes `v` into the leading words of `out`.
fn fill(out: &mut [u32], v: &[usize]) {
    for (o, &x) in out.iter_mut().zip(v) {
        *o = x as u32;
    }
}
