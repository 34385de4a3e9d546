//! The legacy 32-value block formats: Q8_0, Q4_0 (one f16 scale `d`), Q4_1 and Q5_1 (a scale and a
//! min), Q5_0 (a scale and a fifth bit a value). Quantisation is ggml's reference rounding, byte for
//! byte. In kiln's planar layout Q8_0, Q4_0 and Q5_0 have `d` moved out (passed as `d`).

use super::{h16, signed_amax};
use crate::quant::QuantType;
use half::f16;

/// Dequantises one block of the legacy formats into `out`.
#[inline]
pub(super) fn dequant_block(qt: QuantType, body: &[u8], d: f16, out: &mut [f32]) {
    match qt {
        QuantType::Q8_0 => {
            let d = d.to_f32();
            for (o, &q) in out[..32].iter_mut().zip(&body[..32]) {
                *o = (q as i8) as f32 * d;
            }
        }
        QuantType::Q4_0 => {
            let d = d.to_f32();
            let (lo, hi) = out[..32].split_at_mut(16);
            for j in 0..16 {
                lo[j] = ((body[j] & 0x0F) as i32 - 8) as f32 * d;
                hi[j] = ((body[j] >> 4) as i32 - 8) as f32 * d;
            }
        }
        QuantType::Q4_1 => {
            let (d, m) = (h16(body, 0), h16(body, 2));
            for j in 0..16 {
                let (x0, x1) = ((body[4 + j] & 0x0F) as i32, (body[4 + j] >> 4) as i32);
                out[j] = x0 as f32 * d + m;
                out[j + 16] = x1 as f32 * d + m;
            }
        }
        QuantType::Q5_0 | QuantType::Q5_1 => {
            let (d, m, qh, qs) = if qt == QuantType::Q5_0 {
                (d.to_f32(), 0.0, &body[0..4], &body[4..20])
            } else {
                (h16(body, 0), h16(body, 2), &body[4..8], &body[8..24])
            };
            let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
            for j in 0..16 {
                let xh0 = (((qh >> j) << 4) & 0x10) as u8;
                let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
                let (n0, n1) = ((qs[j] & 0x0F) | xh0, (qs[j] >> 4) | xh1);
                if qt == QuantType::Q5_0 {
                    out[j] = (n0 as i32 - 16) as f32 * d;
                    out[j + 16] = (n1 as i32 - 16) as f32 * d;
                } else {
                    out[j] = n0 as i32 as f32 * d + m;
                    out[j + 16] = n1 as i32 as f32 * d + m;
                }
            }
        }
        _ => unreachable!("{qt} is not the legacy formats"),
    }
}

/// Quantises one block of the legacy formats into ggml's block bytes `out`.
pub(super) fn quant_block(qt: QuantType, x: &[f32], out: &mut [u8]) {
    match qt {
        QuantType::Q8_0 => {
            // quantize_row_q8_0_ref
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            let d = amax / 127.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            for (o, &v) in out[2..34].iter_mut().zip(x) {
                *o = ((v * id).round() as i8) as u8;
            }
        }
        QuantType::Q4_0 => {
            // quantize_row_q4_0_ref: the value of largest magnitude maps to -8.
            let (mut amax, mut max) = (0f32, 0f32);
            for &v in x {
                if amax < v.abs() {
                    amax = v.abs();
                    max = v;
                }
            }
            let d = max / -8.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            let q = |v: f32| ((v * id + 8.5) as i32).clamp(0, 15) as u8;
            for j in 0..16 {
                out[2 + j] = q(x[j]) | (q(x[j + 16]) << 4);
            }
        }
        QuantType::Q4_1 | QuantType::Q5_1 => {
            // quantize_row_q4_1_ref / quantize_row_q5_1_ref
            let min = x.iter().fold(f32::MAX, |a, &v| a.min(v));
            let max = x.iter().fold(f32::MIN, |a, &v| a.max(v));
            let top = if qt == QuantType::Q4_1 { 15.0 } else { 31.0 };
            let d = (max - min) / top;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            out[2..4].copy_from_slice(&f16::from_f32(min).to_le_bytes());
            let q = |v: f32| (((v - min) * id + 0.5) as i8 as u8).min(top as u8);
            if qt == QuantType::Q4_1 {
                for j in 0..16 {
                    out[4 + j] = q(x[j]) | (q(x[j + 16]) << 4);
                }
            } else {
                let mut qh = 0u32;
                for j in 0..16 {
                    let (x0, x1) = (q(x[j]), q(x[j + 16]));
                    out[8 + j] = (x0 & 0xF) | ((x1 & 0xF) << 4);
                    qh |= (((x0 & 0x10) >> 4) as u32) << j;
                    qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
                }
                out[4..8].copy_from_slice(&qh.to_le_bytes());
            }
        }
        QuantType::Q5_0 => {
            // quantize_row_q5_0_ref: the value of largest magnitude maps to -16.
            let d = signed_amax(x) / -16.0;
            let id = if d != 0.0 { 1.0 / d } else { 0.0 };
            out[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
            let q = |v: f32| ((v * id + 16.5) as i8 as u8).min(31);
            let mut qh = 0u32;
            for j in 0..16 {
                let (x0, x1) = (q(x[j]), q(x[j + 16]));
                out[6 + j] = (x0 & 0xF) | ((x1 & 0xF) << 4);
                qh |= (((x0 & 0x10) >> 4) as u32) << j;
                qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
            }
            out[2..6].copy_from_slice(&qh.to_le_bytes());
        }
        _ => unreachable!("{qt} is not the legacy formats"),
    }
}
