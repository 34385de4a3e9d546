//! The token embedding table in row blocks that each fit the device's largest buffer: a GPU binds a
//! buffer of at most `max_storage_binding` bytes (128 MiB on lavapipe and many mobile/integrated GPUs,
//! 256 MiB on others), and a large vocabulary's table is more than that in f32 or f16 (SmolLM2's
//! 49152 x 576 in f32 is 108 MiB, Llama 3's 128256 x 4096 in f16 is 1 GiB). The lookup gathers rows
//! from each block their ids fall in and puts them back in token order.

use crate::{LlmError, Result};
use kiln::{Device, Tensor};

/// The largest tensor (bytes) to put on `device`: the adapter's largest bindable buffer, lowered by
/// `KILN_LLM_MAX_TENSOR_BYTES` (to try a small-buffer GPU's path on a large one); `None` on the CPU.
pub fn max_tensor_bytes(device: &Device) -> Option<u64> {
    let info = device.gpu_info()?;
    let adapter = info.max_buffer_size.min(info.max_storage_binding);
    let env = std::env::var("KILN_LLM_MAX_TENSOR_BYTES").ok().and_then(|v| v.trim().parse::<u64>().ok());
    Some(env.map_or(adapter, |e| e.clamp(1, adapter)))
}

/// Rows per block for a `(rows, row_bytes)` table under `limit` bytes per tensor (all rows when it
/// fits), or an error when not even one row fits.
pub fn rows_per_block(name: &str, rows: usize, row_bytes: u64, limit: Option<u64>) -> Result<usize> {
    let Some(limit) = limit else { return Ok(rows.max(1)) };
    if row_bytes > limit {
        return Err(LlmError::Memory(format!(
            "one row of {name} is {row_bytes} bytes, more than the adapter's largest buffer ({limit} bytes)"
        )));
    }
    Ok(((limit / row_bytes.max(1)) as usize).clamp(1, rows.max(1)))
}

pub(crate) struct Embedding {
    /// Row blocks of `rows` rows each (the last may be shorter), in vocabulary order.
    blocks: Vec<Tensor>,
    rows: usize,
}

impl Embedding {
    /// A table in one tensor.
    pub(crate) fn whole(table: Tensor) -> Embedding {
        let rows = table.dims()[0].max(1);
        Embedding { blocks: vec![table], rows }
    }

    /// A table given as row blocks of `rows` rows each (the last may be shorter).
    pub(crate) fn from_blocks(blocks: Vec<Tensor>, rows: usize) -> Embedding {
        Embedding { blocks, rows }
    }

    pub(crate) fn dtype(&self) -> kiln::DType {
        self.blocks[0].dtype()
    }

    /// Bytes on the device.
    pub(crate) fn bytes(&self) -> u64 {
        self.blocks.iter().map(|t| (t.elem_count() * t.dtype().size_in_bytes()) as u64).sum()
    }

    /// Whether `t` is (a view of) one of the blocks: the tied LM head.
    pub(crate) fn shares_storage_with(&self, t: &Tensor) -> bool {
        self.blocks.iter().any(|b| b.shares_storage_with(t))
    }

    /// The rows of the i64 token `ids` (shape `(t,)`), `(t, hidden)`, as `Tensor::embedding`. With
    /// several blocks the ids are read back (a few bytes), each block gathers the rows of its ids,
    /// and one more gather restores token order.
    pub(crate) fn embedding(&self, ids: &Tensor) -> kiln::Result<Tensor> {
        if let [table] = &self.blocks[..] {
            return table.embedding(ids);
        }
        let dev = ids.device();
        let host = ids.to_vec::<i64>()?;
        let mut parts = Vec::new();
        let mut order = vec![0i64; host.len()];
        let mut placed = 0;
        for (b, block) in self.blocks.iter().enumerate() {
            let lo = (b * self.rows) as i64;
            let mine: Vec<usize> =
                (0..host.len()).filter(|&i| host[i] >= lo && host[i] < lo + self.rows as i64).collect();
            if mine.is_empty() {
                continue;
            }
            let local: Vec<i64> = mine.iter().map(|&i| host[i] - lo).collect();
            for (j, &i) in mine.iter().enumerate() {
                order[i] = (placed + j) as i64;
            }
            placed += mine.len();
            parts.push(block.embedding(&Tensor::from_vec(local, mine.len(), dev)?)?);
        }
        if placed != host.len() {
            // An id outside the table: the one-table path's error.
            return self.blocks[0].embedding(ids);
        }
        let rows =
            if parts.len() == 1 { parts.remove(0) } else { Tensor::concat(&parts.iter().collect::<Vec<_>>(), 0)? };
        rows.embedding(&Tensor::from_vec(order, host.len(), dev)?)
    }
}

/// Row blocks of `rows` rows each of `table` (rows, cols), each made contiguous in `dtype` on its own.
pub(crate) fn split_rows(table: &Tensor, rows: usize, dtype: kiln::DType) -> kiln::Result<Vec<Tensor>> {
    let n = table.dims()[0];
    (0..n.div_ceil(rows.max(1)))
        .map(|b| {
            let len = rows.min(n - b * rows);
            table.narrow(0, b * rows, len)?.to_dtype(dtype)?.contiguous()
        })
        .collect()
}
