//! Rotary position embedding.

/// How RoPE pairs the features of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(i, i + d/2)` (GPT-NeoX, Llama in Hugging Face).
    HalfSplit,
    /// Pairs `(2i, 2i + 1)` (GPT-J, the original Llama).
    Interleaved,
}

use crate::{DType, Device, Error, Result, Tensor};

impl Tensor {
    /// Rotary embedding of `self` `(b, h, t, d)` for positions `offset..offset + t` with base `theta`
    /// (10000 in Llama).
    pub fn rope(&self, _offset: usize, _theta: f64, _layout: RopeLayout) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "rope", backend: "api" })
    }

    /// Rotary embedding with precomputed tables `cos`, `sin` of shape `(t, d/2)`.
    pub fn rope_with_tables(&self, _cos: &Tensor, _sin: &Tensor, _layout: RopeLayout) -> Result<Tensor> {
        Err(Error::NotImplemented { op: "rope", backend: "api" })
    }

    /// The `(t, d/2)` cos and sin tables for positions `offset..offset + t`, head size `d`, base `theta`.
    pub fn rope_tables(
        _t: usize,
        _d: usize,
        _offset: usize,
        _theta: f64,
        _dtype: DType,
        _device: &Device,
    ) -> Result<(Tensor, Tensor)> {
        Err(Error::NotImplemented { op: "rope_tables", backend: "api" })
    }
}
