//! Smoke tests of the GPU runtime below the Tensor API (the conformance suite covers every op).
//! They skip when no adapter exists unless `KILN_REQUIRE_GPU=1`.

use super::GpuStorage;
use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::op::{BinaryOp, ReduceOp, UnaryOp};
use crate::{DType, Device, Layout};
use std::sync::Arc;

fn ctx() -> Option<Arc<super::GpuContext>> {
    match Device::gpu() {
        Ok(d) => {
            // Unwritten outputs read back as poison (NaN, 0xDEADBEEF, a bool that is neither 0 nor 1).
            d.set_poison(true);
            d.gpu_context().cloned()
        }
        Err(e) => {
            assert!(!crate::settings::REQUIRE_GPU.is_one(), "KILN_REQUIRE_GPU=1 but: {e}");
            eprintln!("skipped: {e}");
            None
        }
    }
}

#[test]
fn roundtrip_every_dtype() {
    let Some(c) = ctx() else { return };
    for dt in DType::ALL {
        if dt == DType::F64 {
            continue;
        }
        for n in [0usize, 1, 3, 5, 1000] {
            let vals: Vec<f64> = (0..n).map(|i| (i % 7) as f64 - 2.0).collect();
            let host = CpuStorage::full(0, dt, 0.0).unwrap();
            let host = match host {
                CpuStorage::F32(_) => CpuStorage::F32(vals.iter().map(|&v| v as f32).collect()),
                _ => {
                    let f = CpuStorage::F32(vals.iter().map(|&v| v as f32).collect());
                    f.cast(&Layout::contiguous(n), dt).unwrap_or_else(|_| CpuStorage::full(n, dt, 1.0).unwrap())
                }
            };
            let g = GpuStorage::from_cpu(&c, &host).unwrap();
            let back = g.to_cpu(&Layout::contiguous(n)).unwrap();
            assert_eq!(back, host, "{dt} n={n}");
        }
    }
}

#[test]
fn unary_binary_reduce_smoke() {
    let Some(c) = ctx() else { return };
    let x = CpuStorage::F32((0..10).map(|i| i as f32 - 3.0).collect());
    let g = GpuStorage::from_cpu(&c, &x).unwrap();
    let l = Layout::contiguous(10);
    let e = g.unary(&l, UnaryOp::Abs).unwrap().to_cpu(&l).unwrap();
    assert_eq!(e, CpuStorage::F32((0..10).map(|i| (i as f32 - 3.0).abs()).collect()));
    let s = g.binary(&l, &g, &l, BinaryOp::Mul).unwrap().to_cpu(&l).unwrap();
    assert_eq!(s, CpuStorage::F32((0..10).map(|i| (i as f32 - 3.0).powi(2)).collect()));
    let m = Layout::contiguous([2, 5]);
    let r = g.reduce(&m, ReduceOp::Sum, &[1]).unwrap().to_cpu(&Layout::contiguous(2)).unwrap();
    assert_eq!(r, CpuStorage::F32(vec![-5.0, 20.0]));
    let a = g.reduce(&m, ReduceOp::ArgMax, &[0]).unwrap().to_cpu(&Layout::contiguous(5)).unwrap();
    assert_eq!(a, CpuStorage::I64(vec![1; 5]));
    let h = g.cast(&l, DType::F16).unwrap();
    let back = h.cast(&l, DType::F32).unwrap().to_cpu(&l).unwrap();
    assert_eq!(back, x);
}

#[test]
fn matmul_smoke() {
    let Some(c) = ctx() else { return };
    let a = CpuStorage::F32((0..6).map(|i| i as f32).collect());
    let g = GpuStorage::from_cpu(&c, &a).unwrap();
    let al = Layout::contiguous([2, 3]);
    let bl = Layout::contiguous([2, 3]).permute("t", &[1, 0]).unwrap();
    let out = g.matmul(&al, &g, &bl).unwrap().to_cpu(&Layout::contiguous([2, 2])).unwrap();
    assert_eq!(out, CpuStorage::F32(vec![5.0, 14.0, 14.0, 50.0]));
}

/// Each vectorised elementwise variant is taken where it applies (checked through the pipeline cache)
/// and agrees with the CPU; views it cannot take fall back to the scalar kernel.
#[test]
fn vectorised_elementwise_variants() {
    let Some(c) = ctx() else { return };
    let vals = |n: usize| CpuStorage::F32((0..n).map(|i| (i as f32 * 0.37).sin()).collect());
    let check = |al: &Layout, bl: &Layout, key: &str| {
        let (a, b) = (vals(64), vals(64));
        let (ga, gb) = (GpuStorage::from_cpu(&c, &a).unwrap(), GpuStorage::from_cpu(&c, &b).unwrap());
        let out = Layout::contiguous(al.dims());
        let got = ga.binary(al, &gb, bl, BinaryOp::Mul).unwrap().to_cpu(&out).unwrap();
        let want = a.binary(al, &b, bl, BinaryOp::Mul).unwrap();
        assert_eq!(got, want, "{key}");
        assert!(c.pipelines.contains(key), "kernel {key} was not used");
    };
    let rows = Layout::contiguous([3, 8]);
    check(&Layout::contiguous(13), &Layout::contiguous(13), "ewv:binary_mul:cc:f32,f32->f32");
    check(&rows, &Layout::contiguous(8).broadcast_as("t", &[3, 8].into()).unwrap(), "ewv:binary_mul:vv:f32,f32->f32");
    check(
        &rows,
        &Layout::contiguous([3, 1]).broadcast_as("t", &[3, 8].into()).unwrap(),
        "ewv:binary_mul:vb:f32,f32->f32",
    );
    check(&rows, &Layout::contiguous(1).broadcast_as("t", &[3, 8].into()).unwrap(), "ewv:binary_mul:cs:f32,f32->f32");
    // Rows of 6 are not whole vectors, an offset of 1 is misaligned: the scalar kernel.
    check(
        &Layout::contiguous([3, 6]),
        &Layout::contiguous(6).broadcast_as("t", &[3, 6].into()).unwrap(),
        "ew:binary_mul:gg:f32,f32->f32",
    );
    let shifted = Layout::contiguous(64).narrow("t", 0, 1, 13).unwrap();
    check(&Layout::contiguous(13), &shifted, "ew:binary_mul:cc:f32,f32->f32");
    // f16 output: eight lanes per invocation, including a partial last vector.
    let x = vals(21);
    let g = GpuStorage::from_cpu(&c, &x).unwrap();
    let l = Layout::contiguous(21);
    let h = g.cast(&l, DType::F16).unwrap().to_cpu(&l).unwrap();
    assert_eq!(h, x.cast(&l, DType::F16).unwrap());
    assert!(c.pipelines.contains("ewv:cast:c:f32->f16"));
}
