//! The k-quants, 256-value super-blocks of sub-blocks with their own scales: Q2_K, Q3_K, Q4_K, Q5_K,
//! Q6_K. Quantisation is a plain min/max (or largest magnitude) scale per sub-block whose stored
//! 4/6-bit scale is rounded so that the grid covers the sub-block (ggml picks those scales with an
//! iterative search: its files are better, kiln's are simpler). In kiln's planar layout Q3_K and
//! Q6_K have `d` moved out (passed as `d`); Q2_K, Q4_K and Q5_K keep their whole block.

use super::{f16_up, h16, signed_amax};
use crate::quant::QuantType;
use half::f16;

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8) of a Q4_K block.
#[inline]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Q3_K's 6-bit scale `is` (0..16) from its 12 scale bytes (ggml unpacks them with `kmask1/2`).
#[inline]
fn q3k_scale(sc: &[u8], is: usize) -> i32 {
    let lo = (sc[is % 8] >> (4 * (is / 8))) & 0xF;
    let hi = (sc[8 + is % 4] >> (2 * (is / 4))) & 3;
    (lo | (hi << 4)) as i32
}

/// Dequantises one block of the k-quants into `out`.
#[inline]
pub(super) fn dequant_block(qt: QuantType, body: &[u8], d: f16, out: &mut [f32]) {
    match qt {
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
        _ => unreachable!("{qt} is not the k-quants"),
    }
}

/// Quantises one block of the k-quants into ggml's block bytes `out`.
pub(super) fn quant_block(qt: QuantType, x: &[f32], out: &mut [u8]) {
    match qt {
        QuantType::Q4K => quant_q4k(x, out),
        QuantType::Q6K => quant_q6k(x, out),
        QuantType::Q2K => quant_min_k(qt, x, out),
        QuantType::Q5K => quant_min_k(qt, x, out),
        QuantType::Q3K => quant_q3k(x, out),
        _ => unreachable!("{qt} is not the k-quants"),
    }
}

/// The 16-byte head of a Q4_K / Q5_K block: `d`, `dmin`, then the 8 sub-blocks' 6-bit scales
/// `sc` and mins `mn` packed in 12 bytes.
fn put_header(out: &mut [u8], d: f16, dmin: f16, sc: &[u8], mn: &[u8]) {
    out[..2].copy_from_slice(&d.to_le_bytes());
    out[2..4].copy_from_slice(&dmin.to_le_bytes());
    let scales = &mut out[4..16];
    for j in 0..4 {
        scales[j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
        scales[j + 4] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
        scales[j + 8] = (sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4);
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
    put_header(out, d, dmin, &sc, &mn);
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
        put_header(out, d, dmin, &sc, &mn);
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
