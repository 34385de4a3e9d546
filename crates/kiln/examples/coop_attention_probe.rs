//! Bisecting the cooperative attention kernel on a device: small structured cases through the
//! cooperative kernel and its emulated twin, against an f64 reference computed here, with a map of
//! which output rows are wrong (`.` right, `x` wrong, `0` all zero, `N` NaN).
//!
//! Run: `cargo run --release -p kiln --example coop_attention_probe`.

use kiln::gpu_probes::sdpa_coop_tensors;
use kiln::{DType, Device, Result, Tensor};

struct Case {
    name: &'static str,
    hq: usize,
    hkv: usize,
    tq: usize,
    tk: usize,
    d: usize,
    dv: usize,
    causal: bool,
    /// 0 random, 1 keys zero, 2 values one-hot (v[j][c] = j == c).
    kind: u8,
}

fn rng_vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0) as f32
        })
        .collect()
}

fn reference(c: &Case, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    let scale = 1.0 / (c.d as f64).sqrt();
    let mut out = vec![0.0; c.hq * c.tq * c.dv];
    for h in 0..c.hq {
        let hk = h / (c.hq / c.hkv);
        for i in 0..c.tq {
            let vis = if c.causal { (i + 1 + c.tk).saturating_sub(c.tq).min(c.tk) } else { c.tk };
            let s: Vec<f64> = (0..vis)
                .map(|j| {
                    (0..c.d)
                        .map(|x| q[(h * c.tq + i) * c.d + x] as f64 * k[(hk * c.tk + j) * c.d + x] as f64)
                        .sum::<f64>()
                        * scale
                })
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let l: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for (j, sj) in s.iter().enumerate() {
                let p = (sj - m).exp() / l;
                for y in 0..c.dv {
                    out[(h * c.tq + i) * c.dv + y] += p * v[(hk * c.tk + j) * c.dv + y] as f64;
                }
            }
        }
    }
    out
}

fn row_map(c: &Case, got: &[f32], want: &[f64]) -> String {
    let mut m = String::new();
    for r in 0..c.hq * c.tq {
        let g = &got[r * c.dv..(r + 1) * c.dv];
        let w = &want[r * c.dv..(r + 1) * c.dv];
        let ch = if g.iter().any(|x| x.is_nan()) {
            'N'
        } else if g.iter().all(|&x| x == 0.0) {
            '0'
        } else if g.iter().zip(w).all(|(&a, &b)| (a as f64 - b).abs() <= 2e-2 * (1.0 + b.abs())) {
            '.'
        } else {
            'x'
        };
        m.push(ch);
        if (r + 1) % 64 == 0 {
            m.push(' ');
        }
    }
    m
}

fn main() -> Result<()> {
    let dev = Device::gpu()?;
    println!("device {dev}");
    #[rustfmt::skip]
    let cases = [
        Case { name: "k0 64x32 d16", hq: 1, hkv: 1, tq: 64, tk: 32, d: 16, dv: 16, causal: false, kind: 1 },
        Case { name: "onehot 64x32 d16", hq: 1, hkv: 1, tq: 64, tk: 32, d: 16, dv: 16, causal: false, kind: 2 },
        Case { name: "rand 64x32 d16", hq: 1, hkv: 1, tq: 64, tk: 32, d: 16, dv: 16, causal: false, kind: 0 },
        Case { name: "rand 64x64 d16", hq: 1, hkv: 1, tq: 64, tk: 64, d: 16, dv: 16, causal: false, kind: 0 },
        Case { name: "rand 64x32 d64", hq: 1, hkv: 1, tq: 64, tk: 32, d: 64, dv: 64, causal: false, kind: 0 },
        Case { name: "rand 16x16 d16", hq: 1, hkv: 1, tq: 16, tk: 16, d: 16, dv: 16, causal: false, kind: 0 },
        Case { name: "rand 4/2x70 d64 causal", hq: 4, hkv: 2, tq: 70, tk: 70, d: 64, dv: 64, causal: true, kind: 0 },
        Case { name: "rand 2/1x130 d128 causal", hq: 2, hkv: 1, tq: 130, tk: 130, d: 128, dv: 128, causal: true, kind: 0 },
        // Past 7 key tiles (lavapipe's loop limit cut the emulated kernel short there) and tk > tq.
        Case { name: "rand 1/1x130x900 d128 causal", hq: 1, hkv: 1, tq: 130, tk: 900, d: 128, dv: 128, causal: true, kind: 0 },
        Case { name: "k0 32x900 d128", hq: 1, hkv: 1, tq: 32, tk: 900, d: 128, dv: 128, causal: false, kind: 1 },
    ];
    for c in &cases {
        let mut q = rng_vals(c.hq * c.tq * c.d, 1);
        let mut k = rng_vals(c.hkv * c.tk * c.d, 2);
        let mut v = rng_vals(c.hkv * c.tk * c.dv, 3);
        match c.kind {
            1 => k.iter_mut().for_each(|x| *x = 0.0),
            2 => {
                for (i, x) in v.iter_mut().enumerate() {
                    *x = if (i / c.dv) % c.tk == i % c.dv { 1.0 } else { 0.0 };
                }
                q.iter_mut().for_each(|x| *x *= 3.0);
            }
            _ => {}
        }
        // Round to f16 so the reference sees what the kernel sees.
        let t = |x: &[f32], dims: Vec<usize>| -> Result<Tensor> {
            Tensor::from_vec(x.to_vec(), dims, &Device::cpu())?.to_dtype(DType::F16)?.to_device(&dev)
        };
        let (tq_, tk_, tv_) =
            (t(&q, vec![1, c.hq, c.tq, c.d])?, t(&k, vec![1, c.hkv, c.tk, c.d])?, t(&v, vec![1, c.hkv, c.tk, c.dv])?);
        let back = |x: &Tensor| -> Result<Vec<f32>> { x.to_dtype(DType::F32)?.to_vec::<f32>() };
        let want = reference(c, &back(&tq_)?, &back(&tk_)?, &back(&tv_)?);
        for (label, emulate) in [("coop", None), ("emul", Some(16))] {
            match sdpa_coop_tensors(&tq_, &tk_, &tv_, c.causal, None, emulate) {
                None => println!("{:<26} {label}: refused", c.name),
                Some(Err(e)) => println!("{:<26} {label}: error {e}", c.name),
                Some(Ok(o)) => {
                    let got = back(&o)?;
                    let err = got.iter().zip(&want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max);
                    println!("{:<26} {label}: max err {err:.3e}  rows {}", c.name, row_map(c, &got, &want));
                    if label == "coop" && err > 2e-2 && c.tq <= 64 {
                        for r in [0usize, 1, 16, 17] {
                            if r < c.tq {
                                let g: Vec<String> =
                                    got[r * c.dv..r * c.dv + 8].iter().map(|x| format!("{x:.3}")).collect();
                                let w: Vec<String> =
                                    want[r * c.dv..r * c.dv + 8].iter().map(|x| format!("{x:.3}")).collect();
                                println!("    row {r:>2} got  {}", g.join(" "));
                                println!("    row {r:>2} want {}", w.join(" "));
                            }
                        }
                    }
                }
            }
        }
    }
    Ok(())
}
