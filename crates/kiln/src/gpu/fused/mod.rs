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

use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{self, ct, loader, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::layout::collapse;
use crate::op::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
use crate::{DType, Error, Layout, Result};
use std::fmt::Write;

mod row;
mod spec;

use spec::{finish, leaf_base, leaf_base_wgsl, leaf_variant, FusedParams, Gen};
pub(crate) use spec::{Exprs, Op, Spec, Src, Val};

const FLAT: &str = include_str!("flat.wgsl");

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
        let base = format!("p.view[{}]", leaf_base_wgsl(i));
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
                ("PARAMS", &FusedParams::wgsl()),
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
    if words > FusedParams::WORDS {
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
    let mut params = FusedParams { n: n as u32, rank: rank as u32, len: len as u32, ..FusedParams::default() };
    let view = &mut params.view;
    for (k, &d) in cdims.iter().enumerate() {
        view[k] = d as u32;
    }
    for (i, st) in cstrides.iter().enumerate() {
        let b = leaf_base(rank, i);
        view[b] = leaves[i].1.offset() as u32;
        for (k, &s) in st.iter().enumerate() {
            view[b + 1 + k] = s as u32;
        }
        if row {
            view[leaf_base(rank, leaves.len()) + i] = leaves[i].1.strides().last().copied().unwrap_or(0) as u32;
        }
    }
    let bufs: Vec<&wgpu::Buffer> =
        outs.iter().map(|o| o.buffer.raw()).chain(leaves.iter().map(|(s, _)| s.buffer.raw())).collect();
    let groups = match &rp {
        Some(_) => wgsl::grid(rows, 1, ctx.limits.max_compute_workgroups_per_dimension),
        None => wgsl::grid(n.div_ceil(4), 256, ctx.limits.max_compute_workgroups_per_dimension),
    };
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
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
