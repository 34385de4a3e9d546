//! Memory and threads under load: many GPU ops over constantly varying shapes keep the pool's
//! statistics and the process RSS flat (within the cache limit), and 8 threads sharing one GPU and one
//! CPU device get the results of a single-threaded run. `KILN_SOAK_OPS` scales the op count (CI: the
//! default; docs/RELIABILITY.md records a 100,000-op run).

mod support;

use kiln::{DType, Device, Tensor};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::{Duration, Instant};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One step of a varying workload: a few ops on random shapes, returning a small checksum tensor.
fn step(dev: &Device, rng: &mut ChaCha8Rng) -> kiln::Result<Tensor> {
    let (m, k, n) = (rng.random_range(1..48), rng.random_range(1..48), rng.random_range(1..48));
    let seed = rng.random::<u64>();
    let a = Tensor::rand(-1.0, 1.0, (m, k), DType::F32, seed, dev)?;
    let b = Tensor::rand(-1.0, 1.0, (k, n), DType::F32, seed + 1, dev)?;
    let c = a.matmul(&b)?.softmax(-1)?;
    let d = c.add_scalar(1.0)?.log()?.mul(&c)?;
    let e = Tensor::concat(&[&d, &c], 0)?.t()?.contiguous()?;
    e.sum(&[1], false)?.mean_all()
}

#[test]
fn varying_shapes_keep_gpu_memory_and_rss_flat() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(dev) = support::gpu() else { return };
    let _dog = support::Watchdog::new("memory soak", Duration::from_secs(600));
    let steps = support::env_count("KILN_SOAK_OPS", 12_000) / 12; // 12 ops a step
    let cache_limit = 8u64 << 20;
    dev.set_cache_limit(cache_limit);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let start = Instant::now();
    let mut samples = Vec::new();
    for i in 0..steps {
        let r = step(&dev, &mut rng).unwrap();
        if i % 16 == 15 {
            // A readback every 16 steps bounds the queue, as a real program's would.
            assert!(r.to_scalar::<f32>().unwrap().is_finite());
        }
        if i % (steps / 10).max(1) == 0 || i == steps - 1 {
            dev.synchronize().unwrap();
            let s = dev.memory_stats().unwrap();
            samples.push((i * 12, s.active_bytes, s.cached_bytes, support::rss_bytes().unwrap_or(0)));
        }
    }
    for (ops, active, cached, rss) in &samples {
        eprintln!("ops {ops:>7}: active {active:>9} B, cached {cached:>9} B, rss {:>6.1} MiB", *rss as f64 / 1048576.0);
    }
    eprintln!("{} ops in {:.1} s", steps * 12, start.elapsed().as_secs_f64());
    // The pool keeps nothing past the cache limit, and nothing stays active once the tensors are gone.
    for (ops, active, cached, _) in &samples {
        assert!(*cached <= cache_limit, "cached {cached} B over the limit after {ops} ops");
        assert!(*active < 1 << 20, "{active} B still active after {ops} ops");
    }
    // RSS: after a warm-up tenth, growth stays within the cache limit plus a margin for the allocator
    // and the pipeline cache (the same kernels recur; new shapes add no memory).
    let warm = samples[1].3;
    let last = samples.last().unwrap().3;
    assert!(last <= warm + cache_limit + (48 << 20), "RSS grew from {warm} to {last} B");
    dev.set_cache_limit(4 << 30);
}

#[test]
fn eight_threads_share_one_gpu_and_one_cpu_and_match_a_single_thread() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let gpu = support::gpu();
    let _dog = support::Watchdog::new("threads test", Duration::from_secs(300));
    let devices: Vec<Device> = std::iter::once(Device::cpu()).chain(gpu).collect();
    let steps = support::env_count("KILN_THREAD_STEPS", 64);
    // Per thread and device: the checksums of a single-threaded run.
    let run = |t: usize, dev: &Device| -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(1000 + t as u64);
        (0..steps).map(|_| step(dev, &mut rng).unwrap().to_scalar::<f32>().unwrap()).collect()
    };
    let want: Vec<Vec<Vec<f32>>> = (0..8).map(|t| devices.iter().map(|d| run(t, d)).collect()).collect();
    let start = Instant::now();
    let got: Vec<Vec<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let devices = devices.clone();
                s.spawn(move || devices.iter().map(|d| run(t, d)).collect::<Vec<_>>())
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a thread panicked")).collect()
    });
    eprintln!(
        "8 threads x {} devices x {steps} steps ({} ops each) in {:.1} s",
        devices.len(),
        steps * 12,
        start.elapsed().as_secs_f64()
    );
    // Same device, same inputs, same kernels: the results are bit for bit those of the single thread.
    assert_eq!(got, want);
}
