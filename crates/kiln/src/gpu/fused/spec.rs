//! What the fused kernels' generators share (`mod.rs` writes flat kernels, `row.rs` row kernels):
//! the group's program ([`Spec`]: leaves, values, ops), the op expressions it is given
//! ([`Exprs`]), the expression writer ([`Gen`]), rounding to a dtype, leaf indexers and reduction
//! identities. Both generators import this file; it imports neither.

use crate::gpu::pointwise::cast_expr;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::{self, ct};
use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::DType;
use std::fmt::Write;

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
    pub(super) fn has_reduce(&self) -> bool {
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

    pub(super) fn dtype_of(&self, s: Src) -> DType {
        match s {
            Src::Leaf(i) => self.leaves[i],
            Src::Lit(_, d) => d,
            Src::Val(j) => self.vals[j].dtype,
        }
    }
}

/// How the row and flat generators name things: a leaf at element `e`, a value in this context.
pub(super) struct Gen<'a> {
    pub(super) spec: &'a Spec,
    pub(super) ex: Exprs,
    pub(super) helpers: String,
    /// Leaf access: `(leaf, element expression) -> WGSL expression`.
    pub(super) leaf: &'a dyn Fn(usize, &str) -> String,
}

/// `x` (compute type of `dt`) rounded to `dt` as a store and a load would.
pub(super) fn round(dt: DType, x: &str) -> String {
    match dt {
        DType::F16 => format!("unpack2x16float(pack2x16float(vec2<f32>({x}, 0.0))).x"),
        DType::BF16 => format!("bitcast<f32>(bf16_bits({x}) << 16u)"),
        DType::U8 => format!("(({x}) & 0xffu)"),
        _ => x.to_string(),
    }
}

/// A WGSL literal of `v` in the compute type of `dt`.
pub(super) fn literal(v: f64, dt: DType) -> String {
    match ct(dt) {
        "f32" => format!("bitcast<f32>({:#x}u)", (v as f32).to_bits()),
        "i32" => format!("bitcast<i32>({:#x}u)", (v as i64 as i32) as u32),
        _ => format!("{:#x}u", if dt == DType::Bool { (v != 0.0) as u32 } else { v as i64 as u32 }),
    }
}

impl Gen<'_> {
    pub(super) fn name(&self, s: Src, e: &str) -> String {
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
    pub(super) fn arg(&mut self, s: Src, to: DType, e: &str) -> String {
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
    pub(super) fn expr(&mut self, i: usize, e: &str) -> String {
        let v = self.spec.vals[i].clone();
        let dt = v.dtype;
        let t = ct(dt);
        let fresh = !self.helpers.contains(&format!("fn op{i}("));
        match v.op {
            Op::Unary(op) => {
                let x = self.arg(v.args[0], dt, e);
                let body = (self.ex.unary)(op, t);
                // A clamp's expression reads its bounds as `lo` and `hi`: bound here to literals.
                let bounds = match op {
                    UnaryOp::Clamp { min, max } => {
                        // Integer bounds round inward, as on the CPU and in the unfused kernel.
                        let (min, max) = if t == "f32" { (min, max) } else { (min.ceil(), max.floor()) };
                        let (lo, hi) = (wgsl::param_bits(t, min), wgsl::param_bits(t, max));
                        format!("let lo = bitcast<{t}>({lo}u); let hi = bitcast<{t}>({hi}u); ")
                    }
                    _ => String::new(),
                };
                if fresh {
                    let _ =
                        writeln!(self.helpers, "fn op{i}(x: {t}) -> {t} {{ {bounds}return {}; }}", round(dt, &body));
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
    pub(super) fn lets(&mut self, want: &[usize], e: &str) -> String {
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
pub(super) fn leaf_variant(dims: &[usize], strides: &[usize], off: usize, dt: DType, size: u64, vec: bool) -> char {
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

params! {
    /// A fused kernel's parameters: elements, the merged rank, the row length (row kernels), and
    /// `view`: the merged dims (`rank` words), then per leaf its offset and its `rank` strides (from
    /// [`leaf_base`]), then, in row kernels, each leaf's stride along the row. The layout depends on
    /// the rank, which one kernel serves whatever it is, so the kernels index `view` from `p.rank`.
    pub(super) struct FusedParams { n: u32, rank: u32, len: u32, view: [u32; 61] }
}

/// Index in `FusedParams::view` of leaf `i`'s offset (its strides follow).
pub(super) fn leaf_base(rank: usize, i: usize) -> usize {
    rank + i * (rank + 1)
}

/// [`leaf_base`] in WGSL (the rank is a parameter).
pub(super) fn leaf_base_wgsl(i: usize) -> String {
    format!("(p.rank + {i}u * (p.rank + 1u))")
}

/// Fills in the leaf indexers: the WGSL reads `p.rank` for the loop and the leaf's base in `view`
/// from its index ([`leaf_base_wgsl`]).
pub(super) fn finish(src: String, vars: &[char]) -> String {
    let mut idx = String::new();
    for (i, &v) in vars.iter().enumerate() {
        let b = leaf_base_wgsl(i);
        let f = match v {
            's' => format!("fn at{i}(e: u32) -> u32 {{ return p.view[{b}]; }}\n"),
            'c' | 'v' | 'h' => format!("fn at{i}(e: u32) -> u32 {{ return p.view[{b}] + e; }}\n"),
            _ => format!(
                "fn at{i}(e: u32) -> u32 {{\n    let b = {b};\n    var rem = e;\n    var off = p.view[b];\n    for (var d = p.rank; d > 0u; d--) {{\n        let k = d - 1u;\n        off += (rem % p.view[k]) * p.view[b + 1u + k];\n        rem /= p.view[k];\n    }}\n    return off;\n}}\n"
            ),
        };
        idx += &f;
    }
    src.replace("//@IDX@", &idx)
}

/// (accumulator type, identity, combine with `A` and `B`) of a row reduction of `dt` values.
pub(super) fn reduce_parts(op: ReduceOp, dt: DType) -> (&'static str, &'static str, &'static str) {
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
