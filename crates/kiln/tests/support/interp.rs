//! A byte-driven interpreter of random kiln programs, shared by the fuzz target (`fuzz/`) and the
//! soak test (`tests/reliability_soak.rs`). Each step reads an opcode and a bag of arguments from the
//! input bytes (past the end every byte reads as 0) and runs the op on every device of the machine in
//! lockstep: the CPU and, when given, a GPU. Arguments are drawn to be often invalid: zero and one
//! sized dims, out-of-range and negative axes, mixed dtypes and devices, out-of-range and negative
//! ids, empty reductions, wrong reshape sizes, narrow past the end, slice step 0, concat of nothing,
//! a KV cache past its capacity, rope/sdpa with inconsistent heads.
//!
//! The checks: no panic (the caller wraps `run` in `catch_unwind`), every `Err` names an op
//! (`[op] ...`, or one of the op-less variants: out of memory, device lost), and where both devices
//! answer `Ok` the results agree in shape, dtype and value (tolerance per dtype); where one answers
//! `Ok` and the other `Err`, that is a disagreement too. Findings are returned, not asserted, so the
//! caller can tell known ones (owned by another change) from new ones.
//!
//! `Mode::Safe` keeps to arguments whose failures are all fixed; `Mode::NonFinite` adds NaN, +-inf,
//! -0 and f16's largest value to the inputs (CI's fuzz and soak run it); `Mode::Full` adds sizes whose
//! product overflows `usize`, huge allocations and the far ranges too (the hand-run fuzz uses it).

#![allow(dead_code)]

use kiln::op::{BinaryOp, CmpOp, UnaryOp};
use kiln::{DType, Device, Error, KvCache, RopeLayout, Tensor};

/// Which arguments the generator may produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Small sizes and finite values: the set the CI soak asserts on.
    Safe,
    /// Small sizes with NaN, infinities, -0 and +-65504 among the values.
    NonFinite,
    /// Also huge and overflowing sizes, NaN and infinities.
    Full,
}

/// Reads bytes; past the end every read is 0, so any input is a complete program.
pub struct Src<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Src<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Src { data, pos: 0 }
    }
    pub fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }
    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.u8() as usize % from.len()]
    }
}

/// Op variants whose CPU/GPU disagreements are known and owned elsewhere (docs/RELIABILITY.md lists
/// each with a reproducer): their mismatches are counted and printed, not asserted.
pub const KNOWN_MISMATCHES: &[&str] = &[
    // Empty: the disagreements this list held (pow(0, negative), NaN comparisons, casts of tiny and
    // large floats, integer clamp with fractional bounds, gelu_erf(-inf)) are fixed on the GPU side.
];

/// One finding of a run.
#[derive(Debug, Clone)]
pub enum Finding {
    /// An `Err` whose message names no op.
    Unnamed { op: &'static str, msg: String },
    /// The devices disagree: `Ok` on one and `Err` on the other, or different values. `what` names
    /// the op variant (`binary:Pow`), `operands` the reference device's operands.
    Mismatch { op: &'static str, what: String, detail: String, operands: String },
}

impl Finding {
    pub fn op(&self) -> &'static str {
        match self {
            Finding::Unnamed { op, .. } | Finding::Mismatch { op, .. } => op,
        }
    }

    /// The op variant of a mismatch (`binary:Pow`, `unary:Clamp`), else the op.
    pub fn what(&self) -> String {
        match self {
            Finding::Unnamed { op, .. } => op.to_string(),
            Finding::Mismatch { what, .. } => what.clone(),
        }
    }
}

/// What a run did.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// Op calls made (per device).
    pub calls: usize,
    /// Calls that returned `Ok` / `Err` on the first device.
    pub ok: usize,
    pub err: usize,
    pub findings: Vec<Finding>,
}

/// The argument bag every op draws from: decoded once per step, used identically on every device.
#[derive(Debug, Clone)]
struct Args {
    slots: [usize; 3],
    dims: Vec<usize>,
    dims2: Vec<usize>,
    axes: Vec<isize>,
    axis: isize,
    n: [usize; 3],
    f: [f64; 3],
    values: Vec<f64>,
    ids: Vec<f64>,
    dtype: DType,
    dtype2: DType,
    flag: bool,
    sub: u8,
}

const SMALL_DIMS: [usize; 10] = [0, 1, 1, 2, 2, 3, 4, 5, 7, 8];
const HUGE_DIMS: [usize; 6] = [1 << 20, 1 << 31, 1 << 32, usize::MAX / 2, usize::MAX, 3_000_000_000];
const AXES: [isize; 12] = [0, 1, 2, 3, -1, -2, -3, -4, 4, 5, -5, isize::MIN];
const SAFE_VALUES: [f64; 16] = [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 4.0, 0.25, 7.0, -7.0, 1.5, 6.0, -0.0];
const SPECIAL_VALUES: [f64; 8] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e38, -1e38, 65504.0, 1e-40, 1e300];
/// The non-finite values of `Mode::NonFinite`: none outside the documented accuracy ranges (sin/cos
/// of 1e38) or in the subnormals a GPU may flush.
const NONFINITE_VALUES: [f64; 6] = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 65504.0, -65504.0];

/// Mismatches known in the non-finite modes only, owned by another change. Empty: issue 21's pow
/// special cases (`(-inf)^y` and `(-1)^+-inf`, once NaN on the GPU) are fixed, so every pow
/// mismatch is asserted again.
pub const KNOWN_NONFINITE_MISMATCHES: &[&str] = &[];

/// Whether `f` is a known mismatch in `mode` (counted and printed, not asserted).
pub fn is_known(f: &Finding, mode: Mode) -> bool {
    let what = f.what();
    matches!(f, Finding::Mismatch { .. })
        && (KNOWN_MISMATCHES.contains(&what.as_str())
            || (mode != Mode::Safe && KNOWN_NONFINITE_MISMATCHES.contains(&what.as_str())))
}
const IDS: [f64; 12] = [0.0, 1.0, 2.0, 3.0, 0.0, 1.0, -1.0, 5.0, 100.0, -100.0, 2147483647.0, 1099511627776.0];
const SCALARS: [f64; 10] = [0.0, 1.0, -1.0, 2.0, 0.5, -3.0, 10.0, 1e-5, -0.0, 3.0];

impl Args {
    fn decode(src: &mut Src, mode: Mode, dtypes: &[DType]) -> Args {
        let rank = src.u8() as usize % 5;
        let huge = mode == Mode::Full && src.u8().is_multiple_of(8);
        let dim = |src: &mut Src| {
            if huge && src.u8().is_multiple_of(2) {
                src.pick(&HUGE_DIMS)
            } else {
                src.pick(&SMALL_DIMS)
            }
        };
        let dims: Vec<usize> = (0..rank).map(|_| dim(src)).collect();
        let rank2 = src.u8() as usize % 5;
        let dims2: Vec<usize> = (0..rank2).map(|_| dim(src)).collect();
        let naxes = src.u8() as usize % 4;
        let axes = (0..naxes).map(|_| src.pick(&AXES)).collect();
        let axis = src.pick(&AXES);
        let small = |src: &mut Src| src.u8() as usize % 9;
        let mut n = [small(src), small(src), small(src)];
        if huge {
            n[0] = src.pick(&HUGE_DIMS);
        }
        let special = mode != Mode::Safe && src.u8().is_multiple_of(4);
        let value = |src: &mut Src| {
            if special && src.u8().is_multiple_of(3) {
                if mode == Mode::Full {
                    src.pick(&SPECIAL_VALUES)
                } else {
                    src.pick(&NONFINITE_VALUES)
                }
            } else {
                src.pick(&SAFE_VALUES)
            }
        };
        let f = [value(src), value(src), src.pick(&SCALARS)];
        // Values for a new tensor of shape `dims` (when it is small), a few bytes each.
        let count: usize = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).unwrap_or(usize::MAX);
        let values = if count <= 64 { (0..count).map(|_| value(src)).collect() } else { Vec::new() };
        let ids = (0..src.u8() as usize % 6).map(|_| src.pick(&IDS)).collect();
        let dtype = src.pick(dtypes);
        let dtype2 = if src.u8().is_multiple_of(4) { src.pick(dtypes) } else { dtype };
        let slots = [src.u8() as usize, src.u8() as usize, src.u8() as usize];
        Args {
            slots,
            dims,
            dims2,
            axes,
            axis,
            n,
            f,
            values,
            ids,
            dtype,
            dtype2,
            flag: src.u8().is_multiple_of(2),
            sub: src.u8(),
        }
    }
}

/// One device's state: its tensors (the newest last) and a KV cache.
struct Side {
    dev: Device,
    /// A device of the other kind, for mixed-device calls (`None` when there is only one).
    other: Option<Device>,
    slots: Vec<Tensor>,
    cache: Option<KvCache>,
}

const MAX_SLOTS: usize = 8;
/// Results with more elements are not read back (kept as operands only).
const MAX_READBACK: usize = 1 << 14;
/// Tensors with more elements are not kept (a huge broadcast view is fine to make, not to compute on).
const MAX_KEEP: usize = 1 << 16;

impl Side {
    fn t(&self, pick: usize) -> Option<&Tensor> {
        (!self.slots.is_empty()).then(|| &self.slots[pick % self.slots.len()])
    }
}

/// The ops, by opcode; each returns the tensors it made.
pub const OPS: [&str; 34] = [
    "from_f64_values",
    "full",
    "arange_step",
    "linspace_eye",
    "unary",
    "binary",
    "binary_scalar",
    "cmp",
    "where_",
    "reduce",
    "arg_reduce",
    "cumsum",
    "reshape",
    "permute",
    "narrow_slice_select",
    "broadcast_squeeze",
    "index_select",
    "gather",
    "embedding",
    "concat_stack",
    "split_chunk",
    "pad_flip",
    "triu_tril",
    "matmul",
    "softmax",
    "norm",
    "silu_mul",
    "rope",
    "sdpa",
    "kv_cache_append",
    "to_dtype",
    "mixed_device",
    "contiguous",
    "scalar_readback",
];

const BINARY: [BinaryOp; 9] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Pow,
    BinaryOp::Maximum,
    BinaryOp::Minimum,
    BinaryOp::And,
    BinaryOp::Or,
];
const CMP: [CmpOp; 6] = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];

fn need(op: &'static str) -> Error {
    // Not an error of kiln: the program had no operand yet. Never reported (see `run`).
    Error::InvalidArgument { op, msg: "interpreter: no operand".into() }
}

/// Runs opcode `code` with `a` on one side.
fn apply(code: usize, a: &Args, s: &mut Side) -> kiln::Result<Vec<Tensor>> {
    let op = OPS[code];
    let t0 = s.t(a.slots[0]).cloned().ok_or_else(|| need(op));
    let t1 = s.t(a.slots[1]).cloned().ok_or_else(|| need(op));
    let t2 = s.t(a.slots[2]).cloned().ok_or_else(|| need(op));
    let dev = s.dev.clone();
    let one = |t: kiln::Result<Tensor>| t.map(|t| vec![t]);
    match op {
        "from_f64_values" => {
            // The values fit the shape unless it is large; then a wrong count is an error to check too.
            one(Tensor::from_f64_values(&a.values, a.dims.as_slice(), a.dtype, &dev))
        }
        "full" => match a.sub % 3 {
            0 => one(Tensor::full(a.f[0], a.dims.as_slice(), a.dtype, &dev)),
            1 => one(Tensor::zeros(a.dims.as_slice(), a.dtype, &dev)),
            _ => one(Tensor::ones(a.dims.as_slice(), a.dtype, &dev)),
        },
        "arange_step" => one(Tensor::arange_step(a.f[0], a.f[1] * a.n[0] as f64, a.f[2], a.dtype, &dev)),
        "linspace_eye" => match a.sub % 2 {
            0 => one(Tensor::linspace(a.f[0], a.f[1], a.n[0], a.dtype, &dev)),
            _ => one(Tensor::eye(a.n[0], a.dtype, &dev)),
        },
        "unary" => {
            let t = t0?;
            match UnaryOp::ALL[a.sub as usize % UnaryOp::ALL.len()] {
                UnaryOp::Clamp { .. } => one(t.clamp(a.f[0], a.f[1])),
                op => one(t.unary(op)),
            }
        }
        "binary" => one(t0?.binary(&t1?, BINARY[a.sub as usize % BINARY.len()])),
        "binary_scalar" => one(t0?.binary_scalar(a.f[2], BINARY[a.sub as usize % BINARY.len()])),
        "cmp" => match a.flag {
            true => one(t0?.cmp(&t1?, CMP[a.sub as usize % CMP.len()])),
            false => one(t0?.cmp_scalar(a.f[2], CMP[a.sub as usize % CMP.len()])),
        },
        "where_" => one(Tensor::where_(&t0?, &t1?, &t2?)),
        "reduce" => {
            let (t, k, ax) = (t0?, a.flag, a.axes.as_slice());
            one(match a.sub % 11 {
                0 => t.sum(ax, k),
                1 => t.mean(ax, k),
                2 => t.max(ax, k),
                3 => t.min(ax, k),
                4 => t.prod(ax, k),
                5 => t.var(ax, k, a.n[0] % 3),
                6 => t.std(ax, k, a.n[0] % 3),
                7 => t.sum_all(),
                8 => t.max_all(),
                9 => t.min_all(),
                _ => t.mean_all(),
            })
        }
        "arg_reduce" => match a.flag {
            true => one(t0?.argmax(a.axis, a.sub.is_multiple_of(2))),
            false => one(t0?.argmin(a.axis, a.sub.is_multiple_of(2))),
        },
        "cumsum" => one(t0?.cumsum(a.axis)),
        "reshape" => match a.sub % 3 {
            0 => one(t0?.reshape(a.dims.as_slice())),
            1 => {
                let dims: Vec<isize> =
                    a.dims.iter().zip(&a.axes).map(|(&d, &x)| if x < 0 { -1 } else { d as isize }).collect();
                one(t0?.reshape_infer(&dims))
            }
            _ => one(t0?.flatten()),
        },
        "permute" => match a.flag {
            true => one(t0?.permute(&a.dims)),
            false => one(t0?.transpose(a.axis, a.axes.first().copied().unwrap_or(0))),
        },
        "narrow_slice_select" => match a.sub % 3 {
            0 => one(t0?.narrow(a.axis, a.n[0], a.n[1])),
            1 => one(t0?.slice(a.axis, a.n[0], a.n[1], a.n[2] % 4)),
            _ => one(t0?.select(a.axis, a.n[0])),
        },
        "broadcast_squeeze" => match a.sub % 4 {
            0 => one(t0?.broadcast_to(a.dims.as_slice())),
            1 => one(t0?.expand(a.dims.as_slice())),
            2 => one(t0?.squeeze(a.axis)),
            _ => one(t0?.unsqueeze(a.axis)),
        },
        "index_select" | "gather" | "embedding" => {
            let ids_dtype = [DType::I64, DType::I32, DType::U32, DType::U8, DType::F32][a.sub as usize % 5];
            let t = t0?;
            let (ids, shape): (Vec<f64>, Vec<usize>) = if op == "gather" && a.flag {
                // Ids of the operand's shape with one axis resized, as gather wants.
                let mut shape = t.dims().to_vec();
                if let Some(d) = shape.first_mut() {
                    *d = a.ids.len();
                }
                let count: usize = shape.iter().product();
                if count > 64 {
                    return Err(need(op));
                }
                ((0..count).map(|i| a.ids.get(i % a.ids.len().max(1)).copied().unwrap_or(0.0)).collect(), shape)
            } else {
                (a.ids.clone(), vec![a.ids.len()])
            };
            let ids = Tensor::from_f64_values(&ids, shape, ids_dtype, &dev)?;
            match op {
                "index_select" => one(t.index_select(&ids, a.axis)),
                "gather" => one(t.gather(a.axis, &ids)),
                _ => one(t.embedding(&ids)),
            }
        }
        "concat_stack" => {
            let all = [t0, t1, t2];
            let ts: Vec<Tensor> = all.into_iter().take(a.n[0] % 4).collect::<kiln::Result<_>>()?;
            let refs: Vec<&Tensor> = ts.iter().collect();
            match a.flag {
                true => one(Tensor::concat(&refs, a.axis)),
                false => one(Tensor::stack(&refs, a.axis)),
            }
        }
        "split_chunk" => match a.flag {
            true => t0?.split(&a.dims, a.axis),
            false => t0?.chunk(a.n[0], a.axis),
        },
        "pad_flip" => match a.flag {
            true => {
                let pads: Vec<(usize, usize)> = a.dims.iter().zip(&a.dims2).map(|(&l, &r)| (l, r)).collect();
                one(t0?.pad(&pads, a.f[0]))
            }
            false => one(t0?.flip(&a.axes)),
        },
        "triu_tril" => match a.flag {
            true => one(t0?.triu(a.n[0] as i64 - 4)),
            false => one(t0?.tril(a.n[0] as i64 - 4)),
        },
        "matmul" => match a.sub % 3 {
            0 => one(t0?.matmul(&t1?)),
            1 => one(t0?.linear(&t1?, if a.flag { Some(t2?) } else { None }.as_ref())),
            _ => one(t0?.dot(&t1?)),
        },
        "softmax" => match a.flag {
            true => one(t0?.softmax(a.axis)),
            false => one(t0?.log_softmax(a.axis)),
        },
        "norm" => match a.flag {
            true => one(t0?.rms_norm(&t1?, 1e-5)),
            false => one(t0?.layer_norm(&t1?, if a.sub.is_multiple_of(2) { Some(t2?) } else { None }.as_ref(), 1e-5)),
        },
        "silu_mul" => one(t0?.silu_mul(&t1?)),
        "rope" => {
            let layout = if a.flag { RopeLayout::HalfSplit } else { RopeLayout::Interleaved };
            match a.sub % 2 {
                0 => one(t0?.rope(a.n[0], [10000.0, 0.0, -1.0, 1.0][a.n[1] % 4], layout)),
                _ => one(t0?.rope_with_tables(&t1?, &t2?, layout)),
            }
        }
        "sdpa" => {
            let scale = [None, Some(0.5), Some(f64::NAN), Some(0.0)][a.sub as usize % 4];
            one(t0?.sdpa(&t1?, &t2?, a.flag, scale))
        }
        "kv_cache_append" => {
            if a.sub.is_multiple_of(8) || s.cache.is_none() {
                s.cache = Some(KvCache::new(a.n[0]));
            }
            let (k, v) = (t0?, t1?);
            let (k, v) = s.cache.as_mut().expect("made above").append(&k, &v)?;
            Ok(vec![k, v])
        }
        "to_dtype" => one(t0?.to_dtype(a.dtype)),
        "mixed_device" => {
            let Some(other) = s.other.clone() else { return Err(need(op)) };
            let moved = t1?.to_device(&other)?;
            match a.sub % 4 {
                0 => one(t0?.add(&moved)),
                1 => one(t0?.matmul(&moved)),
                2 => one(Tensor::concat(&[&t0?, &moved], a.axis)),
                _ => one(t0?.index_select(&moved, a.axis)),
            }
        }
        "contiguous" => one(t0?.contiguous()),
        "scalar_readback" => {
            let t = t0?;
            t.to_scalar::<f64>().map(|_| vec![t])
        }
        _ => unreachable!("opcode {code}"),
    }
}

/// The op variant that `apply` runs for opcode `code` with `a`, for telling findings apart.
fn variant(code: usize, a: &Args) -> String {
    let op = OPS[code];
    match op {
        "unary" => match UnaryOp::ALL[a.sub as usize % UnaryOp::ALL.len()] {
            UnaryOp::Clamp { .. } => "unary:Clamp".into(),
            op => format!("unary:{op:?}"),
        },
        "binary" | "binary_scalar" => format!("{op}:{:?}", BINARY[a.sub as usize % BINARY.len()]),
        "cmp" => format!("cmp:{:?}", CMP[a.sub as usize % CMP.len()]),
        "reduce" => format!(
            "reduce:{}",
            ["sum", "mean", "max", "min", "prod", "var", "std", "sum_all", "max_all", "min_all", "mean_all"]
                [a.sub as usize % 11]
        ),
        "to_dtype" => format!("to_dtype:{}", a.dtype),
        _ => op.to_string(),
    }
}

/// The operands `a` picks on side `s`, shortly (shape, dtype, first values).
fn operands(a: &Args, s: &Side) -> String {
    a.slots
        .iter()
        .filter_map(|&p| s.t(p))
        .map(|t| {
            let v = if t.elem_count() <= MAX_READBACK { t.to_f64_vec().unwrap_or_default() } else { Vec::new() };
            format!("{} {} {:?}", t.shape(), t.dtype(), &v[..v.len().min(12)])
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether an error's message names an op (the `[op] ...` variants) or is one of the few variants that
/// concern the device rather than one op.
pub fn names_op(e: &Error) -> bool {
    match e {
        Error::OutOfMemory { .. } | Error::DeviceLost(_) | Error::BackendUnavailable { .. } => true,
        e => {
            let m = e.to_string();
            m.starts_with('[') && m[1..].find(']').is_some_and(|i| i > 0)
        }
    }
}

/// Tolerance of a value comparison between devices, relative to the magnitude.
fn tolerance(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 2e-4,
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        _ => 0.0,
    }
}

fn same_value(x: f64, y: f64, tol: f64) -> bool {
    if x.is_nan() || y.is_nan() {
        return x.is_nan() && y.is_nan();
    }
    if x.is_infinite() || y.is_infinite() {
        return x == y;
    }
    (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs()))
}

/// Compares one result of two devices; `None` when they agree.
fn compare(x: &Tensor, y: &Tensor) -> Option<String> {
    if x.dims() != y.dims() || x.dtype() != y.dtype() {
        return Some(format!("{} {} vs {} {}", x.shape(), x.dtype(), y.shape(), y.dtype()));
    }
    if x.elem_count() > MAX_READBACK {
        return None;
    }
    let (vx, vy) = match (x.to_f64_vec(), y.to_f64_vec()) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => return Some(format!("readback: {:?} vs {:?}", a.err(), b.err())),
    };
    let tol = tolerance(x.dtype());
    let bad = vx.iter().zip(&vy).position(|(&p, &q)| !same_value(p, q, tol))?;
    Some(format!(
        "shape {} {}: element {bad} is {} vs {} (first values {:?} vs {:?})",
        x.shape(),
        x.dtype(),
        vx[bad],
        vy[bad],
        &vx[..vx.len().min(8)],
        &vy[..vy.len().min(8)]
    ))
}

/// Runs the program in `bytes` on `devices` in lockstep (the first is the reference, normally the CPU)
/// for at most `max_steps` steps. Panics propagate (wrap the call in `catch_unwind`).
pub fn run(bytes: &[u8], devices: &[Device], mode: Mode, max_steps: usize) -> Report {
    let mut src = Src::new(bytes);
    let mut sides: Vec<Side> = devices
        .iter()
        .map(|d| Side {
            dev: d.clone(),
            other: devices.iter().find(|o| o.is_cpu() != d.is_cpu()).cloned(),
            slots: Vec::new(),
            cache: None,
        })
        .collect();
    // The GPU backend has no f64 (a documented `UnsupportedDType` error): with a GPU in the run, programs
    // keep to the dtypes both backends have, so that their states stay comparable.
    let dtypes: Vec<DType> =
        DType::ALL.iter().copied().filter(|&d| d != DType::F64 || devices.iter().all(|d| d.is_cpu())).collect();
    let mut report = Report::default();
    let mut steps = 0;
    while !src.done() && steps < max_steps {
        steps += 1;
        let code = src.u8() as usize % OPS.len();
        let op = OPS[code];
        let args = Args::decode(&mut src, mode, &dtypes);
        let results: Vec<kiln::Result<Vec<Tensor>>> = sides.iter_mut().map(|s| apply(code, &args, s)).collect();
        if results
            .iter()
            .any(|r| matches!(r, Err(Error::InvalidArgument { msg, .. }) if msg.starts_with("interpreter:")))
        {
            continue;
        }
        report.calls += 1;
        match &results[0] {
            Ok(_) => report.ok += 1,
            Err(_) => report.err += 1,
        }
        for r in &results {
            if let Err(e) = r {
                if !names_op(e) {
                    report.findings.push(Finding::Unnamed { op, msg: e.to_string() });
                }
            }
        }
        let mut agree = true;
        for (i, r) in results.iter().enumerate().skip(1) {
            // The documented difference (ops/index.rs, docs/RELIABILITY.md): an id outside the axis is
            // `Err(OutOfRange)` on the CPU and selects zeros on the GPU. The programs part there.
            if matches!(op, "index_select" | "embedding" | "gather")
                && sides[0].dev.is_cpu()
                && sides[i].dev.is_gpu()
                && matches!((&results[0], r), (Err(Error::OutOfRange { .. }), Ok(_)))
            {
                agree = false;
                continue;
            }
            let detail = match (&results[0], r) {
                (Ok(x), Ok(y)) if x.len() != y.len() => Some(format!("{} vs {} results", x.len(), y.len())),
                (Ok(x), Ok(y)) => x.iter().zip(y).find_map(|(p, q)| compare(p, q)),
                (Err(_), Err(_)) => None,
                (Ok(_), Err(e)) => Some(format!("{} Ok, {} Err: {e}", sides[0].dev, sides[i].dev)),
                (Err(e), Ok(_)) => Some(format!("{} Err: {e}, {} Ok", sides[0].dev, sides[i].dev)),
            };
            if let Some(detail) = detail {
                report.findings.push(Finding::Mismatch {
                    op,
                    what: variant(code, &args),
                    detail: format!("{detail} (args {args:?})"),
                    operands: operands(&args, &sides[0]),
                });
                agree = false;
            }
        }
        if !agree {
            // The devices' states differ from here on: stop rather than compare unrelated values.
            break;
        }
        for (s, r) in sides.iter_mut().zip(results) {
            if let Ok(ts) = r {
                for t in ts.into_iter().filter(|t| t.elem_count() <= MAX_KEEP) {
                    if s.slots.len() == MAX_SLOTS {
                        s.slots.remove(0);
                    }
                    s.slots.push(t);
                }
            }
        }
    }
    report
}
