//! Quantized tensors (`kiln::quant`): dequantisation against ggml's block definitions (written here
//! element by element from `dequantize_row_*`), quantise -> dequantise error bounds, `qlinear`
//! against an f64 product with the dequantised weight (few-row kernel and the prefill path), and
//! the errors. Each runs on every backend.

use crate::bounds::assert_catches_wrong;
use crate::common::{random_values, rng, tensor};
use half::f16;
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Device, Tensor};
use rand::RngExt;

/// ggml's `get_scale_min_k4`.
fn scale_min(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Element `i` of ggml block `blk`, following `dequantize_row_*` (f32, same operation order).
fn ref_value(qt: QuantType, blk: &[u8], i: usize) -> f32 {
    let h16 = |o: usize| f16::from_le_bytes([blk[o], blk[o + 1]]).to_f32();
    match qt {
        QuantType::Q8_0 => (blk[2 + i] as i8) as f32 * h16(0),
        QuantType::Q4_0 => {
            let byte = blk[2 + i % 16];
            let nib = if i < 16 { byte & 0xF } else { byte >> 4 };
            (nib as i32 - 8) as f32 * h16(0)
        }
        QuantType::Q4K => {
            let (p, within) = (i / 64, i % 64);
            let (sc, m) = scale_min(2 * p + within / 32, &blk[4..16]);
            let byte = blk[16 + 32 * p + within % 32];
            let nib = if within < 32 { byte & 0xF } else { byte >> 4 };
            h16(0) * sc as f32 * nib as f32 - h16(2) * m as f32
        }
        QuantType::Q6K => {
            let (h, t, l) = (i / 128, (i % 128) / 32, i % 32);
            let ql = blk[64 * h + l + 32 * (t & 1)];
            let nib = if t < 2 { ql & 0xF } else { ql >> 4 };
            let hi = (blk[128 + 32 * h + l] >> (2 * t)) & 3;
            let q = (nib | (hi << 4)) as i32 - 32;
            let sc = blk[192 + 8 * h + l / 16 + 2 * t] as i8;
            h16(208) * sc as f32 * q as f32
        }
        // y[j] = x0 * d + m (x0 the low nibble of qs[j]; high nibbles for j + 16).
        QuantType::Q4_1 => {
            let byte = blk[4 + i % 16];
            let nib = if i < 16 { byte & 0xF } else { byte >> 4 };
            nib as i32 as f32 * h16(0) + h16(2)
        }
        // The fifth bit of value i is bit i of qh; Q5_0: (q - 16) * d, Q5_1: q * d + m.
        QuantType::Q5_0 | QuantType::Q5_1 => {
            let (qh_at, qs_at) = if qt == QuantType::Q5_0 { (2, 6) } else { (4, 8) };
            let qh = u32::from_le_bytes(blk[qh_at..qh_at + 4].try_into().unwrap());
            let byte = blk[qs_at + i % 16];
            let nib = if i < 16 { byte & 0xF } else { byte >> 4 };
            let q = nib as i32 | ((((qh >> i) & 1) as i32) << 4);
            if qt == QuantType::Q5_0 {
                (q - 16) as f32 * h16(0)
            } else {
                q as f32 * h16(0) + h16(2)
            }
        }
        // Value 128n + 32j + 16r + l: bits 2j of qs[32n + 16r + l], scale byte 8n + 2j + r
        // (low nibble times d, high nibble times dmin); dl * q - ml.
        QuantType::Q2K => {
            let (n, j, r, l) = (i / 128, (i % 128) / 32, (i % 32) / 16, i % 16);
            let q = (blk[16 + 32 * n + 16 * r + l] >> (2 * j)) & 3;
            let sc = blk[8 * n + 2 * j + r];
            let (dl, ml) = (h16(80) * (sc & 0xF) as f32, h16(82) * (sc >> 4) as f32);
            dl * q as i8 as f32 - ml
        }
        // Value 128n + 32j + 16r + l: bits 2j of qs[32n + 16r + l], minus 4 unless bit 4n + j of
        // hmask[16r + l]; scale 8n + 2j + r of the 16 6-bit scales (ggml's kmask unpacking), - 32.
        QuantType::Q3K => {
            let (n, j, r, l) = (i / 128, (i % 128) / 32, (i % 32) / 16, i % 16);
            let q = ((blk[32 + 32 * n + 16 * r + l] >> (2 * j)) & 3) as i8;
            let hbit = blk[16 * r + l] & (1 << (4 * n + j)) != 0;
            let mut aux = [0u32; 4];
            for (a, c) in aux.iter_mut().zip(blk[96..108].chunks(4)) {
                *a = u32::from_le_bytes(c.try_into().unwrap());
            }
            let (k1, k2) = (0x03030303u32, 0x0f0f0f0fu32);
            let tmp = aux[2];
            aux[2] = ((aux[0] >> 4) & k2) | (((tmp >> 4) & k1) << 4);
            aux[3] = ((aux[1] >> 4) & k2) | (((tmp >> 6) & k1) << 4);
            aux[0] = (aux[0] & k2) | ((tmp & k1) << 4);
            aux[1] = (aux[1] & k2) | (((tmp >> 2) & k1) << 4);
            let is = 8 * n + 2 * j + r;
            let sc = (aux[is / 4] >> (8 * (is % 4))) as u8 as i8;
            let dl = h16(108) * (sc as i32 - 32) as f32;
            dl * (q - if hbit { 0 } else { 4 }) as f32
        }
        // Value 64p + 32t + l: nibble t of qs[32p + l] plus 16 for bit 2p + t of qh[l];
        // d * sc - dmin * m of sub-block 2p + t (get_scale_min_k4).
        QuantType::Q5K => {
            let (p, t, l) = (i / 64, (i % 64) / 32, i % 32);
            let byte = blk[48 + 32 * p + l];
            let nib = if t == 0 { byte & 0xF } else { byte >> 4 };
            let hi = if blk[16 + l] & (1 << (2 * p + t)) != 0 { 16 } else { 0 };
            let (sc, m) = scale_min(2 * p + t, &blk[4..16]);
            let (d1, m1) = (h16(0) * sc as f32, h16(2) * m as f32);
            d1 * (nib + hi) as f32 - m1
        }
        QuantType::IQ4NL => {
            let byte = blk[2 + i % 16];
            let nib = if i < 16 { byte & 0xF } else { byte >> 4 };
            h16(0) * KVALUES[nib as usize] as f32
        }
        // Sub-block ib = i / 32: ls = 4 bits of scales_l[ib / 2] | 2 bits of scales_h << 4;
        // d * (ls - 32) * kvalues[nibble].
        QuantType::IQ4XS => {
            let (ib, j) = (i / 32, i % 32);
            let sh = u16::from_le_bytes([blk[2], blk[3]]) as i32;
            let ls = ((blk[4 + ib / 2] as i32 >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            let byte = blk[8 + 16 * ib + j % 16];
            let nib = if j < 16 { byte & 0xF } else { byte >> 4 };
            (h16(0) * (ls - 32) as f32) * KVALUES[nib as usize] as f32
        }
    }
}

/// ggml's `kvalues_iq4nl`.
const KVALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Random ggml blocks with finite scales of either sign.
fn random_raw(qt: QuantType, blocks: usize, seed: u64) -> Vec<u8> {
    let mut r = rng(seed);
    let mut raw: Vec<u8> = (0..blocks * qt.block_bytes()).map(|_| r.random::<u32>() as u8).collect();
    for blk in raw.chunks_exact_mut(qt.block_bytes()) {
        let offs: &[usize] = match qt {
            QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q5_0 | QuantType::IQ4NL | QuantType::IQ4XS => &[0],
            QuantType::Q4K | QuantType::Q4_1 | QuantType::Q5_1 | QuantType::Q5K => &[0, 2],
            QuantType::Q6K => &[208],
            QuantType::Q2K => &[80, 82],
            QuantType::Q3K => &[108],
        };
        for &o in offs {
            let d = f16::from_f32((r.random::<f32>() - 0.3) * 0.05);
            blk[o..o + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    raw
}

fn dequantize_matches_ggml(dev: &Device) {
    for qt in QuantType::ALL {
        let shape = [3, 2 * qt.block_elems()];
        let blocks = 6;
        let raw = random_raw(qt, blocks, 7 + qt.ggml_type() as u64);
        let q = QTensor::from_raw(&raw, qt, shape, dev).unwrap();
        assert_eq!(q.to_raw().unwrap(), raw, "{qt}: planar layout round trip");
        let want: Vec<f32> = raw
            .chunks_exact(qt.block_bytes())
            .flat_map(|blk| (0..qt.block_elems()).map(move |i| ref_value(qt, blk, i)))
            .collect();
        let got = q.dequantize(DType::F32).unwrap();
        assert_eq!(got.dims(), shape);
        let got = got.to_vec::<f32>().unwrap();
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            // The CPU computes ggml's f32 operations exactly; a GPU compiler may fuse a multiply-add.
            let tol = if dev.is_cpu() { 0.0 } else { 1e-6 * w.abs().max(1e-3) };
            assert!((g - w).abs() <= tol, "{qt} {dev:?} element {i}: {g} vs {w}");
        }
        for dt in [DType::F16, DType::BF16] {
            let got = q.dequantize(dt).unwrap();
            assert_eq!(got.dtype(), dt);
            let got = got.to_f64_vec().unwrap();
            let rel = if dt == DType::F16 { 1e-3 } else { 8e-3 };
            for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w as f64).abs() <= rel * (w.abs() as f64) + 1e-7, "{qt} {dt} element {i}: {g} vs {w}");
            }
        }
    }
}

/// The largest error a value of a block with largest magnitude `amax` may get from `qt`'s
/// quantisation (see `quant/formats/kquants.rs`: rounding to the grid, scales rounded up to cover it).
fn error_bound(qt: QuantType, amax: f32) -> f32 {
    match qt {
        // Half a step of amax / 127, plus the f16 rounding of d over 127 steps.
        QuantType::Q8_0 => 0.6 * amax / 127.0,
        // Values of the other sign than the largest one may clamp at 15: one step of amax / 8.
        QuantType::Q4_0 => 1.01 * amax / 8.0,
        // Half a step of the sub-block (<= 2 amax / 15) plus the min's 6-bit rounding (<= dmin).
        QuantType::Q4K => 0.55 * 2.0 * amax / 15.0 + 1.01 * amax / 63.0,
        // Half a step of amax / 31 (the sub-block scale rounded up by at most d = amax / (31 * 127)).
        QuantType::Q6K => 0.51 * amax / 31.0,
        // Half a step of (max - min) / 15 (<= 2 amax / 15), plus the f16 rounding of d and m.
        QuantType::Q4_1 => 0.55 * 2.0 * amax / 15.0 + 2e-3 * amax,
        QuantType::Q5_1 => 0.55 * 2.0 * amax / 31.0 + 2e-3 * amax,
        // As Q4_0: one step of amax / 16.
        QuantType::Q5_0 => 1.01 * amax / 16.0,
        // Half a step: the sub-block's range from its quantised min (<= 2 amax + dmin) over the
        // levels, the scale rounded up by at most d (= 1 / 15 or 1 / 63 of the largest).
        QuantType::Q2K => 0.51 * (2.0 + 1.0 / 15.0) * amax / 3.0 * (1.0 + 1.0 / 15.0),
        QuantType::Q5K => 0.51 * (2.0 + 1.0 / 63.0) * amax / 31.0 * (1.0 + 1.0 / 63.0),
        // One step of amax / 4 (values of the other sign clamp at 3), plus the 6-bit scale's
        // rounding (half of d = amax / 124) over 4 levels.
        QuantType::Q3K => 1.01 * (amax / 4.0 + 2.0 * amax / 124.0),
        // IQ4_NL's levels, amax at -127: gaps of at most 24 (half: 12), 127 vs 113 at the top (14).
        QuantType::IQ4NL => 14.2 * amax / 127.0,
        // Plus the sub-block scale's 6-bit rounding (half of amax / (127 * 31)) over 127.
        QuantType::IQ4XS => 14.2 * amax / 127.0 + 0.51 * amax / 31.0,
    }
}

fn quantize_error_within_bound(dev: &Device) {
    for qt in QuantType::ALL {
        let be = qt.block_elems();
        let shape = [5, 2 * be];
        let mut vals = random_values(10 * be, DType::F32, 3);
        // An all-zero block and one tiny block.
        vals[..be].iter_mut().for_each(|v| *v = 0.0);
        vals[be..2 * be].iter_mut().for_each(|v| *v *= 1e-3);
        let x = tensor(&vals, &shape, DType::F32, dev);
        let q = QTensor::quantize(&x, qt).unwrap();
        assert_eq!((q.qtype(), q.dims()), (qt, &shape[..]));
        assert_eq!(q.storage_bytes(), (10usize * qt.block_bytes()).div_ceil(16) * 16);
        let back = q.dequantize(DType::F32).unwrap().to_vec::<f32>().unwrap();
        for (b, (xs, ys)) in vals.chunks(be).zip(back.chunks(be)).enumerate() {
            let amax = xs.iter().fold(0f32, |a, &v| a.max((v as f32).abs()));
            let bound = error_bound(qt, amax) + 1e-7;
            for (i, (&x, &y)) in xs.iter().zip(ys).enumerate() {
                assert!((x as f32 - y).abs() <= bound, "{qt} block {b} value {i}: {x} -> {y} (bound {bound})");
            }
        }
        assert!(back[..be].iter().all(|&v| v == 0.0), "{qt}: zeros stay zeros");
        // The same tensor quantises to the same bytes on every device (quantisation runs on the host).
        let cpu = QTensor::quantize(&x.to_device(&Device::cpu()).unwrap(), qt).unwrap();
        assert_eq!(q.to_raw().unwrap(), cpu.to_raw().unwrap());
    }
}

/// `x @ w^T + bias` in f64 from the dequantised weight.
fn reference(x: &[f64], w: &[f64], bias: Option<&[f64]>, m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k).map(|t| x[i * k + t] * w[j * k + t]).sum();
            out[i * n + j] = s + bias.map_or(0.0, |b| b[j]);
        }
    }
    out
}

fn qlinear_matches_reference(dev: &Device) {
    // Odd n (16-bit outputs go through f32), a wide k with even n (more lanes per weight row,
    // 16-bit outputs written by the kernel), and an odd number of blocks per row (the CPU kernels
    // take two blocks per step).
    for (qt, (n, k)) in QuantType::ALL
        .into_iter()
        .flat_map(|qt| [(qt, (13, 2 * qt.block_elems().max(64))), (qt, (38, 2048)), (qt, (5, 3 * qt.block_elems()))])
    {
        let wv = random_values(n * k, DType::F32, 11);
        let w = QTensor::quantize(&tensor(&wv, &[n, k], DType::F32, dev), qt).unwrap();
        let wd = w.dequantize(DType::F32).unwrap().to_f64_vec().unwrap();
        for (lead, dt, with_bias) in [
            (vec![1], DType::F32, false),
            (vec![3], DType::F32, true),
            (vec![2, 4], DType::F32, false),
            (vec![9], DType::F16, true),
            (vec![5], DType::BF16, false),
            (vec![70], DType::F32, true),
        ] {
            let m: usize = lead.iter().product();
            let xv = random_values(m * k, DType::F32, 5 + m as u64);
            let mut shape = lead.clone();
            shape.push(k);
            let x = tensor(&xv, &shape, dt, dev);
            let xr = x.to_f64_vec().unwrap();
            let bv = random_values(n, DType::F32, 9);
            let b = tensor(&bv, &[n], dt, dev);
            let bias = with_bias.then_some(&b);
            let y = x.qlinear(&w, bias).unwrap();
            let mut out_shape = lead.clone();
            out_shape.push(n);
            assert_eq!((y.dims(), y.dtype()), (&out_shape[..], dt));
            let br = b.to_f64_vec().unwrap();
            let want = reference(&xr, &wd, with_bias.then_some(&br[..]), m, n, k);
            let got = y.to_f64_vec().unwrap();
            // f32 sums of k products (order differs): 1e-5 of sum |x w|; then rounding to dt.
            let rel = match dt {
                DType::F16 => 2e-3,
                DType::BF16 => 1.6e-2,
                _ => 0.0,
            };
            // The residual form: `res + x @ w^T`, res a view at an odd offset for odd m (the
            // kernel adds word-aligned addends, the rest are added apart).
            let rv = random_values(m * n + 1, DType::F32, 13);
            let res_all = tensor(&rv, &[m * n + 1], dt, dev);
            let res = res_all.narrow(0, m % 2, m * n).unwrap().reshape(out_shape.clone()).unwrap();
            let yr = x.qlinear_add(&w, &res).unwrap();
            assert_eq!((yr.dims(), yr.dtype()), (&out_shape[..], dt));
            let rr = res.to_f64_vec().unwrap();
            let want_r = reference(&xr, &wd, None, m, n, k);
            let got_r = yr.to_f64_vec().unwrap();
            if dt == DType::F32 && m == 3 {
                // The tolerance below catches a product that skipped the last block of k (one
                // quantization block), zeros and a shifted result.
                let bound: Vec<f64> = (0..m * n)
                    .map(|o| {
                        let (i, j) = (o / n, o % n);
                        let mag: f64 = (0..k).map(|t| (xr[i * k + t] * wd[j * k + t]).abs()).sum();
                        1e-5 * mag + rel * want[o].abs() + 1e-6
                    })
                    .collect();
                let be = qt.block_elems();
                let xs: Vec<f64> = xr.iter().enumerate().map(|(i, &v)| if i % k >= k - be { 0.0 } else { v }).collect();
                let dropped = reference(&xs, &wd, with_bias.then_some(&br[..]), m, n, k);
                assert_catches_wrong(&want, &bound, &dropped, &format!("{qt} qlinear control (m {m}, n {n}, k {k})"));
            }
            for i in 0..m {
                for j in 0..n {
                    let mag: f64 = (0..k).map(|t| (xr[i * k + t] * wd[j * k + t]).abs()).sum();
                    let (g, e) = (got[i * n + j], want[i * n + j]);
                    assert!(
                        (g - e).abs() <= 1e-5 * mag + rel * e.abs() + 1e-6,
                        "{qt} {dt} m={m} ({i}, {j}): {g} vs {e}"
                    );
                    let (g, e) = (got_r[i * n + j], want_r[i * n + j] + rr[i * n + j]);
                    assert!(
                        (g - e).abs() <= 1e-5 * (mag + rr[i * n + j].abs()) + 2.0 * rel * e.abs() + 1e-6,
                        "{qt} {dt} m={m} ({i}, {j}) with residual: {g} vs {e}"
                    );
                }
            }
        }
        // A non-contiguous input (a transposed view) and an input at an odd offset.
        let xt = tensor(&random_values(3 * k, DType::F32, 2), &[k, 3], DType::F32, dev).t().unwrap();
        let want = xt.contiguous().unwrap().qlinear(&w, None).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(xt.qlinear(&w, None).unwrap().to_vec::<f32>().unwrap(), want, "{qt} transposed view");
        let big = tensor(&random_values(3 * k + 1, DType::F32, 4), &[3 * k + 1], DType::F32, dev);
        let xo = big.narrow(0, 1, 3 * k).unwrap().reshape((3, k)).unwrap();
        let want = xo.contiguous().unwrap();
        let want = Tensor::from_vec(want.to_vec::<f32>().unwrap(), (3, k), dev).unwrap().qlinear(&w, None).unwrap();
        assert_eq!(
            xo.qlinear(&w, None).unwrap().to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            "{qt} offset view"
        );
        // No rows.
        let e = Tensor::zeros((0, k), DType::F32, dev).unwrap().qlinear(&w, None).unwrap();
        assert_eq!(e.dims(), [0, n]);
    }
}

fn quant_errors(dev: &Device) {
    let x = Tensor::zeros((4, 48), DType::F32, dev).unwrap();
    let e = QTensor::quantize(&x, QuantType::Q8_0).unwrap_err().to_string();
    assert!(e.contains("[quantize]") && e.contains("(4, 48)") && e.contains("32"), "{e}");
    let e = QTensor::quantize(&x.to_dtype(DType::I32).unwrap(), QuantType::Q8_0).unwrap_err().to_string();
    assert!(e.contains("[quantize]") && e.contains("i32"), "{e}");
    let nan = Tensor::full(f64::NAN, (1, 32), DType::F32, dev).unwrap();
    assert!(QTensor::quantize(&nan, QuantType::Q4_0).unwrap_err().to_string().contains("NaN"));
    let e = QTensor::from_raw(&[0u8; 33], QuantType::Q8_0, (1, 32), dev).unwrap_err().to_string();
    assert!(e.contains("34 bytes") && e.contains("33"), "{e}");
    let w = QTensor::quantize(&Tensor::zeros((8, 64), DType::F32, dev).unwrap(), QuantType::Q4_0).unwrap();
    let e = Tensor::zeros((2, 32), DType::F32, dev).unwrap().qlinear(&w, None).unwrap_err().to_string();
    assert!(e.contains("[qlinear]") && e.contains("(2, 32)") && e.contains("(8, 64)"), "{e}");
    let xi = Tensor::zeros((2, 64), DType::I32, dev).unwrap();
    assert!(xi.qlinear(&w, None).unwrap_err().to_string().contains("[qlinear] dtype i32"));
    let x = Tensor::zeros((2, 64), DType::F32, dev).unwrap();
    let b = Tensor::zeros(7, DType::F32, dev).unwrap();
    assert!(x.qlinear(&w, Some(&b)).unwrap_err().to_string().contains("bias of shape"));
    let e = x.qlinear_add(&w, &b).unwrap_err().to_string();
    assert!(e.contains("[qlinear_add]") && e.contains("residual of shape"), "{e}");
    let e = QTensor::from_raw(&[0u8; 18], QuantType::Q4_0, (1, 32), dev).unwrap().dequantize(DType::I32);
    assert!(e.unwrap_err().to_string().contains("[dequantize]"));
    if dev.is_gpu() {
        let xc = Tensor::zeros((2, 64), DType::F32, &Device::cpu()).unwrap();
        assert!(xc.qlinear(&w, None).unwrap_err().to_string().contains("different devices"));
    }
}

/// Stacking rows: the raw blocks are the parts' in order, through the device path (even block
/// counts) and the host one (odd counts of formats with a scale section), and mismatches are errors.
fn cat_rows_stacks_blocks(dev: &Device) {
    for qt in QuantType::ALL {
        let k = qt.block_elems();
        for rows in [[4, 2, 6], [3, 1, 5]] {
            let parts: Vec<QTensor> = rows
                .iter()
                .enumerate()
                .map(|(i, &n)| QTensor::from_raw(&random_raw(qt, n, 40 + i as u64), qt, (n, k), dev).unwrap())
                .collect();
            let cat = QTensor::cat_rows(&parts.iter().collect::<Vec<_>>()).unwrap();
            assert_eq!(cat.dims(), [rows.iter().sum::<usize>(), k]);
            let want: Vec<u8> = parts.iter().flat_map(|p| p.to_raw().unwrap()).collect();
            assert_eq!(cat.to_raw().unwrap(), want, "{qt} rows {rows:?}");
            let direct = QTensor::from_raw(&want, qt, (rows.iter().sum::<usize>(), k), dev).unwrap();
            assert_eq!(cat.storage_bytes(), direct.storage_bytes(), "{qt} padding");
            assert_eq!(
                cat.dequantize(DType::F32).unwrap().to_vec::<f32>().unwrap(),
                direct.dequantize(DType::F32).unwrap().to_vec::<f32>().unwrap()
            );
        }
        let other = QTensor::from_raw(&random_raw(qt, 2, 1), qt, (1, 2 * k), dev).unwrap();
        let one = QTensor::from_raw(&random_raw(qt, 1, 1), qt, (1, k), dev).unwrap();
        let e = QTensor::cat_rows(&[&one, &other]).unwrap_err().to_string();
        assert!(e.contains("[qtensor_cat_rows]"), "{e}");
    }
}

crate::backend_tests!(
    dequantize_matches_ggml,
    quantize_error_within_bound,
    qlinear_matches_reference,
    quant_errors,
    cat_rows_stacks_blocks
);

/// A digest of the CPU's few-row quantized products (Q8_0, Q4_0, Q4_1; one and three rows of k =
/// 4096): the x86 paths (AVX-512, AVX2, scalar) sum in different orders, so their digests differ.
/// Printed for `cpu_quant_paths_each_run`, which runs this in child processes.
#[test]
#[ignore = "run by cpu_quant_paths_each_run in a child process with the ISA forced"]
fn cpu_quant_digest() {
    let dev = Device::cpu();
    let k = 4096;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for qt in [QuantType::Q8_0, QuantType::Q4_0, QuantType::Q4_1] {
        let w =
            QTensor::quantize(&tensor(&random_values(16 * k, DType::F32, 3), &[16, k], DType::F32, &dev), qt).unwrap();
        for m in [1, 3] {
            let x = tensor(&random_values(m * k, DType::F32, 4), &[m, k], DType::F32, &dev);
            for v in x.qlinear(&w, None).unwrap().to_vec::<f32>().unwrap() {
                h = (h ^ v.to_bits() as u64).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    println!("CPU-QUANT-DIGEST {h:016x}");
}

/// The AVX2 and scalar quantized CPU paths run on any x86 CPU, AVX-512 machines included: this test
/// reruns the CPU `qlinear` conformance test in child processes with `KILN_CPU_NO_AVX512=1` (AVX2)
/// and `KILN_CPU_QUANT_SCALAR=1` (scalar), and shows that each setting took its own path: the
/// digests of the same products differ between paths (a setting that was ignored would repeat the
/// default's digest).
#[test]
fn cpu_quant_paths_each_run() {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if !(has!("avx2") && has!("fma") && has!("f16c")) {
            eprintln!("cpu_quant_paths_each_run skipped: no AVX2 on this CPU (only the scalar path exists)");
            return;
        }
        let run = |setting: Option<&str>| -> String {
            let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
            cmd.args(["quant::qlinear_matches_reference::cpu", "quant::cpu_quant_digest", "--exact"])
                .args(["--include-ignored", "--nocapture", "--test-threads=1"])
                .env_remove("KILN_CPU_NO_AVX512")
                .env_remove("KILN_CPU_QUANT_SCALAR");
            if let Some(var) = setting {
                cmd.env(var, "1");
            }
            let out = cmd.output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("2 passed"),
                "{setting:?}: the child run failed:\n{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            // libtest prints the test's name on the same line before the captured output.
            let at = stdout.find("CPU-QUANT-DIGEST ").expect("no digest printed") + "CPU-QUANT-DIGEST ".len();
            stdout[at..at + 16].to_string()
        };
        let (default, avx2, scalar) = (run(None), run(Some("KILN_CPU_NO_AVX512")), run(Some("KILN_CPU_QUANT_SCALAR")));
        assert_ne!(avx2, scalar, "KILN_CPU_QUANT_SCALAR=1 gave the AVX2 path's digest: the scalar path did not run");
        if has!("avx512f") {
            assert_ne!(default, avx2, "KILN_CPU_NO_AVX512=1 gave the AVX-512 path's digest: AVX2 did not run");
        } else {
            assert_eq!(default, avx2, "without AVX-512 the default is the AVX2 path");
        }
    }
}
