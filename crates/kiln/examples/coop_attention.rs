//! Prefill attention on cooperative matrices (`gpu/attention/flash_coop/`) on the device: each
//! case checked against the f32 attention of the same inputs (relative L2 error; the probabilities'
//! f16 rounding and the output's rounding give ~1e-3 for f16, ~4e-3 for bf16) and timed with GPU
//! timestamps (median of `RUNS` after 0.3 s of back-to-back runs), beside the default `sdpa` path
//! (the cooperative kernel itself, or with `KILN_COOP_ATTN=0` the plain flash kernel), and the
//! emulated kernel's error as a control.
//!
//! Run: `cargo run --release -p kiln --example coop_attention` (`ONLY=a,b`: the cases whose name
//! contains one of these).

use kiln::gpu_probes::sdpa_coop_tensors;
use kiln::{DType, Device, Result, Tensor};

const RUNS: usize = 15;

/// `(batch, heads q, heads kv, tokens, head size, causal)`: issue 34's three shapes first.
const CASES: [(usize, usize, usize, usize, usize, bool); 6] = [
    (1, 32, 8, 2048, 128, true),
    (1, 32, 8, 8192, 128, true),
    (8, 16, 16, 512, 64, false),
    (1, 32, 8, 2048, 64, true),
    (1, 32, 8, 2048, 128, false),
    (1, 32, 32, 1024, 128, true),
];

fn median(dev: &Device, f: &dyn Fn() -> Result<Tensor>) -> Result<f64> {
    dev.keep_busy(0.3, f)?;
    let mut t: Vec<f64> = (0..RUNS).map(|_| dev.measure(f).map(|m| m.seconds)).collect::<Result<_>>()?;
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

fn rel_err(got: &Tensor, reference: &Tensor) -> Result<f64> {
    let d = got.to_dtype(DType::F32)?.sub(reference)?;
    let num = d.mul(&d)?.sum_all()?.to_scalar::<f32>()? as f64;
    let den = reference.mul(reference)?.sum_all()?.to_scalar::<f32>()? as f64;
    Ok((num / den).sqrt())
}

fn main() -> Result<()> {
    let dev = Device::gpu()?;
    println!("device {dev}");
    // ONLY=a,b: the cases whose name contains one of these.
    let only: Vec<String> =
        std::env::var("ONLY").unwrap_or_default().split(',').filter(|x| !x.is_empty()).map(String::from).collect();
    for dt in [DType::F16, DType::BF16] {
        for (b, hq, hkv, t, d, causal) in CASES {
            let name = format!("{dt} {b}x{hq}/{hkv}x{t}x{d}{}", if causal { " causal" } else { "" });
            if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
                continue;
            }
            let q = Tensor::randn(0.0, 1.0, vec![b, hq, t, d], dt, 1, &dev)?;
            let k = Tensor::randn(0.0, 1.0, vec![b, hkv, t, d], dt, 2, &dev)?;
            let v = Tensor::randn(0.0, 1.0, vec![b, hkv, t, d], dt, 3, &dev)?;
            let f32s = |x: &Tensor| x.to_dtype(DType::F32);
            let reference = f32s(&q)?.sdpa(&f32s(&k)?, &f32s(&v)?, causal, None)?;
            let pairs = if causal { t * (t + 1) / 2 } else { t * t };
            let flops = 4.0 * (b * hq * d * pairs) as f64;
            let coop = || -> Result<Tensor> {
                sdpa_coop_tensors(&q, &k, &v, causal, None, None).unwrap_or_else(|| {
                    Err(kiln::Error::InvalidArgument {
                        op: "coop_attention",
                        msg: "the cooperative path refused".into(),
                    })
                })
            };
            let default = || q.sdpa(&k, &v, causal, None);
            // The emulated kernel (plain WGSL in place of the cooperative ops) as a control: checked, not timed.
            if t <= 512 {
                match sdpa_coop_tensors(&q, &k, &v, causal, None, Some(16))
                    .map(|r| r.and_then(|o| rel_err(&o, &reference)))
                {
                    Some(Ok(err)) => println!("{name:<28} emulated err {err:.2e}"),
                    Some(Err(e)) => println!("{name:<28} emulated error: {e}"),
                    None => println!("{name:<28} emulated refused"),
                }
            }
            for (label, f) in [("coop", &coop as &dyn Fn() -> Result<Tensor>), ("default", &default)] {
                match f().and_then(|o| rel_err(&o, &reference)) {
                    Err(e) => println!("{name:<28} {label:<8} error: {e}"),
                    Ok(err) => {
                        let s = median(&dev, f)?;
                        let bad = if err > if dt == DType::BF16 { 1e-2 } else { 4e-3 } { "  WRONG" } else { "" };
                        println!(
                            "{name:<28} {label:<8} {:>9.1} us {:>7.1} TFLOPS  err {err:.2e}{bad}",
                            s * 1e6,
                            flops / s / 1e12
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
