//! Criterion benchmarks of kiln's key CPU ops: add, sum, softmax, rms_norm and matmul, at the sizes of
//! `kiln bench` (32M elements, 4096x4096 rows, 1024^3 matmul). Sample counts are small so that
//! `cargo bench -p kiln --bench cpu` finishes in a few minutes. Throughput is the minimal memory
//! traffic (inputs read once, output written once) for memory-bound ops and `2*n^3` FLOPs (shown as
//! elements/s) for the matmul. An op that returns an error (not implemented yet) is skipped with a note.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln::{DType, Device, Tensor};
use std::hint::black_box;
use std::time::Duration;

const N: usize = 32 << 20;
const ROWS: usize = 4096;
const COLS: usize = 4096;
const MM: usize = 1024;

fn randn(shape: impl Into<kiln::Shape>, seed: u64) -> Tensor {
    Tensor::randn(0.0, 1.0, shape, DType::F32, seed, &Device::cpu()).expect("randn on the CPU")
}

/// Registers `f` as benchmark `name` unless a first call fails, in which case it says why and skips.
fn bench_op(c: &mut Criterion, name: &str, throughput: Throughput, f: impl Fn() -> kiln::Result<Tensor>) {
    if let Err(e) = f() {
        eprintln!("skipping {name}: {e}");
        return;
    }
    let mut g = c.benchmark_group(name);
    g.throughput(throughput);
    g.bench_function("cpu", |b| b.iter(|| black_box(f().expect("op failed after a first success"))));
    g.finish();
}

fn elementwise(c: &mut Criterion) {
    let (a, b) = (randn(N, 1), randn(N, 2));
    bench_op(c, "add_f32_32M", Throughput::Bytes(3 * 4 * N as u64), || a.add(&b));
}

fn reductions(c: &mut Criterion) {
    let x = randn(N, 1);
    bench_op(c, "sum_all_f32_32M", Throughput::Bytes(4 * N as u64), || x.sum_all());
    let m = randn((ROWS, COLS), 3);
    let bytes = 4 * (ROWS * COLS + ROWS) as u64;
    bench_op(c, "sum_last_axis_f32_4096x4096", Throughput::Bytes(bytes), || m.sum(&[-1], false));
}

fn rows(c: &mut Criterion) {
    let x = randn((ROWS, COLS), 1);
    let w = randn(COLS, 2);
    let bytes = 2 * 4 * (ROWS * COLS) as u64;
    bench_op(c, "softmax_f32_4096x4096", Throughput::Bytes(bytes), || x.softmax(-1));
    bench_op(c, "rms_norm_f32_4096x4096", Throughput::Bytes(bytes + 4 * COLS as u64), || x.rms_norm(&w, 1e-5));
}

fn matmul(c: &mut Criterion) {
    let (a, b) = (randn((MM, MM), 1), randn((MM, MM), 2));
    bench_op(c, "matmul_f32_1024", Throughput::Elements(2 * (MM * MM * MM) as u64), || a.matmul(&b));
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = elementwise, reductions, rows, matmul
}
criterion_main!(benches);
