//! GPU bandwidth probes (docs/PERFORMANCE.md), every run timed with GPU timestamps:
//! - default: the clock ramp (one read timed over and over from a cold GPU, after 3 s idle, and after
//!   a second of queued work), then read-only, one-input and two-input ops on several buffers, a plain
//!   WGSL vec4 add (custom kernel) beside kiln's own, and a series of 120 adds: the probe that showed
//!   session 2's "bimodal bandwidth" to be the GPU leaving its idle clocks, not buffer placement;
//! - `copy`: copy kernels with 1 to 8 vectors per invocation beside kiln's exp and cast;
//! - `decode`: decode attention on several head/key counts, with per-kernel times.
//!
//! Run: `cargo run --release -p kiln --example bandwidth_probe [elements] [copy|decode]`

use kiln::{DType, Device, Result, Tensor};

const NAIVE_ADD: &str = r#"
@group(0) @binding(0) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f32>>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {
    let i = g.x + g.y * nw.x * 256u;
    if (i < arrayLength(&c)) { c[i] = a[i] + b[i]; }
}
"#;

/// A copy of `U` 16-byte vectors per invocation: a workgroup takes 256 * U consecutive vectors, all
/// loads issued before the stores.
fn copy_kernel(u: usize) -> String {
    let loads: String = (0..u).map(|j| format!("let v{j} = src[b + {}u];\n", 256 * j)).collect();
    let stores: String = (0..u).map(|j| format!("dst[b + {}u] = v{j};\n", 256 * j)).collect();
    format!(
        "@group(0) @binding(0) var<storage, read_write> dst: array<vec4<u32>>;\n\
         @group(0) @binding(1) var<storage, read> src: array<vec4<u32>>;\n\
         @compute @workgroup_size(256)\n\
         fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) w: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{\n\
         let b = (w.x + w.y * nw.x) * {}u + t;\n{loads}{stores}}}\n",
        256 * u
    )
}

/// Times `f` `runs` times (after two warm-ups) and prints min / median / max and the median's GB/s.
fn time(dev: &Device, label: &str, bytes: f64, runs: usize, f: impl Fn() -> Result<Tensor>) -> Result<Vec<f64>> {
    for _ in 0..2 {
        dev.measure(&f)?;
    }
    let mut t: Vec<f64> = (0..runs).map(|_| dev.measure(&f).map(|m| m.seconds)).collect::<Result<_>>()?;
    let series = t.clone();
    t.sort_by(f64::total_cmp);
    let med = t[t.len() / 2];
    println!(
        "{label:<28} min {:>8.1} us  med {:>8.1} us  max {:>8.1} us  {:>6.0} GB/s",
        t[0] * 1e6,
        med * 1e6,
        t[t.len() - 1] * 1e6,
        bytes / med / 1e9
    );
    Ok(series)
}

/// Runs `sum_all(a)` for 1.5 s of wall time, one measured run after another, and prints the GPU time
/// of each run with the wall-clock time since the first, to show how long the GPU takes to speed up.
fn ramp(dev: &Device, label: &str, a: &Tensor) -> Result<()> {
    println!("-- ramp, {label}: wall ms -> GPU us of sum_all(a)");
    let t0 = std::time::Instant::now();
    let mut line = Vec::new();
    let mut k = 0;
    while t0.elapsed().as_secs_f64() < 1.5 {
        let at = t0.elapsed().as_secs_f64() * 1e3;
        let m = dev.measure(|| a.sum_all())?;
        if k % 8 == 0 {
            line.push(format!("{at:.0}:{:.0}", m.seconds * 1e6));
        }
        k += 1;
    }
    println!("{} ({k} runs)", line.join(" "));
    Ok(())
}

/// Decode attention over (query heads, key/value heads, keys): time after a busy warm-up, then
/// per-kernel GPU times, to separate the key walk from fixed costs and the combine kernel.
fn decode(dev: &Device) -> Result<()> {
    for (hq, hkv, tk) in [(32, 8, 8192), (32, 8, 32768), (8, 8, 8192), (32, 32, 8192), (32, 8, 2048)] {
        let q = Tensor::randn(0.0, 1.0, (1, hq, 1, 128), DType::F32, 3, dev)?;
        let k = Tensor::randn(0.0, 1.0, (1, hkv, tk, 128), DType::F32, 4, dev)?;
        let v = Tensor::randn(0.0, 1.0, (1, hkv, tk, 128), DType::F32, 5, dev)?;
        let f = || q.sdpa(&k, &v, false, None);
        dev.keep_busy(1.0, &f)?;
        let bytes = (2 * hkv * tk * 128 * 4) as f64;
        time(dev, &format!("decode hq{hq} hkv{hkv} tk{tk}"), bytes, 30, f)?;
        // Per-kernel times (each dispatch timed on its own: adds a pass boundary per kernel).
        dev.set_profiling(true)?;
        dev.reset_profile();
        for _ in 0..30 {
            drop(f()?);
        }
        dev.synchronize()?;
        dev.set_profiling(false)?;
        for r in dev.profile() {
            println!("    {:<60} {:>8.2} us", r.kernel, r.total_ms * 1e3 / r.dispatches as f64);
        }
    }
    Ok(())
}

/// Copy kernels moving 1, 2, 4 or 8 vectors per invocation, beside kiln's exp and f32->f16 cast, each
/// after a busy warm-up.
fn copies(dev: &Device, a: &Tensor) -> Result<()> {
    let n = a.elem_count();
    let gb = (n * 4) as f64;
    for u in [1usize, 2, 4, 8] {
        let src = copy_kernel(u);
        let wgs = n / 4 / (256 * u);
        if wgs == 0 || wgs * 256 * u * 4 != n {
            println!("copy, {u} vec4 per invocation: needs a multiple of {} elements", 1024 * u);
            continue;
        }
        let grid = [wgs.min(32768) as u32, wgs.div_ceil(32768) as u32, 1];
        assert_eq!(grid[0] as usize * grid[1] as usize, wgs);
        let f = || -> Result<Tensor> {
            Ok(dev.custom_kernel(&src, "main", &[a], &[(a.shape().clone(), DType::F32)], grid, &[])?.remove(0))
        };
        let y = f()?;
        assert_eq!(y.to_vec::<f32>()?[..1000], a.to_vec::<f32>()?[..1000]);
        dev.keep_busy(1.0, &f)?;
        time(dev, &format!("copy, {u} vec4 per invocation"), 2.0 * gb, 30, f)?;
    }
    dev.keep_busy(1.0, || a.exp())?;
    time(dev, "exp(a)", 2.0 * gb, 30, || a.exp())?;
    dev.keep_busy(1.0, || a.to_dtype(DType::F16))?;
    time(dev, "a.to_dtype(f16)", 1.5 * gb, 30, || a.to_dtype(DType::F16))?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(256 << 20);
    let mode = std::env::args().nth(2);
    let dev = Device::gpu()?;
    if mode.as_deref() == Some("decode") {
        return decode(&dev);
    }
    let gb = (n * 4) as f64;
    println!("device {dev}, {n} f32 elements ({:.2} GiB) per buffer", gb / (1u64 << 30) as f64);
    let a = Tensor::randn(0.0, 1.0, n, DType::F32, 1, &dev)?;
    if mode.as_deref() == Some("copy") {
        return copies(&dev, &a);
    }
    let b = Tensor::randn(0.0, 1.0, n, DType::F32, 2, &dev)?;
    let groups = [((n / 4).div_ceil(256)).min(65535) as u32, ((n / 4).div_ceil(256 * 65535)) as u32, 1];
    let naive = |x: &Tensor, y: &Tensor| -> Result<Tensor> {
        let mut v = dev.custom_kernel(NAIVE_ADD, "main", &[x, y], &[(x.shape().clone(), DType::F32)], groups, &[])?;
        Ok(v.remove(0))
    };
    let r = 15;
    ramp(&dev, "cold: sum_all(a) right after the uploads", &a)?;
    std::thread::sleep(std::time::Duration::from_secs(3));
    ramp(&dev, "after 3 s idle", &a)?;
    std::thread::sleep(std::time::Duration::from_secs(3));
    let t0 = std::time::Instant::now();
    let mut queued = 0;
    while t0.elapsed().as_secs_f64() < 0.2 {
        drop(a.sum_all()?);
        queued += 1;
    }
    dev.synchronize()?;
    println!(
        "(queued {queued} sum_all without waiting for 200 ms, done after {:.0} ms)",
        t0.elapsed().as_secs_f64() * 1e3
    );
    ramp(&dev, "after 3 s idle and a 200 ms queued warm-up", &a)?;
    println!("-- read-only (sum_all) per buffer");
    time(&dev, "sum_all(a)", gb, r, || a.sum_all())?;
    time(&dev, "sum_all(b)", gb, r, || b.sum_all())?;
    println!("-- one input");
    time(&dev, "exp(a)", 2.0 * gb, r, || a.exp())?;
    time(&dev, "exp(b)", 2.0 * gb, r, || b.exp())?;
    time(&dev, "silu(a)", 2.0 * gb, r, || a.silu())?;
    time(&dev, "silu(b)", 2.0 * gb, r, || b.silu())?;
    println!("-- two inputs");
    time(&dev, "add(a,b)", 3.0 * gb, r, || a.add(&b))?;
    time(&dev, "add(b,a)", 3.0 * gb, r, || b.add(&a))?;
    time(&dev, "add(a,a)", 3.0 * gb, r, || a.add(&a))?;
    time(&dev, "mul(a,b)", 3.0 * gb, r, || a.mul(&b))?;
    time(&dev, "naive vec4 add(a,b)", 3.0 * gb, r, || naive(&a, &b))?;
    time(&dev, "naive vec4 add(a,a)", 3.0 * gb, r, || naive(&a, &a))?;
    println!("-- buffers written on the GPU (kept alive)");
    let c = a.exp()?;
    let d = b.silu()?;
    time(&dev, "sum_all(c=exp a)", gb, r, || c.sum_all())?;
    time(&dev, "sum_all(d=silu b)", gb, r, || d.sum_all())?;
    time(&dev, "add(c,d)", 3.0 * gb, r, || c.add(&d))?;
    time(&dev, "naive vec4 add(c,d)", 3.0 * gb, r, || naive(&c, &d))?;
    println!("-- zeros (fill kernel)");
    let z = Tensor::zeros(n, DType::F32, &dev)?;
    time(&dev, "sum_all(zeros)", gb, r, || z.sum_all())?;
    time(&dev, "add(zeros,zeros)", 3.0 * gb, r, || z.add(&z))?;
    time(&dev, "add(a,zeros)", 3.0 * gb, r, || a.add(&z))?;
    println!("-- series of 120 add(a,b), in order (us)");
    let s = time(&dev, "add(a,b) series", 3.0 * gb, 120, || a.add(&b))?;
    let line: Vec<String> = s.iter().map(|t| format!("{:.0}", t * 1e6)).collect();
    println!("{}", line.join(" "));
    println!("-- after dropping c, d, z and clearing the cache");
    drop((c, d, z));
    dev.clear_cache();
    time(&dev, "add(a,b)", 3.0 * gb, r, || a.add(&b))?;
    time(&dev, "sum_all(a)", gb, r, || a.sum_all())?;
    time(&dev, "sum_all(b)", gb, r, || b.sum_all())?;
    Ok(())
}
