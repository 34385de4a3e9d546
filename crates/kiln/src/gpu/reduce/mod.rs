//! Reductions and cumulative sums.
//!
//! A reduction reads its input in memory order (axes sorted by stride, so transposed views need no
//! copy), merges adjacent axes into groups, and reduces the innermost reduced group of the
//! contiguous `(outer, k, inner)` view at a time:
//! - `inner == 1` (rows, `rows.wgsl`): segments of `T` lanes per row chunk, `T` from 1 (tiny
//!   rows, one lane each) to 256 (a workgroup). Long rows and the all-elements case are split into
//!   chunks across workgroups and the chunk results reduced again (a two-pass tree).
//! - `inner > 1` (columns, `cols.wgsl`): invocations on consecutive columns, the reduced rows
//!   split into ranges across workgroups, then the ranges' results reduced again.
//!
//! Both read 16-byte packs (`VEC` variants) when the rows or columns start on one. The row kernel
//! combines its lanes with subgroup shuffles where the device has `SUBGROUP`, else in workgroup
//! memory. Partial results are 4-byte compute-type values (plus indices for argmax/argmin); the
//! last pass is cast to the op's output dtype.
//!
//! Float cumsum is a block scan (`cumsum.wgsl`): segments scan blocks of a row in workgroup memory;
//! rows longer than one block scan the block totals (recursively) and add them in a last pass.

use crate::backend::BackendStorage;
use crate::cpu::CpuStorage;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::storage::compute_dtype;
use crate::gpu::runtime::subgroups::use_subgroups;
use crate::gpu::runtime::wgsl::{self, expand, loader, pack_elems, pack_loader, vec_dtype, PRELUDE};
use crate::gpu::runtime::{GpuContext, GpuStorage};
use crate::op::ReduceOp;
use crate::{DType, Layout, Result};

const ROWS: &str = include_str!("rows.wgsl");
const COLS: &str = include_str!("cols.wgsl");
const CUMSUM: &str = include_str!("cumsum.wgsl");

/// Workgroups a split reduction aims for: several waves on the largest GPUs.
const TARGET_GROUPS: usize = 4096;
/// Loop iterations per invocation stay below this (lavapipe caps loops at 65535 iterations).
const MAX_TRIPS: usize = 16384;

fn is_arg(op: ReduceOp) -> bool {
    matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin)
}

/// The identity of `op` in compute type `t`.
fn ident(op: ReduceOp, t: &str) -> String {
    let f = t == "f32";
    let v = match op {
        ReduceOp::Sum => "0",
        ReduceOp::Prod => "1",
        ReduceOp::Max | ReduceOp::ArgMax if f => "-inf_f32()",
        ReduceOp::Max | ReduceOp::ArgMax if t == "i32" => "i32(-2147483648)",
        ReduceOp::Max | ReduceOp::ArgMax => "0u",
        ReduceOp::Min | ReduceOp::ArgMin if f => "inf_f32()",
        ReduceOp::Min | ReduceOp::ArgMin if t == "i32" => "2147483647",
        ReduceOp::Min | ReduceOp::ArgMin => "0xffffffffu",
    };
    format!("{t}({v})")
}

/// `struct Acc`, `comb(a, b)` (and `comb4` on vec4 for the non-index ops) of `op` in type `t`.
/// Max/min propagate NaN; argmax/argmin keep the first index of the best value, NaN counting as
/// the best, whatever order the candidates come in.
fn combine(op: ReduceOp, t: &str) -> String {
    let f = t == "f32";
    let mut s = format!("struct Acc {{ v: {t}, i: u32 }}\n");
    s += "fn is_nan4(x: vec4<f32>) -> vec4<bool> { \
          return (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u); }\n";
    let pick = |fun: &str| {
        if f {
            (
                format!("select({fun}(a.v, b.v), a.v + b.v, is_nan(a.v) || is_nan(b.v))"),
                format!("select({fun}(a, b), a + b, is_nan4(a) | is_nan4(b))"),
            )
        } else {
            (format!("{fun}(a.v, b.v)"), format!("{fun}(a, b)"))
        }
    };
    let (c1, c4) = match op {
        ReduceOp::Sum => ("a.v + b.v".to_string(), "a + b".to_string()),
        ReduceOp::Prod => ("a.v * b.v".to_string(), "a * b".to_string()),
        ReduceOp::Max => pick("max"),
        ReduceOp::Min => pick("min"),
        ReduceOp::ArgMax | ReduceOp::ArgMin => {
            let cmp = if op == ReduceOp::ArgMax { ">" } else { "<" };
            let better = if f {
                format!(
                    "if (i == 0xffffffffu) {{ return true; }} if (is_nan(v)) {{ return is_nan(w) && j < i; }} \
                     return is_nan(w) || w {cmp} v || (w == v && j < i);"
                )
            } else {
                format!("if (i == 0xffffffffu) {{ return true; }} return w {cmp} v || (w == v && j < i);")
            };
            s += &format!("// Whether (w, j) replaces (v, i) as the running result.\nfn better(v: {t}, i: u32, w: {t}, j: u32) -> bool {{ {better} }}\n");
            s += "fn comb(a: Acc, b: Acc) -> Acc { if (better(a.v, a.i, b.v, b.i)) { return b; } return a; }\n";
            return s;
        }
    };
    s += &format!("fn comb(a: Acc, b: Acc) -> Acc {{ return Acc({c1}, 0u); }}\n");
    s += &format!("fn comb4(a: vec4<{t}>, b: vec4<{t}>) -> vec4<{t}> {{ return {c4}; }}\n");
    s
}

/// `comb4` of `acc` with every vec4 of the pack `w`.
fn fold(dt: DType, acc: &str, w: &str) -> String {
    expand(dt, w).iter().fold(acc.to_string(), |a, e| format!("comb4({a}, {e})"))
}

params! {
    /// A row reduction's parameters: segments (rows * chunks), k, the input offset (elements), the
    /// chunk length (whole packs), chunks per row, lanes T per segment, the word offset of a
    /// (value, index) input's indices or 0, and where a (value, index) output puts its indices, or 0
    /// to write only the result (the index for argmax/argmin).
    struct RowsParams { segments: u32, k: u32, off: u32, chunk: u32, chunks: u32, lanes: u32, pairs: u32, out_pairs: u32 }
}

params! {
    /// A column reduction's parameters: outer, k, inner, the input offset (elements), column tiles,
    /// row ranges S, rows per range, column packs CW per workgroup, and the (value, index) offsets
    /// as in [`RowsParams`].
    struct ColsParams {
        outer: u32,
        k: u32,
        inner: u32,
        off: u32,
        tiles: u32,
        ranges: u32,
        per: u32,
        cw: u32,
        pairs: u32,
        out_pairs: u32,
    }
}

params! {
    /// The block scan's parameters: segments (rows * blocks), k, the input offset, blocks per row,
    /// lanes T per segment, and the mode (0 scan, 1 block totals, 2 scan from the scanned totals).
    struct ScanParams { segments: u32, k: u32, off: u32, blocks: u32, lanes: u32, mode: u32 }
}

/// The row-reduction kernel: `op` over `dt` rows; `vec` reads 16-byte packs; `sg` combines lanes
/// with subgroup shuffles; `paired` reads a (value, index) input (argmax/argmin second passes).
pub(crate) fn rows_source(op: ReduceOp, dt: DType, vec: bool, sg: bool, paired: bool) -> String {
    let t = wgsl::ct(dt);
    let arg = is_arg(op);
    let pe = if vec { pack_elems(dt) } else { 1 };
    let idx = if paired {
        "rd(p.pairs + base + j)"
    } else if arg {
        "start + j"
    } else {
        "0u"
    };
    let scalar_loop = |from: &str| {
        format!("        for (var j = {from}; j < len; j += t) {{ a = comb(a, Acc(ld0(base + j), {idx})); }}\n")
    };
    let body = if !vec {
        scalar_loop("lane")
    } else if arg {
        let mut b = format!(
            "        let b4 = base / {pe}u;\n        let np = len / {pe}u;\n        for (var q = lane; q < np; q += t) {{\n            let w = src[b4 + q];\n            let j = start + q * {pe}u;\n"
        );
        for (s, e) in expand(dt, "w").iter().enumerate() {
            b += &format!("            let e{s} = {e};\n");
            for (c, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                b += &format!("            a = comb(a, Acc(e{s}.{comp}, j + {}u));\n", 4 * s + c);
            }
        }
        b + "        }\n" + &scalar_loop(&format!("np * {pe}u + lane"))
    } else {
        let id = ident(op, t);
        let mut b = format!(
            "        let b4 = base / {pe}u;\n        let np = len / {pe}u;\n        var v0 = vec4<{t}>({id});\n        var v1 = v0;\n        var v2 = v0;\n        var v3 = v0;\n        var q = lane;\n        for (; q + 3u * t < np; q += 4u * t) {{\n"
        );
        for u in 0..4 {
            b += &format!("            let w{u} = src[b4 + q + {u}u * t];\n");
        }
        for u in 0..4 {
            b += &format!("            v{u} = {};\n", fold(dt, &format!("v{u}"), &format!("w{u}")));
        }
        b += &format!(
            "        }}\n        for (; q < np; q += t) {{ let w0 = src[b4 + q]; v0 = {}; }}\n",
            fold(dt, "v0", "w0")
        );
        b += "        v0 = comb4(comb4(v0, v1), comb4(v2, v3));\n";
        for comp in ["x", "y", "z", "w"] {
            b += &format!("        a = comb(a, Acc(v0.{comp}, 0u));\n");
        }
        b + &scalar_loop(&format!("np * {pe}u + lane"))
    };
    let reduce = if sg {
        "    let tt = min(t, sgs);
    for (var o = 1u; o < tt; o = o << 1u) {
        a = comb(a, Acc(subgroupShuffleXor(a.v, o), subgroupShuffleXor(a.i, o)));
    }
    if (sgi == 0u) { sv[sid] = a.v; si[sid] = a.i; }
    workgroupBarrier();
    if (t > sgs && lane == 0u) {
        for (var i = 1u; i < t / sgs; i++) { a = comb(a, Acc(sv[sid + i], si[sid + i])); }
    }"
    } else {
        "    sv[lid] = a.v;
    si[lid] = a.i;
    workgroupBarrier();
    for (var s = t >> 1u; s > 0u; s = s >> 1u) {
        if (lane < s) {
            let b = comb(Acc(sv[lid], si[lid]), Acc(sv[lid + s], si[lid + s]));
            sv[lid] = b.v;
            si[lid] = b.i;
        }
        workgroupBarrier();
    }
    a = Acc(sv[lid], si[lid]);"
    };
    let write = if arg {
        "        if (p.out_pairs != 0u) { dst[seg] = bitcast<u32>(a.v); dst[p.out_pairs + seg] = a.i; } else { dst[seg] = a.i; }"
    } else {
        "        dst[seg] = bitcast<u32>(a.v);"
    };
    let (sg_args, lane) = if sg {
        (
            ",\n        @builtin(subgroup_invocation_id) sgi: u32, @builtin(subgroup_size) sgs: u32,\n        @builtin(subgroup_id) sid: u32",
            "sid * sgs + sgi",
        )
    } else {
        ("", "lid")
    };
    render(
        ROWS,
        &[
            ("PARAMS", &RowsParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &pack_loader("ld0", dt)),
            ("COMBINE", &combine(op, t)),
            ("CT", t),
            ("SG_ARGS", sg_args),
            ("LANE", lane),
            ("IDENT", &ident(op, t)),
            ("BODY", &body),
            ("REDUCE", reduce),
            ("WRITE", write),
        ],
    )
}

/// The column-reduction kernel: `op` over the middle axis of `dt` data; `vec` reads 16-byte packs
/// of columns; `paired` reads a (value, index) input.
pub(crate) fn cols_source(op: ReduceOp, dt: DType, vec: bool, paired: bool) -> String {
    let t = wgsl::ct(dt);
    let arg = is_arg(op);
    let id = ident(op, t);
    let pe = pack_elems(dt);
    let (shared, body, reduce, write, packs);
    if vec {
        let ex = expand(dt, "w");
        let n = ex.len();
        shared = (0..n).map(|s| format!("var<workgroup> s{s}: array<vec4<{t}>, 256>;\n")).collect::<String>();
        let mut b = (0..n).map(|s| format!("    var v{s} = vec4<{t}>({id});\n")).collect::<String>();
        b += &format!(
            "    if (live) {{\n        let ip = inner / {pe}u;\n        let b4 = p.off / {pe}u + o * k * ip + cp;\n        var r = r0 + rl;\n        for (; r + 3u * nrl < r1; r += 4u * nrl) {{\n"
        );
        for u in 0..4 {
            b += &format!("            let w{u} = src[b4 + (r + {u}u * nrl) * ip];\n");
        }
        for u in 0..4 {
            for (s, e) in expand(dt, &format!("w{u}")).iter().enumerate() {
                b += &format!("            v{s} = comb4(v{s}, {e});\n");
            }
        }
        b += "        }\n        for (; r < r1; r += nrl) {\n            let w0 = src[b4 + r * ip];\n";
        for (s, e) in expand(dt, "w0").iter().enumerate() {
            b += &format!("            v{s} = comb4(v{s}, {e});\n");
        }
        body = b + "        }\n    }";
        let mut r = (0..n).map(|s| format!("    s{s}[lid] = v{s};\n")).collect::<String>();
        r += "    workgroupBarrier();\n    for (var s = nrl >> 1u; s > 0u; s = s >> 1u) {\n        if (rl < s) {\n";
        for s in 0..n {
            r += &format!("            s{s}[lid] = comb4(s{s}[lid], s{s}[lid + s * cw]);\n");
        }
        r += "        }\n        workgroupBarrier();\n    }\n";
        r += &(0..n).map(|s| format!("    v{s} = s{s}[lid];\n")).collect::<String>();
        reduce = r;
        let mut w = format!("        let c = ob + cp * {pe}u;\n");
        for s in 0..n {
            for (c, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                w += &format!("        dst[c + {}u] = bitcast<u32>(v{s}.{comp});\n", 4 * s + c);
            }
        }
        write = w;
        packs = format!("inner / {pe}u");
    } else {
        shared = format!("var<workgroup> sv: array<{t}, 256>;\nvar<workgroup> si: array<u32, 256>;\n");
        let idx = if paired {
            "rd(p.pairs + e)"
        } else if arg {
            "r"
        } else {
            "0u"
        };
        body = format!(
            "    var a = Acc({id}, 0xffffffffu);\n    if (live) {{\n        for (var r = r0 + rl; r < r1; r += nrl) {{\n            let e = p.off + (o * k + r) * inner + cp;\n            a = comb(a, Acc(ld0(e), {idx}));\n        }}\n    }}"
        );
        reduce = "    sv[lid] = a.v;
    si[lid] = a.i;
    workgroupBarrier();
    for (var s = nrl >> 1u; s > 0u; s = s >> 1u) {
        if (rl < s) {
            let b = comb(Acc(sv[lid], si[lid]), Acc(sv[lid + s * cw], si[lid + s * cw]));
            sv[lid] = b.v;
            si[lid] = b.i;
        }
        workgroupBarrier();
    }
    a = Acc(sv[lid], si[lid]);"
            .to_string();
        write = if arg {
            "        if (p.out_pairs != 0u) { dst[ob + cp] = bitcast<u32>(a.v); dst[p.out_pairs + ob + cp] = a.i; } else { dst[ob + cp] = a.i; }"
                .to_string()
        } else {
            "        dst[ob + cp] = bitcast<u32>(a.v);".to_string()
        };
        packs = "inner".to_string();
    }
    render(
        COLS,
        &[
            ("PARAMS", &ColsParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &pack_loader("ld0", dt)),
            ("COMBINE", &combine(op, t)),
            ("SHARED", &shared),
            ("PACKS", &packs),
            ("BODY", &body),
            ("REDUCE", &reduce),
            ("WRITE", &write),
        ],
    )
}

/// Every (name, WGSL) variant of the reduction kernels, for the catalog.
pub(crate) fn catalog(dt: DType, push: &mut dyn FnMut(String, String)) {
    for op in ReduceOp::ALL {
        let paired_ok = is_arg(op) && matches!(dt, DType::F32 | DType::I32 | DType::U32);
        for vec in [false, true] {
            if vec && !vec_dtype(dt) {
                continue;
            }
            for sg in [false, true] {
                push(
                    format!("reduce_rows:{}:{dt}:v{}:sg{}", op.name(), vec as u8, sg as u8),
                    rows_source(op, dt, vec, sg, false),
                );
                if paired_ok && !vec {
                    push(
                        format!("reduce_rows:{}:{dt}:pairs:sg{}", op.name(), sg as u8),
                        rows_source(op, dt, false, sg, true),
                    );
                }
            }
            if !(vec && is_arg(op)) {
                push(format!("reduce_cols:{}:{dt}:v{}", op.name(), vec as u8), cols_source(op, dt, vec, false));
            }
        }
        if paired_ok {
            push(format!("reduce_cols:{}:{dt}:pairs", op.name()), cols_source(op, dt, false, true));
        }
    }
}

/// Runs a CPU kernel on a host copy and uploads the result: integer sums and products need 64-bit
/// accumulation, which the 32-bit GPU kernels do not have yet.
fn on_host(
    s: &GpuStorage,
    l: &Layout,
    f: impl FnOnce(&CpuStorage, &Layout) -> Result<CpuStorage>,
) -> Result<GpuStorage> {
    let host = s.to_cpu(l)?;
    let out = f(&host, &Layout::contiguous(l.shape().clone()))?;
    GpuStorage::from_cpu(&s.ctx, &out)
}

/// A contiguous input of a reduction pass: `s` from element `off`; `pairs` is the word offset of
/// the indices of a (value, index) input (0 for plain values).
struct Input<'a> {
    s: &'a GpuStorage,
    off: usize,
    pairs: usize,
}

/// Largest power of two <= `n` (n >= 1).
fn pow2_floor(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.max(1).leading_zeros())
}

/// Whether the 16-byte packs of `x` can be read from element offset `off` (`pe` elements a pack).
fn packs_ok(x: &Input, pe: usize) -> bool {
    vec_dtype(x.s.dtype) && x.pairs == 0 && x.off.is_multiple_of(pe) && x.s.buffer.size().is_multiple_of(16)
}

fn dispatch(
    ctx: &GpuContext,
    key: &str,
    src: impl FnOnce() -> String,
    bufs: [&wgpu::Buffer; 2],
    params: &[u32],
    groups: usize,
) -> Result<()> {
    let kernel = ctx.pipelines.get(ctx, key, 1, src)?;
    let grid = wgsl::grid(groups, 1, ctx.limits.max_compute_workgroups_per_dimension);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, params, grid)
}

/// The result buffer of a pass producing `n` results: final (`n` compute-type values, or u32
/// indices for argmax/argmin) or partial (values, then indices for argmax/argmin).
fn pass_output(
    ctx: &std::sync::Arc<GpuContext>,
    op: ReduceOp,
    dt: DType,
    n: usize,
    partial: bool,
) -> Result<GpuStorage> {
    let ct = compute_dtype(dt);
    match (is_arg(op), partial) {
        (true, false) => GpuStorage::alloc(ctx, DType::U32, n),
        (true, true) => GpuStorage::alloc(ctx, ct, 2 * n),
        (false, _) => GpuStorage::alloc(ctx, ct, n),
    }
}

/// Reduces the rows of the contiguous (rows, k) view of `x`.
fn reduce_rows(x: Input, rows: usize, k: usize, op: ReduceOp) -> Result<GpuStorage> {
    let ctx = x.s.ctx.clone();
    let dt = x.s.dtype;
    let pe = pack_elems(dt);
    let vec = packs_ok(&x, pe) && (rows == 1 || k.is_multiple_of(pe));
    let pe = if vec { pe } else { 1 };
    let packs = k.div_ceil(pe);
    let t = pow2_floor((packs / 4).max(1)).min(256);
    let (chunk, chunks) = if t < 256 {
        (k, 1)
    } else {
        // Each lane gets at least 16 packs; enough chunks to fill the GPU and keep loops short.
        let most = k.div_ceil(256 * 16 * pe).max(1);
        let least = k.div_ceil(256 * MAX_TRIPS * pe);
        let c = TARGET_GROUPS.div_ceil(rows).clamp(1, most).max(least);
        let chunk = k.div_ceil(c).div_ceil(pe) * pe;
        (chunk, k.div_ceil(chunk))
    };
    let segments = rows * chunks;
    let partial = chunks > 1;
    let out = pass_output(&ctx, op, dt, segments, partial)?;
    let sg = use_subgroups(&ctx);
    let paired = x.pairs != 0;
    let key = format!("reduce_rows:{}:{dt}:v{}:sg{}:p{}", op.name(), vec as u8, sg as u8, paired as u8);
    let out_pairs = if partial && is_arg(op) { segments } else { 0 };
    let params = RowsParams {
        segments: segments as u32,
        k: k as u32,
        off: x.off as u32,
        chunk: chunk as u32,
        chunks: chunks as u32,
        lanes: t as u32,
        pairs: x.pairs as u32,
        out_pairs: out_pairs as u32,
    };
    let groups = segments.div_ceil(256 / t);
    dispatch(
        &ctx,
        &key,
        || rows_source(op, dt, vec, sg, paired),
        [out.buffer.raw(), x.s.buffer.raw()],
        &params.words(),
        groups,
    )?;
    if !partial {
        return Ok(out);
    }
    reduce_rows(Input { s: &out, off: 0, pairs: out_pairs }, rows, chunks, op)
}

/// Reduces the middle axis of the contiguous (outer, k, inner) view of `x` (inner > 1).
fn reduce_cols(x: Input, outer: usize, k: usize, inner: usize, op: ReduceOp) -> Result<GpuStorage> {
    let ctx = x.s.ctx.clone();
    let dt = x.s.dtype;
    let pe = pack_elems(dt);
    let vec = !is_arg(op) && packs_ok(&x, pe) && inner.is_multiple_of(pe);
    let packs = if vec { inner / pe } else { inner };
    let cw = packs.next_power_of_two().min(64);
    let lanes = 256 / cw;
    let tiles = packs.div_ceil(cw);
    let base = outer * tiles;
    // At least 16 rows per lane (so the second pass over the ranges is usually the last); enough
    // ranges to fill the GPU and keep loops short.
    let most = k.div_ceil(lanes * 16).max(1);
    let least = k.div_ceil(lanes * MAX_TRIPS);
    let ranges = TARGET_GROUPS.div_ceil(base).clamp(1, most).max(least);
    let per = k.div_ceil(ranges);
    let ranges = k.div_ceil(per);
    let partial = ranges > 1;
    let n = outer * ranges * inner;
    let out = pass_output(&ctx, op, dt, n, partial)?;
    let paired = x.pairs != 0;
    let key = format!("reduce_cols:{}:{dt}:v{}:p{}", op.name(), vec as u8, paired as u8);
    let out_pairs = if partial && is_arg(op) { n } else { 0 };
    let params = ColsParams {
        outer: outer as u32,
        k: k as u32,
        inner: inner as u32,
        off: x.off as u32,
        tiles: tiles as u32,
        ranges: ranges as u32,
        per: per as u32,
        cw: cw as u32,
        pairs: x.pairs as u32,
        out_pairs: out_pairs as u32,
    };
    dispatch(
        &ctx,
        &key,
        || cols_source(op, dt, vec, paired),
        [out.buffer.raw(), x.s.buffer.raw()],
        &params.words(),
        base * ranges,
    )?;
    if !partial {
        return Ok(out);
    }
    reduce_cols(Input { s: &out, off: 0, pairs: out_pairs }, outer, ranges, inner, op)
}

/// Axes of `l` of size > 1, ordered by decreasing stride (memory order for a permuted view).
fn memory_order(l: &Layout) -> Vec<usize> {
    let mut order: Vec<usize> = (0..l.rank()).filter(|&a| l.dims()[a] != 1).collect();
    order.sort_by_key(|&a| std::cmp::Reverse(l.strides()[a]));
    order
}

pub(crate) fn reduce(s: &GpuStorage, l: &Layout, op: ReduceOp, axes: &[usize]) -> Result<GpuStorage> {
    if !s.dtype.is_float() && matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
        return on_host(s, l, |h, hl| h.reduce(hl, op, axes));
    }
    let ctx = s.ctx.clone();
    let out_dt = op.output_dtype(s.dtype);
    // Read the data in memory order when that is contiguous, else copy it in logical order.
    let mut order = memory_order(l);
    let ml = Layout::new(
        order.iter().map(|&a| l.dims()[a]).collect::<Vec<_>>().into(),
        order.iter().map(|&a| l.strides()[a]).collect(),
        l.offset(),
    );
    let copy;
    let (src, off) = if ml.is_contiguous() {
        (s, l.offset())
    } else {
        copy = s.copy_contiguous(l)?;
        order = (0..l.rank()).filter(|&a| l.dims()[a] != 1).collect();
        (&copy, 0)
    };
    // Groups of adjacent axes that are all reduced or all kept: (size, reduced).
    let mut groups: Vec<(usize, bool)> = Vec::new();
    for &a in &order {
        let red = axes.contains(&a);
        match groups.last_mut() {
            Some((n, r)) if *r == red => *n *= l.dims()[a],
            _ => groups.push((l.dims()[a], red)),
        }
    }
    let kept: Vec<usize> = order.iter().copied().filter(|a| !axes.contains(a)).collect();
    let n_out: usize = kept.iter().map(|&a| l.dims()[a]).product();
    let mut cur: Option<GpuStorage> = None;
    while let Some(pos) = groups.iter().rposition(|g| g.1) {
        let outer: usize = groups[..pos].iter().map(|g| g.0).product();
        let inner: usize = groups[pos + 1..].iter().map(|g| g.0).product();
        let k = groups[pos].0;
        let x = match &cur {
            Some(c) => Input { s: c, off: 0, pairs: 0 },
            None => Input { s: src, off, pairs: 0 },
        };
        let r = if inner == 1 { reduce_rows(x, outer, k, op)? } else { reduce_cols(x, outer, k, inner, op)? };
        cur = Some(r);
        groups.remove(pos);
        if pos > 0 && pos < groups.len() {
            let (n, _) = groups.remove(pos);
            groups[pos - 1].0 *= n;
        }
    }
    // The result holds the kept axes in memory order: view them in logical order while casting.
    let dims: Vec<usize> = kept.iter().map(|&a| l.dims()[a]).collect();
    let mut inv: Vec<usize> = (0..kept.len()).collect();
    inv.sort_by_key(|&i| kept[i]);
    let in_order = inv.windows(2).all(|w| w[0] < w[1]);
    let res = match cur {
        Some(r) if in_order => return r.finish(out_dt),
        Some(r) => r,
        // Every reduced axis has size 1: the kept data itself (argmax/argmin: index 0).
        None if is_arg(op) => return GpuStorage::full(&ctx, out_dt, n_out, 0.0),
        None => src.copy_contiguous(&Layout::new(vec![n_out].into(), vec![1], off))?,
    };
    let view = Layout::contiguous(dims).permute("reduce", &inv)?;
    if res.dtype == out_dt {
        res.copy_contiguous(&view)
    } else {
        res.cast(&view, out_dt)
    }
}

/// Elements each lane of the scan kernel holds.
const SCAN_ELEMS: usize = 4;

/// The block-scan kernel over `src_dt` (floats; f32 results).
pub(crate) fn cumsum_source(src_dt: DType) -> String {
    render(
        CUMSUM,
        &[
            ("PARAMS", &ScanParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loader("ld0", "in0", src_dt)),
            ("E", &SCAN_ELEMS.to_string()),
        ],
    )
}

/// Inclusive f32 prefix sums of the rows of the contiguous (rows, k) view of `x` (from `off`).
fn scan_rows(x: &GpuStorage, off: usize, rows: usize, k: usize) -> Result<GpuStorage> {
    let ctx = x.ctx.clone();
    let t = k.div_ceil(SCAN_ELEMS).next_power_of_two().min(256);
    let block = t * SCAN_ELEMS;
    let blocks = k.div_ceil(block);
    let segments = rows * blocks;
    let dt = x.dtype;
    let key = format!("cumsum:{dt}");
    let kernel = ctx.pipelines.get(&ctx, &key, 2, || cumsum_source(dt))?;
    let grid = wgsl::grid(segments.div_ceil(256 / t), 1, ctx.limits.max_compute_workgroups_per_dimension);
    let run = |mode: u32, out: &GpuStorage, offsets: &GpuStorage| {
        let params = ScanParams {
            segments: segments as u32,
            k: k as u32,
            off: off as u32,
            blocks: blocks as u32,
            lanes: t as u32,
            mode,
        }
        .words();
        let bufs = [out.buffer.raw(), x.buffer.raw(), offsets.buffer.raw()];
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params, grid)
    };
    let out = GpuStorage::alloc(&ctx, DType::F32, rows * k)?;
    if blocks == 1 {
        run(0, &out, x)?;
        return Ok(out);
    }
    // Block totals, their inclusive scan, then each block scanned from its offset.
    let totals = GpuStorage::alloc(&ctx, DType::F32, segments)?;
    run(1, &totals, x)?;
    let offsets = scan_rows(&totals, 0, rows, blocks)?;
    run(2, &out, &offsets)?;
    Ok(out)
}

pub(crate) fn cumsum(s: &GpuStorage, l: &Layout, axis: usize) -> Result<GpuStorage> {
    if !s.dtype.is_float() {
        return on_host(s, l, |h, hl| h.cumsum(hl, axis));
    }
    let rank = l.rank();
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let pl = l.permute("cumsum", &perm)?;
    let k = l.dims()[axis];
    let rows = l.elem_count() / k.max(1);
    let copy;
    let (src, off) = if pl.is_contiguous() {
        (s, pl.offset())
    } else {
        copy = s.copy_contiguous(&pl)?;
        (&copy, 0)
    };
    let out = scan_rows(src, off, rows, k)?.finish(s.dtype)?;
    if axis + 1 == rank {
        return Ok(out);
    }
    // `out` holds the permuted order; view it back in the input's axis order and copy.
    let pl = Layout::contiguous(perm.iter().map(|&a| l.dims()[a]).collect::<Vec<_>>());
    let mut inv = vec![0; rank];
    for (i, &a) in perm.iter().enumerate() {
        inv[a] = i;
    }
    out.copy_contiguous(&pl.permute("cumsum", &inv)?)
}
