//! CPU kernels of the index-driven ops: `index_select` (parallel over output rows, copying whole
//! inner blocks with `copy_from_slice` when the source rows are contiguous) and `gather` (the strided
//! segment engine with one indirect load per element). Index values arrive already range-checked.

use super::{map_vec, strided, unsupported, CpuStorage};
use crate::backend::BackendStorage;
use crate::layout::collapse;
use crate::{Layout, Result};
use rayon::prelude::*;

/// The index values of view `il` of `ids` as `usize`, row-major. The API has refused negative values.
fn ids_to_usize(op: &'static str, ids: &CpuStorage, il: &Layout) -> Result<Vec<usize>> {
    Ok(match ids {
        CpuStorage::I64(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::I32(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::U32(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::U8(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::I8(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::I16(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::U16(v) => strided::unary_map(v, il, |x| x as usize),
        CpuStorage::U64(v) => strided::unary_map(v, il, |x| x as usize),
        other => return Err(unsupported(op, other.dtype())),
    })
}

/// Copies the strided block (`dims`, `strides` from `offset`, already collapsed) into `out` in
/// row-major order. The innermost dim is a slice copy when its stride is 1.
fn copy_block<T: Copy>(data: &[T], offset: usize, dims: &[usize], strides: &[usize], out: &mut [T]) {
    match dims {
        [] => out[0] = data[offset],
        [n] => {
            let s = strides[0];
            if s == 1 {
                out.copy_from_slice(&data[offset..offset + n]);
            } else {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = data[offset + j * s];
                }
            }
        }
        [n, rest @ ..] => {
            let inner = out.len() / n;
            for (j, o) in out.chunks_exact_mut(inner).enumerate() {
                copy_block(data, offset + j * strides[0], rest, &strides[1..], o);
            }
        }
    }
}

fn index_select_t<T: Copy + Send + Sync + bytemuck::Zeroable>(
    data: &[T],
    l: &Layout,
    ids: &[usize],
    axis: usize,
) -> Vec<T> {
    let dims = l.dims();
    let strides = l.strides();
    let outer_dims = &dims[..axis];
    let outer_strides = &strides[..axis];
    let axis_stride = strides[axis];
    let n_ids = ids.len();
    let inner: usize = dims[axis + 1..].iter().product();
    let total = outer_dims.iter().product::<usize>() * n_ids * inner;
    let mut out: Vec<T> = strided::zeroed(total);
    if total == 0 {
        return out;
    }
    // The inner block (dims after `axis`) collapsed to as few strided dims as possible.
    let (inner_dims, inner_strides) = collapse(&dims[axis + 1..], &[&strides[axis + 1..]]);
    let inner_strides = &inner_strides[0];
    // Storage offset of outer row `o` (unravelled once per output row, not per element).
    let outer_offset = |mut o: usize| {
        let mut off = l.offset();
        for d in (0..outer_dims.len()).rev() {
            off += (o % outer_dims[d]) * outer_strides[d];
            o /= outer_dims[d];
        }
        off
    };
    let rows_per_task = (strided::CHUNK / inner).max(1);
    let run = |first_row: usize, chunk: &mut [T]| {
        let mut row = first_row;
        if inner == 1 {
            // One element per row: a plain indexed load loop.
            for o in chunk.iter_mut() {
                let base = outer_offset(row / n_ids);
                *o = data[base + ids[row % n_ids] * axis_stride];
                row += 1;
            }
            return;
        }
        for o in chunk.chunks_exact_mut(inner) {
            let base = outer_offset(row / n_ids) + ids[row % n_ids] * axis_stride;
            copy_block(data, base, &inner_dims, inner_strides, o);
            row += 1;
        }
    };
    let task_len = rows_per_task * inner;
    if total <= task_len {
        run(0, &mut out);
    } else {
        out.par_chunks_mut(task_len).enumerate().for_each(|(i, c)| run(i * rows_per_task, c));
    }
    out
}

pub(crate) fn index_select(
    s: &CpuStorage,
    l: &Layout,
    ids: &CpuStorage,
    il: &Layout,
    axis: usize,
) -> Result<CpuStorage> {
    let ids = ids_to_usize("index_select", ids, il)?;
    Ok(map_vec!(s, v => index_select_t(v, l, &ids, axis)))
}

fn gather_t<T: Copy + Send + Sync + bytemuck::Zeroable>(
    data: &[T],
    l: &Layout,
    ids: &[usize],
    il: &Layout,
    axis: usize,
) -> Vec<T> {
    // Walk the output (shape of `ids`) with two operands: the source with its `axis` stride zeroed
    // (the index supplies that coordinate) and the contiguous ids.
    let axis_stride = l.strides()[axis];
    let mut src_strides = l.strides().to_vec();
    src_strides[axis] = 0;
    let id_strides = il.shape().contiguous_strides();
    let mut out: Vec<T> = strided::zeroed(il.elem_count());
    strided::for_each_segment(
        strided::CHUNK,
        il.dims(),
        [&src_strides, &id_strides],
        [l.offset(), 0],
        &mut out,
        |o, [a, b], [sa, sb]| {
            let n = o.len();
            if sb == 1 {
                for (j, (o, &i)) in o.iter_mut().zip(&ids[b..b + n]).enumerate() {
                    *o = data[a + j * sa + i * axis_stride];
                }
            } else {
                for (j, o) in o.iter_mut().enumerate() {
                    *o = data[a + j * sa + ids[b + j * sb] * axis_stride];
                }
            }
        },
    );
    out
}

pub(crate) fn gather(s: &CpuStorage, l: &Layout, ids: &CpuStorage, il: &Layout, axis: usize) -> Result<CpuStorage> {
    let ids = ids_to_usize("gather", ids, il)?;
    Ok(map_vec!(s, v => gather_t(v, l, &ids, il, axis)))
}
