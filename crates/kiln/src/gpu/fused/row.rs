//! The row kernel of a fused group with reductions over the last axis (`row.wgsl`): one workgroup
//! per row, the row cut into packs of 4 elements, invocation `lid` owning packs `lid + u * wg`.
//!
//! A [`RowPlan`] fixes, per call:
//! - how each leaf is read along the row (`Access`): 16-byte packs (4-byte dtypes) or 8-byte packs
//!   (f16/bf16) where the leaf is contiguous along the row and every row starts on a pack; else one
//!   element at a time at unit or any stride; leaves constant along the row once per row;
//! - `np` packs per invocation held in registers: the leaves the reductions read are loaded once
//!   and stay in registers through every reduction and the output pass (as `rowwise/norm.wgsl`
//!   does). Rows too long for the register budget (`np` = 0) are read once per pass instead;
//! - the workgroup size, sized to the row (small rows do not take 256 lanes), and whether the
//!   workgroup reductions go through subgroup operations or a workgroup-memory tree;
//! - how each output is written: 16-byte packs, words, or packed 2- and 1-byte words.

use super::spec::{finish, leaf_base_wgsl, reduce_parts, round, Exprs, FusedParams, Gen, Op, Spec, Src};
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::subgroups::use_subgroups;
use crate::gpu::runtime::wgsl::{ct, loader, PRELUDE};
use crate::gpu::runtime::GpuContext;
use crate::op::ReduceOp;
use crate::{DType, Layout};
use std::fmt::Write;

const ROW: &str = include_str!("row.wgsl");

/// Register budget: vec4 values of cached leaves each invocation keeps (as `rowwise`).
const MAX_SLOTS: usize = 8;

/// How a leaf is read along a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// 16-byte packs (4-byte dtypes).
    Vec4,
    /// 8-byte packs (f16, bf16).
    Vec2,
    /// Elements at unit stride.
    Unit,
    /// Elements at the leaf's stride along the last axis (a parameter word).
    Strided,
    /// Constant along the row: one element per row.
    Row,
}

impl Access {
    fn code(self) -> char {
        match self {
            Access::Vec4 => 'v',
            Access::Vec2 => 'h',
            Access::Unit => 'u',
            Access::Strided => 't',
            Access::Row => 'z',
        }
    }
}

/// How an output is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Store {
    /// A 4-byte dtype in 16-byte packs (rows of whole packs in a buffer of whole packs).
    Vec4,
    /// One word per element (4-byte dtypes; narrower ones widened to f32/u32, cast after).
    Word,
    /// f16/bf16 two to a word (even rows), u8/bool four to a word (rows of whole packs).
    Packed,
    /// A row value: one word per row, written by the first invocation (widened like `Word`).
    RowValue,
}

impl Store {
    fn code(self) -> char {
        match self {
            Store::Vec4 => 'v',
            Store::Word => 'w',
            Store::Packed => 'p',
            Store::RowValue => 'r',
        }
    }

    /// The dtype the kernel writes an output of `dt` as.
    pub(crate) fn dtype(self, dt: DType) -> DType {
        match (self, ct(dt)) {
            (Store::Packed | Store::Vec4, _) => dt,
            _ if dt.size_in_bytes() == 4 => dt,
            (_, "f32") => DType::F32,
            (_, "i32") => DType::I32,
            _ => DType::U32,
        }
    }
}

/// One row-kernel variant (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RowPlan {
    /// Per leaf: its indexer (`s`, `c`, `g` as in flat kernels, for the row's first element) and
    /// how the row is read.
    pub leaves: Vec<(char, Access)>,
    pub stores: Vec<Store>,
    /// Packs per invocation in registers; 0: rows read once per pass.
    pub np: usize,
    pub wg: usize,
    pub sg: bool,
}

impl RowPlan {
    pub(crate) fn key(&self) -> String {
        let l: String = self.leaves.iter().flat_map(|&(i, a)| [i, a.code()]).collect();
        let s: String = self.stores.iter().map(|s| s.code()).collect();
        format!("{l}:{s}:np{}:w{}:sg{}", self.np, self.wg, self.sg as u8)
    }
}

/// How leaf `l` (a view broadcast to the iteration shape, rows of `len`) of `dt` in a buffer of
/// `bytes` bytes is read along a row.
pub(crate) fn access(l: &Layout, len: usize, dt: DType, bytes: u64) -> Access {
    let st = l.strides();
    let last = st.last().copied().unwrap_or(0);
    if len <= 1 || last == 0 {
        return Access::Row;
    }
    if last != 1 {
        return Access::Strided;
    }
    // Every row starts on a pack: the offset and every outer stride are multiples of 4 elements.
    let outer = &st[..st.len() - 1];
    let aligned = len.is_multiple_of(4)
        && l.offset().is_multiple_of(4)
        && outer.iter().zip(l.dims()).all(|(&s, &d)| d == 1 || s.is_multiple_of(4));
    match dt {
        DType::F32 | DType::I32 | DType::U32 if aligned && bytes.is_multiple_of(16) => Access::Vec4,
        DType::F16 | DType::BF16 if aligned && bytes.is_multiple_of(8) => Access::Vec2,
        _ => Access::Unit,
    }
}

/// How a full output of `dt` (rows of `len`, buffer of `bytes`) is written.
pub(crate) fn store(dt: DType, len: usize, bytes: u64) -> Store {
    match dt {
        DType::F32 | DType::I32 | DType::U32 if len.is_multiple_of(4) && bytes.is_multiple_of(16) => Store::Vec4,
        DType::F16 | DType::BF16 if len.is_multiple_of(2) => Store::Packed,
        DType::U8 | DType::Bool if len.is_multiple_of(4) => Store::Packed,
        _ => Store::Word,
    }
}

/// Largest power of two <= `n` (n >= 1).
fn pow2_floor(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// (packs per invocation, workgroup size) for rows of `len` with `cached` leaves held in
/// registers, workgroups of `wmin` to `wmax`: about 4 packs per invocation, at most
/// [`MAX_SLOTS`] vec4 registers; (0, `wmax`) when the row does not fit.
pub(crate) fn shape(len: usize, cached: usize, wmin: usize, wmax: usize) -> (usize, usize) {
    let packs = len.div_ceil(4).max(1);
    let w = packs.div_ceil(4).next_power_of_two().clamp(wmin, wmax);
    let np = packs.div_ceil(w).next_power_of_two();
    if np * cached.max(1) <= MAX_SLOTS {
        (np, w)
    } else {
        (0, wmax)
    }
}

/// The workgroup limits of `ctx` for row kernels: the smallest and largest workgroup, and the
/// largest subgroup (subgroup reductions need whole subgroups).
pub(crate) fn limits(ctx: &GpuContext) -> (usize, usize, usize) {
    let lim = &ctx.limits;
    // Metal may refuse 1024-invocation threadgroups for register-heavy pipelines: 512 there.
    let cap = if ctx.summary.backend == "Metal" { 512 } else { 1024 };
    let wmax = pow2_floor(
        cap.min(lim.max_compute_invocations_per_workgroup as usize)
            .min(lim.max_compute_workgroup_size_x as usize)
            .min(lim.max_compute_workgroup_storage_size as usize / 4),
    );
    let sg_max = ctx.summary.subgroup_size.1.max(1) as usize;
    (sg_max.next_power_of_two().max(64).min(wmax), wmax, sg_max)
}

/// The plan for `spec` over rows of `len`: leaf accesses and stores as given, registers and
/// workgroup from the row length, subgroups where the device has them.
pub(crate) fn plan(
    ctx: &GpuContext,
    spec: &Spec,
    len: usize,
    leaves: Vec<(char, Access)>,
    stores: Vec<Store>,
) -> RowPlan {
    let (wmin, wmax, sg_max) = limits(ctx);
    let cached = cached(spec, &leaves).iter().filter(|&&c| c).count();
    let (np, wg) = shape(len, cached, wmin, wmax);
    RowPlan { leaves, stores, np, wg, sg: use_subgroups(ctx) && wg >= sg_max }
}

/// The leaves that the non-row values `want` read (through other non-row values).
fn leaves_of(spec: &Spec, want: &[usize]) -> Vec<usize> {
    let mut seen = vec![false; spec.vals.len()];
    let mut out = vec![false; spec.leaves.len()];
    let mut stack = want.to_vec();
    while let Some(i) = stack.pop() {
        if seen[i] || spec.vals[i].row {
            continue;
        }
        seen[i] = true;
        for a in &spec.vals[i].args {
            match *a {
                Src::Val(j) => stack.push(j),
                Src::Leaf(l) => out[l] = true,
                Src::Lit(..) => {}
            }
        }
    }
    (0..out.len()).filter(|&l| out[l]).collect()
}

/// The leaves a reduction's operand reads.
fn operand_leaves(spec: &Spec, i: usize) -> Vec<usize> {
    match spec.vals[i].args[0] {
        Src::Leaf(l) => vec![l],
        Src::Val(j) => leaves_of(spec, &[j]),
        Src::Lit(..) => vec![],
    }
}

/// Per leaf: whether it is held in registers (read by a reduction, and not constant along the row).
fn cached(spec: &Spec, leaves: &[(char, Access)]) -> Vec<bool> {
    let mut c = vec![false; spec.leaves.len()];
    for (i, v) in spec.vals.iter().enumerate() {
        if matches!(v.op, Op::Reduce(_)) {
            for l in operand_leaves(spec, i) {
                c[l] = leaves[l].1 != Access::Row;
            }
        }
    }
    c
}

/// `s` with every line indented by `by` more.
fn indent(s: &str, by: &str) -> String {
    s.lines().map(|l| format!("{by}{l}\n")).collect()
}

/// A word of compute-type value `x` of `dt`.
fn word(dt: DType, x: &str) -> String {
    if ct(dt) == "u32" {
        x.to_string()
    } else {
        format!("bitcast<u32>({x})")
    }
}

/// The WGSL of `spec` as a row kernel of plan `rp` (`ex`: the elementwise op expressions).
pub(crate) fn source(spec: &Spec, ex: Exprs, rp: &RowPlan) -> String {
    let wg = rp.wg;
    let leaves = leaf_code(spec, rp);
    // Values of a row read leaves constant along it (`rz`); values of an element read lane `c` of
    // the pack arguments `l{i}`.
    let leaf = |i: usize, e: &str| if e == "row" { format!("rz{i}") } else { format!("l{i}[c]") };
    let mut g = Gen { spec, ex, helpers: String::new(), leaf: &leaf };
    let packs = Packs { spec, np: rp.np, cached: cached(spec, &rp.leaves) };
    let sg_args = if rp.sg {
        ",\n        @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_size) sgs: u32,\n        @builtin(subgroup_id) sid: u32"
    } else {
        ""
    };
    let mut funcs = String::new();
    let mut body = packs.prefetch(wg);
    reductions(&mut g, &packs, rp, &mut body, &mut funcs);
    output_pass(&mut g, &packs, rp, &mut body, &mut funcs);
    let mut row_stores = String::new();
    for (k, &o) in spec.outputs.iter().enumerate() {
        if spec.vals[o].row {
            let _ = writeln!(row_stores, "        out{k}[row] = {};", word(spec.vals[o].dtype, &format!("rv{o}")));
        }
    }
    let red_words = if rp.sg { (wg / 4).max(1) } else { wg };
    let helpers = std::mem::take(&mut g.helpers);
    let idx: Vec<char> = rp.leaves.iter().map(|&(i, _)| i).collect();
    finish(
        render(
            ROW,
            &[
                ("WG", &wg.to_string()),
                ("DECLS", &leaves.decls),
                ("PARAMS", &FusedParams::wgsl()),
                ("PRELUDE", PRELUDE),
                ("LOADERS", &leaves.loaders),
                ("INDEXERS", "//@IDX@"),
                ("FUNCS", ex.funcs),
                ("HELPERS", &helpers),
                ("RED", &red_words.to_string()),
                ("PRIVATES", &leaves.privs),
                ("ROWFUNCS", &funcs),
                ("SG_ARGS", sg_args),
                ("BASES", &leaves.bases),
                ("BODY", &body),
                ("ROWSTORES", &row_stores),
            ],
        ),
        &idx,
    )
}

/// How a row kernel binds and reads its outputs and leaves: the bindings (`decls`), each leaf's
/// pack loader `lp{i}` (`loaders`), the private bases and row values (`privs`) and their
/// assignments at the row's start (`bases`).
struct LeafCode {
    decls: String,
    loaders: String,
    privs: String,
    bases: String,
}

fn leaf_code(spec: &Spec, rp: &RowPlan) -> LeafCode {
    let nl = spec.leaves.len();
    let mut decls = String::new();
    for (k, s) in rp.stores.iter().enumerate() {
        let ty = if *s == Store::Vec4 { "vec4<u32>" } else { "u32" };
        let _ = writeln!(decls, "@group(0) @binding({k}) var<storage, read_write> out{k}: array<{ty}>;");
    }
    let (mut loaders, mut privs, mut bases) = (String::new(), String::new(), String::new());
    for (i, (&dt, &(_, acc))) in spec.leaves.iter().zip(&rp.leaves).enumerate() {
        let t = ct(dt);
        let ty = match acc {
            Access::Vec4 => "vec4<u32>",
            Access::Vec2 => "vec2<u32>",
            _ => "u32",
        };
        let _ = writeln!(decls, "@group(0) @binding({}) var<storage, read> in{i}: array<{ty}>;", rp.stores.len() + i);
        if ty == "u32" {
            loaders += &loader(&format!("ld{i}"), &format!("in{i}"), dt);
        }
        let lanes = |at: &str| {
            format!(
                "fn lp{i}(q: u32) -> vec4<{t}> {{\n    var r = vec4<{t}>();\n    for (var c = 0u; c < 4u; c++) {{\n        \
                 let d = 4u * q + c;\n        if (d < p.len) {{ r[c] = ld{i}({at}); }}\n    }}\n    return r;\n}}\n"
            )
        };
        loaders += &match acc {
            Access::Vec4 if t == "u32" => format!("fn lp{i}(q: u32) -> vec4<u32> {{ return in{i}[b{i} + q]; }}\n"),
            Access::Vec4 => format!("fn lp{i}(q: u32) -> vec4<{t}> {{ return bitcast<vec4<{t}>>(in{i}[b{i} + q]); }}\n"),
            Access::Vec2 if dt == DType::F16 => format!(
                "fn lp{i}(q: u32) -> vec4<f32> {{ let w = in{i}[b{i} + q]; \
                 return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }}\n"
            ),
            Access::Vec2 => format!(
                "fn lp{i}(q: u32) -> vec4<f32> {{ let w = in{i}[b{i} + q]; \
                 return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u)); }}\n"
            ),
            Access::Unit => lanes(&format!("b{i} + d")),
            Access::Strided => lanes(&format!("b{i} + d * s{i}")),
            Access::Row => format!("fn lp{i}(q: u32) -> vec4<{t}> {{ return vec4<{t}>(rz{i}); }}\n"),
        };
        match acc {
            Access::Vec4 | Access::Vec2 => {
                let _ = writeln!(privs, "var<private> b{i}: u32;");
                let _ = writeln!(bases, "    b{i} = at{i}(erow) / 4u;");
            }
            Access::Unit => {
                let _ = writeln!(privs, "var<private> b{i}: u32;");
                let _ = writeln!(bases, "    b{i} = at{i}(erow);");
            }
            Access::Strided => {
                let _ = writeln!(privs, "var<private> b{i}: u32;\nvar<private> s{i}: u32;");
                let _ = writeln!(bases, "    b{i} = at{i}(erow);\n    s{i} = p.view[{} + {i}u];", leaf_base_wgsl(nl));
            }
            Access::Row => {
                let _ = writeln!(privs, "var<private> rz{i}: {t};");
                let _ = writeln!(bases, "    rz{i} = ld{i}(at{i}(erow));");
            }
        }
    }
    for (i, v) in spec.vals.iter().enumerate() {
        if v.row {
            let _ = writeln!(privs, "var<private> rv{i}: {};", ct(v.dtype));
        }
    }
    LeafCode { decls, loaders, privs, bases }
}

/// How the packs of a row are spelled: `np` packs per invocation held as `q{u}` (0: a loop over
/// `q`), the `cached` leaves' packs read once into `x{l}_{u}`.
struct Packs<'a> {
    spec: &'a Spec,
    np: usize,
    cached: Vec<bool>,
}

impl Packs<'_> {
    /// Parameters `l{l}` of a pack function over leaves `ls`.
    fn params(&self, ls: &[usize]) -> String {
        ls.iter().map(|&l| format!(", l{l}: vec4<{}>", ct(self.spec.leaves[l]))).collect()
    }

    /// Argument `l` of a pack call for slot `u` (or the loop's pack when `u` is None).
    fn arg(&self, l: usize, u: Option<usize>) -> String {
        match u {
            Some(u) if self.cached[l] => format!("x{l}_{u}"),
            Some(u) => format!("lp{l}(q{u})"),
            None => format!("lp{l}(q)"),
        }
    }

    fn args(&self, ls: &[usize], u: Option<usize>) -> String {
        ls.iter().map(|&l| format!(", {}", self.arg(l, u))).collect()
    }

    /// The pack index of slot `u`, or the loop's.
    fn q(u: Option<usize>) -> String {
        u.map_or("q".to_string(), |u| format!("q{u}"))
    }

    /// The body's start: each slot's pack index and the cached leaves' packs.
    fn prefetch(&self, wg: usize) -> String {
        let mut body = String::new();
        for u in 0..self.np {
            let _ = writeln!(body, "    let q{u} = lid + {}u;", u * wg);
            for l in (0..self.spec.leaves.len()).filter(|&l| self.cached[l]) {
                let t = ct(self.spec.leaves[l]);
                let _ = writeln!(
                    body,
                    "    var x{l}_{u} = vec4<{t}>();\n    if (q{u} < packs) {{ x{l}_{u} = lp{l}(q{u}); }}"
                );
            }
        }
        body
    }
}

/// Row values not yet `done` whose operands are ready, assigned until none is left (reductions
/// excepted).
fn emit_rows(g: &mut Gen, done: &mut [bool], out: &mut String) {
    let spec = g.spec;
    loop {
        let mut progress = false;
        for i in 0..spec.vals.len() {
            let v = &spec.vals[i];
            let ready = v.args.iter().all(|a| !matches!(a, Src::Val(j) if !done[*j]));
            if !done[i] && !matches!(v.op, Op::Reduce(_)) && ready {
                let x = g.expr(i, "row");
                let _ = writeln!(out, "    rv{i} = {x};");
                done[i] = true;
                progress = true;
            }
        }
        if !progress {
            break;
        }
    }
}

/// Row values: those computable now, then each reduction (a pack function `pk{i}`, the
/// invocation's packs, the workgroup's combination `wred{i}`) and the values it made computable.
fn reductions(g: &mut Gen, packs: &Packs, rp: &RowPlan, body: &mut String, funcs: &mut String) {
    let spec = g.spec;
    let (wg, np) = (rp.wg, rp.np);
    let ids = if rp.sg { ", lid, sgi, sgs, sid" } else { ", lid" };
    let mut done: Vec<bool> = spec.vals.iter().map(|v| !v.row).collect();
    emit_rows(g, &mut done, body);
    for i in 0..spec.vals.len() {
        let Op::Reduce(op) = spec.vals[i].op else { continue };
        let src = spec.vals[i].args[0];
        let dt = spec.vals[i].dtype;
        let (acc_t, ident, comb) = reduce_parts(op, spec.dtype_of(src));
        let c = |a: &str, b: &str| comb.replace("A", a).replace("B", b);
        let ls = operand_leaves(spec, i);
        let lets = g.lets(
            &match src {
                Src::Val(j) => vec![j],
                _ => vec![],
            },
            "c",
        );
        let x = g.name(src, "c");
        let _ = writeln!(
            funcs,
            "fn pk{i}(q: u32{}) -> {acc_t} {{\n    var acc: {acc_t} = {ident};\n    for (var c = 0u; c < 4u; c++) {{\n        \
             if (4u * q + c < p.len) {{\n{}            acc = {};\n        }}\n    }}\n    return acc;\n}}",
            packs.params(&ls),
            indent(&lets, "        "),
            c("acc", &x)
        );
        *funcs += &reducer(i, acc_t, comb, op, rp);
        let _ = writeln!(body, "    {{\n        var acc: {acc_t} = {ident};");
        let call = |u: Option<usize>| c("acc", &format!("pk{i}({}{})", Packs::q(u), packs.args(&ls, u)));
        if np > 0 {
            for u in 0..np {
                let _ = writeln!(body, "        if (q{u} < packs) {{ acc = {}; }}", call(Some(u)));
            }
        } else {
            let _ = writeln!(body, "        for (var q = lid; q < packs; q += {wg}u) {{ acc = {}; }}", call(None));
        }
        let _ = writeln!(body, "        rv{i} = {};\n    }}", round(dt, &format!("wred{i}(acc{ids})")));
        done[i] = true;
        emit_rows(g, &mut done, body);
    }
}

/// The output pass: `fn st` computes and stores the full (non-row) outputs of one pack, called for
/// each of the invocation's packs.
fn output_pass(g: &mut Gen, packs: &Packs, rp: &RowPlan, body: &mut String, funcs: &mut String) {
    let spec = g.spec;
    let (wg, np) = (rp.wg, rp.np);
    let full: Vec<(usize, usize)> =
        spec.outputs.iter().enumerate().filter(|(_, &o)| !spec.vals[o].row).map(|(k, &o)| (k, o)).collect();
    if full.is_empty() {
        return;
    }
    let want: Vec<usize> = full.iter().map(|&(_, o)| o).collect();
    let ls = leaves_of(spec, &want);
    let mut st = format!("fn st(q: u32{}) {{\n", packs.params(&ls));
    for &(k, o) in &full {
        let _ = writeln!(st, "    var o{k}: vec4<{}>;", ct(spec.vals[o].dtype));
    }
    let lets = g.lets(&want, "c");
    let _ = write!(st, "    for (var c = 0u; c < 4u; c++) {{\n{}", indent(&lets, "    "));
    for &(k, o) in &full {
        let _ = writeln!(st, "        o{k}[c] = v{o};");
    }
    st += "    }\n";
    for &(k, o) in &full {
        st += &store_pack(k, spec.vals[o].dtype, rp.stores[k]);
    }
    st += "}\n";
    *funcs += &st;
    if np > 0 {
        for u in 0..np {
            let _ = writeln!(body, "    if (q{u} < packs) {{ st(q{u}{}); }}", packs.args(&ls, Some(u)));
        }
    } else {
        let _ = writeln!(body, "    for (var q = lid; q < packs; q += {wg}u) {{ st(q{}); }}", packs.args(&ls, None));
    }
}

/// `wred{i}`: the workgroup-wide combination of each invocation's `x` (`comb` of `A` and `B`):
/// subgroup operations (an add, or a butterfly of `comb`) then one value per subgroup in
/// workgroup memory, or a workgroup-memory tree.
fn reducer(i: usize, t: &str, comb: &str, op: ReduceOp, rp: &RowPlan) -> String {
    let ab = |a: &str, b: &str| comb.replace('A', a).replace('B', b);
    if rp.sg {
        let sub = if op == ReduceOp::Sum {
            "    v = subgroupAdd(v);\n".to_string()
        } else {
            format!("    for (var o = 1u; o < sgs; o = o << 1u) {{ v = {}; }}\n", ab("v", "subgroupShuffleXor(v, o)"))
        };
        format!(
            "fn wred{i}(x: {t}, lid: u32, sgi: u32, sgs: u32, sid: u32) -> {t} {{\n    var v = x;\n{sub}\
             \x20   if (sgi == 0u) {{ red[sid] = bitcast<u32>(v); }}\n    workgroupBarrier();\n\
             \x20   var r = bitcast<{t}>(red[0]);\n\
             \x20   for (var i = 1u; i < ({}u + sgs - 1u) / sgs; i++) {{ r = {}; }}\n\
             \x20   workgroupBarrier();\n    return r;\n}}\n",
            rp.wg,
            ab("r", &format!("bitcast<{t}>(red[i])"))
        )
    } else {
        format!(
            "fn wred{i}(x: {t}, lid: u32) -> {t} {{\n    red[lid] = bitcast<u32>(x);\n    workgroupBarrier();\n\
             \x20   for (var s = {}u; s > 0u; s = s >> 1u) {{\n\
             \x20       if (lid < s) {{ red[lid] = bitcast<u32>({}); }}\n        workgroupBarrier();\n    }}\n\
             \x20   let r = bitcast<{t}>(red[0]);\n    workgroupBarrier();\n    return r;\n}}\n",
            rp.wg / 2,
            ab(&format!("bitcast<{t}>(red[lid])"), &format!("bitcast<{t}>(red[lid + s])"))
        )
    }
}

/// Statements of `st` writing `o{k}` (pack `q` of the row) as output `k` of `dt`.
fn store_pack(k: usize, dt: DType, s: Store) -> String {
    let w = |c: usize| word(dt, &format!("o{k}[{c}]"));
    match s {
        Store::Vec4 => format!("    out{k}[erow / 4u + q] = vec4<u32>({}, {}, {}, {});\n", w(0), w(1), w(2), w(3)),
        Store::Packed if dt.size_in_bytes() == 2 => {
            let pack = |a: usize, b: usize| {
                if dt == DType::F16 {
                    format!("pack2x16float(vec2<f32>(o{k}[{a}], o{k}[{b}]))")
                } else {
                    format!("bf16_bits(o{k}[{a}]) | (bf16_bits(o{k}[{b}]) << 16u)")
                }
            };
            format!(
                "    out{k}[(erow + 4u * q) / 2u] = {};\n    if (4u * q + 2u < p.len) {{ out{k}[(erow + 4u * q) / 2u + 1u] = {}; }}\n",
                pack(0, 1),
                pack(2, 3)
            )
        }
        Store::Packed => format!(
            "    out{k}[(erow + 4u * q) / 4u] = (o{k}[0] & 0xffu) | ((o{k}[1] & 0xffu) << 8u) | ((o{k}[2] & 0xffu) << 16u) | ((o{k}[3] & 0xffu) << 24u);\n"
        ),
        Store::Word | Store::RowValue => {
            (0..4).map(|c| format!("    if (4u * q + {c}u < p.len) {{ out{k}[erow + 4u * q + {c}u] = {}; }}\n", w(c))).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shape;

    /// Rows get about 4 packs per invocation in a workgroup sized to them: small rows take the
    /// smallest workgroup, RMSNorm's 4096 takes 256 lanes of 4 packs (as `rowwise`), rows past the
    /// register budget of their cached leaves are read per pass by the largest workgroup.
    #[test]
    fn workgroup_and_registers_follow_the_row() {
        assert_eq!(shape(7, 1, 64, 1024), (1, 64));
        assert_eq!(shape(1030, 1, 64, 1024), (4, 128));
        assert_eq!(shape(4096, 1, 64, 1024), (4, 256));
        assert_eq!(shape(32768, 1, 64, 1024), (8, 1024));
        assert_eq!(shape(40001, 1, 64, 1024), (0, 1024));
        assert_eq!(shape(20000, 2, 64, 1024), (0, 1024));
        assert_eq!(shape(16384, 2, 64, 1024), (4, 1024));
        assert_eq!(shape(4096, 1, 64, 256), (4, 256));
        assert_eq!(shape(16384, 1, 64, 256), (0, 256));
    }
}
