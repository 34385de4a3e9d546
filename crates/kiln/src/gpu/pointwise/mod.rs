//! The strided per-element launcher every family shares (the named shared piece above the runtime):
//! `Elementwise` renders a kernel from `pointwise.wgsl` (or the vectorised `vec.wgsl` path, four
//! output words per invocation) around a body that computes `value(e)` from `ld{i}(at{i}(e))`; and
//! the data movement built on it: contiguous copies of strided views (`copy.rs` for whole units),
//! dtype casts with the CPU's semantics, and `where`.

pub(crate) mod copy;
pub(crate) mod line_maxima;
pub(crate) mod strided;
pub(crate) mod vec;

use crate::cpu::CpuStorage;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::Block;
use crate::gpu::runtime::wgsl::{self, bits_loader, ct, loader, store_word, PRELUDE};
use crate::gpu::runtime::{GpuContext, GpuStorage};
use crate::layout::collapse;
use crate::{DType, Error, Layout, Result};
use half::{bf16, f16};
pub(crate) use strided::{params_wgsl, Strided};

const TEMPLATE: &str = include_str!("pointwise.wgsl");
const MAX_RANK: usize = 8;

/// How an input is indexed.
fn variant(dims: &[usize], strides: &[usize]) -> char {
    if strides.iter().all(|&s| s == 0) {
        's'
    } else if dims.len() == 1 && strides[0] == 1 {
        'c'
    } else {
        'g'
    }
}

fn indexer(i: usize, v: char) -> String {
    match v {
        'c' => format!("fn at{i}(e: u32) -> u32 {{ return p.offsets[{i}u] + e; }}\n"),
        's' => format!("fn at{i}(e: u32) -> u32 {{ return p.offsets[{i}u]; }}\n"),
        _ => format!(
            "fn at{i}(e: u32) -> u32 {{\n    var rem = e;\n    var off = p.offsets[{i}u];\n    for (var d = p.rank; d > 0u; d--) {{\n        let k = d - 1u;\n        off += (rem % p.dims[k]) * p.strides[{s}u + k];\n        rem /= p.dims[k];\n    }}\n    return off;\n}}\n",
            s = 8 * i
        ),
    }
}

/// An elementwise kernel: `body` computes `value(e)` from `ld{i}(at{i}(e))`.
pub(crate) struct Elementwise<'a> {
    pub name: String,
    pub inputs: Vec<(&'a GpuStorage, &'a Layout)>,
    pub out: DType,
    pub body: String,
    pub funcs: &'static str,
    /// The op's constants (a parameter struct, read by the body as `p.op`), if any.
    pub op: Option<Block>,
    /// `Some(n)`: the output has `n` elements and inputs are only offset (`at{i}(e)` returns the
    /// input's offset; the body indexes itself). `None`: inputs are views of the output's shape.
    pub raw: Option<usize>,
}

impl<'a> Elementwise<'a> {
    /// A kernel over views of the output's shape, with no op constants and no scalar functions.
    pub(crate) fn new(name: &str, inputs: Vec<(&'a GpuStorage, &'a Layout)>, out: DType, body: String) -> Self {
        Elementwise { name: name.to_string(), inputs, out, body, funcs: "", op: None, raw: None }
    }

    /// Adds the scalar functions (`FUNCS` of a family) that `body` calls.
    pub(crate) fn with_funcs(mut self, funcs: &'static str) -> Self {
        self.funcs = funcs;
        self
    }

    pub(crate) fn run(self) -> Result<GpuStorage> {
        let first = self.inputs[0].0;
        let ctx = first.ctx.clone();
        let (n, dims, cstrides) = match self.raw {
            Some(n) => (n, vec![n], vec![vec![0]; self.inputs.len()]),
            None => {
                let strides: Vec<&[usize]> = self.inputs.iter().map(|(_, l)| l.strides()).collect();
                let (dims, cstrides) = collapse(self.inputs[0].1.dims(), &strides);
                (self.inputs[0].1.elem_count(), dims, cstrides)
            }
        };
        if dims.len() > MAX_RANK {
            return Err(Error::Gpu {
                op: "elementwise",
                msg: format!("views of rank {} after merging dims are not supported (max {MAX_RANK})", dims.len()),
            });
        }
        if n > u32::MAX as usize {
            return Err(Error::Gpu { op: "elementwise", msg: format!("{n} elements exceed the 32-bit index range") });
        }
        let out = self.out;
        let inputs = &self.inputs;
        let dtypes: Vec<DType> = inputs.iter().map(|(s, _)| s.dtype).collect();
        let dst = GpuStorage::alloc(&ctx, out, n)?;
        let vec_plan = match self.raw {
            None if dst.buffer.raw().size().is_multiple_of(16) && vec::enabled() => {
                let described: Vec<(DType, usize, &[usize], u64)> = inputs
                    .iter()
                    .zip(&cstrides)
                    .map(|((s, l), st)| (s.dtype, l.offset(), st.as_slice(), s.buffer.raw().size()))
                    .collect();
                vec::plan(out, &dims, &described)
            }
            _ => None,
        };
        let (kernel, threads) = match &vec_plan {
            Some(variants) => {
                let key = format!("ewv:{}:{variants}:{}->{out}", self.name, dtype_list(&dtypes));
                let src = || vec::source_with(variants, &dtypes, out, &self.body, self.funcs, self.op.as_ref());
                (ctx.pipelines.get(&ctx, &key, inputs.len(), src)?, n.div_ceil(vec::lanes(out)))
            }
            None => {
                let variants: String = cstrides.iter().map(|s| variant(&dims, s)).collect();
                let key = format!("ew:{}:{variants}:{}->{out}", self.name, dtype_list(&dtypes));
                let src = || source_with(&variants, &dtypes, out, &self.body, self.funcs, self.op.as_ref());
                (ctx.pipelines.get(&ctx, &key, inputs.len(), src)?, n.div_ceil(wgsl::per_word(out)))
            }
        };
        let mut strided = Strided {
            n: if vec_plan.is_some() { threads as u32 } else { n as u32 },
            rank: dims.len() as u32,
            ..Strided::default()
        };
        for (k, &d) in dims.iter().enumerate() {
            strided.dims[k] = d as u32;
        }
        for (i, s) in cstrides.iter().enumerate() {
            for (k, &st) in s.iter().enumerate() {
                strided.strides[8 * i + k] = st as u32;
            }
            strided.offsets[i] = inputs[i].1.offset() as u32;
        }
        let mut params = strided.words().to_vec();
        params.extend(self.op.iter().flat_map(|op| op.words.iter().copied()));
        let bufs: Vec<&wgpu::Buffer> =
            std::iter::once(dst.buffer.raw()).chain(inputs.iter().map(|(s, _)| s.buffer.raw())).collect();
        let groups = wgsl::grid(threads, 256, ctx.limits.max_compute_workgroups_per_dimension);
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params, groups)?;
        Ok(dst)
    }
}

/// `f32,f16` for a list of dtypes (part of a kernel key).
fn dtype_list(dtypes: &[DType]) -> String {
    dtypes.iter().map(|d| d.as_str()).collect::<Vec<_>>().join(",")
}

/// The WGSL of an elementwise kernel: input `i` has dtype `inputs[i]` and indexing variant
/// `variants[i]` (`c` contiguous, `s` scalar/raw offset, `g` general strided).
pub(crate) fn source(variants: &str, inputs: &[DType], out: DType, body: &str, funcs: &str) -> String {
    source_with(variants, inputs, out, body, funcs, None)
}

/// [`source`] of an op with constants `op` (read by `body` as `p.op`).
pub(crate) fn source_with(
    variants: &str,
    inputs: &[DType],
    out: DType,
    body: &str,
    funcs: &str,
    op: Option<&Block>,
) -> String {
    // An i64 output is written from `wide(e)`: both words of an i64 input when the op only moves
    // or converts data, else the i32 `value(e)` sign-extended.
    let w64 = |d: DType| matches!(d, DType::I64 | DType::U64);
    let wide = match (out, inputs) {
        (o, [i]) if w64(o) && w64(*i) && (body == COPY_BODY || body == cast_body(*i, o)) => {
            "fn wide(e: u32) -> vec2<u32> { let o = at0(e); return vec2<u32>(in0[2u * o], in0[2u * o + 1u]); }".into()
        }
        (o, [DType::Bool, a, b]) if w64(o) && a == b && *a == o && body == WHERE_BODY => {
            "fn wide(e: u32) -> vec2<u32> { let o1 = at1(e); let o2 = at2(e); \
             return select(vec2<u32>(in2[2u * o2], in2[2u * o2 + 1u]), vec2<u32>(in1[2u * o1], in1[2u * o1 + 1u]), \
             ld0(at0(e)) != 0u); }"
                .into()
        }
        (DType::I64, [from]) if body == cast_body(*from, DType::I64) => wide_cast(*from),
        (DType::I64, _) => wgsl::WIDE_SIGN_EXTEND.to_string(),
        (DType::U64, [from]) if body == cast_body(*from, DType::U64) => wide_cast_u64(*from),
        (DType::U64, _) => wgsl::WIDE_ZERO_EXTEND.to_string(),
        _ => String::new(),
    };
    let decls: String = (0..inputs.len())
        .map(|i| format!("@group(0) @binding({}) var<storage, read> in{i}: array<u32>;\n", i + 1))
        .collect();
    let loaders: String = inputs
        .iter()
        .enumerate()
        .map(|(i, &dt)| loader(&format!("ld{i}"), &format!("in{i}"), dt) + &bits_loader(i, &format!("in{i}"), dt, body))
        .collect();
    let indexers: String = variants.chars().enumerate().map(|(i, v)| indexer(i, v)).collect();
    let (store, _) = store_word(out, 0);
    render(
        TEMPLATE,
        &[
            ("INPUTS", &decls),
            ("PARAMS", &params_wgsl(op)),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loaders),
            ("INDEXERS", &indexers),
            ("FUNCS", funcs),
            ("OUT_CT", ct(out)),
            ("BODY", body),
            ("WIDE", &wide),
            ("STORE", &store),
        ],
    )
}

pub(crate) const WHERE_BODY: &str = "return select(ld2(at2(e)), ld1(at1(e)), ld0(at0(e)) != 0u);";
pub(crate) const COPY_BODY: &str = "return ld0(at0(e));";
pub(crate) fn cast_body(from: DType, to: DType) -> String {
    match (from, to) {
        // Read both words of an i64 so values beyond 32 bits convert exactly.
        (DType::I64, t) if t.is_float() => {
            "let o = at0(e); let lo = in0[2u * o]; let hi = bitcast<i32>(in0[2u * o + 1u]); \
             if (hi == select(0, -1, lo >= 0x80000000u)) { return f32(bitcast<i32>(lo)); } \
             return f32(hi) * 4294967296.0 + f32(lo);"
                .into()
        }
        (DType::I64 | DType::U64, DType::Bool) => {
            "let o = at0(e); return select(0u, 1u, (in0[2u * o] | in0[2u * o + 1u]) != 0u);".into()
        }
        // u64 to a float in one rounding: the top 32 significant bits (a sticky bit for the rest)
        // converted, then scaled by a power of two (exact).
        (DType::U64, t) if t.is_float() => "let o = at0(e); let lo = in0[2u * o]; let hi = in0[2u * o + 1u]; \
             if (hi == 0u) { return f32(lo); } let z = countLeadingZeros(hi); \
             let top = select((hi << z) | (lo >> (32u - z)), hi, z == 0u); \
             let rest = select(lo << z, lo, z == 0u); \
             return ldexp(f32(top | select(0u, 1u, rest != 0u)), i32(32u - z));"
            .into(),
        _ => format!("let x = ld0(at0(e)); return {};", cast_expr(from, to)),
    }
}

/// `wide(e)` of a cast into i64 from `from`, with the CPU's saturating semantics for floats.
fn wide_cast(from: DType) -> String {
    match ct(from) {
        "f32" => "fn wide(e: u32) -> vec2<u32> {
    let x = ld0(at0(e));
    if (is_nan(x)) { return vec2<u32>(0u, 0u); }
    if (x >= 9223372036854775808.0) { return vec2<u32>(0xffffffffu, 0x7fffffffu); }
    if (x <= -9223372036854775808.0) { return vec2<u32>(0u, 0x80000000u); }
    let t = trunc(x);
    if (abs(t) < 2147483648.0) { let v = i32(t); return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0)); }
    let hi = floor(t / 4294967296.0);
    return vec2<u32>(u32(t - hi * 4294967296.0), bitcast<u32>(i32(hi)));
}"
        .into(),
        "u32" => "fn wide(e: u32) -> vec2<u32> { return vec2<u32>(ld0(at0(e)), 0u); }".into(),
        _ => wgsl::WIDE_SIGN_EXTEND.to_string(),
    }
}

/// `wide(e)` of a cast into u64 from `from`, with the CPU's semantics (Rust's `as`): floats truncate
/// and saturate to `0..=u64::MAX` (NaN gives 0), signed integers sign-extend (wrapping), unsigned
/// ones zero-extend.
fn wide_cast_u64(from: DType) -> String {
    match ct(from) {
        "f32" => "fn wide(e: u32) -> vec2<u32> {
    let x = ld0(at0(e));
    if (is_nan(x) || x <= 0.0) { return vec2<u32>(0u, 0u); }
    if (x >= 18446744073709551616.0) { return vec2<u32>(0xffffffffu, 0xffffffffu); }
    let t = trunc(x);
    if (t < 4294967296.0) { return vec2<u32>(u32(t), 0u); }
    let hi = floor(t / 4294967296.0);
    return vec2<u32>(u32(t - hi * 4294967296.0), u32(hi));
}"
        .into(),
        "u32" => wgsl::WIDE_ZERO_EXTEND.replace("value(e)", "ld0(at0(e))"),
        _ => wgsl::WIDE_SIGN_EXTEND.replace("value(e)", "ld0(at0(e))"),
    }
}

/// The WGSL expression converting `x` (compute type of `from`) to the compute type of `to`, with the
/// CPU's semantics: floats to integers truncate toward zero and saturate, NaN gives 0; integers to
/// narrower integers wrap; anything nonzero is `true`.
pub(crate) fn cast_expr(from: DType, to: DType) -> String {
    let (fi, ti) = (ct(from), ct(to));
    match (fi, to) {
        (_, DType::Bool) => match fi {
            "f32" => "select(0u, 1u, x != 0.0 || is_nan(x))".into(),
            "i32" => "select(0u, 1u, x != 0)".into(),
            _ => "select(0u, 1u, x != 0u)".into(),
        },
        ("f32", DType::U8) => "select(u32(clamp(x, 0.0, 255.0)), 0u, is_nan(x))".into(),
        ("f32", DType::U16) => "select(u32(clamp(x, 0.0, 65535.0)), 0u, is_nan(x))".into(),
        ("f32", DType::I8) => "select(i32(clamp(x, -128.0, 127.0)), 0, is_nan(x))".into(),
        ("f32", DType::I16) => "select(i32(clamp(x, -32768.0, 32767.0)), 0, is_nan(x))".into(),
        ("f32", DType::U64) => {
            "select(select(u32(clamp(x, 0.0, 4294967040.0)), 0xffffffffu, x >= 4294967296.0), 0u, is_nan(x))".into()
        }
        ("f32", DType::U32) => {
            "select(select(u32(clamp(x, 0.0, 4294967040.0)), 0xffffffffu, x >= 4294967296.0), 0u, is_nan(x))".into()
        }
        ("f32", DType::I32 | DType::I64) => {
            "select(select(i32(clamp(x, -2147483648.0, 2147483520.0)), 2147483647, x >= 2147483648.0), 0, is_nan(x))"
                .into()
        }
        (_, DType::U8) => format!("{}(x) & 0xffu", if fi == "i32" { "bitcast<u32>" } else { "" }),
        (_, DType::U16) => format!("{}(x) & 0xffffu", if fi == "i32" { "bitcast<u32>" } else { "" }),
        // Wrap to the narrow type: its low bits moved to the top, then an arithmetic shift down.
        (_, DType::I8) => format!("({}(x) << 24u) >> 24u", if fi == "u32" { "bitcast<i32>" } else { "" }),
        (_, DType::I16) => format!("({}(x) << 16u) >> 16u", if fi == "u32" { "bitcast<i32>" } else { "" }),
        _ if fi == ti => "x".into(),
        ("i32", _) if ti == "u32" => "bitcast<u32>(x)".into(),
        ("u32", _) if ti == "i32" => "bitcast<i32>(x)".into(),
        (_, _) => format!("{ti}(x)"),
    }
}

impl GpuStorage {
    /// A contiguous copy of the view `l`: whole units where rows allow, else element by element.
    pub(crate) fn copy_contiguous(&self, l: &Layout) -> Result<GpuStorage> {
        // Strided views that keep whole words together copy in words or 16-byte units.
        if !l.is_contiguous() {
            if let Some(s) = copy::copy_strided(self, l)? {
                return Ok(s);
            }
        }
        Elementwise::new("copy", vec![(self, l)], self.dtype, COPY_BODY.into()).run()
    }

    /// The view `l` converted to `dtype` with the CPU's semantics.
    pub(crate) fn cast(&self, l: &Layout, dtype: DType) -> Result<GpuStorage> {
        wgsl::check_dtype("cast", dtype)?;
        Elementwise::new("cast", vec![(self, l)], dtype, cast_body(self.dtype, dtype)).run()
    }

    /// Converts a 4-byte compute-type result (f32/i32/u32) into `dtype` when they differ.
    pub(crate) fn finish(self, dtype: DType) -> Result<GpuStorage> {
        if self.dtype == dtype {
            return Ok(self);
        }
        let l = Layout::contiguous(self.len);
        self.cast(&l, dtype)
    }

    /// The view `l` as host data.
    pub(crate) fn to_cpu(&self, l: &Layout) -> Result<CpuStorage> {
        let bytes = self.with_contiguous(l, |src| self.ctx.download(&src.buffer, self.bytes_of(l)))?;
        host_of(&self.ctx, self.dtype, bytes)
    }

    /// Starts reading the view `l` behind the work recorded so far, without waiting for it
    /// ([`PendingGpuRead::finish`] waits).
    pub(crate) fn read_later(&self, l: &Layout) -> Result<PendingGpuRead> {
        let download = self.with_contiguous(l, |src| self.ctx.download_later(&src.buffer, self.bytes_of(l)))?;
        Ok(PendingGpuRead { ctx: self.ctx.clone(), dtype: self.dtype, download })
    }

    /// `f` of a storage holding the view `l` from its start: this one, or a contiguous copy.
    fn with_contiguous<R>(&self, l: &Layout, f: impl FnOnce(&GpuStorage) -> Result<R>) -> Result<R> {
        if l.is_contiguous() && l.offset() == 0 {
            return f(self);
        }
        f(&self.copy_contiguous(l)?)
    }

    fn bytes_of(&self, l: &Layout) -> u64 {
        (l.elem_count() * self.dtype.size_in_bytes()) as u64
    }
}

/// Host data of `dtype` from its little-endian bytes (read back from `ctx`).
fn host_of(ctx: &GpuContext, dtype: DType, bytes: Vec<u8>) -> Result<CpuStorage> {
    Ok(match dtype {
        DType::F32 => CpuStorage::F32(bytemuck::pod_collect_to_vec(&bytes)),
        DType::F16 => CpuStorage::F16(bytemuck::pod_collect_to_vec::<u8, f16>(&bytes)),
        DType::BF16 => CpuStorage::BF16(bytemuck::pod_collect_to_vec::<u8, bf16>(&bytes)),
        DType::I32 => CpuStorage::I32(bytemuck::pod_collect_to_vec(&bytes)),
        DType::U32 => CpuStorage::U32(bytemuck::pod_collect_to_vec(&bytes)),
        DType::I64 => CpuStorage::I64(bytemuck::pod_collect_to_vec(&bytes)),
        DType::U8 => CpuStorage::U8(bytes),
        DType::I8 => CpuStorage::I8(bytemuck::pod_collect_to_vec(&bytes)),
        DType::I16 => CpuStorage::I16(bytemuck::pod_collect_to_vec(&bytes)),
        DType::U16 => CpuStorage::U16(bytemuck::pod_collect_to_vec(&bytes)),
        DType::U64 => CpuStorage::U64(bytemuck::pod_collect_to_vec(&bytes)),
        DType::Bool => {
            if ctx.poison.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(i) = bytes.iter().position(|&b| b > 1) {
                    return Err(Error::Gpu {
                        op: "to_cpu",
                        msg: format!(
                            "bool element {i} holds {:#x}: an output no kernel wrote (poisoning is on)",
                            bytes[i]
                        ),
                    });
                }
            }
            CpuStorage::Bool(bytes.iter().map(|&b| b != 0).collect())
        }
        DType::F64 => return Err(wgsl::check_dtype("to_cpu", DType::F64).unwrap_err()),
    })
}

/// A read of GPU data started by [`GpuStorage::read_later`].
pub(crate) struct PendingGpuRead {
    ctx: std::sync::Arc<GpuContext>,
    dtype: DType,
    download: crate::gpu::runtime::transfer::Download,
}

impl PendingGpuRead {
    /// Waits for the read (only for the work recorded before it started) and returns the data.
    pub(crate) fn finish(self) -> Result<CpuStorage> {
        let bytes = self.ctx.finish_download(self.download)?;
        host_of(&self.ctx, self.dtype, bytes)
    }
}

/// What a few-row matrix-vector kernel (`matvec/`: the dense one and the quantized one)
/// does to each x row before the product: the row prologue both share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pro {
    /// x as it is.
    Plain,
    /// `x * rsqrt(mean(x^2) + eps) * weight` (the weight: binding 3, the scale applied after the sum).
    RmsNorm,
    /// `silu(x[.., :k]) * x[.., k..2k]` (the stacked gate/up product's row).
    SiluMul,
}

impl Pro {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pro::Plain => "plain",
            Pro::RmsNorm => "rmsnorm",
            Pro::SiluMul => "silumul",
        }
    }
}
