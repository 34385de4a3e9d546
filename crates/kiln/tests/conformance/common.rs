//! Shared pieces of the conformance suite: the per-backend test macro, random inputs, non-contiguous
//! views, a plain f64 reference array, and NaN-aware comparisons with per-dtype tolerances.
#![allow(dead_code)]

use kiln::{DType, Device, Result, Tensor};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Expands each named `fn name(dev: &Device)` into a test module with one `#[test]` per backend:
/// `name::cpu`, and (with the GPU backend) `name::gpu`. Adding a backend is one line here.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn cpu() {
                    super::$name(&kiln::Device::cpu())
                }
                #[test]
                fn gpu() {
                    if let Some(dev) = $crate::common::gpu_device() {
                        super::$name(&dev)
                    }
                }
            }
        )*
    };
}

/// The GPU device for the `gpu` half of each test, with output poisoning on; `None` (test skipped,
/// with a note) when no adapter exists, a failure instead when `KILN_REQUIRE_GPU=1`.
pub fn gpu_device() -> Option<Device> {
    static DEV: std::sync::OnceLock<Option<Device>> = std::sync::OnceLock::new();
    let dev = DEV
        .get_or_init(|| match Device::gpu() {
            Ok(d) => {
                d.set_poison(true);
                Some(d)
            }
            Err(e) => {
                eprintln!("GPU tests skipped: {e}");
                None
            }
        })
        .clone();
    if dev.is_none() && std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        panic!("KILN_REQUIRE_GPU=1 but no GPU adapter was found");
    }
    dev
}

/// Notes that an emulated cooperative test cannot run on `dev` (no SHADER_F16), or fails when
/// `KILN_REQUIRE_GPU=1`: there the GPU suite must run whole, and a skip that reports ok hides it.
pub fn skip_emulation(dev: &Device, what: &str) {
    assert!(
        !std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1"),
        "KILN_REQUIRE_GPU=1 but {} has no SHADER_F16: the emulated {what} cannot run",
        dev.name()
    );
    eprintln!("emulated {what} skipped: {} has no SHADER_F16", dev.name());
}

/// The dtypes of `list` that `dev` supports (GPUs have no f64).
pub fn supported(dev: &Device, list: &[DType]) -> Vec<DType> {
    list.iter().copied().filter(|&d| dev.is_cpu() || d != DType::F64).collect()
}

pub const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
/// The integer dtypes the f64-reference suites cover (values small enough not to wrap there); the
/// narrow ones and u64 have exact wrapping references in `narrow_ints.rs`.
pub const INTS: [DType; 4] = [DType::I32, DType::U32, DType::I64, DType::U8];

/// Absolute and relative tolerance for results of simple (correctly rounded in f32) ops per dtype.
/// Ops with longer error chains multiply these by a factor they state.
pub fn tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F64 => (1e-12, 1e-12),
        DType::F32 => (1e-6, 1e-5),
        DType::F16 => (1e-3, 2e-3),
        DType::BF16 => (1e-2, 1.6e-2),
        _ => (0.0, 0.0),
    }
}

/// A small deterministic generator for test data.
pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Random values suited to `dtype`: normals for floats, small integers (non-negative for unsigned),
/// 0/1 for bool.
pub fn random_values(n: usize, dtype: DType, seed: u64) -> Vec<f64> {
    let mut r = rng(seed);
    (0..n)
        .map(|_| match dtype {
            DType::Bool => (r.random::<f64>() < 0.5) as u8 as f64,
            DType::U8 | DType::U32 | DType::U16 | DType::U64 => (r.random::<f64>() * 10.0).floor(),
            DType::I32 | DType::I64 | DType::I8 | DType::I16 => (r.random::<f64>() * 20.0).floor() - 10.0,
            _ => {
                // Box-Muller keeps this free of extra crates.
                let (u1, u2) = (r.random::<f64>().max(1e-12), r.random::<f64>());
                (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
            }
        })
        .collect()
}

/// A contiguous tensor of `values` (converted to `dtype`).
pub fn tensor(values: &[f64], shape: &[usize], dtype: DType, dev: &Device) -> Tensor {
    Tensor::from_f64_values(values, shape.to_vec(), dtype, dev).unwrap()
}

/// A random contiguous tensor.
pub fn rand_tensor(shape: &[usize], dtype: DType, seed: u64, dev: &Device) -> Tensor {
    let n = shape.iter().product();
    tensor(&random_values(n, dtype, seed), shape, dtype, dev)
}

/// How a test view is laid out in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layouts {
    Contiguous,
    /// Stored with all axes reversed, viewed through a permute.
    Transposed,
    /// Stored with every other element of the last axis, viewed through a slice with step 2.
    Stepped,
}

pub const ALL_LAYOUTS: [Layouts; 3] = [Layouts::Contiguous, Layouts::Transposed, Layouts::Stepped];

/// A tensor holding `values` (row-major over `shape`) in the memory layout `kind`.
pub fn tensor_in(values: &[f64], shape: &[usize], dtype: DType, kind: Layouts, dev: &Device) -> Tensor {
    let t = match kind {
        Layouts::Contiguous => tensor(values, shape, dtype, dev),
        Layouts::Transposed => {
            let rank = shape.len();
            let rev: Vec<usize> = shape.iter().rev().copied().collect();
            let r = RefArray::new(shape.to_vec(), values.to_vec());
            let mut stored = vec![0.0; values.len()];
            let rev_ref = RefArray::new(rev.clone(), vec![0.0; values.len()]);
            for (i, s) in stored.iter_mut().enumerate() {
                let idx: Vec<usize> = rev_ref.unravel(i).into_iter().rev().collect();
                *s = r.get(&idx);
            }
            let perm: Vec<usize> = (0..rank).rev().collect();
            tensor(&stored, &rev, dtype, dev).permute(&perm).unwrap()
        }
        Layouts::Stepped => {
            if shape.is_empty() {
                return tensor(values, shape, dtype, dev);
            }
            let last = *shape.last().unwrap();
            let mut wide_shape = shape.to_vec();
            *wide_shape.last_mut().unwrap() = 2 * last;
            let mut stored = vec![f64::NAN; 2 * values.len()];
            for (i, &v) in values.iter().enumerate() {
                let (row, col) = (i / last.max(1), i % last.max(1));
                stored[row * 2 * last + 2 * col] = v;
            }
            let axis = shape.len() as isize - 1;
            tensor(&stored, &wide_shape, dtype, dev).slice(axis, 0, 2 * last, 2).unwrap()
        }
    };
    assert_eq!(t.dims(), shape);
    if kind != Layouts::Contiguous && values.len() > 1 && shape.iter().filter(|&&d| d > 1).count() > 1 {
        assert!(!t.is_contiguous(), "{kind:?} view of {shape:?} should not be contiguous");
    }
    t
}

/// A plain row-major f64 array: the reference side of every comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct RefArray {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl RefArray {
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Self {
        assert_eq!(shape.iter().product::<usize>(), data.len());
        RefArray { shape, data }
    }

    /// The values a tensor holds (read back as f64).
    pub fn of(t: &Tensor) -> Self {
        RefArray::new(t.dims().to_vec(), t.to_f64_vec().unwrap())
    }

    pub fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.shape.len()];
        for i in (0..self.shape.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * self.shape[i + 1];
        }
        s
    }

    pub fn unravel(&self, mut i: usize) -> Vec<usize> {
        let mut idx = vec![0; self.shape.len()];
        for d in (0..self.shape.len()).rev() {
            idx[d] = i % self.shape[d];
            i /= self.shape[d];
        }
        idx
    }

    pub fn ravel(&self, idx: &[usize]) -> usize {
        idx.iter().zip(self.strides()).map(|(i, s)| i * s).sum()
    }

    pub fn get(&self, idx: &[usize]) -> f64 {
        self.data[self.ravel(idx)]
    }

    /// Element at `idx` of the broadcast of this array to a shape of rank `idx.len()` (NumPy rules).
    pub fn get_broadcast(&self, idx: &[usize]) -> f64 {
        let lead = idx.len() - self.shape.len();
        let own: Vec<usize> =
            self.shape.iter().enumerate().map(|(i, &d)| if d == 1 { 0 } else { idx[lead + i] }).collect();
        self.get(&own)
    }

    pub fn map(&self, f: impl Fn(f64) -> f64) -> RefArray {
        RefArray::new(self.shape.clone(), self.data.iter().map(|&x| f(x)).collect())
    }
}

/// NumPy's broadcast shape of two shapes (panics when incompatible: tests build compatible ones).
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let rank = a.len().max(b.len());
    (0..rank)
        .map(|i| {
            let da = if i + a.len() >= rank { a[i + a.len() - rank] } else { 1 };
            let db = if i + b.len() >= rank { b[i + b.len() - rank] } else { 1 };
            if da == 1 {
                db
            } else {
                da
            }
        })
        .collect()
}

/// True when `a` is within tolerance of `e`; NaN matches only NaN and infinities only themselves.
pub fn close(a: f64, e: f64, atol: f64, rtol: f64) -> bool {
    if e.is_nan() || a.is_nan() {
        return e.is_nan() && a.is_nan();
    }
    if e.is_infinite() || a.is_infinite() {
        return a == e;
    }
    (a - e).abs() <= atol + rtol * e.abs()
}

/// Compares a tensor with expected values, with the dtype's tolerance times `factor`. Panics with the
/// first few mismatches, their indices and `ctx`.
pub fn assert_close(actual: &Tensor, expected: &RefArray, factor: f64, ctx: &str) {
    assert_eq!(actual.dims(), expected.shape.as_slice(), "shape mismatch: {ctx}");
    let (atol, rtol) = tol(actual.dtype());
    assert_close_tol(actual, expected, atol * factor, rtol * factor, ctx)
}

/// The per-element bound [`assert_close`] applies to `want` for `dtype` times `factor`, for
/// `bounds::assert_catches_wrong`.
pub fn tol_bounds(want: &[f64], dtype: DType, factor: f64) -> Vec<f64> {
    let (atol, rtol) = tol(dtype);
    want.iter().map(|w| factor * (atol + rtol * w.abs())).collect()
}

/// Like [`assert_close`] with explicit tolerances.
pub fn assert_close_tol(actual: &Tensor, expected: &RefArray, atol: f64, rtol: f64, ctx: &str) {
    assert_eq!(actual.dims(), expected.shape.as_slice(), "shape mismatch: {ctx}");
    let got = actual.to_f64_vec().unwrap();
    let bad: Vec<String> = got
        .iter()
        .zip(&expected.data)
        .enumerate()
        .filter(|(_, (a, e))| !close(**a, **e, atol, rtol))
        .take(5)
        .map(|(i, (a, e))| format!("at {:?}: got {a}, expected {e}", expected.unravel(i)))
        .collect();
    assert!(bad.is_empty(), "{ctx} ({}, atol {atol}, rtol {rtol}): {}", actual.dtype(), bad.join("; "));
}

/// Exact comparison (integer and bool results).
pub fn assert_exact(actual: &Tensor, expected: &RefArray, ctx: &str) {
    assert_close_tol(actual, expected, 0.0, 0.0, ctx)
}

/// Rounds f64 values the way storing them in `dtype` does, so references start from the same inputs.
pub fn round_to(values: &[f64], dtype: DType) -> Vec<f64> {
    tensor(values, &[values.len()], dtype, &Device::cpu()).to_f64_vec().unwrap()
}

/// Asserts `r` is an error whose message contains every one of `parts`.
pub fn assert_err<T: std::fmt::Debug>(r: Result<T>, parts: &[&str]) {
    let e = r.expect_err("expected an error").to_string();
    for p in parts {
        assert!(e.contains(p), "error message {e:?} should mention {p:?}");
    }
}
