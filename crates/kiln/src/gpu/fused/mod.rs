//! Generated kernels for `kiln::compile` (crate::fusion): one kernel per group of elementwise ops,
//! optionally with row reductions over the last axis. The fusion planner describes a group as a
//! [`Spec`] (a small SSA program over leaves, literals and earlier values); this file writes its
//! WGSL and launches it.
//!
//! Two shapes of kernel:
//! - flat (`flat.wgsl`): no reduction; one invocation computes 4 consecutive elements of every
//!   output and writes whole words (16-byte loads and stores where inputs and outputs allow);
//! - row (`row.rs`, `row.wgsl`): one workgroup per row of the last axis, sized to the row; the
//!   leaves the reductions read are loaded once (16-byte loads where rows are aligned) and stay in
//!   registers through every reduction (subgroup operations or a workgroup tree) and the output
//!   pass; rows too long for the registers are read once per pass. Values of the row (after the
//!   reductions) are per-invocation registers; element values are recomputed in each pass.
//!
//! Every value is rounded to its dtype after its op (f16/bf16 through the same packing the stores of
//! the unfused kernels use, u8 masked to 8 bits), and op expressions come from the elementwise
//! family (passed in as [`Exprs`] by the face: no family imports another), so a fused chain gives
//! the unfused kernels' bits, except where the shader compiler contracts a multiply and an add into
//! one FMA, and for sums, whose order differs.

use crate::gpu::pointwise::cast_expr;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{self, ct, loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::layout::collapse;
use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Error, Layout, Result};
use std::fmt::Write;

mod row;

const FLAT: &str = include_str!("flat.wgsl");

/// The op expressions of the elementwise family (`x`, or `a` and `b`, in compute type `t`).
#[derive(Clone, Copy)]
pub(crate) struct Exprs {
    pub unary: fn(UnaryOp, &str) -> String,
    pub binary: fn(BinaryOp, &str) -> String,
    pub cmp: fn(CmpOp) -> &'static str,
    pub funcs: &'static str,
}

/// An operand of a fused op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Src {
    /// Input buffer `i` of the kernel.
    Leaf(usize),
    /// A constant, in its dtype.
    Lit(f64, DType),
    /// An earlier value of the program.
    Val(usize),
}

/// A fused op.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Op {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// Comparison computed in the given (promoted) dtype.
    Cmp(CmpOp, DType),
    Where,
    Cast,
    /// Reduction of the operand over the last axis (row kernels only).
    Reduce(ReduceOp),
}

/// One value of the program.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Val {
    pub op: Op,
    pub args: Vec<Src>,
    /// The value's dtype (operands are converted to what the op computes in first).
    pub dtype: DType,
    /// Constant along a row (row kernels): computed once per row, after the reductions it needs.
    pub row: bool,
}

/// A fused group as a kernel: values in dependency order, the dtypes of the leaves, the outputs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    pub vals: Vec<Val>,
    pub leaves: Vec<DType>,
    pub outputs: Vec<usize>,
}

impl Spec {
    fn has_reduce(&self) -> bool {
        self.vals.iter().any(|v| matches!(v.op, Op::Reduce(_)))
    }

    /// Whether the GPU can run this program: no i64/f64 anywhere, integer sums (i64 results) excluded.
    pub(crate) fn supported(&self) -> bool {
        let bad = |d: DType| matches!(d, DType::I64 | DType::F64);
        if self.leaves.iter().any(|&d| bad(d)) {
            return false;
        }
        self.vals.iter().all(|v| {
            !bad(v.dtype)
                && v.args.iter().all(|a| !matches!(a, Src::Lit(_, d) if bad(*d)))
                && !matches!(v.op, Op::Cmp(_, d) if bad(d))
                && !matches!(v.op, Op::Reduce(ReduceOp::Sum) if !v.dtype.is_float())
                && !matches!(v.op, Op::Reduce(ReduceOp::Prod | ReduceOp::ArgMax | ReduceOp::ArgMin))
        })
    }

    fn dtype_of(&self, s: Src) -> DType {
        match s {
            Src::Leaf(i) => self.leaves[i],
            Src::Lit(_, d) => d,
            Src::Val(j) => self.vals[j].dtype,
        }
    }
}

/// How the row and flat generators name things: a leaf at element `e`, a value in this context.
struct Gen<'a> {
    spec: &'a Spec,
    ex: Exprs,
    helpers: String,
    /// Leaf access: `(leaf, element expression) -> WGSL expression`.
    leaf: &'a dyn Fn(usize, &str) -> String,
}

/// `x` (compute type of `dt`) rounded to `dt` as a store and a load would.
fn round(dt: DType, x: &str) -> String {
    match dt {
        DType::F16 => format!("unpack2x16float(pack2x16float(vec2<f32>({x}, 0.0))).x"),
        DType::BF16 => format!("bitcast<f32>(bf16_bits({x}) << 16u)"),
        DType::U8 => format!("(({x}) & 0xffu)"),
        _ => x.to_string(),
    }
}

/// A WGSL literal of `v` in the compute type of `dt`.
fn literal(v: f64, dt: DType) -> String {
    match ct(dt) {
        "f32" => format!("bitcast<f32>({:#x}u)", (v as f32).to_bits()),
        "i32" => format!("bitcast<i32>({:#x}u)", (v as i64 as i32) as u32),
        _ => format!("{:#x}u", if dt == DType::Bool { (v != 0.0) as u32 } else { v as i64 as u32 }),
    }
}

impl Gen<'_> {
    fn name(&self, s: Src, e: &str) -> String {
        match s {
            Src::Leaf(i) => (self.leaf)(i, e),
            Src::Lit(v, d) => literal(v, d),
            Src::Val(j) => {
                if self.spec.vals[j].row {
                    format!("rv{j}")
                } else {
                    format!("v{j}")
                }
            }
        }
    }

    /// Operand `s` converted to dtype `to`.
    fn arg(&mut self, s: Src, to: DType, e: &str) -> String {
        let x = self.name(s, e);
        let from = self.spec.dtype_of(s);
        if from == to {
            return x;
        }
        let f = format!("cast_{}_{}", from.as_str(), to.as_str());
        if !self.helpers.contains(&format!("fn {f}(")) {
            let _ = writeln!(
                self.helpers,
                "fn {f}(x: {}) -> {} {{ return {}; }}",
                ct(from),
                ct(to),
                round(to, &cast_expr(from, to))
            );
        }
        format!("{f}({x})")
    }

    /// The expression of value `i` (not a reduction), its operands read at element `e`.
    fn expr(&mut self, i: usize, e: &str) -> String {
        let v = self.spec.vals[i].clone();
        let dt = v.dtype;
        let t = ct(dt);
        let fresh = !self.helpers.contains(&format!("fn op{i}("));
        match v.op {
            Op::Unary(op) => {
                let x = self.arg(v.args[0], dt, e);
                let mut body = (self.ex.unary)(op, t);
                if let UnaryOp::Clamp { min, max } = op {
                    // Integer bounds round inward, as on the CPU and in the unfused kernel.
                    let (min, max) = if t == "f32" { (min, max) } else { (min.ceil(), max.floor()) };
                    body = body
                        .replace("p[37]", &format!("{}u", wgsl::param_bits(t, min)))
                        .replace("p[38]", &format!("{}u", wgsl::param_bits(t, max)));
                }
                if fresh {
                    let _ = writeln!(self.helpers, "fn op{i}(x: {t}) -> {t} {{ return {}; }}", round(dt, &body));
                }
                format!("op{i}({x})")
            }
            Op::Binary(op) => {
                let (a, b) = (self.arg(v.args[0], dt, e), self.arg(v.args[1], dt, e));
                let body = (self.ex.binary)(op, t);
                if fresh {
                    let _ =
                        writeln!(self.helpers, "fn op{i}(a: {t}, b: {t}) -> {t} {{ return {}; }}", round(dt, &body));
                }
                format!("op{i}({a}, {b})")
            }
            Op::Cmp(op, cd) => {
                let (a, b) = (self.arg(v.args[0], cd, e), self.arg(v.args[1], cd, e));
                let c = ct(cd);
                if fresh {
                    let _ = writeln!(
                        self.helpers,
                        "fn op{i}(a: {c}, b: {c}) -> u32 {{ return select(0u, 1u, {}); }}",
                        (self.ex.cmp)(op)
                    );
                }
                format!("op{i}({a}, {b})")
            }
            Op::Where => {
                let m = self.arg(v.args[0], DType::Bool, e);
                let (a, b) = (self.arg(v.args[1], dt, e), self.arg(v.args[2], dt, e));
                format!("select({b}, {a}, {m} != 0u)")
            }
            Op::Cast => self.arg(v.args[0], dt, e),
            Op::Reduce(_) => unreachable!("reductions are written by the row generator"),
        }
    }

    /// `let` statements computing the non-row values in `want` (and what they need) at element `e`.
    fn lets(&mut self, want: &[usize], e: &str) -> String {
        let mut need = vec![false; self.spec.vals.len()];
        let mut stack: Vec<usize> = want.to_vec();
        while let Some(i) = stack.pop() {
            if need[i] || self.spec.vals[i].row {
                continue;
            }
            need[i] = true;
            for a in &self.spec.vals[i].args {
                if let Src::Val(j) = a {
                    stack.push(*j);
                }
            }
        }
        let mut out = String::new();
        for (i, &needed) in need.iter().enumerate() {
            if needed {
                let x = self.expr(i, e);
                let _ = writeln!(out, "    let v{i} = {x};");
            }
        }
        out
    }
}

/// How each leaf is indexed: `c` contiguous over the collapsed dims, `v` contiguous and read in
/// 16-byte units (flat kernels, 4-byte dtypes), `h` the same for 2-byte dtypes (8-byte units),
/// `s` one element for all, `g` general strides.
fn leaf_variant(dims: &[usize], strides: &[usize], off: usize, dt: DType, size: u64, vec: bool) -> char {
    if strides.iter().all(|&s| s == 0) {
        return 's';
    }
    let mut acc = 1;
    let mut contiguous = true;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d > 1 && s != acc {
            contiguous = false;
        }
        acc *= d;
    }
    if !contiguous {
        return 'g';
    }
    match (vec, dt.size_in_bytes()) {
        (true, 4) if off.is_multiple_of(4) && size.is_multiple_of(16) => 'v',
        (true, 2) if off.is_multiple_of(4) && size.is_multiple_of(8) => 'h',
        _ => 'c',
    }
}

/// Parameter word of leaf `i`'s offset (its strides follow).
fn leaf_base(rank: usize, i: usize) -> usize {
    3 + rank + i * (rank + 1)
}

/// The WGSL of `spec` (no reductions) as a flat kernel with leaf variants `variants`;
/// `vec_out[k]`: output `k` is written as 16-byte units.
pub(crate) fn source(spec: &Spec, ex: Exprs, variants: &str, vec_out: &[bool]) -> String {
    let vars: Vec<char> = variants.chars().collect();
    let nout = spec.outputs.len();
    let mut decls = String::new();
    for (k, &o) in spec.outputs.iter().enumerate() {
        let ty = if vec_out[k] && spec.vals[o].dtype.size_in_bytes() == 4 { "vec4<u32>" } else { "u32" };
        let _ = writeln!(decls, "@group(0) @binding({k}) var<storage, read_write> out{k}: array<{ty}>;");
    }
    let (mut loaders, mut caches) = (String::new(), String::new());
    for (i, (&dt, &v)) in spec.leaves.iter().zip(&vars).enumerate() {
        let ty = match v {
            'v' => "vec4<u32>",
            'h' => "vec2<u32>",
            _ => "u32",
        };
        let _ = writeln!(decls, "@group(0) @binding({}) var<storage, read> in{i}: array<{ty}>;", nout + i);
        if ty == "u32" {
            loaders += &loader(&format!("ld{i}"), &format!("in{i}"), dt);
        } else {
            // The cache holds this invocation's 4 elements (loaded once in main); `ld` reads lane j.
            let words = if v == 'v' { 4 } else { 2 };
            let _ = writeln!(caches, "var<private> c{i}: array<u32, {words}>;");
            loaders += &loader(&format!("ld{i}"), &format!("c{i}"), dt);
        }
    }
    let leaf_read = |i: usize, e: &str| -> String {
        match vars[i] {
            'v' | 'h' => format!("ld{i}(j)"),
            _ => format!("ld{i}(at{i}({e}))"),
        }
    };
    let mut g = Gen { spec, ex, helpers: String::new(), leaf: &leaf_read };
    let prelude_funcs = ex.funcs;
    let mut body = g.lets(&spec.outputs, "e");
    for (k, &o) in spec.outputs.iter().enumerate() {
        let _ = writeln!(body, "    o{k}[j] = v{o};");
    }
    let mut privs = String::new();
    let mut stores = String::new();
    let mut fills = String::new();
    for (i, &v) in vars.iter().enumerate() {
        let base = format!("p[RANKBASE{i}]");
        match v {
            'v' => {
                let _ = writeln!(
                    fills,
                    "    {{ let q = in{i}[({base} + e0) / 4u]; c{i}[0] = q.x; c{i}[1] = q.y; c{i}[2] = q.z; c{i}[3] = q.w; }}"
                );
            }
            'h' => {
                let _ = writeln!(fills, "    {{ let q = in{i}[({base} + e0) / 4u]; c{i}[0] = q.x; c{i}[1] = q.y; }}");
            }
            _ => {}
        }
    }
    for (k, &o) in spec.outputs.iter().enumerate() {
        let dt = spec.vals[o].dtype;
        let t = ct(dt);
        let _ = writeln!(privs, "var<private> o{k}: array<{t}, 4>;");
        let w = |j: usize| if t == "u32" { format!("o{k}[{j}]") } else { format!("bitcast<u32>(o{k}[{j}])") };
        match dt.size_in_bytes() {
            4 if vec_out[k] => {
                let _ = writeln!(stores, "    out{k}[t] = vec4<u32>({}, {}, {}, {});", w(0), w(1), w(2), w(3));
            }
            4 => {
                for j in 0..4 {
                    let _ = writeln!(stores, "    if (e0 + {j}u < n) {{ out{k}[e0 + {j}u] = {}; }}", w(j));
                }
            }
            2 => {
                let pack = |a: usize, b: usize| {
                    if dt == DType::F16 {
                        format!("pack2x16float(vec2<f32>(o{k}[{a}], o{k}[{b}]))")
                    } else {
                        format!("bf16_bits(o{k}[{a}]) | (bf16_bits(o{k}[{b}]) << 16u)")
                    }
                };
                let _ = writeln!(stores, "    out{k}[2u * t] = {};", pack(0, 1));
                let _ = writeln!(stores, "    if (e0 + 2u < n) {{ out{k}[2u * t + 1u] = {}; }}", pack(2, 3));
            }
            _ => {
                let _ = writeln!(
                    stores,
                    "    out{k}[t] = (o{k}[0] & 0xffu) | ((o{k}[1] & 0xffu) << 8u) | ((o{k}[2] & 0xffu) << 16u) | ((o{k}[3] & 0xffu) << 24u);"
                );
            }
        }
    }
    let helpers = std::mem::take(&mut g.helpers);
    finish(
        render(
            FLAT,
            &[
                ("DECLS", &decls),
                ("PRELUDE", PRELUDE),
                ("CACHES", &caches),
                ("LOADERS", &loaders),
                ("INDEXERS", "//@IDX@"),
                ("FUNCS", prelude_funcs),
                ("HELPERS", &helpers),
                ("PRIVATES", &privs),
                ("BODY", &body),
                ("FILLS", &fills),
                ("STORES", &stores),
            ],
        ),
        &vars,
    )
}

/// The indexers need the rank, which is a parameter word; the WGSL reads `p[1]` for the loop and
/// the leaf's parameter base from its index. Bases depend on the rank, so they are computed in
/// WGSL from `p[1]` too.
fn finish(src: String, vars: &[char]) -> String {
    let mut idx = String::new();
    for (i, &v) in vars.iter().enumerate() {
        let b = format!("(3u + p[1] + {i}u * (p[1] + 1u))");
        let f = match v {
            's' => format!("fn at{i}(e: u32) -> u32 {{ return p[{b}]; }}\n"),
            'c' | 'v' | 'h' => format!("fn at{i}(e: u32) -> u32 {{ return p[{b}] + e; }}\n"),
            _ => format!(
                "fn at{i}(e: u32) -> u32 {{\n    let b = {b};\n    var rem = e;\n    var off = p[b];\n    for (var d = p[1]; d > 0u; d--) {{\n        let k = d - 1u;\n        off += (rem % p[3u + k]) * p[b + 1u + k];\n        rem /= p[3u + k];\n    }}\n    return off;\n}}\n"
            ),
        };
        idx += &f;
    }
    let mut out = src.replace("//@IDX@", &idx);
    for i in 0..vars.len() {
        out = out.replace(&format!("p[RANKBASE{i}]"), &format!("p[3u + p[1] + {i}u * (p[1] + 1u)]"));
    }
    out
}

/// (accumulator type, identity, combine with `A` and `B`) of a row reduction of `dt` values.
fn reduce_parts(op: ReduceOp, dt: DType) -> (&'static str, &'static str, &'static str) {
    match (op, ct(dt)) {
        (ReduceOp::Sum, _) => ("f32", "0.0", "(A + B)"),
        (ReduceOp::Max, "f32") => ("f32", "-inf_f32()", "maxf_(A, B)"),
        (ReduceOp::Min, "f32") => ("f32", "inf_f32()", "minf_(A, B)"),
        (ReduceOp::Max, "i32") => ("i32", "bitcast<i32>(0x80000000u)", "max(A, B)"),
        (ReduceOp::Min, "i32") => ("i32", "0x7fffffff", "min(A, B)"),
        (ReduceOp::Max, _) => ("u32", "0u", "max(A, B)"),
        (ReduceOp::Min, _) => ("u32", "0xffffffffu", "min(A, B)"),
        _ => unreachable!("unsupported fused reduction"),
    }
}

/// Runs `spec` over the iteration shape `dims` with leaves `leaves` (views broadcast to `dims`);
/// returns one contiguous storage per output (row outputs hold one element per row). `key` names
/// the program for the pipeline cache; `what` describes the user's ops for errors.
pub(crate) fn run(
    spec: &Spec,
    ex: Exprs,
    key: &str,
    dims: &[usize],
    leaves: &[(&GpuStorage, &Layout)],
    what: &str,
) -> Result<Vec<GpuStorage>> {
    let ctx = leaves
        .first()
        .map(|l| l.0.ctx.clone())
        .ok_or_else(|| Error::Gpu { op: "compile", msg: format!("fused kernel of {what} has no input") })?;
    let row = spec.has_reduce();
    let n: usize = dims.iter().product();
    let len = *dims.last().unwrap_or(&1);
    let rows = if row { n / len.max(1) } else { n };
    if n > u32::MAX as usize / 2 {
        return Err(Error::Gpu {
            op: "compile",
            msg: format!("fused kernel of {what}: {n} elements exceed the 32-bit index range"),
        });
    }
    let strides: Vec<&[usize]> = leaves.iter().map(|(_, l)| l.strides()).collect();
    let (cdims, cstrides) =
        if dims.is_empty() { (vec![1], vec![vec![0]; leaves.len()]) } else { collapse(dims, &strides) };
    let rank = cdims.len();
    // Row kernels also take each leaf's stride along the row.
    let words = 3 + rank + leaves.len() * (rank + 1) + if row { leaves.len() } else { 0 };
    if words > crate::gpu::runtime::kernels::PARAM_WORDS {
        return Err(Error::Gpu {
            op: "compile",
            msg: format!("fused kernel of {what}: {} inputs of rank {rank} need too many parameters", leaves.len()),
        });
    }
    // Outputs of row kernels: words, or native packed words where rows allow (see row::Store;
    // widened dtypes are converted after).
    let out_dt: Vec<DType> = spec.outputs.iter().map(|&o| spec.vals[o].dtype).collect();
    let pre: Vec<row::Store> = spec
        .outputs
        .iter()
        .map(|&o| if spec.vals[o].row { row::Store::RowValue } else { row::store(spec.vals[o].dtype, len, 16) })
        .collect();
    let outs: Vec<GpuStorage> = spec
        .outputs
        .iter()
        .zip(&out_dt)
        .zip(&pre)
        .map(|((&o, &d), s)| {
            let d = if row { s.dtype(d) } else { d };
            GpuStorage::alloc(&ctx, d, if spec.vals[o].row { rows } else { n })
        })
        .collect::<Result<_>>()?;
    let vec_out: Vec<bool> = outs.iter().map(|o| o.buffer.raw().size().is_multiple_of(16)).collect();
    let indexers: Vec<char> = leaves
        .iter()
        .zip(&cstrides)
        .zip(&spec.leaves)
        .map(|(((s, l), st), &dt)| leaf_variant(&cdims, st, l.offset(), dt, s.buffer.raw().size(), !row))
        .collect();
    let (full_key, rp) = if row {
        let acc: Vec<(char, row::Access)> = leaves
            .iter()
            .zip(&indexers)
            .zip(&spec.leaves)
            .map(|(((s, l), &ix), &dt)| (ix, row::access(l, len, dt, s.buffer.raw().size())))
            .collect();
        let stores: Vec<row::Store> = pre
            .iter()
            .zip(&outs)
            .zip(&out_dt)
            .map(|((&s, o), &d)| if s == row::Store::Vec4 { row::store(d, len, o.buffer.raw().size()) } else { s })
            .collect();
        let rp = row::plan(&ctx, spec, len, acc, stores);
        (format!("fused:{key}:row:{}", rp.key()), Some(rp))
    } else {
        let vo: String = vec_out.iter().map(|&b| if b { '1' } else { '0' }).collect();
        (format!("fused:{key}:{}:{vo}", indexers.iter().collect::<String>()), None)
    };
    let kernel = ctx
        .pipelines
        .get_with(&ctx, &full_key, outs.len(), leaves.len(), || match &rp {
            Some(rp) => row::source(spec, ex, rp),
            None => source(spec, ex, &indexers.iter().collect::<String>(), &vec_out),
        })
        .map_err(|e| Error::Gpu { op: "compile", msg: format!("fused kernel of {what}: {e}") })?;
    let mut params = vec![0u32; words];
    params[0] = n as u32;
    params[1] = rank as u32;
    params[2] = len as u32;
    for (k, &d) in cdims.iter().enumerate() {
        params[3 + k] = d as u32;
    }
    for (i, st) in cstrides.iter().enumerate() {
        let b = leaf_base(rank, i);
        params[b] = leaves[i].1.offset() as u32;
        for (k, &s) in st.iter().enumerate() {
            params[b + 1 + k] = s as u32;
        }
        if row {
            params[leaf_base(rank, leaves.len()) + i] = leaves[i].1.strides().last().copied().unwrap_or(0) as u32;
        }
    }
    let bufs: Vec<&wgpu::Buffer> =
        outs.iter().map(|o| o.buffer.raw()).chain(leaves.iter().map(|(s, _)| s.buffer.raw())).collect();
    let groups = match &rp {
        Some(_) => wgsl::grid(rows, 1, ctx.limits.max_compute_workgroups_per_dimension),
        None => wgsl::grid(n.div_ceil(4), 256, ctx.limits.max_compute_workgroups_per_dimension),
    };
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params, groups)?;
    outs.into_iter()
        .zip(out_dt)
        .map(|(o, d)| if o.dtype == d { Ok(o) } else { o.cast(&Layout::contiguous(o.len), d) })
        .collect()
}

/// Generated kernels for the shader-translation test: the bench programs (hypot, a Gaussian, an
/// RMSNorm, a softmax) in each float dtype and an integer chain, over every leaf variant.
pub(crate) fn samples(ex: Exprs) -> Vec<(String, String)> {
    use Src::{Leaf, Lit, Val as V};
    let v = |op: Op, args: Vec<Src>, dtype: DType, row: bool| Val { op, args, dtype, row };
    let mut out = vec![];
    for dt in [DType::F32, DType::F16, DType::BF16] {
        let hypot = Spec {
            vals: vec![
                v(Op::Binary(BinaryOp::Mul), vec![Leaf(0), Leaf(0)], dt, false),
                v(Op::Binary(BinaryOp::Mul), vec![Leaf(1), Leaf(1)], dt, false),
                v(Op::Binary(BinaryOp::Add), vec![V(0), V(1)], dt, false),
                v(Op::Unary(UnaryOp::Sqrt), vec![V(2)], dt, false),
            ],
            leaves: vec![dt, dt],
            outputs: vec![3],
        };
        let gauss = Spec {
            vals: vec![
                v(Op::Binary(BinaryOp::Mul), vec![Leaf(0), Leaf(0)], dt, false),
                v(Op::Unary(UnaryOp::Neg), vec![V(0)], dt, false),
                v(Op::Unary(UnaryOp::Exp), vec![V(1)], dt, false),
                v(Op::Cmp(CmpOp::Gt, dt), vec![V(2), Lit(0.5, dt)], DType::Bool, false),
                v(Op::Unary(UnaryOp::Clamp { min: -1.0, max: 1.0 }), vec![V(2)], dt, false),
            ],
            leaves: vec![dt],
            outputs: vec![2, 3, 4],
        };
        let rms = Spec {
            vals: vec![
                v(Op::Binary(BinaryOp::Mul), vec![Leaf(0), Leaf(0)], dt, false),
                v(Op::Reduce(ReduceOp::Sum), vec![V(0)], dt, true),
                v(Op::Binary(BinaryOp::Div), vec![V(1), Lit(4096.0, dt)], dt, true),
                v(Op::Binary(BinaryOp::Add), vec![V(2), Lit(1e-5, dt)], dt, true),
                v(Op::Unary(UnaryOp::Rsqrt), vec![V(3)], dt, true),
                v(Op::Binary(BinaryOp::Mul), vec![Leaf(0), V(4)], dt, false),
                v(Op::Binary(BinaryOp::Mul), vec![V(5), Leaf(1)], dt, false),
            ],
            leaves: vec![dt, dt],
            outputs: vec![6, 4],
        };
        let softmax = Spec {
            vals: vec![
                v(Op::Reduce(ReduceOp::Max), vec![Leaf(0)], dt, true),
                v(Op::Binary(BinaryOp::Sub), vec![Leaf(0), V(0)], dt, false),
                v(Op::Unary(UnaryOp::Exp), vec![V(1)], dt, false),
                v(Op::Reduce(ReduceOp::Sum), vec![V(2)], dt, true),
                v(Op::Binary(BinaryOp::Div), vec![V(2), V(3)], dt, false),
                v(Op::Reduce(ReduceOp::Min), vec![V(4)], dt, true),
            ],
            leaves: vec![dt],
            outputs: vec![4, 5],
        };
        let vs = if dt == DType::F32 { ["cc", "vv", "vg", "sc"] } else { ["cc", "hh", "hg", "sc"] };
        for vars in vs {
            out.push((format!("fused_hypot:{vars}:{dt}"), source(&hypot, ex, vars, &[true])));
        }
        out.push((format!("fused_gauss:c:{dt}"), source(&gauss, ex, "c", &[false, false, false])));
        out.push((format!("fused_gauss:v:{dt}"), source(&gauss, ex, "v", &[true, true, true])));
        // Row kernels: packs in registers (1 to 8 per invocation) or rows read per pass, subgroup
        // and workgroup-memory reductions, every leaf access and output store.
        use row::{Access as A, Store as St};
        let vec = if dt == DType::F32 { A::Vec4 } else { A::Vec2 };
        let full = row::store(dt, 4096, 16);
        let shapes =
            [(1, 64, true), (4, 256, true), (4, 256, false), (8, 1024, false), (0, 1024, true), (0, 256, false)];
        for (np, wg, sg) in shapes {
            let rp =
                row::RowPlan { leaves: vec![('c', vec), ('c', vec)], stores: vec![full, St::RowValue], np, wg, sg };
            out.push((format!("fused_rmsnorm:{}:{dt}", rp.key()), row::source(&rms, ex, &rp)));
            let rp = row::RowPlan { leaves: vec![('c', vec)], stores: vec![full, St::RowValue], np, wg, sg };
            out.push((format!("fused_softmax:{}:{dt}", rp.key()), row::source(&softmax, ex, &rp)));
        }
        for (leaves, np, wg, sg) in [
            (vec![('g', A::Strided), ('s', A::Row)], 2, 128, false),
            (vec![('g', A::Strided), ('g', A::Row)], 0, 256, true),
            (vec![('c', A::Unit), ('c', A::Unit)], 1, 64, true),
        ] {
            let rp = row::RowPlan { leaves, stores: vec![St::Word, St::RowValue], np, wg, sg };
            out.push((format!("fused_rmsnorm:{}:{dt}", rp.key()), row::source(&rms, ex, &rp)));
        }
    }
    for dt in [DType::I32, DType::U32, DType::U8] {
        let ints = Spec {
            vals: vec![
                v(Op::Binary(BinaryOp::Mul), vec![Leaf(0), Leaf(1)], dt, false),
                v(Op::Binary(BinaryOp::FloorDiv), vec![V(0), Lit(3.0, dt)], dt, false),
                v(Op::Cmp(CmpOp::Lt, dt), vec![V(1), Leaf(1)], DType::Bool, false),
                v(Op::Where, vec![V(2), V(1), Leaf(0)], dt, false),
                v(Op::Cast, vec![V(3)], DType::F16, false),
                v(Op::Reduce(ReduceOp::Max), vec![V(3)], dt, true),
            ],
            leaves: vec![dt, dt],
            outputs: vec![4, 5, 3],
        };
        let vec = if dt == DType::U8 { row::Access::Unit } else { row::Access::Vec4 };
        for (leaves, np, sg) in
            [(vec![('c', vec), ('g', row::Access::Row)], 2, true), (vec![('c', vec), ('c', vec)], 0, false)]
        {
            let stores = vec![row::Store::Packed, row::Store::RowValue, row::store(dt, 8, 16)];
            let rp = row::RowPlan { leaves, stores, np, wg: 128, sg };
            out.push((format!("fused_ints:{}:{dt}", rp.key()), row::source(&ints, ex, &rp)));
        }
        let flat = Spec { outputs: vec![3, 4, 2], vals: ints.vals[..5].to_vec(), ..ints.clone() };
        out.push((format!("fused_ints_flat:cs:{dt}"), source(&flat, ex, "cs", &[true, true, true])));
    }
    out
}
