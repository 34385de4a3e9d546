//! The launch of one chosen kernel: its parameters (`CoopParams`, config.rs), the output, the
//! bindings and the dispatch of one workgroup per output tile and batch entry.

use super::config::{Config, CoopParams, Out};
use super::emit::source;
use crate::gpu::matmul::problem::MatmulShape;
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Layout, Result};

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
    mx: Option<&GpuStorage>,
) -> Result<GpuStorage> {
    let ctx = &a.ctx;
    let rank = al.rank();
    let bf16 = c.out.bf16();
    let inputs = 4 + bf16 as usize;
    let kernel = ctx.pipelines.get(ctx, &c.key(), inputs, || source(c))?;
    let out_dtype = match c.out {
        Out::F16 => DType::F16,
        Out::Bf16Pairs => DType::BF16,
        Out::Bf16ViaF32 => DType::F32,
    };
    let out = GpuStorage::alloc(ctx, out_dtype, batch * m * n)?;
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
        mx_b: (batch * m) as u32,
    };
    let groups = [tiles as u32, 1, batch as u32];
    // Each operand is bound twice: 4 halves at a time and one at a time (edges, general strides).
    let mut bufs = vec![out.buffer.raw(), a.buffer.raw(), a.buffer.raw(), b.buffer.raw(), b.buffer.raw()];
    bufs.extend(mx.map(|mx| mx.buffer.raw()));
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)?;
    if c.out == Out::Bf16ViaF32 {
        return out.finish(DType::BF16);
    }
    Ok(out)
}
