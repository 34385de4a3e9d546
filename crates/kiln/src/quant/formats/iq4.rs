//! IQ4_NL (32-value blocks, `d` moved out in kiln's planar layout) and IQ4_XS (256-value
//! super-blocks with 6-bit sub-block scales): nibbles index a table of 16 non-uniform levels.
//! Quantisation maps each (sub-)block's value of largest magnitude to the lowest level.

use super::{f16_up, h16, signed_amax};
use crate::quant::QuantType;
use half::f16;

/// IQ4_NL's and IQ4_XS's 16 levels (ggml's `kvalues_iq4nl`).
const KVALUES_IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Dequantises one block of IQ4_NL or IQ4_XS into `out`.
#[inline]
pub(super) fn dequant_block(qt: QuantType, body: &[u8], d: f16, out: &mut [f32]) {
    match qt {
        QuantType::IQ4NL => {
            let d = d.to_f32();
            for j in 0..16 {
                out[j] = d * KVALUES_IQ4NL[(body[j] & 0xF) as usize] as f32;
                out[j + 16] = d * KVALUES_IQ4NL[(body[j] >> 4) as usize] as f32;
            }
        }
        QuantType::IQ4XS => {
            let d = h16(body, 0);
            let sh = u16::from_le_bytes([body[2], body[3]]) as i32;
            for ib in 0..8 {
                let ls = ((body[4 + ib / 2] as i32 >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
                let dl = d * (ls - 32) as f32;
                let qs = &body[8 + 16 * ib..8 + 16 * ib + 16];
                let y = &mut out[32 * ib..32 * ib + 32];
                for j in 0..16 {
                    y[j] = dl * KVALUES_IQ4NL[(qs[j] & 0xF) as usize] as f32;
                    y[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
                }
            }
        }
        _ => unreachable!("{qt} is not IQ4_NL or IQ4_XS"),
    }
}

/// Quantises one block of IQ4_NL or IQ4_XS into ggml's block bytes `out`.
pub(super) fn quant_block(qt: QuantType, x: &[f32], out: &mut [u8]) {
    match qt {
        QuantType::IQ4NL => {
            let d = f16::from_f32(signed_amax(x) / -127.0);
            out[..2].copy_from_slice(&d.to_le_bytes());
            let df = d.to_f32();
            for j in 0..16 {
                out[2 + j] = nearest_iq4(x[j], df) | (nearest_iq4(x[j + 16], df) << 4);
            }
        }
        QuantType::IQ4XS => quant_iq4xs(x, out),
        _ => unreachable!("{qt} is not IQ4_NL or IQ4_XS"),
    }
}

/// Index of the IQ4_NL level nearest `v / d` (0 when `d` is 0).
fn nearest_iq4(v: f32, d: f32) -> u8 {
    if d == 0.0 {
        return 8; // level 1: the closest to zero; d = 0 makes it 0.
    }
    let t = v / d;
    let mut best = 0;
    for (i, &k) in KVALUES_IQ4NL.iter().enumerate() {
        if (t - k as f32).abs() < (t - KVALUES_IQ4NL[best] as f32).abs() {
            best = i;
        }
    }
    best as u8
}

/// IQ4_XS: each 32-value sub-block gets the scale mapping its value of largest magnitude to -127
/// (IQ4_NL's lowest level), stored as a 6-bit multiple (offset 32) of the block's f16 `d`; values
/// take the nearest level.
fn quant_iq4xs(x: &[f32], out: &mut [u8]) {
    let mut scale = [0f32; 8];
    for (j, s) in scale.iter_mut().enumerate() {
        *s = signed_amax(&x[32 * j..32 * (j + 1)]) / -127.0;
    }
    let d = f16_up(scale.iter().fold(0f32, |a, &v| a.max(v.abs())) / 31.0);
    let df = d.to_f32();
    out.fill(0);
    out[..2].copy_from_slice(&d.to_le_bytes());
    let mut sh = 0u16;
    for (ib, &s) in scale.iter().enumerate() {
        let l = if df > 0.0 { ((s / df).round() as i32).clamp(-31, 31) } else { 0 };
        let ls = (l + 32) as u8;
        out[4 + ib / 2] |= (ls & 0xF) << (4 * (ib % 2));
        sh |= ((ls >> 4) as u16) << (2 * ib);
        let dl = df * l as f32;
        for j in 0..16 {
            let (a, b) = (x[32 * ib + j], x[32 * ib + 16 + j]);
            out[8 + 16 * ib + j] = nearest_iq4(a, dl) | (nearest_iq4(b, dl) << 4);
        }
    }
    out[2..4].copy_from_slice(&sh.to_le_bytes());
}
