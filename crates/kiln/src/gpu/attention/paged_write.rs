//! Stores each sequence's new key or value row into a paged KV pool in one dispatch
//! (`paged_write.wgsl`): the batched decode step's KV append, without one copy per sequence. The
//! API checks shapes, dtypes and the slots (inside the pool) before this runs.

use super::dispatch;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Layout, Result};

const WRITE: &str = include_str!("paged_write.wgsl");

params! {
    /// Words to write, heads h, row length e, the pool's block size and offset (elements), the
    /// source's offset and sequence/head/element strides.
    struct WriteParams {
        words: u32,
        h: u32,
        e: u32,
        block_size: u32,
        pool_off: u32,
        src_off: u32,
        src_ss: u32,
        src_sh: u32,
        src_se: u32,
    }
}

/// Elements per u32 word of the pool.
fn pack(dt: DType) -> usize {
    if dt == DType::F32 {
        1
    } else {
        2
    }
}

pub(crate) fn write_source(dt: DType) -> String {
    let store = match dt {
        DType::F16 => "    dst[at >> 1u] = pack2x16float(vec2<f32>(ld0(src), ld0(src + p.src_se)));",
        DType::BF16 => "    dst[at >> 1u] = bf16_bits(ld0(src)) | (bf16_bits(ld0(src + p.src_se)) << 16u);",
        _ => "    dst[at] = bitcast<u32>(ld0(src));",
    };
    render(
        WRITE,
        &[
            ("PARAMS", &WriteParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADER", &loader("ld0", "in0", dt)),
            ("PACK", &pack(dt).to_string()),
            ("STORE", store),
        ],
    )
}

pub(crate) fn catalog() -> Vec<(String, String)> {
    [DType::F32, DType::F16, DType::BF16].map(|dt| (format!("attention_paged_write:{dt}"), write_source(dt))).into()
}

/// Whether the kernel can write rows of `e` elements into a pool of `dt` starting at element
/// `offset` (16-bit rows must fill whole words).
pub(crate) fn fits(dt: DType, e: usize, offset: usize) -> bool {
    matches!(dt, DType::F32 | DType::F16 | DType::BF16)
        && (pack(dt) == 1 || (e.is_multiple_of(2) && offset.is_multiple_of(2)))
}

/// Writes `src` `(b, h, 1, e)` into `pool` `(blocks, h, block_size, e)` at the flat slots `slots`
/// (u32 `(b,)`, from element 0).
pub(crate) fn write_rows(
    pool: &GpuStorage,
    pl: &Layout,
    src: &GpuStorage,
    sl: &Layout,
    slots: &GpuStorage,
) -> Result<()> {
    src.same_ctx("kv_block_pool", pool)?;
    slots.same_ctx("kv_block_pool", pool)?;
    let dt = pool.dtype;
    let (b, h, e) = (sl.dims()[0], sl.dims()[1], sl.dims()[3]);
    let words = b * h * e / pack(dt);
    if words == 0 {
        return Ok(());
    }
    let st = sl.strides();
    let params = WriteParams {
        words: words as u32,
        h: h as u32,
        e: e as u32,
        block_size: pl.dims()[2] as u32,
        pool_off: pl.offset() as u32,
        src_off: sl.offset() as u32,
        src_ss: st[0] as u32,
        src_sh: st[1] as u32,
        src_se: st[3] as u32,
    }
    .words();
    let bufs = [pool.buffer.raw(), src.buffer.raw(), slots.buffer.raw()];
    dispatch(pool, format!("attention_paged_write:{dt}"), || write_source(dt), &bufs, &params, words.div_ceil(256), 1)
}
