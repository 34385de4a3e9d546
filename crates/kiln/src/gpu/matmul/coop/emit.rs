//! The kernel source for one `Config`: `coop.wgsl` with its placeholders filled. The pieces, in
//! kernel order: declarations (bf16 line scales, the register sets), the reads of a K slice into
//! registers (checked, or unchecked for interior tiles) and their stores into workgroup memory, the
//! multiply of one staged slice, the K loop around them, the epilogue's stores to C, and the
//! operand readers and bf16 helpers the template declares.

use super::config::{Config, CoopParams, Operand, Out, Probe, Stage, PAD};
use super::emulation::emulation;
use crate::gpu::pointwise::line_maxima;
use crate::gpu::runtime::kernels::render;

const SOURCE: &str = include_str!("coop.wgsl");

/// The sizes every piece reads, derived once from a `Config`.
struct Geometry<'a> {
    c: &'a Config,
    s: u32,
    wg: u32,
    /// Halves in one stage of A and of B.
    sa_stage: u32,
    sb_stage: u32,
    /// Fast extents of the staged tiles and their padded row strides.
    a_tf: u32,
    b_tf: u32,
    lda: u32,
    ldb: u32,
    /// Halves per global read (`w`), per workgroup-memory element (`unit`) and log2 of the latter.
    w: u32,
    unit: u32,
    shift: u32,
    /// Chunks each invocation reads per slice, and the slow-index step between them.
    a_chunks: u32,
    b_chunks: u32,
    a_step: u32,
    b_step: u32,
    bf16: bool,
    /// Operands read and held as 32-bit words (bf16 always, f16 with `Config::words`).
    words: bool,
    /// The type of a register holding one chunk as read.
    reg: &'static str,
}

impl<'a> Geometry<'a> {
    fn of(c: &'a Config) -> Self {
        let (s, wg) = (c.s, c.wg());
        let (sa_stage, sb_stage) = c.stages();
        let (a_ts, a_tf) = c.a_tile();
        let (b_ts, b_tf) = c.b_tile();
        let (w, unit) = (c.stage.chunk(), c.stage.unit());
        let bf16 = c.out.bf16();
        let words = bf16 || c.words;
        Geometry {
            c,
            s,
            wg,
            sa_stage,
            sb_stage,
            a_tf,
            b_tf,
            lda: a_tf + PAD,
            ldb: b_tf + PAD,
            w,
            unit,
            shift: unit.trailing_zeros(),
            a_chunks: a_ts * a_tf / w / wg,
            b_chunks: b_ts * b_tf / w / wg,
            a_step: wg / (a_tf / w),
            b_step: wg / (b_tf / w),
            bf16,
            words,
            // A register holds one chunk as read: 4 halves, or the two words of 4 bf16 (or f16)
            // values (converted when stored, so that a read in flight is not waited on early).
            reg: if words { "vec2<u32>" } else { "vec4<f16>" },
        }
    }

    fn mat(&self, t: &str, role: &str) -> String {
        format!("coop_mat{s}x{s}<{t}, {role}>", s = self.s)
    }

    /// A fragment of `role` at `sa`/`sb[idx]`, stored row-major (`t`) or column-major, rows `ld` apart.
    fn frag(&self, t: bool, role: &str, arr: &str, idx: String, ld: u32) -> String {
        if self.c.emulate {
            format!("vec3<u32>({idx}, {ld}u, {}u)", t as u32)
        } else {
            let (unit, shift) = (self.unit, self.shift);
            let (idx, ld) = if unit == 1 { (idx, ld) } else { (format!("({idx}) >> {shift}u"), ld / unit) };
            format!("{}<{}>(&{arr}[{idx}], {ld}u)", if t { "coopLoadT" } else { "coopLoad" }, self.mat("f16", role))
        }
    }
}

/// The kernel source for `c`.
pub(crate) fn source(c: &Config) -> String {
    assert!(c.well_formed(), "cooperative matmul config {c:?} does not divide evenly");
    let g = Geometry::of(c);
    let (s, wg, unit, w, ldc) = (g.s, g.wg, g.unit, g.w, c.ldc());
    let main = main_loop(&g);
    let epilogue = epilogue(c);
    let decls = declarations(&g);

    // Operand bindings and chunk readers. `base + s * slow_stride + f * fast_stride`.
    // A split reads K up to its own end (`kend`), so a slice past it reads zeros, not the next split.
    let kx = if c.split { "kend" } else { "p.k" };
    let a = reader(c.a, c.stage, g.words, ("p.m", "p.a_so"), (kx, "p.a_sk"));
    let b = reader(c.b, c.stage, g.words, ("p.n", "p.b_so"), (kx, "p.b_sk"));
    let (dst, decls_bf16, set_x) = match c.out {
        Out::F16 if g.words => ("array<f16>", F16_WORDS.to_string(), ""),
        Out::F16 => ("array<f16>", String::new(), ""),
        out => (
            if out == Out::Bf16Pairs { "array<u32>" } else { "array<f32>" },
            bf16_decls(),
            "xa = wid.z * m;\n    xb = wid.z * n;",
        ),
    };
    let (dst, split_decls, k_range, part) = split_parts(c, dst);
    let (lda, ldb) = (g.lda, g.ldb);
    let wa = if c.a.k_fast { format!("wm * {}u", c.tm * s * lda) } else { format!("wm * {}u", c.tm * s) };
    let wb = if c.b.k_fast { format!("wn * {}u", c.tn * s * ldb) } else { format!("wn * {}u", c.tn * s) };
    let num = |v: u32| v.to_string();
    let (enable, zero, sg_param, sg_let, emu) = if c.emulate {
        (
            String::new(),
            format!("array<f32, {}>()", s * s / c.sg),
            String::new(),
            format!("let sg = li / {sgs}u;\n    let lane = li % {sgs}u;", sgs = c.sg),
            emulation(s, c.sg, c.stage),
        )
    } else {
        (
            "enable wgpu_cooperative_matrix;".to_string(),
            format!("coopLoadT<{}>(&sc[0], {ldc}u)", g.mat("f32", "C")),
            "@builtin(subgroup_id) sg: u32,".to_string(),
            String::new(),
            String::new(),
        )
    };
    render(
        SOURCE,
        &[
            // First: the loop holds placeholders of its own.
            ("MAINLOOP", &main),
            ("PARAMS", &CoopParams::wgsl()),
            ("ENABLE", &enable),
            ("ZERO", &zero),
            ("SG_PARAM", &sg_param),
            ("SG_LET", &sg_let),
            ("EMU", &emu),
            ("S", &num(s)),
            ("SG", &num(c.sg)),
            ("WG", &num(wg)),
            ("NSG", &num(c.nsg())),
            ("WM", &num(c.wm)),
            ("WN", &num(c.wn)),
            ("TM", &num(c.tm)),
            ("TN", &num(c.tn)),
            ("BM", &num(c.bm())),
            ("BN", &num(c.bn())),
            ("BK", &num(c.bk)),
            ("SA", &num(2 * g.sa_stage / unit)),
            ("SB", &num(2 * g.sb_stage / unit)),
            (
                "SE",
                match c.stage {
                    Stage::H1 => "f16",
                    Stage::H4 => "vec4<f16>",
                },
            ),
            ("REG", g.reg),
            ("W", &num(w)),
            ("A1", a.scalar_binding()),
            ("B1", b.scalar_binding()),
            ("A_PART", &a.part("a1")),
            ("B_PART", &b.part("b1")),
            ("SA_STAGE", &num(g.sa_stage)),
            ("SB_STAGE", &num(g.sb_stage)),
            ("SC", &num(c.nsg() * s * c.ldc())),
            ("LDA", &num(lda)),
            ("LDB", &num(ldb)),
            ("A_FC", &num(g.a_tf / w)),
            ("B_FC", &num(g.b_tf / w)),
            ("A4", &a.binding),
            ("B4", &b.binding),
            ("A_NS", &a.ns),
            ("A_NF", &a.nf),
            ("A_SS", &a.ss),
            ("A_FS", &a.fs),
            ("A_FULL", &a.full("a4")),
            ("B_NS", &b.ns),
            ("B_NF", &b.nf),
            ("B_SS", &b.ss),
            ("B_FS", &b.fs),
            ("B_FULL", &b.full("b4")),
            ("WA", &wa),
            ("WB", &wb),
            ("DECLS", &decls),
            ("EPILOGUE", &epilogue),
            ("DST", dst),
            ("BF16_DECLS", &decls_bf16),
            ("SPLIT_DECLS", split_decls),
            ("K_RANGE", k_range),
            ("PART", part),
            ("SET_X", set_x),
            ("PUT", &put_fn(c)),
        ],
    )
}

/// The pieces split K changes: the result binding (f32 partial products), the declarations, this
/// workgroup's K range (`kb` to `kk`) and its plane's offset.
fn split_parts<'a>(c: &Config, dst: &'a str) -> (&'a str, &'static str, &'static str, &'static str) {
    if c.split {
        (
            "array<f32>",
            "var<private> kend: u32;\n",
            "    let kb = wid.y * p.kper;\n    let kk = min(p.k, kb + p.kper);\n    kend = kk;",
            " + wid.y * p.part",
        )
    } else {
        (dst, "", "    let kb = 0u;\n    let kk = p.k;", "")
    }
}

/// `DECLS`: for bf16 the line scales of each chunk, then the register sets of the slices in flight.
fn declarations(g: &Geometry) -> String {
    let c = g.c;
    let mut decls = String::new();
    if g.bf16 {
        // Each chunk's lines are the same at every K step: their scales are read once. A k-fast chunk
        // lies along one line (slow index: one scale, splatted where used), an mn-fast chunk across 4
        // (fast index).
        // (A scaled beforehand, `a16`: B's only.)
        for (sc, n, step, k_fast, s0, sl, f, lines, x) in [
            ("sca", if c.a16 { 0 } else { g.a_chunks }, g.a_step, c.a.k_fast, "m0", "a_s", "a_f", "m", "a"),
            ("scb", g.b_chunks, g.b_step, c.b.k_fast, "n0", "b_s", "b_f", "n", "b"),
        ] {
            for i in 0..n {
                let v = if k_fast {
                    format!("line_scale_{x}({s0} + {sl} + {}u, {lines})", i * step)
                } else {
                    let l = |j: u32| format!("line_scale_{x}({s0} + {f} + {j}u, {lines})");
                    format!("vec4<f32>({}, {}, {}, {})", l(0), l(1), l(2), l(3))
                };
                decls += &format!("    let {sc}_{i} = {v};\n");
            }
        }
    }
    // Register sets for the slices in flight (`ahead`), named by set so that no value is copied
    // while its load is in flight.
    let reg = g.reg;
    for set in 0..c.ahead {
        for i in 0..g.a_chunks {
            decls += &format!("    var ra{set}_{i}: {reg};\n");
        }
        for i in 0..g.b_chunks {
            decls += &format!("    var rb{set}_{i}: {reg};\n");
        }
    }
    decls
}

/// Checked reads of the slice at `k0` into register set `set` (any tile, any strides): through
/// `chunk_a`/`chunk_b`, zeros outside.
fn load(g: &Geometry, set: u32) -> String {
    let (c, reg) = (g.c, g.reg);
    // Global (slow, fast) origin of this workgroup's slice for each operand.
    let (a_s0, a_f0) = if c.a.k_fast { ("m0", "k0") } else { ("k0", "m0") };
    let (b_s0, b_f0) = if c.b.k_fast { ("n0", "k0") } else { ("k0", "n0") };
    let mut load = String::new();
    for i in 0..g.a_chunks {
        let v = if c.probe == Probe::NoLoad {
            format!("{reg}({}(k0 & 7u))", if g.words { "" } else { "f16" })
        } else {
            format!("chunk_a(a_base, {a_s0} + a_s + {}u, {a_f0} + a_f)", i * g.a_step)
        };
        load += &format!("        ra{set}_{i} = {v};\n");
    }
    for i in 0..g.b_chunks {
        let v = if c.probe == Probe::NoLoad {
            format!("{reg}({}(k0 & 3u))", if g.words { "" } else { "f16" })
        } else {
            format!("chunk_b(b_base, {b_s0} + b_s + {}u, {b_f0} + b_f)", i * g.b_step)
        };
        load += &format!("        rb{set}_{i} = {v};\n");
    }
    load
}

/// Unchecked reads of interior tiles (`fast`): `fa_i`/`fb_i` are the chunks' element offsets at
/// k0 = 0 (multiples of 4: vector operands only), K advances them by `a_ks`/`b_ks` per element.
/// Slices past K (the unrolled loop's tail) are not read.
fn fast_load(g: &Geometry, set: u32) -> String {
    let mut regs: Vec<(String, String)> = Vec::new();
    for (r, f, buf, ks, n) in [("ra", "fa", "a4", "a_ks", g.a_chunks), ("rb", "fb", "b4", "b_ks", g.b_chunks)] {
        for i in 0..n {
            regs.push((format!("{r}{set}_{i}"), format!("{buf}[({f}_{i} + k0 * {ks}) >> 2u]")));
        }
    }
    let mut load = String::from("        if (k0 < kk) {\n");
    for (r, v) in &regs {
        load += &format!("        {r} = {v};\n");
    }
    load += "        } else {\n";
    for (r, _) in &regs {
        load += &format!("        {r} = {}();\n", g.reg);
    }
    load + "        }\n"
}

/// The element offsets `fa_i`/`fb_i` and per-K steps that `fast_load` reads from.
fn fast_setup(g: &Geometry) -> String {
    let c = g.c;
    let mut setup = String::new();
    // A K-contiguous operand's lines past its edge (rows of A past M, columns of B past N) read its
    // last line instead: in bounds, and they only reach outputs past the edge, which are not stored.
    let origin = |k_fast: bool, (mn0, mn): (&str, &str), sl: String, f: &str| {
        if k_fast {
            format!("min({mn0} + {sl}, {mn} - 1u) * ss + {f}")
        } else {
            format!("({sl}) * ss + {mn0} + {f}")
        }
    };
    // Slow stride and per-K step of each operand: A (M: p.a_so, K: p.a_sk), B (K: p.b_sk, N: p.b_so).
    let (a_ss, a_ks) = if c.a.k_fast { ("p.a_so", "1u") } else { ("p.a_sk", "p.a_sk") };
    let (b_ss, b_ks) = if c.b.k_fast { ("p.b_so", "1u") } else { ("p.b_sk", "p.b_sk") };
    setup += &format!("        let a_ks = {a_ks};\n        let b_ks = {b_ks};\n        var ss = {a_ss};\n");
    for i in 0..g.a_chunks {
        let origin = origin(c.a.k_fast, ("m0", "m"), format!("a_s + {}u", i * g.a_step), "a_f");
        setup += &format!("        let fa_{i} = a_base + {origin};\n");
    }
    setup += &format!("        ss = {b_ss};\n");
    for i in 0..g.b_chunks {
        let origin = origin(c.b.k_fast, ("n0", "n"), format!("b_s + {}u", i * g.b_step), "b_f");
        setup += &format!("        let fb_{i} = b_base + {origin};\n");
    }
    setup
}

/// Stores register set `set` into the workgroup buffer `so` (bf16: scaled and rounded to f16; f16
/// words and an `a16` A: unpacked).
fn store(g: &Geometry, set: u32) -> String {
    let c = g.c;
    let (unit, shift) = (g.unit, g.shift);
    let mut store = String::new();
    for (name, reg, sc, k_fast, n, step, ld, st, stage, pre) in [
        ("sa", "ra", "sca", c.a.k_fast, g.a_chunks, g.a_step, g.lda, "a_st", g.sa_stage, c.a16),
        ("sb", "rb", "scb", c.b.k_fast, g.b_chunks, g.b_step, g.ldb, "b_st", g.sb_stage, false),
    ] {
        for i in 0..n {
            // bf16: the 4 values scaled by their lines' powers of two and rounded to f16 (A already
            // is with `a16`: its words hold f16 values).
            let v = match (g.bf16, k_fast) {
                (true, _) if c.probe == Probe::NoConv || pre => format!("f16_h4({reg}{set}_{i})"),
                (false, _) if g.words => format!("f16_h4({reg}{set}_{i})"),
                (false, _) => format!("{reg}{set}_{i}"),
                (true, true) => format!("bf16_h4({reg}{set}_{i}, vec4<f32>({sc}_{i}))"),
                (true, false) => format!("bf16_h4({reg}{set}_{i}, {sc}_{i})"),
            };
            if unit > 1 {
                let off = i * step * ld;
                store += &format!("        {name}[(so * {stage}u + {st} + {off}u) >> {shift}u] = {v};\n");
                continue;
            }
            store += &format!("        {{\n        let h = {v};\n");
            for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                store += &format!("        {name}[so * {stage}u + {st} + {}u] = h.{comp};\n", i * step * ld + j as u32);
            }
            store += "        }\n";
        }
    }
    store
}

/// One K slice: for each s-deep step, the subgroup's B fragments, then each A fragment against them.
/// Row-major tiles are read with coopLoadT: A staged [m][k] (k fast), B staged [k][n] (n fast).
fn compute(g: &Geometry) -> String {
    let (c, s, lda, ldb) = (g.c, g.s, g.lda, g.ldb);
    let mma = if c.emulate { "emu_mma" } else { "coopMultiplyAdd" };
    let lane_arg = if c.emulate { ", lane" } else { "" };
    let (a_t, b_t) = (c.a.k_fast, !c.b.k_fast);
    let mut compute = String::new();
    for ks in 0..c.bk / s {
        let kq = ks * s;
        compute += "        {\n";
        for j in 0..c.tn {
            let off = if c.b.k_fast { j * s * ldb + kq } else { kq * ldb + j * s };
            compute +=
                &format!("            let b_{j} = {};\n", g.frag(b_t, "B", "sb", format!("sb0 + wb + {off}u"), ldb));
        }
        for i in 0..c.tm {
            let off = if c.a.k_fast { i * s * lda + kq } else { kq * lda + i * s };
            compute +=
                &format!("            let a_{i} = {};\n", g.frag(a_t, "A", "sa", format!("sa0 + wa + {off}u"), lda));
            for j in 0..c.tn {
                compute += &if c.probe == Probe::NoMma {
                    // Keep the fragments alive without multiplying: a use behind a uniform condition that is
                    // never true (p.frag is the matrix size).
                    if j == 0 && !c.emulate {
                        format!("            if (p.frag == 0u) {{ c_{i}_{j} = {mma}(a_{i}, b_{j}, c_{i}_{j}{lane_arg}); }}\n")
                    } else {
                        String::new()
                    }
                } else {
                    format!("            c_{i}_{j} = {mma}(a_{i}, b_{j}, c_{i}_{j}{lane_arg});\n")
                };
            }
        }
        compute += "        }\n";
    }
    compute
}

/// The K loop, over `ahead` register sets and two workgroup buffers, reading with `load`. Step `t`
/// (slice t in buffer t % 2): read slice t + ahead into set t % ahead, multiply buffer t % 2, store
/// set (t + 1) % ahead (slice t + 1, read `ahead - 1` steps earlier) into buffer (t + 1) % 2, one
/// barrier. Each read thus has `ahead - 1` whole steps, and the time of the current step's
/// multiplies, to arrive. The loop is unrolled by lcm(ahead, 2) so every set and buffer index is a
/// constant; slices past K read zeros (checked reads) or are skipped (fast reads).
fn k_loop(g: &Geometry, compute: &str, load: &dyn Fn(u32) -> String) -> String {
    let c = g.c;
    let (bk, sas, sbs, ahead) = (c.bk, g.sa_stage, g.sb_stage, c.ahead);
    let unroll = if ahead % 2 == 0 { ahead } else { 2 * ahead };
    let barrier = if c.probe == Probe::NoBarrier { "" } else { "        workgroupBarrier();\n" };
    let mut main = format!("    k0 = kb;\n{}    so = 0u;\n{}", load(0), store(g, 0));
    for set in 1..ahead {
        main += &format!("    k0 = kb + {}u;\n{}", set * bk, load(set));
    }
    main += "    workgroupBarrier();\n";
    let mut body = String::new();
    for u in 0..unroll {
        body += &format!(
            "        {{\n        let sa0 = {}u;\n        let sb0 = {}u;\n        k0 = kb + (t + {}u) * {bk}u;\n{}{compute}        so = {}u;\n{}{barrier}        }}\n",
            (u % 2) * sas,
            (u % 2) * sbs,
            u + ahead,
            load(u % ahead),
            (u + 1) % 2,
            store(g, (u + 1) % ahead),
        );
    }
    main + &format!("    for (var t = 0u; t < steps; t += {unroll}u) {{\n{body}    }}\n")
}

/// `MAINLOOP`: the accumulators, then the K loop on checked reads, or for `fast` configs with vector
/// operands a copy on unchecked reads that interior workgroups take.
fn main_loop(g: &Geometry) -> String {
    let c = g.c;
    let mut accs = String::new();
    for i in 0..c.tm {
        for j in 0..c.tn {
            accs += &format!("    var c_{i}_{j} = zero;\n");
        }
    }
    let compute = compute(g);
    let checked = |set: u32| load(g, set);
    let mut main =
        format!("    var k0 = 0u;\n    var so = 0u;\n    workgroupBarrier();\n    let zero = {{{{ZERO}}}};\n{accs}");
    if c.fast && c.a.vec && c.b.vec {
        // Workgroup-uniform (`&`, not `&&`: naga lowers a short-circuit into a local variable, which
        // its uniformity analysis takes as non-uniform): the coop ops of both branches stay in
        // uniform control flow.
        // A K-contiguous operand's edge tiles read on the fast path too (`fast_setup`): few-row
        // products (any row count) are all edge tiles.
        let whole = |k_fast: bool, e: &str| if k_fast { String::new() } else { e.to_string() };
        main += &format!(
            "    let interior = {}{}(kk % {bk}u == 0u);\n    if (interior) {{\n{}{}    }} else {{\n{}    }}\n",
            whole(c.a.k_fast, &format!("(m0 + {}u <= m) & ", c.bm())),
            whole(c.b.k_fast, &format!("(n0 + {}u <= n) & ", c.bn())),
            fast_setup(g),
            k_loop(g, &compute, &|set| fast_load(g, set)),
            k_loop(g, &compute, &checked),
            bk = c.bk,
        );
    } else {
        main += &k_loop(g, &compute, &checked);
    }
    main
}

/// `EPILOGUE`: each accumulator tile: every subgroup stores it into its slot of `sc`, then all
/// write them out.
fn epilogue(c: &Config) -> String {
    let s = c.s;
    let ldc = c.ldc();
    let slot = s * ldc;
    let mut epilogue = String::new();
    for i in 0..c.tm {
        for j in 0..c.tn {
            let acc = format!("c_{i}_{j}");
            let store = if c.emulate {
                format!("emu_store({acc}, sg * {slot}u, {ldc}u, lane);")
            } else {
                format!("coopStoreT({acc}, &sc[sg * {slot}u], {ldc}u);")
            };
            epilogue += &format!(
                "    {store}\n    workgroupBarrier();\n    put(li, m0 + {}u, n0 + {}u, m, n, out);\n    workgroupBarrier();\n",
                i * s,
                j * s
            );
        }
    }
    epilogue
}

/// How a chunk reader sees one operand: extents and strides of its slow and fast dims.
struct Reader {
    binding: String,
    ns: String,
    nf: String,
    ss: String,
    fs: String,
    vec: bool,
    stage: Stage,
    /// 16-bit values (bf16, or f16 with `Config::words`), read as the 32-bit words that hold them.
    words: bool,
}

impl Reader {
    /// The whole-chunk read of `vec` variants (the fast stride is 1 and `e` a multiple of the chunk).
    fn full(&self, buf: &str) -> String {
        let w = self.stage.chunk();
        if self.vec {
            format!("if (f + {w}u <= nf) {{ return {buf}[e >> {}u]; }}", w.trailing_zeros())
        } else {
            String::new()
        }
    }
    /// The element type of the one-at-a-time binding.
    fn scalar_binding(&self) -> &'static str {
        if self.words {
            "array<u32>"
        } else {
            "array<f16>"
        }
    }
    /// The element-by-element read of a chunk (edges, general strides): zeros past the fast extent.
    fn part(&self, buf: &str) -> String {
        if self.words {
            // Value j's 16 bits go to half j % 2 of word j / 2.
            return format!(
                "for (var j = 0u; j < 4u; j++) {{
            if (f + j < nf) {{
                let i = e + j * fs;
                let h = ({buf}[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu;
                v[j >> 1u] |= h << ((j & 1u) * 16u);
            }}
        }}"
            );
        }
        format!(
            "for (var j = 0u; j < 4u; j++) {{
            if (f + j < nf) {{ v[j] = {buf}[e + j * fs]; }}
        }}"
        )
    }
}

/// `mn` and `k` are (extent, stride) parameter expressions of the operand's M-or-N dim and K dim.
fn reader(o: Operand, stage: Stage, words: bool, mn: (&str, &str), k: (&str, &str)) -> Reader {
    let (slow, fast) = if o.k_fast { (mn, k) } else { (k, mn) };
    let vec_ty = if words { "array<vec2<u32>>" } else { "array<vec4<f16>>" };
    Reader {
        stage,
        words,
        binding: if o.vec { vec_ty.into() } else { "array<u32>".into() },
        ns: slow.0.into(),
        nf: fast.0.into(),
        ss: slow.1.into(),
        fs: if o.vec { "1u".into() } else { fast.1.into() },
        vec: o.vec,
    }
}

/// The conversion of f16 kernels with `Config::words`: four halves (two words, low half first) as
/// a `vec4<f16>`, exactly (naga's `bitcast` keeps the component width, so through f32).
const F16_WORDS: &str = "fn f16_h4(w: vec2<u32>) -> vec4<f16> {
    return vec4<f16>(vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)));
}
";

/// Declarations of bf16 kernels: the line maxima of A (`mx`) and of B (`mxb`, which a weight keeps
/// between products: `plan.rs`), where this batch entry's lines start in them, the scale exponent
/// of a line and the scaling back of a result.
fn bf16_decls() -> String {
    format!(
        "@group(0) @binding(5) var<storage, read> mx: array<u32>;
@group(0) @binding(6) var<storage, read> mxb: array<u32>;
var<private> xa: u32;
var<private> xb: u32;

{}
{}
// The power of two 2^-e that a line's values are multiplied by when staged (1 past the last line):
// `bits`, the line's maximum, is read only for a line inside the operand.
fn line_scale(line: u32, lines: u32, bits: u32) -> f32 {{
    if (line >= lines) {{
        return 1.0;
    }}
    // e is within [-110, 115]: the exponent field stays normal.
    return bitcast<f32>(u32(127 - line_exp(bits)) << 23u);
}}
fn line_scale_a(line: u32, lines: u32) -> f32 {{
    return line_scale(line, lines, mx[xa + min(line, lines - 1u)]);
}}
fn line_scale_b(line: u32, lines: u32) -> f32 {{
    return line_scale(line, lines, mxb[xb + min(line, lines - 1u)]);
}}

// Four bf16 values (two words, low half first) times their scales, as f16: every finite value fits
// (a line's maximum is scaled into [2^14, 2^15)); Inf and NaN pass through.
fn bf16_h4(w: vec2<u32>, s: vec4<f32>) -> vec4<f16> {{
    let v = vec4<f32>(
        bitcast<f32>(w.x << 16u),
        bitcast<f32>(w.x & 0xffff0000u),
        bitcast<f32>(w.y << 16u),
        bitcast<f32>(w.y & 0xffff0000u),
    );
    return vec4<f16>(v * s);
}}
{}
// `v * 2^(ea + eb)` in two steps of the same sign: no intermediate overflows unless the result does.
fn unscale(v: f32, row: u32, col: u32) -> f32 {{
    let e = line_exp(mx[xa + row]) + line_exp(mxb[xb + col]);
    let h = e / 2;
    return ldexp(ldexp(v, h), e - h);
}}
",
        crate::gpu::runtime::wgsl::PRELUDE,
        line_maxima::LINE_EXP,
        F16_WORDS,
    )
}

/// `fn put`: writes one accumulator tile of every subgroup from its slot of `sc` to C; `row0` and
/// `col0` place the tile within subgroup 0's block (called between barriers, after each subgroup
/// stored the tile into its slot).
fn put_fn(c: &Config) -> String {
    let (s, wg) = (c.s, c.wg());
    let (ss, slot, ldc, wmt, wnt, wn) = (s * s, s * c.ldc(), c.ldc(), c.tm * s, c.tn * s, c.wn);
    let pairs = c.out == Out::Bf16Pairs && !c.split;
    let per = c.nsg() * ss / wg / if pairs { 2 } else { 1 };
    let (tile, width, col) = if pairs { (ss / 2, s / 2, "2u * (x % W2)") } else { (ss, s, "x % S") };
    let store = match c.out {
        // A split's partial product: f32, scaled back for bf16 (the planes are summed afterwards).
        Out::F16 if c.split => "dst[out + row * n + col] = sc[i];",
        _ if c.split => "dst[out + row * n + col] = unscale(sc[i], row, col);",
        Out::F16 => "dst[out + row * n + col] = f16(sc[i]);",
        Out::Bf16ViaF32 => "dst[out + row * n + col] = unscale(sc[i], row, col);",
        // N is even here, so `col + 1` is inside the row and the word holds no other row's element.
        Out::Bf16Pairs => {
            "dst[(out + row * n + col) >> 1u] = bf16_bits(unscale(sc[i], row, col)) | (bf16_bits(unscale(sc[i + 1u], row, col + 1u)) << 16u);"
        }
    };
    let col = col.replace("W2", &format!("{width}u")).replace('S', &format!("{s}u"));
    format!(
        "fn put(li: u32, row0: u32, col0: u32, m: u32, n: u32, out: u32) {{
    for (var q = 0u; q < {per}u; q++) {{
        let x = li + q * {wg}u;
        let g = x / {tile}u;
        let r = (x % {tile}u) / {width}u;
        let c = {col};
        let row = row0 + (g / {wn}u) * {wmt}u + r;
        let col = col0 + (g % {wn}u) * {wnt}u + c;
        if (row < m && col < n) {{
            let i = g * {slot}u + r * {ldc}u + c;
            {store}
        }}
    }}
}}
"
    )
}
