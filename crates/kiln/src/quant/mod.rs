//! Quantized weights: GGUF's `Q8_0`, `Q4_0`, `Q4_1`, `Q5_0`, `Q5_1`, `Q2_K`, `Q3_K`, `Q4_K`,
//! `Q5_K`, `Q6_K`, `IQ4_NL` and `IQ4_XS` block formats, stored packed on
//! either backend, with exact dequantisation, quantisation from f32 and a `qlinear` that reads the
//! packed weights directly.
//!
//! # Storage layout
//!
//! A [`QTensor`] holds its blocks in one `u32` tensor on its device, in kiln's *planar* layout:
//! ggml's blocks of 34 (Q8_0), 18 (Q4_0) and 210 (Q6_K) bytes are not word aligned, so each block's
//! f16 scale `d` is moved out: first the block bodies (ggml's block without `d`: 32, 16, 208 bytes,
//! all whole words), then every block's `d`, two per word (block `b` in the low half of word
//! `b / 2` when `b` is even), and zero words up to a whole number of 16-byte vectors (so the GPU
//! reads the bodies with 16-byte loads). Q4_K blocks (144 bytes) are word aligned and are kept whole, with no
//! scale section; so are the other word-aligned blocks (Q4_1 20 bytes, Q5_1 24, Q2_K 84, Q5_K 176,
//! IQ4_XS 136; the GPU reads those by words), while Q5_0 (22), Q3_K (110) and IQ4_NL (18) move
//! `d` out as Q4_0 does. So the planar layout has the same size as ggml's (plus at most 2 + 15
//! bytes) and
//! `from_raw`/`to_raw` convert between the two. Blocks run along the last axis (`in` of an
//! `(out, in)` weight), row after row, as in GGUF.

pub(crate) mod cpu;
#[cfg(target_arch = "x86_64")]
mod cpu_x86;
mod formats;
mod fused;
mod ops;

use crate::{DType, Device, Error, Result, Shape, Tensor};
use half::f16;

/// A GGUF/ggml block quantization format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// 32 values: f16 scale `d`, 32 i8; value = q * d.
    Q8_0,
    /// 32 values: f16 `d`, 16 bytes of nibbles (low nibbles are values 0..15, high 16..31);
    /// value = (q - 8) * d.
    Q4_0,
    /// 256 values: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and mins of 8 sub-blocks,
    /// 128 bytes of nibbles; value = d * sc * q - dmin * m.
    Q4K,
    /// 256 values: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 i8 scales, f16 `d`;
    /// value = d * sc * (q - 32).
    Q6K,
    /// 32 values: f16 `d`, f16 `m`, 16 bytes of nibbles (as Q4_0); value = q * d + m.
    Q4_1,
    /// 32 values: f16 `d`, 4 bytes of fifth bits, 16 bytes of nibbles; value = (q - 16) * d.
    Q5_0,
    /// 32 values: f16 `d`, f16 `m`, 4 bytes of fifth bits, 16 bytes of nibbles; value = q * d + m.
    Q5_1,
    /// 256 values: 16 bytes of 4-bit scales and mins, 64 bytes of 2-bit values, f16 `d`, f16
    /// `dmin`; value = d * sc * q - dmin * m.
    Q2K,
    /// 256 values: 32 bytes of high bits, 64 bytes of low 2-bit pairs, 12 bytes of 6-bit scales,
    /// f16 `d`; value = d * (sc - 32) * (q - 4 * !hbit).
    Q3K,
    /// 256 values: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and mins (as Q4_K), 32 bytes of
    /// fifth bits, 128 bytes of nibbles; value = d * sc * q - dmin * m.
    Q5K,
    /// 32 values: f16 `d`, 16 bytes of nibbles indexing a fixed non-uniform table of 16 levels.
    IQ4NL,
    /// 256 values: f16 `d`, 6-bit scales of 8 sub-blocks (2 + 4 bytes), 128 bytes of nibbles
    /// indexing IQ4_NL's table; value = d * (ls - 32) * table[q].
    IQ4XS,
}

impl QuantType {
    pub const ALL: [QuantType; 12] = [
        QuantType::Q8_0,
        QuantType::Q4_0,
        QuantType::Q4K,
        QuantType::Q6K,
        QuantType::Q4_1,
        QuantType::Q5_0,
        QuantType::Q5_1,
        QuantType::Q2K,
        QuantType::Q3K,
        QuantType::Q5K,
        QuantType::IQ4NL,
        QuantType::IQ4XS,
    ];

    /// ggml's name (`Q8_0`, `Q4_K`, ...).
    pub fn name(self) -> &'static str {
        match self {
            QuantType::Q8_0 => "Q8_0",
            QuantType::Q4_0 => "Q4_0",
            QuantType::Q4K => "Q4_K",
            QuantType::Q6K => "Q6_K",
            QuantType::Q4_1 => "Q4_1",
            QuantType::Q5_0 => "Q5_0",
            QuantType::Q5_1 => "Q5_1",
            QuantType::Q2K => "Q2_K",
            QuantType::Q3K => "Q3_K",
            QuantType::Q5K => "Q5_K",
            QuantType::IQ4NL => "IQ4_NL",
            QuantType::IQ4XS => "IQ4_XS",
        }
    }

    /// ggml's type id (`ggml_type`), as GGUF tensor infos store it.
    pub fn ggml_type(self) -> u32 {
        match self {
            QuantType::Q8_0 => 8,
            QuantType::Q4_0 => 2,
            QuantType::Q4K => 12,
            QuantType::Q6K => 14,
            QuantType::Q4_1 => 3,
            QuantType::Q5_0 => 6,
            QuantType::Q5_1 => 7,
            QuantType::Q2K => 10,
            QuantType::Q3K => 11,
            QuantType::Q5K => 13,
            QuantType::IQ4NL => 20,
            QuantType::IQ4XS => 23,
        }
    }

    /// The format with ggml type id `id`, if kiln supports it.
    pub fn from_ggml_type(id: u32) -> Option<QuantType> {
        QuantType::ALL.into_iter().find(|q| q.ggml_type() == id)
    }

    /// Values per block.
    pub fn block_elems(self) -> usize {
        match self {
            QuantType::Q8_0
            | QuantType::Q4_0
            | QuantType::Q4_1
            | QuantType::Q5_0
            | QuantType::Q5_1
            | QuantType::IQ4NL => 32,
            QuantType::Q4K | QuantType::Q6K | QuantType::Q2K | QuantType::Q3K | QuantType::Q5K | QuantType::IQ4XS => {
                256
            }
        }
    }

    /// Bytes per block in ggml's layout.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantType::Q8_0 => 34,
            QuantType::Q4_0 => 18,
            QuantType::Q4K => 144,
            QuantType::Q6K => 210,
            QuantType::Q4_1 => 20,
            QuantType::Q5_0 => 22,
            QuantType::Q5_1 => 24,
            QuantType::Q2K => 84,
            QuantType::Q3K => 110,
            QuantType::Q5K => 176,
            QuantType::IQ4NL => 18,
            QuantType::IQ4XS => 136,
        }
    }

    /// Bytes of a block's body in the planar layout.
    pub(crate) fn body_bytes(self) -> usize {
        match self.d_offset() {
            None => self.block_bytes(),
            Some(_) => self.block_bytes() - 2,
        }
    }

    /// Byte offset of `d` in ggml's block, when the planar layout moves it out.
    fn d_offset(self) -> Option<usize> {
        match self {
            QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q5_0 | QuantType::IQ4NL => Some(0),
            QuantType::Q6K => Some(208),
            QuantType::Q3K => Some(108),
            // Word-aligned blocks stay whole.
            QuantType::Q4K | QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q2K | QuantType::Q5K | QuantType::IQ4XS => {
                None
            }
        }
    }

    /// Words of the planar layout for `blocks` blocks (padded to whole 16-byte vectors).
    pub(crate) fn planar_words(self, blocks: usize) -> usize {
        let scales = if self.d_offset().is_some() { blocks.div_ceil(2) } else { 0 };
        (blocks * self.body_bytes() / 4 + scales).next_multiple_of(4)
    }
}

impl std::fmt::Display for QuantType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor of quantized blocks along its last axis, on a device (see the module docs for the
/// layout). Cheap to clone.
#[derive(Debug, Clone)]
pub struct QTensor {
    qtype: QuantType,
    shape: Shape,
    /// The planar words, a 1-D `u32` tensor.
    data: Tensor,
}

/// Number of blocks of a `shape` tensor, or an error naming `op` when the last axis is not a
/// whole number of blocks.
fn blocks_of(op: &'static str, qt: QuantType, shape: &Shape) -> Result<usize> {
    let dims = shape.dims();
    let last = dims.last().copied().unwrap_or(0);
    if dims.is_empty() || last % qt.block_elems() != 0 {
        return Err(Error::shape(
            op,
            format!("shape {shape}: the last axis must be a multiple of {qt}'s block of {} values", qt.block_elems()),
        ));
    }
    Ok(shape.elem_count() / qt.block_elems())
}

/// ggml's blocks to the planar layout.
fn to_planar(qt: QuantType, raw: &[u8], blocks: usize) -> Vec<u32> {
    let mut words = vec![0u32; qt.planar_words(blocks)];
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut words);
    let (bb, body) = (qt.block_bytes(), qt.body_bytes());
    let (bodies, scales) = bytes.split_at_mut(blocks * body);
    for (b, block) in raw.chunks_exact(bb).enumerate() {
        let dst = &mut bodies[b * body..(b + 1) * body];
        match qt.d_offset() {
            None => dst.copy_from_slice(block),
            Some(off) => {
                dst[..off].copy_from_slice(&block[..off]);
                dst[off..].copy_from_slice(&block[off + 2..]);
                scales[2 * b..2 * b + 2].copy_from_slice(&block[off..off + 2]);
            }
        }
    }
    words
}

/// The planar layout back to ggml's blocks.
fn from_planar(qt: QuantType, words: &[u32], blocks: usize) -> Vec<u8> {
    let bytes: &[u8] = bytemuck::cast_slice(words);
    let (bb, body) = (qt.block_bytes(), qt.body_bytes());
    let mut raw = vec![0u8; blocks * bb];
    for (b, block) in raw.chunks_exact_mut(bb).enumerate() {
        let src = &bytes[b * body..(b + 1) * body];
        match qt.d_offset() {
            None => block.copy_from_slice(src),
            Some(off) => {
                let d = blocks * body + 2 * b;
                block[..off].copy_from_slice(&src[..off]);
                block[off..off + 2].copy_from_slice(&bytes[d..d + 2]);
                block[off + 2..].copy_from_slice(&src[off..]);
            }
        }
    }
    raw
}

/// Body bytes and `d` of block `b` in planar `bytes` of `blocks` blocks (Q4_K: `d` unused).
#[inline]
pub(crate) fn planar_block(qt: QuantType, bytes: &[u8], blocks: usize, b: usize) -> (&[u8], f16) {
    let body = qt.body_bytes();
    let d = match qt.d_offset() {
        Some(_) => {
            let o = blocks * body + 2 * b;
            f16::from_le_bytes([bytes[o], bytes[o + 1]])
        }
        None => f16::ZERO,
    };
    (&bytes[b * body..(b + 1) * body], d)
}

impl QTensor {
    /// Wraps ggml's block bytes (`raw`, as stored in a GGUF file) of a `shape` tensor, on `device`.
    pub fn from_raw(raw: &[u8], qtype: QuantType, shape: impl Into<Shape>, device: &Device) -> Result<QTensor> {
        let shape = shape.into();
        let blocks = blocks_of("qtensor_from_raw", qtype, &shape)?;
        if raw.len() != blocks * qtype.block_bytes() {
            return Err(Error::arg(
                "qtensor_from_raw",
                format!(
                    "{qtype} tensor of shape {shape} needs {} bytes ({blocks} blocks of {}), got {}",
                    blocks * qtype.block_bytes(),
                    qtype.block_bytes(),
                    raw.len()
                ),
            ));
        }
        let words = to_planar(qtype, raw, blocks);
        let n = words.len();
        let data = Tensor::from_vec(words, n, device)?;
        Ok(QTensor { qtype, shape, data })
    }

    /// Quantizes a float tensor (its last axis a multiple of the block size; finite values).
    pub fn quantize(t: &Tensor, qtype: QuantType) -> Result<QTensor> {
        let op = "quantize";
        if !t.dtype().is_float() {
            return Err(Error::dtype(op, t.dtype(), "quantize takes a float tensor"));
        }
        let blocks = blocks_of(op, qtype, t.shape())?;
        let x = t.to_dtype(DType::F32)?.to_vec::<f32>()?;
        if let Some(i) = x.iter().position(|v| !v.is_finite()) {
            return Err(Error::arg(
                op,
                format!("element {i} of the {} tensor is {}; only finite values quantize", t.shape(), x[i]),
            ));
        }
        let raw = cpu::quantize(qtype, &x, blocks);
        QTensor::from_raw(&raw, qtype, t.shape().clone(), t.device())
    }

    /// Stacks `(n_i, k)` tensors of one format along the first axis, `(sum n_i, k)` on the device
    /// of the first (how a model fuses projections that read the same input into one product).
    /// On the device when every part has an even number of blocks (the f16 scales, two a word,
    /// then stay word aligned), else through the host.
    pub fn cat_rows(parts: &[&QTensor]) -> Result<QTensor> {
        let op = "qtensor_cat_rows";
        let first = *parts.first().ok_or_else(|| Error::arg(op, "no tensors to stack"))?;
        let (qt, k) = (first.qtype, first.dims().last().copied().unwrap_or(0));
        for p in parts {
            if p.qtype != qt || p.dims().len() != 2 || p.dims()[1] != k || first.dims().len() != 2 {
                return Err(Error::shape(
                    op,
                    format!(
                        "{} {} does not stack on {} {} (both (rows, k) of one format)",
                        p.qtype, p.shape, qt, first.shape
                    ),
                ));
            }
            if p.device() != first.device() {
                return Err(Error::DeviceMismatch { op, lhs: first.device().name(), rhs: p.device().name() });
            }
        }
        let rows: usize = parts.iter().map(|p| p.dims()[0]).sum();
        let shape = Shape::from(vec![rows, k]);
        if qt.d_offset().is_some() && parts.iter().any(|p| p.blocks() % 2 == 1) {
            let raw: Vec<u8> = parts.iter().map(|p| p.to_raw()).collect::<Result<Vec<_>>>()?.concat();
            return QTensor::from_raw(&raw, qt, shape, first.device());
        }
        let body_words = |p: &QTensor| p.blocks() * qt.body_bytes() / 4;
        let mut pieces = Vec::new();
        for p in parts {
            pieces.push(p.data.narrow(0, 0, body_words(p))?);
        }
        if qt.d_offset().is_some() {
            for p in parts {
                pieces.push(p.data.narrow(0, body_words(p), p.blocks() / 2)?);
            }
        }
        let blocks: usize = parts.iter().map(|p| p.blocks()).sum();
        let used: usize = pieces.iter().map(|t| t.elem_count()).sum();
        let pad = qt.planar_words(blocks) - used;
        if pad > 0 {
            pieces.push(Tensor::zeros(pad, DType::U32, first.device())?);
        }
        let data = Tensor::concat(&pieces.iter().collect::<Vec<_>>(), 0)?;
        Ok(QTensor { qtype: qt, shape, data })
    }

    /// ggml's block bytes (what a GGUF file stores), read back from the device.
    pub fn to_raw(&self) -> Result<Vec<u8>> {
        let words = self.data.to_vec::<u32>()?;
        Ok(from_planar(self.qtype, &words, self.blocks()))
    }

    /// The values as a `dtype` tensor (f32, f16 or bf16) on the same device; exact in f32.
    pub fn dequantize(&self, dtype: DType) -> Result<Tensor> {
        let op = "dequantize";
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::dtype(op, dtype, "dequantize gives f32, f16 or bf16"));
        }
        let storage = self.data.storage().dequantize(self.qtype, self.blocks(), dtype)?;
        let t = Tensor::from_storage(storage, self.shape.clone(), self.device());
        if t.dtype() == dtype {
            Ok(t)
        } else {
            t.to_dtype(dtype)
        }
    }

    /// A copy on `device`.
    pub fn to_device(&self, device: &Device) -> Result<QTensor> {
        Ok(QTensor { qtype: self.qtype, shape: self.shape.clone(), data: self.data.to_device(device)? })
    }

    pub fn qtype(&self) -> QuantType {
        self.qtype
    }
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn device(&self) -> &Device {
        self.data.device()
    }
    /// Number of blocks.
    pub fn blocks(&self) -> usize {
        self.shape.elem_count() / self.qtype.block_elems()
    }
    /// Bytes of the packed data on the device.
    pub fn storage_bytes(&self) -> usize {
        self.data.elem_count() * 4
    }
    /// The planar words (1-D `u32`).
    pub(crate) fn data(&self) -> &Tensor {
        &self.data
    }
}
