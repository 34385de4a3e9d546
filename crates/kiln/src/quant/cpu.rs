//! CPU kernels on the planar layout: quantisation and dequantisation block by block, and the
//! quantized matrix product for few rows, which dequantises one weight row at a time into a
//! thread-local buffer (never the whole matrix) and takes its dot products with every input row;
//! rows of the weight are split over rayon's threads, and the dots run on 8 independent partial
//! sums so that they vectorise.

use super::formats::{dequant_block, quant_block};
use super::{planar_block, QuantType};
use rayon::prelude::*;

/// Blocks per parallel task.
const TASK_BLOCKS: usize = 256;

/// ggml block bytes of `x` (`blocks` blocks).
pub(crate) fn quantize(qt: QuantType, x: &[f32], blocks: usize) -> Vec<u8> {
    let (be, bb) = (qt.block_elems(), qt.block_bytes());
    let mut raw = vec![0u8; blocks * bb];
    raw.par_chunks_mut(bb * TASK_BLOCKS).zip(x.par_chunks(be * TASK_BLOCKS)).for_each(|(out, x)| {
        for (o, v) in out.chunks_exact_mut(bb).zip(x.chunks_exact(be)) {
            quant_block(qt, v, o);
        }
    });
    raw
}

/// Every value of planar `bytes` (`blocks` blocks) in f32.
pub(crate) fn dequantize(qt: QuantType, bytes: &[u8], blocks: usize) -> Vec<f32> {
    let be = qt.block_elems();
    let mut out = vec![0f32; blocks * be];
    out.par_chunks_mut(be * TASK_BLOCKS).enumerate().for_each(|(t, chunk)| {
        for (i, o) in chunk.chunks_exact_mut(be).enumerate() {
            let (body, d) = planar_block(qt, bytes, blocks, t * TASK_BLOCKS + i);
            dequant_block(qt, body, d, o);
        }
    });
    out
}

/// `x (m, k) @ w^T` for the `(n, k)` quantized `w` (planar `bytes`): the `(m, n)` f32 result.
pub(crate) fn qmatmul(qt: QuantType, bytes: &[u8], n: usize, k: usize, x: &[f32], m: usize) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = super::cpu_x86::isa(qt) {
        return qmatmul_x86(isa, qt, bytes, n, k, x, m);
    }
    let blocks = n * k / qt.block_elems();
    let bpr = k / qt.block_elems();
    let rows_per_task = (TASK_BLOCKS / bpr.max(1)).max(1);
    let dequant_row = |nr: usize, row: &mut [f32]| {
        for (j, dst) in row.chunks_exact_mut(qt.block_elems()).enumerate() {
            let (body, d) = planar_block(qt, bytes, blocks, nr * bpr + j);
            dequant_block(qt, body, d, dst);
        }
    };
    rows_product(n, k, x, m, rows_per_task, dequant_row, dot)
}

/// `x (m, k)` times the `n` weight rows that `dequant_row(r, buf)` writes as f32, each dequantised
/// once into a per-task buffer, `rows_per_task` weight rows a task: the `(m, n)` result.
fn rows_product(
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
    rows_per_task: usize,
    dequant_row: impl Fn(usize, &mut [f32]) + Sync,
    dot: impl Fn(&[f32], &[f32]) -> f32 + Sync,
) -> Vec<f32> {
    // Output transposed (n, m): each task owns whole weight rows.
    let mut out_t = vec![0f32; n * m];
    out_t.par_chunks_mut(m * rows_per_task).enumerate().for_each_init(
        || vec![0f32; k],
        |row, (t, chunk)| {
            for (r, o) in chunk.chunks_exact_mut(m).enumerate() {
                dequant_row(t * rows_per_task + r, row);
                for (i, o) in o.iter_mut().enumerate() {
                    *o = dot(row, &x[i * k..(i + 1) * k]);
                }
            }
        },
    );
    if m == 1 {
        return out_t;
    }
    let mut out = vec![0f32; m * n];
    for (j, col) in out_t.chunks_exact(m).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
    out
}

/// Blocks per parallel task of the x86 kernels (larger: each is cheaper per block).
#[cfg(target_arch = "x86_64")]
const X86_TASK_BLOCKS: usize = 1024;

/// `qmatmul` with the x86 kernels (`cpu_x86.rs`; 32-value blocks).
#[cfg(target_arch = "x86_64")]
fn qmatmul_x86(
    isa: super::cpu_x86::Isa,
    qt: QuantType,
    bytes: &[u8],
    n: usize,
    k: usize,
    x: &[f32],
    m: usize,
) -> Vec<f32> {
    use super::cpu_x86 as k86;
    let bpr = k / 32;
    let w = k86::Blocks::new(qt, bytes, n * bpr);
    let rows_per_task = (X86_TASK_BLOCKS / bpr.max(1)).max(1);
    if m == 1 {
        let mut out = vec![0f32; n];
        out.par_chunks_mut(rows_per_task).enumerate().for_each(|(t, o)| {
            k86::matvec_rows(isa, w, t * rows_per_task, bpr, x, o);
        });
        return out;
    }
    // More rows: each weight row dequantised once, then its dot products with every input row.
    let dequant_row = |r: usize, row: &mut [f32]| k86::dequant_row(isa, w, r, bpr, row);
    rows_product(n, k, x, m, rows_per_task, dequant_row, |a, b| k86::dot(isa, a, b))
}

/// Dot product on 8 partial sums (vectorises; lengths are multiples of 32).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum()
}
