//! The shared pieces of the benchmark sets: the `Case` type, the input cache, and the builders of
//! the common case shapes (flat element-wise, row-wise, matmul, attention). The case sets
//! (`cases`, `gpu_cases`, `quant_cases`, `realistic_cases`) use this module and never each other;
//! `mod.rs` puts the sets together and times them.

use kiln::{DType, Device, SdpaOptions, Shape, Tensor};
use std::collections::HashMap;

/// What limits an op: memory traffic or arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// Reported in GB/s, compared with the measured copy bandwidth.
    Memory,
    /// Reported in GFLOPS; no peak is known, so no ratio unless the case also counts bytes.
    Compute,
    /// The host's cost of issuing `ops` dependent ops: timed on the host without waiting for the device,
    /// reported per op.
    Launch {
        /// Ops issued per run.
        ops: usize,
    },
}

/// A timed op: called once per run.
pub type Op = Box<dyn Fn() -> kiln::Result<Tensor>>;

/// Makes a case's op from the shared inputs.
pub type Builder = Box<dyn Fn(&mut Inputs) -> kiln::Result<Op>>;

/// One benchmark: its description and how to build the op from cached inputs.
pub struct Case {
    /// Stable name used by `--filter` and in JSON (`add`, `matmul_f32_1024`, ...).
    pub name: String,
    /// Human-readable shape(s) of the inputs.
    pub shape: String,
    /// Element type of the (main) input.
    pub dtype: DType,
    /// What bounds the op.
    pub bound: Bound,
    /// Minimal bytes moved (inputs read once + output written once), when meaningful.
    pub bytes: Option<f64>,
    /// Useful floating-point operations, when meaningful.
    pub flops: Option<f64>,
    /// Builds the op (creating inputs through the cache) before timing starts.
    pub build: Builder,
}

/// Random inputs, made once per (shape, dtype, seed) and shared between cases.
pub struct Inputs {
    device: Device,
    cache: HashMap<(Vec<usize>, DType, u64), Tensor>,
}

impl Inputs {
    /// An empty cache for `device`.
    pub fn new(device: &Device) -> Inputs {
        Inputs { device: device.clone(), cache: HashMap::new() }
    }

    /// The device the inputs live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Standard-normal values of `shape` and `dtype`, the same for one seed on every device.
    pub fn randn(&mut self, shape: impl Into<Shape>, dtype: DType, seed: u64) -> kiln::Result<Tensor> {
        let shape = shape.into();
        let key = (shape.dims().to_vec(), dtype, seed);
        if let Some(t) = self.cache.get(&key) {
            return Ok(t.clone());
        }
        let t = Tensor::randn(0.0, 1.0, shape, dtype, seed, &self.device)?;
        self.cache.insert(key, t.clone());
        Ok(t)
    }
}

pub const F32: f64 = 4.0;
pub const SEED_A: u64 = 1;
pub const SEED_B: u64 = 2;
pub const SEED_C: u64 = 3;
pub const EPS: f64 = 1e-5;

/// `32M` for powers of two that are whole mebi-counts, else the plain number.
pub fn count(n: usize) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else {
        n.to_string()
    }
}

pub fn case(
    name: impl Into<String>,
    shape: String,
    dtype: DType,
    bound: Bound,
    bytes: Option<f64>,
    flops: Option<f64>,
    build: impl Fn(&mut Inputs) -> kiln::Result<Op> + 'static,
) -> Case {
    Case { name: name.into(), shape, dtype, bound, bytes, flops, build: Box::new(build) }
}

/// A memory-bound op of one flat f32 input of `n` elements: `bytes_per_elem` counts input + output.
pub fn unary(name: &str, n: usize, bytes_per_elem: f64, f: fn(&Tensor) -> kiln::Result<Tensor>) -> Case {
    case(name, count(n), DType::F32, Bound::Memory, Some(bytes_per_elem * n as f64), None, move |inp| {
        let x = inp.randn(n, DType::F32, SEED_A)?;
        Ok(Box::new(move || f(&x)) as Op)
    })
}

/// A memory-bound op over the rows of an `r x c` f32 input with per-column weights `w` and `b`.
pub fn rows_case(
    name: &str,
    (r, c): (usize, usize),
    bytes: f64,
    f: fn(&Tensor, &Tensor, &Tensor) -> kiln::Result<Tensor>,
) -> Case {
    case(name, format!("{r}x{c}"), DType::F32, Bound::Memory, Some(bytes), None, move |inp| {
        let x = inp.randn((r, c), DType::F32, SEED_A)?;
        let w = inp.randn(c, DType::F32, SEED_B)?;
        let b = inp.randn(c, DType::F32, SEED_C)?;
        Ok(Box::new(move || f(&x, &w, &b)) as Op)
    })
}

/// `(m, k) @ (k, n)`: compute-bound, plus the bytes when `count_bytes` (matrix-vector-like shapes
/// stream the weight matrix and are bounded by memory).
pub fn matmul(name: String, (m, k, n): (usize, usize, usize), dtype: DType, count_bytes: bool) -> Case {
    let size = dtype.size_in_bytes() as f64;
    let bytes = count_bytes.then(|| size * (m * k + k * n + m * n) as f64);
    let flops = 2.0 * (m * k * n) as f64;
    case(name, format!("{m}x{k} @ {k}x{n}"), dtype, Bound::Compute, bytes, Some(flops), move |inp| {
        let a = inp.randn((m, k), dtype, SEED_A)?;
        let b = inp.randn((k, n), dtype, SEED_B)?;
        Ok(Box::new(move || a.matmul(&b)) as Op)
    })
}

/// Causal attention with `hq` query heads over `hkv` key/value heads (GQA when they differ).
pub fn sdpa_gqa(name: String, b: usize, heads: (usize, usize), t: usize, d: usize) -> Case {
    sdpa_gqa_in(name, DType::F32, b, heads, t, d)
}

/// [`sdpa_gqa`] in `dtype`.
/// Causal GQA attention of `t` tokens in `dtype` with a soft cap and a sliding window of `w`, each
/// optional (Gemma 2's options, `Tensor::sdpa_with`); FLOPs count each query's `min(i + 1, w)` keys.
pub fn sdpa_options_in(
    name: String,
    dtype: DType,
    (hq, hkv): (usize, usize),
    t: usize,
    d: usize,
    softcap: Option<f64>,
    window: Option<usize>,
) -> Case {
    let w = window.unwrap_or(t);
    let seen: usize = (0..t).map(|i| (i + 1).min(w)).sum();
    let flops = 4.0 * (hq * d) as f64 * seen as f64;
    let shape = format!("1x{hq}/{hkv}x{t}x{d} cap {softcap:?} window {window:?}");
    case(name, shape, dtype, Bound::Compute, None, Some(flops), move |inp| {
        let q = inp.randn((1, hq, t, d), dtype, SEED_A)?;
        let k = inp.randn((1, hkv, t, d), dtype, SEED_B)?;
        let v = inp.randn((1, hkv, t, d), dtype, SEED_C)?;
        let opts = SdpaOptions { causal: true, scale: None, softcap, window };
        Ok(Box::new(move || q.sdpa_with(&k, &v, opts)) as Op)
    })
}

pub fn sdpa_gqa_in(name: String, dtype: DType, b: usize, (hq, hkv): (usize, usize), t: usize, d: usize) -> Case {
    let flops = 4.0 * (b * hq * d) as f64 * (t * (t + 1) / 2) as f64;
    let shape = if hq == hkv { format!("{b}x{hq}x{t}x{d}") } else { format!("{b}x{hq}/{hkv}x{t}x{d}") };
    case(name, shape, dtype, Bound::Compute, None, Some(flops), move |inp| {
        let q = inp.randn((b, hq, t, d), dtype, SEED_A)?;
        let k = inp.randn((b, hkv, t, d), dtype, SEED_B)?;
        let v = inp.randn((b, hkv, t, d), dtype, SEED_C)?;
        Ok(Box::new(move || q.sdpa(&k, &v, true, None)) as Op)
    })
}
