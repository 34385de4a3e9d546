//! Your own WGSL kernel on kiln tensors with `Device::custom_kernel`, checked against kiln's own ops.
//!
//! The kernel takes a `(rows, cols)` f32 matrix `x` and a `cols` f32 vector `bias` and writes two
//! outputs: `y = alpha * x + bias` (bias broadcast over the rows) and `rowmax`, the maximum of each
//! row of `y`. It shows the binding layout `custom_kernel` expects:
//!
//! - `@group(0)`: the outputs first (bindings 0 and 1, `read_write`), then the inputs (bindings 2 and
//!   3, `read`), each a contiguous row-major copy of the tensor (a strided view, like the transpose
//!   below, is copied first);
//! - `@group(1) @binding(0)`: 64 `u32` parameter words (`rows`, `cols`, and `alpha` as f32 bits).
//!
//! Run: `cargo run --release -p kiln --example custom_kernel` (needs a GPU adapter; on Linux without
//! one, Mesa's lavapipe gives a software one: `apt-get install mesa-vulkan-drivers`). `cargo test -p
//! kiln --example custom_kernel` runs it as a test (skipped without a GPU unless `KILN_REQUIRE_GPU=1`).

use kiln::{DType, Device, Result, Shape, Tensor};

/// One thread per row: writes the row of `y` and its maximum.
const SCALE_BIAS_ROWMAX: &str = r#"
@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@group(0) @binding(1) var<storage, read_write> rowmax: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(1) @binding(0) var<storage, read> params: array<u32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let rows = params[0];
    let cols = params[1];
    let alpha = bitcast<f32>(params[2]);
    let r = id.x;
    if (r >= rows) {
        return;
    }
    var m = -3.4028235e38;
    for (var c = 0u; c < cols; c++) {
        let v = alpha * x[r * cols + c] + bias[c];
        y[r * cols + c] = v;
        m = max(m, v);
    }
    rowmax[r] = m;
}
"#;

/// Runs the kernel on `gpu` and compares both outputs with the same computation in kiln ops on the
/// CPU; returns the largest difference.
fn run(gpu: &Device) -> Result<f32> {
    let (rows, cols, alpha) = (100usize, 37usize, 0.5f32);
    // x is the transpose of a (cols, rows) tensor: a strided view, which custom_kernel copies into a
    // contiguous buffer before binding it.
    let x = Tensor::randn(0.0, 1.0, (cols, rows), DType::F32, 1, gpu)?.t()?;
    let bias = Tensor::randn(0.0, 1.0, cols, DType::F32, 2, gpu)?;
    let params = [rows as u32, cols as u32, alpha.to_bits()];
    let workgroups = [rows.div_ceil(64) as u32, 1, 1];
    let outputs = [(Shape::from((rows, cols)), DType::F32), (Shape::from(rows), DType::F32)];
    let out = gpu.custom_kernel(SCALE_BIAS_ROWMAX, "main", &[&x, &bias], &outputs, workgroups, &params)?;
    let (y, rowmax) = (&out[0], &out[1]);

    // The reference: kiln's own ops on the CPU.
    let cpu = Device::cpu();
    let want_y = x.to_device(&cpu)?.mul_scalar(alpha as f64)?.add(&bias.to_device(&cpu)?)?;
    let want_max = want_y.max(&[-1], false)?;
    let diff = |got: &Tensor, want: &Tensor| -> Result<f32> {
        assert_eq!(got.shape(), want.shape());
        got.to_device(&cpu)?.sub(want)?.abs()?.max_all()?.to_scalar::<f32>()
    };
    Ok(diff(y, &want_y)?.max(diff(rowmax, &want_max)?))
}

fn main() -> std::process::ExitCode {
    let checked = Device::gpu().and_then(|gpu| {
        println!("device: {gpu} ({})", gpu.gpu_info().map(|a| a.name).unwrap_or_default());
        run(&gpu)
    });
    match checked {
        Ok(d) if d <= 1e-5 => {
            println!("custom kernel matches kiln's ops: max |diff| = {d:.1e}");
            std::process::ExitCode::SUCCESS
        }
        Ok(d) => {
            eprintln!("error: custom kernel differs from kiln's ops: max |diff| = {d:.1e}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    /// The example's kernel gives kiln's results (the binding layout documented on
    /// `Device::custom_kernel` is the one the runtime binds).
    #[test]
    fn custom_kernel_matches_kiln_ops() {
        let gpu = match kiln::Device::gpu() {
            Ok(g) => g,
            Err(e) if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("KILN_REQUIRE_GPU=1: {e}"),
            Err(e) => return eprintln!("skipped: {e}"),
        };
        let d = super::run(&gpu).expect("the custom kernel runs");
        assert!(d <= 1e-5, "max |diff| = {d}");
    }
}
