//! A bf16 weight's line maxima kept with its storage (`plan.rs`, `GpuStorage::derived`) follow a
//! write into that storage.

use crate::gpu_probes::{matmul_coop_tensors, CoopTile};
use crate::{DType, Device, Tensor};

/// Relative L2 distance of `got` from `want` (both f32 on the host).
fn rel(got: &Tensor, want: &Tensor) -> f64 {
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let num: f64 = g.iter().zip(&w).map(|(a, b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = w.iter().map(|b| (*b as f64).powi(2)).sum();
    (num / den).sqrt()
}

#[test]
fn kept_weight_maxima_follow_a_write() {
    let dev = match Device::gpu() {
        Ok(d) => d,
        Err(e) => {
            assert!(!crate::settings::REQUIRE_GPU.is_one(), "KILN_REQUIRE_GPU=1 but: {e}");
            return;
        }
    };
    let cpu = Device::cpu();
    let a = Tensor::randn(0.0, 1.0, [20, 40], DType::BF16, 1, &dev).unwrap();
    let w = Tensor::randn(0.0, 1.0, [36, 40], DType::BF16, 2, &dev).unwrap();
    let product = |w: &Tensor| {
        let r = matmul_coop_tensors(&a, &w.t().unwrap(), CoopTile::Small, Some(16))?;
        Some(r.unwrap().to_dtype(DType::F32).unwrap().to_device(&cpu).unwrap())
    };
    let Some(first) = product(&w) else {
        eprintln!("skipped: {} runs no emulated cooperative bf16 matmul", dev.name());
        return;
    };
    let reference = |w: &Tensor| {
        let f = |t: &Tensor| t.to_device(&cpu).unwrap().to_dtype(DType::F32).unwrap();
        f(&a).matmul(&f(w).t().unwrap()).unwrap()
    };
    assert!(rel(&first, &reference(&w)) < 8e-3);
    // Values far outside f16's range: the first product's maxima (|w| about 4) would scale them to
    // infinities. Written into w's own storage, as the KV cache and `concat` write.
    let big = w.mul_scalar(3e4).unwrap();
    {
        let mut dst = w.storage_mut();
        big.storage().copy_into(big.layout(), &mut dst, w.layout()).unwrap();
    }
    let second = product(&w).unwrap();
    let want = reference(&big);
    assert!(rel(&second, &want) < 8e-3, "a product after the write: relative error {}", rel(&second, &want));
    // The control: the first product is far from the second reference.
    assert!(rel(&first, &want) > 0.5);
}
