//! The block formats beyond Q8_0/Q4_0/Q4_K/Q6_K (`formats.rs`): Q4_1, Q5_0, Q5_1, Q2_K, Q3_K,
//! Q5_K, IQ4_NL and IQ4_XS. Dequantisation follows ggml's `dequantize_row_*` exactly (the same f32
//! operations in the same order); quantisation is ggml's reference rounding for Q4_1, Q5_0 and Q5_1
//! (byte for byte) and, for the k-quants and IQ4 formats, a plain min/max (or largest magnitude)
//! scale per sub-block whose stored 4/6-bit scale is rounded so that the grid covers the sub-block
//! (ggml picks those scales with an iterative search: its files are better, kiln's are simpler).
//!
//! Blocks are seen in kiln's planar layout (`mod.rs`): Q5_0, Q3_K and IQ4_NL have their f16 `d`
//! moved out (passed as `d`), the others are whole.

use super::formats::scale_min_k4;
use super::QuantType;
use half::f16;

/// IQ4_NL's and IQ4_XS's 16 levels (ggml's `kvalues_iq4nl`).
pub(crate) const KVALUES_IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

fn h16(b: &[u8], o: usize) -> f32 {
    f16::from_le_bytes([b[o], b[o + 1]]).to_f32()
}

/// Dequantises one block of the formats of this file into `out`.
pub(crate) fn dequant_block(qt: QuantType, body: &[u8], d: f16, out: &mut [f32]) {
    match qt {
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
        QuantType::Q2K => {
            let (scales, qs) = (&body[0..16], &body[16..80]);
            let (d, min) = (h16(body, 80), h16(body, 82));
            let mut y = 0;
            let mut is = 0;
            for n in 0..2 {
                let q = &qs[32 * n..32 * n + 32];
                for shift in [0, 2, 4, 6] {
                    for half in 0..2 {
                        let sc = scales[is];
                        is += 1;
                        let (dl, ml) = (d * (sc & 0xF) as f32, min * (sc >> 4) as f32);
                        for l in 0..16 {
                            out[y] = dl * ((q[l + 16 * half] >> shift) & 3) as i8 as f32 - ml;
                            y += 1;
                        }
                    }
                }
            }
        }
        QuantType::Q3K => {
            let (hm, qs, sc) = (&body[0..32], &body[32..96], &body[96..108]);
            let d_all = d.to_f32();
            let mut y = 0;
            let mut is = 0;
            let mut m = 1u8;
            for n in 0..2 {
                let q = &qs[32 * n..32 * n + 32];
                for shift in [0, 2, 4, 6] {
                    for half in 0..2 {
                        let dl = d_all * (q3k_scale(sc, is) - 32) as f32;
                        is += 1;
                        for l in 16 * half..16 * half + 16 {
                            let v = ((q[l] >> shift) & 3) as i8 - if hm[l] & m != 0 { 0 } else { 4 };
                            out[y] = dl * v as f32;
                            y += 1;
                        }
                    }
                    m <<= 1;
                }
            }
        }
        QuantType::Q5K => {
            let (d, min) = (h16(body, 0), h16(body, 2));
            let (scales, qh, qs) = (&body[4..16], &body[16..48], &body[48..176]);
            let (mut u1, mut u2) = (1u8, 2u8);
            for p in 0..4 {
                let ql = &qs[32 * p..32 * p + 32];
                let (sc, m) = scale_min_k4(2 * p, scales);
                let (d1, m1) = (d * sc as f32, min * m as f32);
                let (sc, m) = scale_min_k4(2 * p + 1, scales);
                let (d2, m2) = (d * sc as f32, min * m as f32);
                let y = &mut out[64 * p..64 * p + 64];
                for l in 0..32 {
                    y[l] = d1 * ((ql[l] & 0xF) + if qh[l] & u1 != 0 { 16 } else { 0 }) as f32 - m1;
                    y[l + 32] = d2 * ((ql[l] >> 4) + if qh[l] & u2 != 0 { 16 } else { 0 }) as f32 - m2;
                }
                u1 <<= 2;
                u2 <<= 2;
            }
        }
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
        _ => unreachable!("{qt} is dequantised in formats.rs"),
    }
}

/// Q3_K's 6-bit scale `is` (0..16) from its 12 scale bytes (ggml unpacks them with `kmask1/2`).
#[inline]
pub(crate) fn q3k_scale(sc: &[u8], is: usize) -> i32 {
    let lo = (sc[is % 8] >> (4 * (is / 8))) & 0xF;
    let hi = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
    (lo | (hi << 4)) as i32
}

/// The f16 nearest `v`, or the next one up when that is below `v` (a scale that must cover).
fn f16_up(v: f32) -> f16 {
    let h = f16::from_f32(v);
    if h.to_f32() < v {
        f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

/// Value of largest magnitude (with its sign), ggml's `max` of `quantize_row_q4_0_ref`.
fn signed_amax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// Quantises one block of the formats of this file into ggml's block bytes `out`.
pub(crate) fn quant_block(qt: QuantType, x: &[f32], out: &mut [u8]) {
    match qt {
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
        QuantType::Q2K => quant_min_k(qt, x, out),
        QuantType::Q5K => quant_min_k(qt, x, out),
        QuantType::Q3K => quant_q3k(x, out),
        QuantType::IQ4NL => {
            let d = f16::from_f32(signed_amax(x) / -127.0);
            out[..2].copy_from_slice(&d.to_le_bytes());
            let df = d.to_f32();
            for j in 0..16 {
                out[2 + j] = nearest_iq4(x[j], df) | (nearest_iq4(x[j + 16], df) << 4);
            }
        }
        QuantType::IQ4XS => quant_iq4xs(x, out),
        _ => unreachable!("{qt} is quantised in formats.rs"),
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

/// Q2_K and Q5_K: sub-blocks (16 and 32 values) get a min (`-lo`, quantised first, rounded up to
/// a multiple of `dmin`) and then a scale that covers the sub-block from that min, rounded up to
/// a multiple of `d`; values are rounded to the nearest of the 4 (Q2_K) or 32 (Q5_K) levels.
fn quant_min_k(qt: QuantType, x: &[f32], out: &mut [u8]) {
    let (sub, levels, smax) = if qt == QuantType::Q2K { (16, 3.0, 15u8) } else { (32, 31.0, 63u8) };
    let nsub = 256 / sub;
    let mut minv = [0f32; 16];
    for j in 0..nsub {
        minv[j] = -x[sub * j..sub * (j + 1)].iter().fold(0f32, |a, &v| a.min(v));
    }
    let dmin = f16_up(minv.iter().fold(0f32, |a, &v| a.max(v)) / smax as f32);
    let mf = dmin.to_f32();
    let q_up =
        |v: f32, unit: f32, top: u8| if unit > 0.0 { ((v / unit).ceil() as i32).clamp(0, top as i32) as u8 } else { 0 };
    let mut mn = [0u8; 16];
    let mut scale = [0f32; 16];
    for j in 0..nsub {
        mn[j] = q_up(minv[j], mf, smax);
        let lo = -(mf * mn[j] as f32);
        let hi = x[sub * j..sub * (j + 1)].iter().fold(lo, |a, &v| a.max(v));
        scale[j] = (hi - lo) / levels;
    }
    let d = f16_up(scale.iter().fold(0f32, |a, &v| a.max(v)) / smax as f32);
    let df = d.to_f32();
    let mut sc = [0u8; 16];
    for j in 0..nsub {
        sc[j] = q_up(scale[j], df, smax);
    }
    let mut q = [0u8; 256];
    for (i, &v) in x[..256].iter().enumerate() {
        let j = i / sub;
        let (d1, m1) = (df * sc[j] as f32, mf * mn[j] as f32);
        q[i] = if d1 > 0.0 { (((v + m1) / d1).round() as i32).clamp(0, levels as i32) as u8 } else { 0 };
    }
    if qt == QuantType::Q2K {
        for j in 0..16 {
            out[j] = sc[j] | (mn[j] << 4);
        }
        for n in 0..2 {
            for l in 0..32 {
                let mut b = 0u8;
                for (t, shift) in [0, 2, 4, 6].into_iter().enumerate() {
                    b |= q[128 * n + 32 * t + l] << shift;
                }
                out[16 + 32 * n + l] = b;
            }
        }
        out[80..82].copy_from_slice(&d.to_le_bytes());
        out[82..84].copy_from_slice(&dmin.to_le_bytes());
    } else {
        out[..2].copy_from_slice(&d.to_le_bytes());
        out[2..4].copy_from_slice(&dmin.to_le_bytes());
        let scales = &mut out[4..16];
        for j in 0..4 {
            scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
            scales[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
            scales[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
        }
        out[16..48].fill(0);
        for p in 0..4 {
            for l in 0..32 {
                let (a, b) = (q[64 * p + l], q[64 * p + 32 + l]);
                out[48 + 32 * p + l] = (a & 0xF) | ((b & 0xF) << 4);
                out[16 + l] |= ((a >> 4) << (2 * p)) | ((b >> 4) << (2 * p + 1));
            }
        }
    }
}

/// Q3_K: each 16-value sub-block gets the scale that maps its value of largest magnitude to -4,
/// stored as a signed 6-bit multiple of the super-block's f16 `d`; values rounded to the nearest
/// of the levels -4..3.
fn quant_q3k(x: &[f32], out: &mut [u8]) {
    let mut scale = [0f32; 16];
    for (j, s) in scale.iter_mut().enumerate() {
        *s = signed_amax(&x[16 * j..16 * (j + 1)]) / -4.0;
    }
    let d = f16_up(scale.iter().fold(0f32, |a, &v| a.max(v.abs())) / 31.0);
    let df = d.to_f32();
    let sc: Vec<i32> =
        scale.iter().map(|&s| if df > 0.0 { ((s / df).round() as i32).clamp(-31, 31) } else { 0 }).collect();
    let mut q = [0u8; 256];
    for (i, &v) in x[..256].iter().enumerate() {
        let unit = df * sc[i / 16] as f32;
        let l = if unit != 0.0 { ((v / unit).round() as i32).clamp(-4, 3) } else { 0 };
        q[i] = (l + 4) as u8;
    }
    out.fill(0);
    for n in 0..2 {
        for l in 0..32 {
            for t in 0..4 {
                let v = q[128 * n + 32 * t + l];
                out[32 + 32 * n + l] |= (v & 3) << (2 * t);
                out[l] |= ((v >> 2) & 1) << (4 * n + t);
            }
        }
    }
    let s = &mut out[96..108];
    for (is, &v) in sc.iter().enumerate() {
        let v = (v + 32) as u8;
        s[is % 8] |= (v & 0xF) << (4 * (is / 8));
        s[8 + is % 4] |= (v >> 4) << (2 * (is / 4));
    }
    out[108..110].copy_from_slice(&d.to_le_bytes());
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
