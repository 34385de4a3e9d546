//! The launch of one chosen kernel: its parameters (`CoopParams`, config.rs), the output, the
//! bindings and the dispatch of one workgroup per output tile, K split and batch entry; for split K,
//! the sum of the partial products (`splitsum.wgsl`, or the generic split-K sum for odd lengths).

use super::config::{Config, CoopParams, Out};
use super::emit::source;
use crate::gpu::matmul::problem::MatmulShape;
use crate::gpu::matmul::splitk_sum;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::{wgsl, GpuStorage};
use crate::{DType, Layout, Result};

const SPLITSUM: &str = include_str!("splitsum.wgsl");

params! {
    /// The split sum's parameters: output pairs, splits.
    struct SplitSumParams { len: u32, splits: u32 }
}

/// The split sum writing pairs of f16 (`bf16: false`) or bf16 values.
pub(super) fn splitsum_source(bf16: bool) -> String {
    let pack = if bf16 { "bf16_bits(a.x) | (bf16_bits(a.y) << 16u)" } else { "pack2x16float(a)" };
    render(SPLITSUM, &[("PARAMS", &SplitSumParams::wgsl()), ("PRELUDE", wgsl::PRELUDE), ("PACK", pack)])
}

#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    a: &GpuStorage,
    al: &Layout,
    b: &GpuStorage,
    bl: &Layout,
    c: &Config,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    (bd, bs): (&[usize], &[Vec<usize>]),
    tiles: usize,
    mx: Option<(&GpuStorage, &GpuStorage)>,
    (splits, kper): (usize, usize),
) -> Result<GpuStorage> {
    let ctx = &a.ctx;
    let rank = al.rank();
    let bf16 = c.out.bf16();
    let inputs = 4 + 2 * bf16 as usize;
    let kernel = ctx.pipelines.get(ctx, &c.key(), inputs, || source(c))?;
    let out_dtype = match c.out {
        Out::F16 => DType::F16,
        Out::Bf16Pairs => DType::BF16,
        Out::Bf16ViaF32 => DType::F32,
    };
    let len = batch * m * n;
    let out = if c.split {
        GpuStorage::alloc(ctx, DType::F32, splits * len)?
    } else {
        GpuStorage::alloc(ctx, out_dtype, len)?
    };
    let st = |l: &Layout, i: usize| l.strides()[i] as u32;
    let mut shape = MatmulShape {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        a_off: al.offset() as u32,
        b_off: bl.offset() as u32,
        a_so: st(al, rank - 2),
        a_sk: st(al, rank - 1),
        b_sk: st(bl, rank - 2),
        b_so: st(bl, rank - 1),
        rank: if batch > 1 { bd.len() as u32 } else { 0 },
        ..MatmulShape::default()
    };
    if batch > 1 {
        for (i, &d) in bd.iter().enumerate() {
            shape.bdims[i] = d as u32;
            shape.a_batch[i] = bs[0][i] as u32;
            shape.b_batch[i] = bs[1][i] as u32;
        }
    }
    let params = CoopParams {
        base: shape,
        tiles_m: m.div_ceil(c.bm() as usize) as u32,
        tiles_n: n.div_ceil(c.bn() as usize) as u32,
        // Loop bounds of the emulated kernel.
        lane_elems: c.s * c.s / c.sg,
        frag: c.s,
        kper: kper as u32,
        part: len as u32,
    };
    let groups = [tiles as u32, splits as u32, batch as u32];
    // Each operand is bound twice: 4 halves at a time and one at a time (edges, general strides).
    let mut bufs = vec![out.buffer.raw(), a.buffer.raw(), a.buffer.raw(), b.buffer.raw(), b.buffer.raw()];
    if let Some((ma, mb)) = mx {
        bufs.extend([ma.buffer.raw(), mb.buffer.raw()]);
    }
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)?;
    if c.split {
        return sum_splits(&out, splits, len, c.out.bf16());
    }
    if c.out == Out::Bf16ViaF32 {
        return out.finish(DType::BF16);
    }
    Ok(out)
}

/// The result of a split product from its `splits` f32 planes of `len` outputs: f16 or bf16 pairs
/// in one pass where `len` is even, else the generic split-K sum to f32 and a cast.
fn sum_splits(part: &GpuStorage, splits: usize, len: usize, bf16: bool) -> Result<GpuStorage> {
    let ctx = &part.ctx;
    let dtype = if bf16 { DType::BF16 } else { DType::F16 };
    if len % 2 == 1 {
        let sum = GpuStorage::alloc(ctx, DType::F32, len)?;
        splitk_sum(ctx, &sum, part, len, splits)?;
        return sum.finish(dtype);
    }
    let out = GpuStorage::alloc(ctx, dtype, len)?;
    let key = if bf16 { "matmul_coop_splitsum_bf16" } else { "matmul_coop_splitsum_f16" };
    let kernel = ctx.pipelines.get(ctx, key, 1, || splitsum_source(bf16))?;
    let pairs = len / 2;
    let groups = wgsl::grid(pairs, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let params = SplitSumParams { len: pairs as u32, splits: splits as u32 };
    let bufs = [out.buffer.raw(), part.buffer.raw()];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(out)
}
