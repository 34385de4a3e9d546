//! Rotary position embedding.

/// How RoPE pairs the features of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(i, i + d/2)` (GPT-NeoX, Llama in Hugging Face).
    HalfSplit,
    /// Pairs `(2i, 2i + 1)` (GPT-J, the original Llama).
    Interleaved,
}

use super::nn::require_float;
use crate::{DType, Device, Error, Result, Tensor};

/// An error unless `d` is a valid (even) head size.
fn check_head_size(op: &'static str, d: usize, shape: &crate::Shape) -> Result<()> {
    if !d.is_multiple_of(2) {
        return Err(Error::shape(op, format!("the head size (last dim) must be even, got {d} in shape {shape}")));
    }
    Ok(())
}

impl Tensor {
    /// Rotary embedding of `self` `(b, h, t, d)` for positions `offset..offset + t` with base `theta`
    /// (10000 in Llama). The tables are computed in f64 ([`Tensor::rope_tables`]) and cast to this
    /// tensor's dtype. `d` must be even.
    ///
    /// The tables are cached per (device, `d`, `theta`, dtype) for positions `0..` a power of two
    /// covering `offset + t` (see [`cached_tables`]): repeated calls (every layer of every step) cost
    /// no host work and no upload, and read rows `offset..offset + t` of the cached tables in place.
    pub fn rope(&self, offset: usize, theta: f64, layout: RopeLayout) -> Result<Tensor> {
        self.check_rope_input("rope")?;
        let (t, d) = (self.dims()[2], self.dims()[3]);
        let (cos, sin) = cached_tables(t, d, offset, theta, self.dtype(), self.device())?;
        self.rope_with_tables(&cos, &sin, layout)
    }

    fn check_rope_input(&self, op: &'static str) -> Result<()> {
        require_float(op, self)?;
        if self.rank() != 4 {
            return Err(Error::shape(
                op,
                format!("expected x of shape (batch, heads, seq, head_dim), got shape {}", self.shape()),
            ));
        }
        check_head_size(op, self.dims()[3], self.shape())
    }

    /// Rotary embedding with precomputed tables `cos`, `sin` of shape `(t, d/2)` (as made by
    /// [`Tensor::rope_tables`]); row `i` rotates position `i` of `self` `(b, h, t, d)`. Float tables of
    /// another dtype are cast to this tensor's dtype.
    pub fn rope_with_tables(&self, cos: &Tensor, sin: &Tensor, layout: RopeLayout) -> Result<Tensor> {
        const OP: &str = "rope";
        self.check_rope_input(OP)?;
        let (t, d) = (self.dims()[2], self.dims()[3]);
        for (name, tab) in [("cos", cos), ("sin", sin)] {
            self.same_device(OP, tab)?;
            require_float(OP, tab)?;
            if tab.dims() != [t, d / 2] {
                return Err(Error::shape(
                    OP,
                    format!(
                        "{name} table must have shape ({t}, {}) for x of shape {}, got {}",
                        d / 2,
                        self.shape(),
                        tab.shape()
                    ),
                ));
            }
        }
        if self.elem_count() == 0 {
            return self.zeros_like();
        }
        let (cos, sin) = (cos.to_dtype(self.dtype())?, sin.to_dtype(self.dtype())?);
        let s = self.storage().rope(
            self.layout(),
            &cos.storage(),
            cos.layout(),
            &sin.storage(),
            sin.layout(),
            layout == RopeLayout::Interleaved,
        )?;
        Ok(Tensor::from_storage(s, self.shape(), self.device()))
    }

    /// The `(t, d/2)` cos and sin tables for positions `offset..offset + t`, head size `d` (even), base
    /// `theta` (finite, > 0): entry `(p, i)` is `cos/sin((offset + p) * theta^(-2i/d))`, computed in f64
    /// and then cast to the float `dtype`.
    pub fn rope_tables(
        t: usize,
        d: usize,
        offset: usize,
        theta: f64,
        dtype: DType,
        device: &Device,
    ) -> Result<(Tensor, Tensor)> {
        const OP: &str = "rope_tables";
        check_head_size(OP, d, &crate::Shape::new(vec![t, d]))?;
        if !dtype.is_float() {
            return Err(Error::dtype(OP, dtype, "the tables must have a float dtype"));
        }
        if !(theta.is_finite() && theta > 0.0) {
            return Err(Error::arg(OP, format!("theta must be finite and > 0, got {theta}")));
        }
        let half = d / 2;
        let n = Tensor::check_size(OP, &crate::Shape::new(vec![t, half, 8]), DType::U8)? / 8;
        let inv_freq: Vec<f64> = (0..half).map(|i| theta.powf(-((2 * i) as f64) / d as f64)).collect();
        let mut cos = crate::cpu::alloc::try_with_capacity(OP, n)?;
        let mut sin = crate::cpu::alloc::try_with_capacity(OP, n)?;
        for p in 0..t {
            let pos = offset as f64 + p as f64;
            for &f in &inv_freq {
                let (s, c) = (pos * f).sin_cos();
                cos.push(c);
                sin.push(s);
            }
        }
        Ok((
            Tensor::from_f64_values(&cos, (t, half), dtype, device)?,
            Tensor::from_f64_values(&sin, (t, half), dtype, device)?,
        ))
    }
}

/// Most table entries (positions x d/2) one cached pair may hold; longer ranges are built per call.
const MAX_CACHED_ENTRIES: usize = 1 << 24;
/// Cached pairs kept (oldest dropped first).
const MAX_CACHED_PAIRS: usize = 16;

/// A cached pair of tables: its key (device, d, theta bits, dtype), the positions it covers from 0,
/// and the `(positions, d/2)` cos and sin tables.
type CachedPair = ((Device, usize, u64, DType), usize, Tensor, Tensor);

/// Rows `offset..offset + t` of the `(positions, d/2)` tables for (`device`, `d`, `theta`, `dtype`),
/// cached: built once (in f64, like [`Tensor::rope_tables`], so every entry is the same value) for
/// positions `0..P`, `P` the power of two (at least 256) covering `offset + t`, and rebuilt at the next
/// power of two when a later call passes it. Ranges over 2^24 entries are not cached.
fn cached_tables(
    t: usize,
    d: usize,
    offset: usize,
    theta: f64,
    dtype: DType,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    use std::sync::{Mutex, OnceLock};
    static CACHE: OnceLock<Mutex<Vec<CachedPair>>> = OnceLock::new();
    let end = offset
        .checked_add(t)
        .ok_or_else(|| Error::arg("rope", format!("positions {offset}..{offset} + {t} overflow")))?;
    let positions = end.max(256).next_power_of_two();
    if positions.saturating_mul(d / 2) > MAX_CACHED_ENTRIES {
        return Tensor::rope_tables(t, d, offset, theta, dtype, device);
    }
    let key = (device.clone(), d, theta.to_bits(), dtype);
    let cache = CACHE.get_or_init(|| Mutex::new(Vec::new()));
    let hit = {
        let list = cache.lock().unwrap_or_else(|e| e.into_inner());
        list.iter().find(|(k, p, _, _)| *k == key && *p >= end).map(|(_, _, c, s)| (c.clone(), s.clone()))
    };
    let (cos, sin) = match hit {
        Some(pair) => pair,
        None => {
            let (c, s) = Tensor::rope_tables(positions, d, 0, theta, dtype, device)?;
            let mut list = cache.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|(k, _, _, _)| *k != key);
            if list.len() >= MAX_CACHED_PAIRS {
                list.remove(0);
            }
            list.push((key, positions, c.clone(), s.clone()));
            (c, s)
        }
    };
    Ok((cos.narrow(0, offset, t)?, sin.narrow(0, offset, t)?))
}
