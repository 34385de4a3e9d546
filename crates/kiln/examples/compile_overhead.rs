//! What `kiln::compile` costs on the host: the first call of a signature (trace, plan, kernel
//! generation and pipeline compilation, then the run) against cached calls and the eager chain.
//! Device from `KILN_DEVICE` (default: the best adapter, else the CPU).
//!
//! `cargo run --release -p kiln --example compile_overhead`

use kiln::{compile, DType, Device, Result, Tensor};
use std::time::Instant;

fn hypot(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.add(&x[1].mul(&x[1])?)?.sqrt()?])
}

fn rmsnorm(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let ms = x[0].mul(&x[0])?.mean(&[-1], true)?;
    Ok(vec![x[0].mul(&ms.add_scalar(1e-5)?.rsqrt()?)?.mul(&x[1])?])
}

fn time(dev: &Device, runs: usize, mut f: impl FnMut() -> Result<Vec<Tensor>>) -> Result<f64> {
    let t = Instant::now();
    for _ in 0..runs {
        drop(f()?);
    }
    dev.synchronize()?;
    Ok(t.elapsed().as_secs_f64() * 1e6 / runs as f64)
}

fn main() -> Result<()> {
    let dev = Device::from_env()?;
    println!("device: {}", dev.name());
    type F = fn(&[Tensor]) -> Result<Vec<Tensor>>;
    let progs: [(&str, F, Vec<Vec<usize>>); 2] =
        [("hypot", hypot, vec![vec![1024], vec![1024]]), ("rmsnorm", rmsnorm, vec![vec![8, 1024], vec![1024]])];
    for (name, f, shapes) in progs {
        let xs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| Tensor::randn(0.0, 1.0, s.clone(), DType::F32, i as u64, &dev))
            .collect::<Result<_>>()?;
        dev.synchronize()?;
        let c = compile(f);
        let first = time(&dev, 1, || c.call(&xs))?;
        let cached = time(&dev, 200, || c.call(&xs))?;
        let eager = time(&dev, 200, || f(&xs))?;
        let one = time(&dev, 200, || Ok(vec![xs[0].exp()?]))?;
        println!(
            "{name}: first call {first:.0} us (trace + plan + compile + run), cached call {cached:.1} us, \
             eager chain {eager:.1} us, one eager op {one:.1} us  [{:?}]",
            c.stats()
        );
    }
    Ok(())
}
