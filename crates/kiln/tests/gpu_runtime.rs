//! The GPU runtime: pool reuse and statistics, cache and memory limits, out-of-memory, threads,
//! batching of long op chains, custom kernels and their errors, keeping a device busy. Skipped without a GPU adapter unless
//! `KILN_REQUIRE_GPU=1` (CI sets it and runs on lavapipe).

use kiln::{DType, Device, Error, Shape, Tensor};

/// The GPU and a guard that runs the tests of this file one at a time: they share one device, and the
/// pool statistics some of them check would see the allocations of tests running beside them.
fn gpu() -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    match Device::gpu() {
        Ok(d) => {
            // Outputs are checked: unwritten elements read back as poison.
            d.set_poison(true);
            Some((d, guard))
        }
        Err(e) => {
            assert!(!std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1"), "KILN_REQUIRE_GPU=1 but no GPU: {e}");
            eprintln!("skipped: {e}");
            None
        }
    }
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn pool_reuses_freed_buffers_and_counts_them() {
    let Some((dev, _serial)) = gpu() else { return };
    dev.synchronize().unwrap();
    let before = dev.memory_stats().unwrap();
    let a = Tensor::zeros(100_000, DType::F32, &dev).unwrap();
    let after_alloc = dev.memory_stats().unwrap();
    assert!(after_alloc.active_bytes >= before.active_bytes + 400_000, "{before:?} -> {after_alloc:?}");
    drop(a);
    let freed = dev.memory_stats().unwrap();
    assert_eq!(freed.active_bytes, before.active_bytes);
    assert!(freed.cached_bytes >= 400_000);
    // A request of a similar size is served from the cache, not by a new allocation.
    let b = Tensor::zeros(99_000, DType::F32, &dev).unwrap();
    let reused = dev.memory_stats().unwrap();
    assert_eq!(reused.device_allocations, freed.device_allocations);
    assert_eq!(reused.cache_hits, freed.cache_hits + 1);
    assert!(reused.peak_bytes >= after_alloc.active_bytes);
    drop(b);
    dev.clear_cache();
    assert_eq!(dev.memory_stats().unwrap().cached_bytes, 0);
}

#[test]
fn cache_limit_trims_and_memory_limit_gives_out_of_memory() {
    let Some((dev, _serial)) = gpu() else { return };
    dev.set_cache_limit(1 << 20);
    let ts: Vec<Tensor> = (0..4).map(|_| Tensor::zeros(200_000, DType::F32, &dev).unwrap()).collect();
    drop(ts);
    assert!(dev.memory_stats().unwrap().cached_bytes <= 1 << 20);
    dev.set_cache_limit(4 << 30);

    let active = dev.memory_stats().unwrap().active_bytes;
    dev.set_memory_limit(active + (8 << 20));
    let err = Tensor::zeros(16 << 20, DType::F32, &dev).unwrap_err();
    match err {
        Error::OutOfMemory { requested, .. } => assert_eq!(requested, 64 << 20),
        e => panic!("expected OutOfMemory, got {e}"),
    }
    // Small allocations still work, and lifting the limit restores large ones.
    Tensor::zeros(1000, DType::F32, &dev).unwrap();
    dev.set_memory_limit(u64::MAX);
    Tensor::zeros(16 << 20, DType::F32, &dev).unwrap();
}

#[test]
fn a_tensor_larger_than_a_binding_is_refused_clearly() {
    let Some((dev, _serial)) = gpu() else { return };
    let max = dev.gpu_info().unwrap().max_storage_binding;
    let n = (max / 4 + 1024) as usize;
    let e = Tensor::zeros(n, DType::F32, &dev).unwrap_err().to_string();
    assert!(e.contains("largest storage binding"), "{e}");
    // The message compares the tensor's own bytes with the limit (not a rounded size class).
    assert!(e.contains(&format!("{} bytes", 4 * n as u64)) && e.contains(&format!("{max} bytes")), "{e}");
    assert!(e.contains(&format!("{n} f32 elements")), "{e}");
}

#[test]
fn a_long_chain_is_batched_not_submitted_per_op() {
    let Some((dev, _serial)) = gpu() else { return };
    let mut x = Tensor::zeros(64, DType::F32, &dev).unwrap();
    dev.synchronize().unwrap();
    let (d0, s0) = dev.gpu_counters().unwrap();
    for _ in 0..10_000 {
        x = x.add_scalar(1.0).unwrap();
    }
    let (d1, s1) = dev.gpu_counters().unwrap();
    assert!(d1 - d0 >= 10_000, "each op is one dispatch");
    // Full batches of 512 dispatches, after a ramp of 8, 16, ... 256 (6 more submissions).
    let full = (d1 - d0).div_ceil(512);
    assert!(s1 - s0 <= full + 7, "{} submits for {} dispatches", s1 - s0, d1 - d0);
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![10_000.0; 64]);
}

#[test]
fn several_threads_use_one_device() {
    let Some((dev, _serial)) = gpu() else { return };
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || {
                let a = Tensor::full(t as f64, 1000, DType::F32, &dev).unwrap();
                let mut s = a.clone();
                for _ in 0..50 {
                    s = s.add(&a).unwrap();
                }
                s.to_vec::<f32>().unwrap()
            })
        })
        .collect();
    for (t, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), vec![51.0 * t as f32; 1000]);
    }
}

const SCALE_ADD: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(64)
fn scale_add(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= p[0]) { return; }
    out[i] = a[i] * bitcast<f32>(p[1]) + b[i];
}
"#;

#[test]
fn custom_kernel_runs_on_tensors() {
    let Some((dev, _serial)) = gpu() else { return };
    let n = 1000;
    let a = Tensor::arange(0.0, n as f64, DType::F32, &dev).unwrap();
    // A non-contiguous input is made contiguous before binding.
    let b = Tensor::ones((2, n), DType::F32, &dev).unwrap().t().unwrap().narrow(1, 0, 1).unwrap().flatten().unwrap();
    let outs = dev
        .custom_kernel(
            SCALE_ADD,
            "scale_add",
            &[&a, &b],
            &[(Shape::from(n), DType::F32)],
            [16, 1, 1],
            &[n as u32, 3f32.to_bits()],
        )
        .unwrap();
    let want: Vec<f32> = (0..n).map(|i| 3.0 * i as f32 + 1.0).collect();
    assert_eq!(outs[0].to_vec::<f32>().unwrap(), want);
    // Compiled once: running it again does not grow the pipeline cache.
    let k = dev.compiled_kernels();
    dev.custom_kernel(SCALE_ADD, "scale_add", &[&a, &b], &[(Shape::from(n), DType::F32)], [16, 1, 1], &[n as u32, 0])
        .unwrap();
    assert_eq!(dev.compiled_kernels(), k);
}

#[test]
fn a_bad_custom_kernel_is_an_error_with_the_compiler_message() {
    let Some((dev, _serial)) = gpu() else { return };
    let bad = "@compute @workgroup_size(1) fn main() { let x: f32 = undefined_thing; }";
    let e =
        dev.custom_kernel(bad, "main", &[], &[(Shape::from(1), DType::F32)], [1, 1, 1], &[]).unwrap_err().to_string();
    assert!(e.contains("undefined_thing") || e.contains("no definition"), "{e}");
    let e = dev.custom_kernel(SCALE_ADD, "no_such_entry", &[], &[], [1, 1, 1], &[]).unwrap_err();
    assert!(matches!(e, Error::Gpu { .. }), "{e}");
    // The device still works afterwards.
    let t = Tensor::ones(4, DType::F32, &dev).unwrap().add_scalar(1.0).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![2.0; 4]);
}

#[test]
fn profiling_reports_kernels() {
    let Some((dev, _serial)) = gpu() else { return };
    dev.reset_profile();
    dev.set_profiling(true).unwrap();
    let a = Tensor::ones(4096, DType::F32, &dev).unwrap();
    let b = a.exp().unwrap().add(&a).unwrap();
    b.to_vec::<f32>().unwrap();
    dev.set_profiling(false).unwrap();
    let report = dev.profile();
    assert!(report.iter().any(|r| r.kernel.contains("exp")), "{report:?}");
    assert!(report.iter().all(|r| r.dispatches > 0 && r.total_ms >= 0.0));
    assert!(kiln::gpu::format_report(&report).contains("kernel"));
}

#[test]
fn mixing_devices_is_an_error() {
    let Some((dev, _serial)) = gpu() else { return };
    let a = Tensor::ones(3, DType::F32, &dev).unwrap();
    let b = Tensor::ones(3, DType::F32, &Device::cpu()).unwrap();
    let e = a.add(&b).unwrap_err().to_string();
    assert!(e.contains("different devices") && e.contains("cpu") && e.contains("gpu"), "{e}");
}

#[test]
fn keep_busy_runs_the_work_for_its_time_and_returns_errors() {
    let Some((dev, _serial)) = gpu() else { return };
    for d in [dev.clone(), Device::cpu()] {
        let x = Tensor::ones(1000, DType::F32, &d).unwrap();
        let runs = std::cell::Cell::new(0);
        let start = std::time::Instant::now();
        d.keep_busy(0.05, || {
            runs.set(runs.get() + 1);
            x.add(&x)
        })
        .unwrap();
        assert!(start.elapsed().as_secs_f64() >= 0.05 && runs.get() > 0, "{d}: {} runs", runs.get());
        let err = d.keep_busy(0.05, || x.add(&Tensor::ones(3, DType::F32, &d).unwrap())).unwrap_err();
        assert!(err.to_string().contains("add"), "{d}: {err}");
    }
}

#[test]
fn vulkan_reports_device_memory() {
    let Some((dev, _serial)) = gpu() else { return };
    assert_eq!(Device::cpu().vram(), None);
    let info = dev.gpu_info().unwrap();
    let Some(v) = dev.vram() else {
        assert_ne!(info.backend, "Vulkan", "a Vulkan adapter ({}) reports its heaps", info.name);
        return;
    };
    assert!(v.total > 0, "{v:?}");
    // What is free is a part of the heap (lavapipe's budget is host memory's).
    if let Some(free) = v.free {
        assert!(free <= v.total, "{v:?}");
    }
}

/// `Tensor::from_le_bytes` (weights straight from a file's bytes: uploaded as they are on a GPU)
/// gives `from_vec`'s tensor on both devices, and a byte count that is not the shape's is an error.
#[test]
fn tensors_from_little_endian_bytes() {
    let Some((gpu, _serial)) = gpu() else { return };
    let f: Vec<f32> = (0..37).map(|i| i as f32 * 0.37 - 5.0).collect();
    let h: Vec<kiln::f16> = f.iter().map(|&x| kiln::f16::from_f32(x)).collect();
    let b: Vec<kiln::bf16> = f.iter().map(|&x| kiln::bf16::from_f32(x)).collect();
    let n: Vec<i64> = (0..37).map(|i| i * 1_000_000_007 - 3).collect();
    for dev in [Device::cpu(), gpu] {
        let check = |bytes: &[u8], dt: DType, want: Tensor| {
            let t = Tensor::from_le_bytes(bytes, dt, 37, &dev).unwrap();
            assert_eq!((t.dtype(), t.dims().to_vec(), t.device().name()), (dt, vec![37], dev.name()));
            assert_eq!(t.to_f64_vec().unwrap(), want.to_f64_vec().unwrap(), "{dt} on {dev}");
        };
        check(bytemuck::cast_slice(&f), DType::F32, Tensor::from_vec(f.clone(), 37, &dev).unwrap());
        check(bytemuck::cast_slice(&h), DType::F16, Tensor::from_vec(h.clone(), 37, &dev).unwrap());
        check(bytemuck::cast_slice(&b), DType::BF16, Tensor::from_vec(b.clone(), 37, &dev).unwrap());
        check(bytemuck::cast_slice(&n), DType::I64, Tensor::from_vec(n.clone(), 37, &dev).unwrap());
        let e = Tensor::from_le_bytes(&[0u8; 73], DType::F16, 37, &dev).unwrap_err().to_string();
        assert!(e.contains("from_le_bytes") && e.contains("needs 74 bytes, got 73"), "{e}");
    }
}
