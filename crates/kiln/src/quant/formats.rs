//! The block formats, on one block at a time: dequantisation that follows ggml's
//! `dequantize_row_*` exactly (same f32 operations in the same order), and quantisation from f32
//! (ggml's reference rounding for Q8_0 and Q4_0, byte for byte; a plain min/max search for the
//! k-quants, whose scales ggml picks with an iterative search).
//!
//! Blocks are seen in kiln's planar layout (see `mod.rs`): `body` is the block without its
//! separated f16 scale `d` (Q8_0, Q4_0, Q6_K), Q4_K keeps its whole block as body.

use super::QuantType;
use half::f16;

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K block.
#[inline]
pub(crate) fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Dequantises one block (`qt.block_elems()` values) into `out`.
#[inline]
pub(crate) fn dequant_block(qt: QuantType, body: &[u8], d: f16, out: &mut [f32]) {
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
        QuantType::Q4K => {
            let d = f16::from_le_bytes([body[0], body[1]]).to_f32();
            let min = f16::from_le_bytes([body[2], body[3]]).to_f32();
            let scales = &body[4..16];
            for p in 0..4 {
                let q = &body[16 + 32 * p..16 + 32 * (p + 1)];
                let (sc, m) = scale_min_k4(2 * p, scales);
                let (d1, m1) = (d * sc as f32, min * m as f32);
                let (sc, m) = scale_min_k4(2 * p + 1, scales);
                let (d2, m2) = (d * sc as f32, min * m as f32);
                let y = &mut out[64 * p..64 * (p + 1)];
                for l in 0..32 {
                    y[l] = d1 * (q[l] & 0xF) as f32 - m1;
                    y[l + 32] = d2 * (q[l] >> 4) as f32 - m2;
                }
            }
        }
        QuantType::Q6K => {
            let d = d.to_f32();
            for h in 0..2 {
                let ql = &body[64 * h..64 * h + 64];
                let qh = &body[128 + 32 * h..128 + 32 * h + 32];
                let sc = &body[192 + 8 * h..192 + 8 * h + 8];
                let y = &mut out[128 * h..128 * (h + 1)];
                for l in 0..32 {
                    let is = l / 16;
                    let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                    let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                    let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                    let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                    y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
                    y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
                    y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
                    y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
                }
            }
        }
        q => super::formats_more::dequant_block(q, body, d, out),
    }
}

/// Quantises one block of `x` into ggml's block bytes `out` (`qt.block_bytes()` long).
pub(crate) fn quant_block(qt: QuantType, x: &[f32], out: &mut [u8]) {
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
        QuantType::Q4K => quant_q4k(x, out),
        QuantType::Q6K => quant_q6k(x, out),
        q => super::formats_more::quant_block(q, x, out),
    }
}

/// Q4_K: each 32-value sub-block gets scale (max - min) / 15 and min -min (min clamped to <= 0);
/// both are stored as 6-bit multiples of the super-block's f16 `d` and `dmin` (rounded up, so the
/// grid covers the sub-block), then every value is rounded to the nearest of its 16 levels.
fn quant_q4k(x: &[f32], out: &mut [u8]) {
    let mut scale = [0f32; 8];
    let mut minv = [0f32; 8];
    for j in 0..8 {
        let s = &x[32 * j..32 * (j + 1)];
        let lo = s.iter().fold(0f32, |a, &v| a.min(v));
        let hi = s.iter().fold(lo, |a, &v| a.max(v));
        scale[j] = (hi - lo) / 15.0;
        minv[j] = -lo;
    }
    let d = f16::from_f32(scale.iter().fold(0f32, |a, &v| a.max(v)) / 63.0);
    let dmin = f16::from_f32(minv.iter().fold(0f32, |a, &v| a.max(v)) / 63.0);
    let (df, mf) = (d.to_f32(), dmin.to_f32());
    let q6 = |v: f32, unit: f32| if unit > 0.0 { ((v / unit).ceil() as i32).clamp(0, 63) as u8 } else { 0 };
    let sc: Vec<u8> = scale.iter().map(|&s| q6(s, df)).collect();
    let mn: Vec<u8> = minv.iter().map(|&m| q6(m, mf)).collect();
    out[..2].copy_from_slice(&d.to_le_bytes());
    out[2..4].copy_from_slice(&dmin.to_le_bytes());
    let scales = &mut out[4..16];
    for j in 0..4 {
        scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        scales[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        scales[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
    }
    let mut q = [0u8; 256];
    for j in 0..8 {
        let (d1, m1) = (df * sc[j] as f32, mf * mn[j] as f32);
        for l in 0..32 {
            let v = x[32 * j + l];
            q[32 * j + l] = if d1 > 0.0 { (((v + m1) / d1).round() as i32).clamp(0, 15) as u8 } else { 0 };
        }
    }
    for p in 0..4 {
        for l in 0..32 {
            out[16 + 32 * p + l] = q[64 * p + l] | (q[64 * p + 32 + l] << 4);
        }
    }
}

/// Q6_K: each 16-value sub-block gets scale amax / 31 (values -31..31 of 6 bits, offset 32),
/// stored as an i8 multiple of the super-block's f16 `d`; values rounded to the nearest level.
fn quant_q6k(x: &[f32], out: &mut [u8]) {
    let mut scale = [0f32; 16];
    for (j, s) in scale.iter_mut().enumerate() {
        *s = x[16 * j..16 * (j + 1)].iter().fold(0f32, |a, v| a.max(v.abs())) / 31.0;
    }
    let d = f16::from_f32(scale.iter().fold(0f32, |a, &v| a.max(v)) / 127.0);
    let df = d.to_f32();
    let sc: Vec<i8> =
        scale.iter().map(|&s| if df > 0.0 { (s / df).ceil().clamp(0.0, 127.0) as i8 } else { 0 }).collect();
    let mut q = [0u8; 256];
    for (i, v) in x[..256].iter().enumerate() {
        let unit = df * sc[i / 16] as f32;
        let l = if unit > 0.0 { ((v / unit).round() as i32).clamp(-32, 31) } else { 0 };
        q[i] = (l + 32) as u8;
    }
    let (ql, rest) = out.split_at_mut(128);
    let (qh, rest) = rest.split_at_mut(64);
    let (scales, dd) = rest.split_at_mut(16);
    for h in 0..2 {
        for l in 0..32 {
            let [q1, q2, q3, q4] = [0, 32, 64, 96].map(|o| q[128 * h + o + l]);
            ql[64 * h + l] = (q1 & 0xF) | ((q3 & 0xF) << 4);
            ql[64 * h + 32 + l] = (q2 & 0xF) | ((q4 & 0xF) << 4);
            qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6);
        }
    }
    for (s, &v) in scales.iter_mut().zip(&sc) {
        *s = v as u8;
    }
    dd[..2].copy_from_slice(&d.to_le_bytes());
}
