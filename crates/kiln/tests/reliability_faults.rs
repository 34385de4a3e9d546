//! Faults: custom kernels that fail to compile, write out of bounds or run very long, out-of-range ids,
//! an allocation over the memory limit, and a device loss (really caused with wgpu's
//! `Device::destroy`). After each the program goes on: the error is a clean `Err`, later ops on a lost
//! device fail with `DeviceLost`, and `Device::gpu()` opens a fresh working device. These tests lose
//! the shared GPU on purpose, so they live in their own test binary and run one at a time; each is
//! under a watchdog.

mod support;

use kiln::{DType, Device, Error, Shape, Tensor};
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A working GPU (a fresh one if an earlier test lost it) and the guard that serialises the tests.
fn gpu() -> Option<(Device, MutexGuard<'static, ()>)> {
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    support::gpu().map(|d| (d, guard))
}

fn works(dev: &Device) {
    let t = Tensor::arange(0.0, 5.0, DType::F32, dev).unwrap().mul_scalar(2.0).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 2.0, 4.0, 6.0, 8.0]);
}

#[test]
fn a_kernel_that_does_not_compile_is_an_err_and_the_device_goes_on() {
    let Some((dev, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("compile-error test", Duration::from_secs(120));
    let cases = [
        ("syntax", "@compute @workgroup_size(1) fn main( {"),
        ("type", "@compute @workgroup_size(1) fn main() { let x: f32 = 1u; }"),
        ("binding", "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn main() { o[0] = 1.0; }\n@compute @workgroup_size(1) fn main() {}"),
        ("workgroup", "@compute @workgroup_size(100000) fn main() {}"),
    ];
    for (what, src) in cases {
        let e = dev.custom_kernel(src, "main", &[], &[(Shape::from(4), DType::F32)], [1, 1, 1], &[]).unwrap_err();
        assert!(e.to_string().starts_with("[custom_kernel]") || matches!(e, Error::Gpu { .. }), "{what}: {e}");
        works(&dev);
    }
    // A kernel whose bindings do not match the call.
    let src = "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n@group(0) @binding(1) var<storage, read> a: array<f32>;\n@compute @workgroup_size(1) fn main() { o[0] = a[0]; }";
    let e = dev.custom_kernel(src, "main", &[], &[(Shape::from(4), DType::F32)], [1, 1, 1], &[]);
    assert!(e.is_err(), "a missing input binding was accepted");
    works(&dev);
}

const WRITE_FAR: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    // Every invocation writes far past the end of its 16-element output.
    out[gid.x * p[0] + p[1]] = 7.0;
}
"#;

#[test]
fn a_kernel_writing_out_of_bounds_stays_inside_its_own_buffer() {
    let Some((dev, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("out-of-bounds test", Duration::from_secs(120));
    // Neighbours allocated before and after the output: none of them may change.
    let before: Vec<Tensor> = (0..4).map(|i| Tensor::full(i as f64, 4096, DType::F32, &dev).unwrap()).collect();
    let outs = dev
        .custom_kernel(WRITE_FAR, "main", &[], &[(Shape::from(16), DType::F32)], [64, 1, 1], &[1 << 12, 1 << 20])
        .unwrap();
    let after: Vec<Tensor> = (0..4).map(|i| Tensor::full(10.0 + i as f64, 4096, DType::F32, &dev).unwrap()).collect();
    let outs2 = dev
        .custom_kernel(WRITE_FAR, "main", &[], &[(Shape::from(16), DType::F32)], [64, 1, 1], &[u32::MAX, u32::MAX])
        .unwrap();
    for (i, t) in before.iter().enumerate() {
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![i as f32; 4096], "tensor {i} made before");
    }
    for (i, t) in after.iter().enumerate() {
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![10.0 + i as f32; 4096], "tensor {i} made after");
    }
    // The outputs themselves hold whatever the clamped writes left (wgpu clamps or drops them): only
    // the 16 elements, no error.
    assert_eq!(outs[0].to_vec::<f32>().unwrap().len(), 16);
    assert_eq!(outs2[0].to_vec::<f32>().unwrap().len(), 16);
    works(&dev);
}

/// A kernel of 64-invocation workgroups, each invocation looping `p[0]` times on a hash chain that
/// goes through memory (so no compiler can shortcut it); the grid size sets the total time.
const SPIN: &str = r#"
@group(0) @binding(0) var<storage, read_write> out: array<u32>;
@group(1) @binding(0) var<storage, read> p: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let slot = (gid.x & 63u) * 2u;
    var h = gid.x + gid.y;
    for (var j = 0u; j < p[0]; j++) {
        h = (h ^ (h >> 13u)) * 1664525u + 1013904223u + out[slot + (h & 1u)];
        out[slot + ((h >> 7u) & 1u)] = h;
    }
}
"#;

fn spin(dev: &Device, groups: [u32; 3]) -> kiln::Result<Vec<u32>> {
    dev.custom_kernel(SPIN, "main", &[], &[(Shape::from(128), DType::U32)], groups, &[256])?[0].to_vec::<u32>()
}

#[test]
fn a_kernel_that_runs_too_long_times_out_as_device_lost_and_a_new_device_works() {
    let Some((dev, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("long-kernel test", Duration::from_secs(240));
    // Calibrate (after compiling): how long does one workgroup take on this device?
    spin(&dev, [1, 1, 1]).unwrap();
    let start = Instant::now();
    spin(&dev, [4096, 1, 1]).unwrap();
    let per_group = start.elapsed().as_secs_f64() / 4096.0;
    // About 4 s of work under a 1 s wait limit.
    let groups = (4.0 / per_group).clamp(65536.0, 65535.0 * 65535.0);
    let grid = [65535, (groups / 65535.0).ceil() as u32, 1];
    dev.set_wait_timeout(Duration::from_secs(1));
    let start = Instant::now();
    let e = spin(&dev, grid).unwrap_err();
    let waited = start.elapsed();
    assert!(matches!(&e, Error::DeviceLost(m) if m.contains("wait limit")), "{e}");
    assert!(waited < Duration::from_secs(3), "the wait returned after {waited:?}");
    assert!(dev.is_lost());
    // Later ops on the device fail the same way, without waiting.
    assert!(matches!(Tensor::ones(4, DType::F32, &dev), Err(Error::DeviceLost(_))));
    // A new device works.
    let fresh = Device::gpu().unwrap();
    assert!(fresh != dev && !fresh.is_lost());
    works(&fresh);
    eprintln!("long kernel: {per_group:.2e} s per workgroup, grid {grid:?}, Err after {waited:?}: {e}");
}

#[test]
fn a_lost_device_fails_every_later_op_and_a_new_device_works() {
    let Some((dev, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("device-loss test", Duration::from_secs(120));
    let a = Tensor::arange(0.0, 64.0, DType::F32, &dev).unwrap();
    let pending = a.exp().unwrap(); // queued, not yet read
    dev.simulate_device_lost();
    assert!(dev.is_lost());
    let lost = |r: kiln::Result<Vec<f32>>| match r {
        Err(Error::DeviceLost(m)) => assert!(m.contains("destroyed"), "{m}"),
        r => panic!("expected DeviceLost, got {r:?}"),
    };
    lost(pending.to_vec::<f32>());
    lost(a.to_vec::<f32>());
    lost(a.add(&a).and_then(|t| t.to_vec()));
    lost(a.sum_all().and_then(|t| t.to_vec()));
    lost(a.matmul(&a.reshape((64, 1)).unwrap()).and_then(|t| t.to_vec()));
    lost(Tensor::zeros(8, DType::F32, &dev).and_then(|t| t.to_vec()));
    lost(Tensor::from_vec(vec![1f32; 8], 8, &dev).and_then(|t| t.to_vec()));
    assert!(matches!(dev.synchronize(), Err(Error::DeviceLost(_))));
    assert!(matches!(
        dev.custom_kernel(SPIN, "main", &[], &[(Shape::from(128), DType::U32)], [1, 1, 1], &[1]),
        Err(Error::DeviceLost(_))
    ));
    // Moving data off the lost device fails too; onto a CPU tensor nothing is lost.
    assert!(matches!(a.to_device(&Device::cpu()), Err(Error::DeviceLost(_))));
    drop((a, pending));
    // A new device works, twice in a row (the lost one is not handed out again).
    let fresh = Device::gpu().unwrap();
    assert!(fresh != dev);
    works(&fresh);
    assert!(Device::gpu().unwrap() == fresh);
    let x = Tensor::from_vec(vec![1f32, 2.0, 3.0], 3, &Device::cpu()).unwrap().to_device(&fresh).unwrap();
    assert_eq!(x.sum_all().unwrap().to_scalar::<f32>().unwrap(), 6.0);
}

#[test]
fn an_allocation_over_the_memory_limit_is_an_err_and_the_device_goes_on() {
    let Some((dev, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("memory-limit test", Duration::from_secs(120));
    dev.synchronize().unwrap();
    let keep = Tensor::ones(1 << 16, DType::F32, &dev).unwrap();
    let active = dev.memory_stats().unwrap().active_bytes;
    dev.set_memory_limit(active + (4 << 20));
    for n in [2usize << 20, 1 << 23, 1 << 24] {
        match Tensor::zeros(n, DType::F32, &dev) {
            Err(Error::OutOfMemory { requested, .. }) => assert!(requested >= 4 * n as u64),
            r => panic!("{n} elements over the limit: {r:?}"),
        }
        // An op whose output goes over the limit fails the same way.
        assert!(matches!(keep.broadcast_to((64, 1 << 16)).unwrap().contiguous(), Err(Error::OutOfMemory { .. })));
        works(&dev);
        assert_eq!(keep.sum_all().unwrap().to_scalar::<f32>().unwrap(), 65536.0);
    }
    dev.set_memory_limit(u64::MAX);
    assert_eq!(
        Tensor::ones(2 << 20, DType::F32, &dev).unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap(),
        2097152.0
    );
}

#[test]
fn out_of_range_and_negative_ids_are_errors_on_the_cpu_and_zeros_on_the_gpu() {
    // The defined result of docs/RELIABILITY.md: the CPU returns an `Err` naming the op; the GPU checks
    // each id as its kernel reads it (no host round trip per call) and selects zeros for an id outside
    // the axis, never memory outside the table.
    let Some((gpu, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("ids test", Duration::from_secs(120));
    for dev in [Device::cpu(), gpu] {
        let table = Tensor::arange(1.0, 13.0, DType::F32, &dev).unwrap().reshape((4, 3)).unwrap();
        for (dt, bad) in
            [(DType::I64, 4.0), (DType::I64, -1.0), (DType::I32, -5.0), (DType::U32, 4.0), (DType::I64, 1e12)]
        {
            let ids = Tensor::from_f64_values(&[0.0, bad, 1.0], 3, dt, &dev).unwrap();
            let g = Tensor::from_f64_values(&[0.0, bad, 1.0, 2.0, 0.0, 1.0], (2, 3), dt, &dev).unwrap();
            let sel = table.index_select(&ids, 0).and_then(|t| t.to_vec::<f32>());
            let emb = table.embedding(&ids).and_then(|t| t.to_vec::<f32>());
            let gat = table.gather(0, &g).and_then(|t| t.to_vec::<f32>());
            if dev.is_cpu() {
                assert!(matches!(&sel, Err(e) if e.to_string().starts_with("[index_select]")), "{dt} {bad}: {sel:?}");
                assert!(matches!(&emb, Err(e) if e.to_string().starts_with('[')), "embedding {dt} {bad}: {emb:?}");
                assert!(matches!(&gat, Err(e) if e.to_string().starts_with("[gather]")), "gather {dt} {bad}: {gat:?}");
            } else {
                let rows = vec![1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0];
                assert_eq!(sel.unwrap(), rows, "index_select {dt} {bad}");
                assert_eq!(emb.unwrap(), rows, "embedding {dt} {bad}");
                assert_eq!(gat.unwrap(), vec![1.0, 0.0, 6.0, 7.0, 2.0, 6.0], "gather {dt} {bad}");
            }
        }
        // Valid ids still work.
        let ids = Tensor::from_f64_values(&[3.0, 0.0], 2, DType::I64, &dev).unwrap();
        assert_eq!(
            table.index_select(&ids, 0).unwrap().to_vec::<f32>().unwrap(),
            vec![10.0, 11.0, 12.0, 1.0, 2.0, 3.0]
        );
    }
}

#[test]
fn the_largest_tensor_the_gpu_accepts_works_and_one_element_more_is_an_err() {
    let Some((dev, _serial)) = gpu() else { return };
    let _dog = support::Watchdog::new("largest-tensor test", Duration::from_secs(300));
    // The largest tensor is the largest storage binding (lavapipe: 128 MiB, so 32 Mi f32).
    let max = dev.gpu_info().unwrap().max_storage_binding.min(dev.gpu_info().unwrap().max_buffer_size);
    let n = (max / 4) as usize;
    let t = Tensor::ones(n, DType::F32, &dev).unwrap().mul_scalar(0.5).unwrap();
    let tail = t.narrow(0, n - 3, 3).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(tail, vec![0.5; 3]);
    assert_eq!(t.sum_all().unwrap().to_scalar::<f32>().unwrap(), n as f32 / 2.0);
    drop(t);
    for (count, dt) in [(n + 1, DType::F32), (2 * n + 2, DType::F16), (4 * n + 4, DType::U8)] {
        let e = Tensor::zeros(count, dt, &dev).unwrap_err().to_string();
        assert!(e.contains("exceeds") && e.starts_with('['), "{count} x {dt}: {e}");
    }
    works(&dev);
    dev.clear_cache();
}
