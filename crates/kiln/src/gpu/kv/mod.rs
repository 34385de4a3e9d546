//! Rotary embedding of q and k plus the KV-cache append in one dispatch (`rope_kv.wgsl`),
//! for the stacked q/k/v product of a decoder layer (`KvCache::append_rope`).

use crate::gpu::kit::rope_store::rope_store;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::{self, loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Error, Result};

const SRC: &str = include_str!("rope_kv.wgsl");
/// The kernel of `dt` (f32, f16 or bf16).
pub(crate) fn source(dt: DType) -> String {
    render(
        SRC,
        &[
            ("DT", dt.as_str()),
            ("PARAMS", &RopeKvParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loader("ldy", "y", dt)),
            ("STORES", &rope_store(dt, "qo")),
        ],
    )
}

/// The operands: `t` rows of the stacked product (`row` elements apart from `y_off`), `nh` q heads
/// and `nkv` k and v heads of `d` values, cos/sin rows of `d / 2` from `cos_off` / `sin_off`, and
/// the `(1, nkv, len, d)` caches (from `k_off` / `v_off`) written at positions `pos..pos + t`.
pub(crate) struct RopeKv<'a> {
    pub(crate) y: &'a GpuStorage,
    pub(crate) y_off: usize,
    pub(crate) row: usize,
    pub(crate) t: usize,
    pub(crate) nh: usize,
    pub(crate) nkv: usize,
    pub(crate) d: usize,
    pub(crate) cos: &'a GpuStorage,
    pub(crate) cos_off: usize,
    pub(crate) sin: &'a GpuStorage,
    pub(crate) sin_off: usize,
    pub(crate) pos: usize,
    pub(crate) len: usize,
    pub(crate) k_off: usize,
    pub(crate) v_off: usize,
}

params! {
    /// The qkv projection's offset and row length, tokens t, query heads NH, the first position,
    /// the cache length, KV heads NKV, head dim D, the cos table's offset (rows of D/2, one a
    /// token), the k and v caches' offsets, the grid width in invocations, the sin table's offset.
    struct RopeKvParams {
        y_off: u32,
        row: u32,
        t: u32,
        nh: u32,
        pos: u32,
        len: u32,
        nkv: u32,
        d: u32,
        cos_off: u32,
        k_off: u32,
        v_off: u32,
        width: u32,
        sin_off: u32,
    }
}

/// Writes k and v into the caches and returns the rotated q, `(t, nh, d)`, in a fresh buffer.
/// `d` is a multiple of 4 and (16-bit dtypes) the cache offsets even: checked by the caller.
pub(crate) fn rope_kv(a: &RopeKv, kc: &GpuStorage, vc: &GpuStorage) -> Result<GpuStorage> {
    let op = "kv_cache_append_rope";
    let ctx = a.y.ctx.clone();
    for s in [a.cos, a.sin, kc, vc] {
        a.y.same_ctx(op, s)?;
    }
    let dt = a.y.dtype;
    if kc.len.max(vc.len).max(a.y_off + a.t * a.row) > u32::MAX as usize {
        return Err(Error::Gpu { op, msg: "the cache exceeds the 32-bit index range".into() });
    }
    let q = GpuStorage::alloc(&ctx, dt, a.t * a.nh * a.d)?;
    let key = format!("rope_kv:{dt}");
    let kernel = ctx.pipelines.get_with(&ctx, &key, 3, 3, || source(dt))?;
    let threads = a.t * (a.nh + 2 * a.nkv) * (a.d / 4);
    let groups = wgsl::grid(threads, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let params = RopeKvParams {
        y_off: a.y_off as u32,
        row: a.row as u32,
        t: a.t as u32,
        nh: a.nh as u32,
        pos: a.pos as u32,
        len: a.len as u32,
        nkv: a.nkv as u32,
        d: a.d as u32,
        cos_off: a.cos_off as u32,
        k_off: a.k_off as u32,
        v_off: a.v_off as u32,
        width: groups[0] * 256,
        sin_off: a.sin_off as u32,
    };
    let bufs =
        [q.buffer.raw(), kc.buffer.raw(), vc.buffer.raw(), a.y.buffer.raw(), a.cos.buffer.raw(), a.sin.buffer.raw()];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(q)
}

/// Every rope + append kernel variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        push(format!("rope_kv:{dt}"), source(dt));
    }
}
