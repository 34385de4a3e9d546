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
    pub fn rope(&self, offset: usize, theta: f64, layout: RopeLayout) -> Result<Tensor> {
        self.check_rope_input("rope")?;
        let (t, d) = (self.dims()[2], self.dims()[3]);
        let (cos, sin) = Tensor::rope_tables(t, d, offset, theta, self.dtype(), self.device())?;
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
