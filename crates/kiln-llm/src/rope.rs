//! Rotary tables, computed once per model for every position of the context: the inverse frequencies
//! (with Llama 3 or linear scaling applied), then `cos`/`sin` of `position * inv_freq` in f64, stored
//! on the device in the model's dtype. Each forward pass takes a view of the rows it needs.

use crate::config::RopeScaling;
use crate::Result;
use kiln::{DType, Device, Tensor};
use std::f64::consts::PI;

/// The inverse frequencies `theta^(-2i/d)` for `i < d/2`, rescaled as `scaling` says.
pub fn inv_freq(head_dim: usize, theta: f64, scaling: Option<&RopeScaling>) -> Vec<f64> {
    let base = (0..head_dim / 2).map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64));
    match scaling {
        None => base.collect(),
        Some(RopeScaling::Linear { factor }) => base.map(|f| f / factor).collect(),
        Some(&RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }) => {
            // transformers' `_compute_llama3_parameters`.
            let old = original_max_position_embeddings as f64;
            let low_freq_wavelen = old / low_freq_factor;
            let high_freq_wavelen = old / high_freq_factor;
            base.map(|f| {
                let wavelen = 2.0 * PI / f;
                if wavelen < high_freq_wavelen {
                    f
                } else if wavelen > low_freq_wavelen {
                    f / factor
                } else {
                    let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                    (1.0 - smooth) * f / factor + smooth * f
                }
            })
            .collect()
        }
    }
}

/// `cos` and `sin` tables `(positions, head_dim/2)` on `device` in `dtype`.
pub struct RopeTables {
    pub cos: Tensor,
    pub sin: Tensor,
}

impl RopeTables {
    pub fn new(inv_freq: &[f64], positions: usize, dtype: DType, device: &Device) -> Result<RopeTables> {
        let half = inv_freq.len();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        for p in 0..positions {
            for &f in inv_freq {
                // transformers computes the angle in f32 (inv_freq and positions as f32).
                let angle = (p as f32 * f as f32) as f64;
                let (s, c) = angle.sin_cos();
                cos.push(c);
                sin.push(s);
            }
        }
        Ok(RopeTables {
            cos: Tensor::from_f64_values(&cos, (positions, half), dtype, device)?,
            sin: Tensor::from_f64_values(&sin, (positions, half), dtype, device)?,
        })
    }

    /// Views of the rows for positions `offset..offset + t`.
    pub fn rows(&self, offset: usize, t: usize) -> Result<(Tensor, Tensor)> {
        Ok((self.cos.narrow(0, offset, t)?, self.sin.narrow(0, offset, t)?))
    }
}
