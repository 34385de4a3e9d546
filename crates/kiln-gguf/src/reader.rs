//! Parsing a GGUF file (versions 2 and 3, little-endian): header, metadata, tensor infos, alignment
//! and data offsets. Every read is bounds-checked and every length is checked against the bytes
//! left before anything is allocated, so no input makes the parser panic or allocate wildly.

use crate::error::{GgufError, Result};
use crate::value::{Value, ValueType};

/// GGML's limit on tensor rank.
const MAX_DIMS: u32 = 4;
/// Nesting limit of arrays in arrays.
const MAX_DEPTH: u32 = 8;
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// The shape in kiln's (row-major) order: GGUF's dims reversed, so an `(out, in)` weight
    /// stored with `ne = [in, out]` reads as `(out, in)`.
    pub shape: Vec<usize>,
    /// ggml's type id (`0` f32, `1` f16, `30` bf16, `8` Q8_0, `2` Q4_0, `12` Q4_K, `14` Q6_K, ...).
    pub ggml_type: u32,
    /// Byte offset inside the data section.
    pub offset: u64,
    /// Bytes of the tensor's data.
    pub size: u64,
}

/// The parsed header.
#[derive(Debug, Clone)]
pub(crate) struct Header {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Byte offset of the data section in the file.
    pub data_offset: u64,
}

/// (values per block, bytes per block) of a ggml type id, for the types whose size is known here.
pub fn ggml_block(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        30 => (1, 2),     // BF16
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        20 => (32, 18),   // IQ4_NL
        23 => (256, 136), // IQ4_XS
        _ => return None,
    })
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let left = self.buf.len() - self.pos;
        if n > left as u64 {
            return Err(GgufError::Truncated { what: what(), offset: self.pos, needed: n, left });
        }
        let s = &self.buf[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }
    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("took N bytes"))
    }
    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn left(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| GgufError::Corrupt(format!("{} at byte {} is not UTF-8", what(), self.pos - bytes.len())))
    }

    fn value(&mut self, t: ValueType, what: &dyn Fn() -> String, depth: u32) -> Result<Value> {
        Ok(match t {
            ValueType::U8 => Value::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::Bool => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(GgufError::Corrupt(format!("{} is a bool of value {b}", what()))),
            },
            ValueType::String => Value::String(self.string(what)?),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Array => {
                if depth >= MAX_DEPTH {
                    return Err(GgufError::Corrupt(format!("{} nests arrays deeper than {MAX_DEPTH}", what())));
                }
                let id = self.u32(what)?;
                let it = ValueType::from_id(id)
                    .ok_or_else(|| GgufError::Corrupt(format!("{} is an array of unknown type {id}", what())))?;
                let len = self.u64(what)?;
                if len.checked_mul(it.min_size()).is_none_or(|b| b > self.left()) {
                    return Err(GgufError::Truncated {
                        what: format!("{} ({len} items of {it:?})", what()),
                        offset: self.pos,
                        needed: len.saturating_mul(it.min_size()),
                        left: self.left() as usize,
                    });
                }
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(self.value(it, what, depth + 1)?);
                }
                Value::Array(it, items)
            }
        })
    }
}

/// Parses the header of the GGUF bytes `buf`, checking that every tensor's data lies in `buf`.
pub(crate) fn parse(buf: &[u8]) -> Result<Header> {
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.array::<4>(&|| "magic".into())?;
    if &magic != b"GGUF" {
        return Err(GgufError::Corrupt(format!("magic is {magic:?}, not \"GGUF\"")));
    }
    let version = c.u32(&|| "version".into())?;
    match version {
        2 | 3 => {}
        1 => return Err(GgufError::Unsupported("GGUF version 1 (32-bit lengths); convert the file to v3".into())),
        v if v.swap_bytes() <= 3 => {
            return Err(GgufError::Unsupported("a big-endian GGUF file; only little-endian files are read".into()))
        }
        v => return Err(GgufError::Unsupported(format!("GGUF version {v}"))),
    }
    let n_tensors = c.u64(&|| "tensor count".into())?;
    let n_kv = c.u64(&|| "metadata count".into())?;
    // Every key/value takes at least 13 bytes and every tensor info at least 24.
    if n_kv.saturating_mul(13) > c.left() || n_tensors.saturating_mul(24) > c.left() {
        return Err(GgufError::Truncated {
            what: format!("{n_kv} metadata entries and {n_tensors} tensor infos"),
            offset: c.pos,
            needed: n_kv.saturating_mul(13).saturating_add(n_tensors.saturating_mul(24)),
            left: c.left() as usize,
        });
    }
    let mut metadata = Vec::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key = c.string(&|| format!("key of metadata entry {i}"))?;
        let what = || format!("metadata {key}");
        let id = c.u32(&what)?;
        let t =
            ValueType::from_id(id).ok_or_else(|| GgufError::Corrupt(format!("{} has unknown type {id}", what())))?;
        let v = c.value(t, &what, 0)?;
        metadata.push((key, v));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, v)) => match v {
            Value::U32(a) if *a > 0 && a.is_power_of_two() => *a as u64,
            v => return Err(GgufError::Corrupt(format!("general.alignment is {v}, not a power of two u32"))),
        },
    };
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let name = c.string(&|| format!("name of tensor info {i}"))?;
        let what = || format!("tensor info {name}");
        let n_dims = c.u32(&what)?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::Corrupt(format!("tensor {name} has {n_dims} dims (at most {MAX_DIMS})")));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(c.u64(&what)?);
        }
        let ggml_type = c.u32(&what)?;
        let offset = c.u64(&what)?;
        let count = ne.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        let count = count.filter(|&n| n <= usize::MAX as u64 / 4).ok_or_else(|| {
            GgufError::Corrupt(format!("tensor {name} has dims {ne:?}, more elements than fit in memory"))
        })?;
        let size = match ggml_block(ggml_type) {
            Some((be, bb)) => {
                if ne.first().is_some_and(|&d| d % be != 0) {
                    return Err(GgufError::Corrupt(format!(
                        "tensor {name} of type {ggml_type} has a first dim {} that is not a multiple of its block of {be}",
                        ne[0]
                    )));
                }
                count / be * bb
            }
            None => 0,
        };
        if offset % alignment != 0 {
            return Err(GgufError::Corrupt(format!("tensor {name} at offset {offset} is not aligned to {alignment}")));
        }
        let shape = ne.iter().rev().map(|&d| d as usize).collect();
        tensors.push(TensorInfo { name, shape, ggml_type, offset, size });
    }
    let data_offset = (c.pos as u64).div_ceil(alignment) * alignment;
    for t in &tensors {
        let end = data_offset.checked_add(t.offset).and_then(|o| o.checked_add(t.size));
        if end.is_none_or(|e| e > buf.len() as u64) {
            return Err(GgufError::Truncated {
                what: format!("data of tensor {} ({} bytes at data offset {})", t.name, t.size, t.offset),
                offset: buf.len(),
                needed: t.size,
                left: (buf.len() as u64).saturating_sub(data_offset.saturating_add(t.offset)) as usize,
            });
        }
    }
    Ok(Header { version, metadata, tensors, alignment, data_offset })
}
