//! The line maxima passes (whole lines and atomic blocks) against a host reference, exactly: lines
//! with a stride, an offset and a batch, K from 0 to past one round of 256 invocations, values from
//! 1e-30 to 1e30 per line with NaN, infinities, signed zeros and an all-NaN line. The control: the
//! reference of the lines one line on differs, so a pass that reads the wrong line fails.

use super::{line_maxima, maxima, maxima_buffer, maxima_scaled, Lines};
use crate::storage::Storage;
use crate::{Device, Tensor};
use half::{bf16, f16};
use rand::{RngExt, SeedableRng};

/// bf16 values: per line a scale from 1e-30 to 1e30, and the special values placed on some lines.
fn data(n: usize, seed: u64) -> Vec<bf16> {
    let mut r = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut v: Vec<bf16> = (0..n)
        .map(|i| {
            let scale = 10f32.powi(((i / 16) % 61) as i32 - 30);
            bf16::from_f32((r.random::<f32>() - 0.5) * scale)
        })
        .collect();
    for (i, x) in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0].into_iter().enumerate() {
        if n > 7 * i + 3 {
            v[7 * i + 3] = bf16::from_f32(x);
        }
    }
    v
}

/// Where batch entry `z`'s lines start (the last batch dim steps fastest).
fn entry(l: &Lines, z: usize) -> usize {
    let (mut base, mut rem) = (l.offset, z);
    for (&d, &s) in l.dims.iter().zip(l.strides).rev() {
        base += (rem % d) * s;
        rem /= d;
    }
    base
}

/// The largest finite |x| of each line as f32 bits (0 when none), batch entry by batch entry.
fn reference(x: &[bf16], l: &Lines) -> Vec<u32> {
    let mut out = Vec::new();
    for z in 0..l.batch {
        let base = entry(l, z);
        for line in 0..l.lines {
            let m = (0..l.k)
                .map(|k| ((x[base + line * l.line_stride + k * l.k_stride].to_bits() as u32) << 16) & 0x7fff_ffff)
                .filter(|&b| b < 0x7f80_0000)
                .max()
                .unwrap_or(0);
            out.push(m);
        }
    }
    out
}

/// The lines as `maxima_scaled` writes them: each value times 2^-e of its line's maximum (`LINE_EXP`)
/// rounded to f16, line after line.
fn scaled(x: &[bf16], l: &Lines, maxima: &[u32]) -> Vec<f16> {
    let mut out = Vec::new();
    for z in 0..l.batch {
        let base = entry(l, z);
        for line in 0..l.lines {
            let bits = maxima[z * l.lines + line];
            let e = if bits == 0 { 0 } else { ((bits >> 23) as i32 - 141).clamp(-110, 115) };
            let s = 2f32.powi(-e);
            out.extend((0..l.k).map(|k| f16::from_f32(x[base + line * l.line_stride + k].to_f32() * s)));
        }
    }
    out
}

#[test]
fn line_maxima_match_the_host() {
    let dev = match Device::gpu() {
        Ok(d) => d,
        Err(e) => {
            assert!(!crate::settings::REQUIRE_GPU.is_one(), "KILN_REQUIRE_GPU=1 but: {e}");
            return;
        }
    };
    dev.set_poison(true);
    let n = 4 * 4104 + 64;
    let host = data(n, 7);
    // An all-NaN line: lines 1 of the first case (elements 24..48).
    let mut host = host;
    host[24..48].fill(bf16::NAN);
    let t = Tensor::from_vec(host.clone(), n, &Device::cpu()).unwrap().to_device(&dev).unwrap();
    let guard = t.storage();
    let Storage::Gpu(x) = &*guard else { panic!("not on the GPU") };
    let read = |mx: crate::gpu::runtime::GpuStorage, words: usize| {
        Tensor::from_storage(Storage::Gpu(mx), [words], &dev).to_vec::<u32>().unwrap()
    };
    let plain = |lines, k, offset, line_stride| Lines {
        lines,
        k,
        offset,
        line_stride,
        k_stride: 1,
        batch: 1,
        dims: &[],
        strides: &[],
    };
    let cases = [
        plain(5, 24, 0, 24),
        plain(3, 16, 8, 40),
        plain(1, 0, 0, 8),
        plain(3, 4104, 16, 4104),
        plain(40, 64, 0, 72),
        Lines { lines: 4, k: 8, offset: 8, line_stride: 16, k_stride: 1, batch: 6, dims: &[2, 3], strides: &[400, 72] },
    ];
    for l in &cases {
        let want = reference(&host, l);
        let words = l.batch * l.lines;
        let whole = read(maxima(x, l).unwrap(), words);
        assert_eq!(whole, want, "whole lines: {} lines of {} from {}", l.lines, l.k, l.offset);
        let mx = maxima_buffer(&x.ctx, words).unwrap();
        line_maxima(x, l, &mx, 0).unwrap();
        assert_eq!(read(mx, words), want, "blocks: {} lines of {} from {}", l.lines, l.k, l.offset);
        // The scaled lines (all values, NaN where NaN).
        let (mx, a16) = maxima_scaled(x, l).unwrap();
        assert_eq!(read(mx, words), want, "scaled pass's maxima");
        let got: Vec<f16> = Tensor::from_storage(Storage::Gpu(a16), [words * l.k], &dev).to_vec::<f16>().unwrap();
        let expect = scaled(&host, l, &want);
        let same = |a: &f16, b: &f16| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let bad = got.iter().zip(&expect).filter(|(a, b)| !same(a, b)).count();
        assert!(got.len() == expect.len() && bad == 0, "{bad} scaled values differ ({} lines of {})", l.lines, l.k);
        // The control: the maxima of the next lines (one line stride on).
        if l.k > 0 {
            let shifted = reference(&host, &Lines { offset: l.offset + l.line_stride, ..*l });
            assert_ne!(whole, shifted, "the shifted lines' maxima are the same: the case tells nothing");
            // ... and lines scaled by one power of two less (each maximum doubled) differ.
            let doubled: Vec<u32> = want.iter().map(|&b| if b == 0 { 0 } else { b + (1 << 23) }).collect();
            let other = scaled(&host, l, &doubled);
            assert!(other.iter().zip(&expect).any(|(a, b)| !same(a, b)), "a scale off by 2 changes nothing");
        }
    }
}
