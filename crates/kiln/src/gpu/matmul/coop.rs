//! f16 matmul on cooperative matrices (issue 4): tensor cores through `VK_KHR_cooperative_matrix`
//! (16x16x16 on NVIDIA), simdgroup matrices on Apple GPUs (8x8x8), both reached through wgpu's
//! `EXPERIMENTAL_COOPERATIVE_MATRIX` and naga's `coop_mat` WGSL types.
//!
//! [`try_matmul_coop`] is the entry the generic matmul calls first for f16: it answers `None` when
//! this path does not apply (adapter without the feature, SHADER_F16 or SUBGROUP; no f16 x f16 -> f32
//! configuration of size 16 or 8; a varying subgroup size; shapes too small or too large for the
//! grid) and otherwise runs the kernel in `coop.wgsl`, described there.
//!
//! Tiles: each subgroup keeps `tm x tn` accumulators of `s x s` f32; `wm x wn` subgroups make a
//! workgroup tile of `(wm*tm*s) x (wn*tn*s)`; K advances `bk` at a time through two workgroup buffers.
//! `Large` (16x16: 128x128 tile, 4 subgroups of 64x64, 16 accumulators each) is for big outputs;
//! `Wide` is the same tile over 8 subgroups of 64x32; `Small` (16x16: 64x64, 4 subgroups of 32x32)
//! keeps enough workgroups in flight when the output is small. `KILN_COOP=0` turns the path off;
//! `KILN_COOP_TILE=large|wide|small` forces a preset (for benchmarks).
//!
//! On Vulkan (issue 22) tiles are staged as `vec4<f16>` (`Stage::H4`, `KILN_COOP_STAGE=h1|h4`);
//! interior workgroups run a copy of the K loop with unchecked reads (`fast`), and the automatic
//! choice takes 8 subgroups of 4x4 accumulators (128x256 tiles, 16-deep K slices, four in flight)
//! where the output has 1.5 waves of them, else 4 subgroups of 4x4 (128x128, 32-deep slices, two in
//! flight), else the presets (docs/PERFORMANCE.md, session 8: 1.5x the session-6 choice on an H200).
//! Every choice can be spelled out with [`CoopSpec`] through [`matmul_coop_spec`] (tests,
//! `examples/coop_sweep.rs`).

use super::problem::MatmulShape;
use crate::gpu::pointwise::line_maxima;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl;
use crate::gpu::runtime::GpuStorage;
use crate::layout::collapse;
use crate::storage::Storage;
use crate::{DType, Error, Layout, Result, Tensor};
use std::sync::Arc;

const SOURCE: &str = include_str!("coop.wgsl");

/// Halves of padding after each staged tile row: keeps rows 16-byte aligned (cooperative loads need
/// it) and spreads the rows of one fragment over different memory banks.
const PAD: u32 = 8;
/// Below this many multiply-adds (or with M or N under `MIN_SIDE`) the generic kernel is used.
const MIN_WORK: usize = 32 * 32 * 32;
const MIN_SIDE: usize = 16;
/// bf16 takes the cooperative path from this many rows and columns on.
const MIN_SIDE_BF16: usize = 64;
/// The automatic choice on Vulkan takes 128x256 tiles from this many on (about 1.5 waves of an
/// H100/H200's 132 SMs; fewer: 128x128 tiles, two workgroups per SM).
const WIDE_MIN_TILES: usize = 200;
/// `Auto` picks `Small` when `Large` would make fewer workgroups than this.
const LARGE_MIN_TILES: usize = 256;

/// Which tile preset to run (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoopTile {
    Auto,
    Large,
    /// Like `Large` with 8 subgroups (2x4) of 4x2 accumulators each: half the registers per
    /// invocation and twice the subgroups to hide memory latency.
    Wide,
    Small,
}

/// How one operand is staged: `k_fast` when its contiguous dim is K (row-major A, transposed B);
/// `vec` when 4 halves can be read at once (fast stride 1, offset and other strides multiples of 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Operand {
    pub(crate) k_fast: bool,
    pub(crate) vec: bool,
}

/// How operand tiles sit in workgroup memory.
/// - `H1`: an `array<f16>`, written one half at a time: every backend, the only form Metal's
///   `simdgroup_load` takes;
/// - `H4`: an `array<vec4<f16>>`, written 8 bytes at a time; fragments loaded through a pointer to a
///   `vec4<f16>` (stride in vectors), as llama.cpp's Vulkan `mul_mm` does with `f16vec2`. Vulkan only.
///
/// (Raw `vec4<u32>` staging loaded as f16 fragments passes naga but NVIDIA's compiler rejects it:
/// "NVVM compilation failed", then a lost device, on driver 580.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    H1,
    H4,
}

impl Stage {
    /// Halves per workgroup-memory element.
    fn unit(self) -> u32 {
        match self {
            Stage::H1 => 1,
            Stage::H4 => 4,
        }
    }
    /// Halves per global read (one chunk).
    pub(crate) fn chunk(self) -> u32 {
        4
    }
    fn name(self) -> &'static str {
        match self {
            Stage::H1 => "h1",
            Stage::H4 => "h4",
        }
    }
}

/// One specialisation of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Config {
    /// Cooperative matrix size (16 or 8).
    pub(crate) s: u32,
    /// Subgroup size the workgroup is built from.
    pub(crate) sg: u32,
    /// Subgroups along M and N.
    pub(crate) wm: u32,
    pub(crate) wn: u32,
    /// Accumulator tiles per subgroup along M and N.
    pub(crate) tm: u32,
    pub(crate) tn: u32,
    /// K slice per stage.
    pub(crate) bk: u32,
    /// Workgroup-memory layout of the staged tiles.
    pub(crate) stage: Stage,
    /// Slices in flight in registers while one is multiplied: 1 (the next slice), 2 (`deep`), 3 or 4,
    /// each in its own register set (see the K loop in `source`).
    pub(crate) ahead: u32,
    /// Interior workgroups (whole tiles, K a multiple of the slice, vector operands) run a copy of
    /// the K loop whose reads have no bounds checks and whose addresses are computed once.
    pub(crate) fast: bool,
    /// Sweep-only ablations that make the result wrong, to see where the time goes (`Probe`).
    pub(crate) probe: Probe,
    pub(crate) a: Operand,
    pub(crate) b: Operand,
    /// Cooperative ops replaced by plain WGSL over workgroup memory with the same data layout (a
    /// test of everything around them on adapters without cooperative matrices, e.g. lavapipe).
    pub(crate) emulate: bool,
    /// bf16 operands and result (see [`Out`]): the operands are read as stored (bf16 pairs in 32-bit
    /// words) and converted to f16 when staged, each line (row of A, column of B) multiplied by a
    /// power of two from its maximum (`pointwise/line_maxima.rs`), which the epilogue undoes.
    pub(crate) out: Out,
}

/// Ablations for `examples/coop_sweep.rs` (results are wrong with any but `None`): `NoLoad` reads no
/// global memory in the K loop (the staged values are constants), `NoBarrier` drops the K loop's
/// barrier, `NoMma` drops the multiply-adds (fragments are still loaded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    None,
    NoLoad,
    NoBarrier,
    NoMma,
}

/// The result a kernel writes: f16 (f16 operands), or for bf16 operands bf16 written in pairs of
/// one 32-bit word (N even: no two invocations write one word) or f32 (odd N; cast afterwards).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Out {
    F16,
    Bf16Pairs,
    Bf16ViaF32,
}

impl Out {
    fn bf16(self) -> bool {
        self != Out::F16
    }
}

impl Config {
    /// The preset `tile` (`Auto` means `Large`) for matrices of size `s` and subgroups of `sg`.
    pub(crate) fn preset(tile: CoopTile, s: u32, sg: u32, a: Operand, b: Operand) -> Config {
        // 8x8 matrices (Apple) hold a quarter of the work of a 16x16 one: same tile counts, half the
        // edge, so the large preset is 64x64 and fits Apple's 32 KiB of workgroup memory.
        let (wm, wn, tm, tn) = match tile {
            CoopTile::Small => (2, 2, 2, 2),
            CoopTile::Wide => (2, 4, 4, 2),
            CoopTile::Auto | CoopTile::Large => (2, 2, 4, 4),
        };
        Config {
            s,
            sg,
            wm,
            wn,
            tm,
            tn,
            bk: 32,
            stage: Stage::H1,
            ahead: 1,
            fast: false,
            probe: Probe::None,
            a,
            b,
            emulate: false,
            out: Out::F16,
        }
    }

    fn bm(&self) -> u32 {
        self.wm * self.tm * self.s
    }
    fn bn(&self) -> u32 {
        self.wn * self.tn * self.s
    }
    fn nsg(&self) -> u32 {
        self.wm * self.wn
    }
    fn wg(&self) -> u32 {
        self.nsg() * self.sg
    }
    /// (slow, fast) extents of the staged A tile.
    fn a_tile(&self) -> (u32, u32) {
        if self.a.k_fast {
            (self.bm(), self.bk)
        } else {
            (self.bk, self.bm())
        }
    }
    fn b_tile(&self) -> (u32, u32) {
        if self.b.k_fast {
            (self.bn(), self.bk)
        } else {
            (self.bk, self.bn())
        }
    }
    /// Row stride of the epilogue tiles: padded against bank conflicts, except with 8 subgroups,
    /// where the padding would push the 16x16 kernel past 48 KiB.
    fn ldc(&self) -> u32 {
        if self.nsg() > 4 {
            self.s
        } else {
            self.s + 4
        }
    }
    /// Halves in one stage of each operand.
    fn stages(&self) -> (u32, u32) {
        let (sa, fa) = self.a_tile();
        let (sb, fb) = self.b_tile();
        (sa * (fa + PAD), sb * (fb + PAD))
    }
    /// Bytes of workgroup memory the kernel declares.
    pub(crate) fn workgroup_bytes(&self) -> u32 {
        let (a, b) = self.stages();
        2 * (a + b) * 2 + self.nsg() * self.s * self.ldc() * 4
    }

    pub(crate) fn key(&self) -> String {
        let op = |o: Operand| format!("{}{}", if o.k_fast { "k" } else { "mn" }, if o.vec { "x4" } else { "x1" });
        format!(
            "matmul_coop{}{}:{s}x{s}:sg{}:{}x{}:{}x{}:bk{}:{}{}{}{}:A={}:B={}",
            if self.emulate { "_emulated" } else { "" },
            match self.out {
                Out::F16 => "",
                Out::Bf16Pairs => "_bf16",
                Out::Bf16ViaF32 => "_bf16f32",
            },
            self.sg,
            self.wm,
            self.wn,
            self.tm,
            self.tn,
            self.bk,
            self.stage.name(),
            match self.ahead {
                1 => String::new(),
                2 => ":deep".into(),
                n => format!(":a{n}"),
            },
            if self.fast { ":fast" } else { "" },
            if self.probe == Probe::None { String::new() } else { format!(":{:?}", self.probe) },
            op(self.a),
            op(self.b),
            s = self.s
        )
    }

    /// Whether the tile shapes divide evenly among the invocations (true for every preset).
    fn well_formed(&self) -> bool {
        let wg = self.wg();
        let w = self.stage.chunk();
        let ok = |(slow, fast): (u32, u32)| {
            fast.is_multiple_of(w) && wg.is_multiple_of(fast / w) && (slow * fast / w).is_multiple_of(wg)
        };
        // Vector staging needs every fragment to start on a whole element: the tile edges (multiples
        // of `s`) and the padded rows must be multiples of the element.
        let unit = self.stage.unit();
        matches!(self.s, 8 | 16)
            && (1..=4).contains(&self.ahead)
            && self.s.is_multiple_of(unit)
            && PAD.is_multiple_of(unit)
            && self.bk.is_multiple_of(self.s)
            && (self.s * self.s).is_multiple_of(self.sg)
            && ok(self.a_tile())
            && ok(self.b_tile())
    }
}

/// The kernel source for `c`.
pub(crate) fn source(c: &Config) -> String {
    assert!(c.well_formed(), "cooperative matmul config {c:?} does not divide evenly");
    let (s, wg) = (c.s, c.wg());
    let (sa_stage, sb_stage) = c.stages();
    let (a_ts, a_tf) = c.a_tile();
    let (b_ts, b_tf) = c.b_tile();
    let (lda, ldb) = (a_tf + PAD, b_tf + PAD);
    let (w, unit) = (c.stage.chunk(), c.stage.unit());
    let shift = unit.trailing_zeros();
    let (a_chunks, b_chunks) = (a_ts * a_tf / w / wg, b_ts * b_tf / w / wg);
    let (a_step, b_step) = (wg / (a_tf / w), wg / (b_tf / w));
    let bf16 = c.out.bf16();
    // A register holds one chunk as read: 4 halves, or for bf16 the two words of 4 bf16 values
    // (converted when stored, so that a read in flight is not waited on early).
    let reg = if bf16 { "vec2<u32>" } else { "vec4<f16>" };
    let mat = |t: &str, role: &str| format!("coop_mat{s}x{s}<{t}, {role}>");
    // A fragment of `role` at `sa`/`sb[idx]`, stored row-major (`t`) or column-major, rows `ld` apart.
    let frag = |t: bool, role: &str, arr: &str, idx: String, ld: u32| {
        if c.emulate {
            format!("vec3<u32>({idx}, {ld}u, {}u)", t as u32)
        } else {
            let (idx, ld) = if unit == 1 { (idx, ld) } else { (format!("({idx}) >> {shift}u"), ld / unit) };
            format!("{}<{}>(&{arr}[{idx}], {ld}u)", if t { "coopLoadT" } else { "coopLoad" }, mat("f16", role))
        }
    };
    let mma = if c.emulate { "emu_mma" } else { "coopMultiplyAdd" };
    let lane_arg = if c.emulate { ", lane" } else { "" };

    let mut decls = String::new();
    let mut accs = String::new();
    for i in 0..c.tm {
        for j in 0..c.tn {
            accs += &format!("    var c_{i}_{j} = zero;\n");
        }
    }
    if bf16 {
        // Each chunk's lines are the same at every K step: their scales are read once. A k-fast chunk
        // lies along one line (slow index: one scale, splatted where used), an mn-fast chunk across 4
        // (fast index).
        for (sc, n, step, k_fast, s0, sl, f, lines, x) in [
            ("sca", a_chunks, a_step, c.a.k_fast, "m0", "a_s", "a_f", "m", "xa"),
            ("scb", b_chunks, b_step, c.b.k_fast, "n0", "b_s", "b_f", "n", "xb"),
        ] {
            for i in 0..n {
                let v = if k_fast {
                    format!("line_scale({x}, {s0} + {sl} + {}u, {lines})", i * step)
                } else {
                    let l = |j: u32| format!("line_scale({x}, {s0} + {f} + {j}u, {lines})");
                    format!("vec4<f32>({}, {}, {}, {})", l(0), l(1), l(2), l(3))
                };
                decls += &format!("    let {sc}_{i} = {v};\n");
            }
        }
    }
    // Register sets for the slices in flight (`ahead`), named by set so that no value is copied
    // while its load is in flight.
    let sets = c.ahead;
    for set in 0..sets {
        for i in 0..a_chunks {
            decls += &format!("    var ra{set}_{i}: {reg};\n");
        }
        for i in 0..b_chunks {
            decls += &format!("    var rb{set}_{i}: {reg};\n");
        }
    }

    // Global (slow, fast) origin of this workgroup's slice for each operand.
    let (a_s0, a_f0) = if c.a.k_fast { ("m0", "k0") } else { ("k0", "m0") };
    let (b_s0, b_f0) = if c.b.k_fast { ("n0", "k0") } else { ("k0", "n0") };
    // Checked reads (any tile, any strides): through `chunk_a`/`chunk_b`, zeros outside.
    let load = |set: u32| {
        let mut load = String::new();
        for i in 0..a_chunks {
            let v = if c.probe == Probe::NoLoad {
                format!("{reg}({}(k0 & 7u))", if bf16 { "" } else { "f16" })
            } else {
                format!("chunk_a(a_base, {a_s0} + a_s + {}u, {a_f0} + a_f)", i * a_step)
            };
            load += &format!("        ra{set}_{i} = {v};\n");
        }
        for i in 0..b_chunks {
            let v = if c.probe == Probe::NoLoad {
                format!("{reg}({}(k0 & 3u))", if bf16 { "" } else { "f16" })
            } else {
                format!("chunk_b(b_base, {b_s0} + b_s + {}u, {b_f0} + b_f)", i * b_step)
            };
            load += &format!("        rb{set}_{i} = {v};\n");
        }
        load
    };
    // Unchecked reads of interior tiles (`fast`): `fa_i`/`fb_i` are the chunks' element offsets at
    // k0 = 0 (multiples of 4: vector operands only), K advances them by `a_ks`/`b_ks` per element.
    // Slices past K (the unrolled loop's tail) are not read.
    let fast_load = |set: u32| {
        let mut regs: Vec<(String, String)> = Vec::new();
        for (r, f, buf, ks, n) in [("ra", "fa", "a4", "a_ks", a_chunks), ("rb", "fb", "b4", "b_ks", b_chunks)] {
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
            load += &format!("        {r} = {reg}();\n");
        }
        load + "        }\n"
    };
    let fast_setup = || {
        let mut setup = String::new();
        let origin = |k_fast: bool, mn0: &str, sl: String, f: &str| {
            if k_fast {
                format!("({mn0} + {sl}) * ss + {f}")
            } else {
                format!("({sl}) * ss + {mn0} + {f}")
            }
        };
        // Slow stride and per-K step of each operand: A (M: p.a_so, K: p.a_sk), B (K: p.b_sk, N: p.b_so).
        let (a_ss, a_ks) = if c.a.k_fast { ("p.a_so", "1u") } else { ("p.a_sk", "p.a_sk") };
        let (b_ss, b_ks) = if c.b.k_fast { ("p.b_so", "1u") } else { ("p.b_sk", "p.b_sk") };
        setup += &format!("        let a_ks = {a_ks};\n        let b_ks = {b_ks};\n        var ss = {a_ss};\n");
        for i in 0..a_chunks {
            let origin = origin(c.a.k_fast, "m0", format!("a_s + {}u", i * a_step), "a_f");
            setup += &format!("        let fa_{i} = a_base + {origin};\n");
        }
        setup += &format!("        ss = {b_ss};\n");
        for i in 0..b_chunks {
            let origin = origin(c.b.k_fast, "n0", format!("b_s + {}u", i * b_step), "b_f");
            setup += &format!("        let fb_{i} = b_base + {origin};\n");
        }
        setup
    };
    let store = |set: u32| {
        let mut store = String::new();
        for (name, reg, sc, k_fast, n, step, ld, st, stage) in [
            ("sa", "ra", "sca", c.a.k_fast, a_chunks, a_step, lda, "a_st", sa_stage),
            ("sb", "rb", "scb", c.b.k_fast, b_chunks, b_step, ldb, "b_st", sb_stage),
        ] {
            for i in 0..n {
                // bf16: the 4 values scaled by their lines' powers of two and rounded to f16.
                let v = match (bf16, k_fast) {
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
                    store +=
                        &format!("        {name}[so * {stage}u + {st} + {}u] = h.{comp};\n", i * step * ld + j as u32);
                }
                store += "        }\n";
            }
        }
        store
    };

    // One K slice: for each s-deep step, the subgroup's B fragments, then each A fragment against them.
    // Row-major tiles are read with coopLoadT: A staged [m][k] (k fast), B staged [k][n] (n fast).
    let (a_t, b_t) = (c.a.k_fast, !c.b.k_fast);
    let mut compute = String::new();
    for ks in 0..c.bk / s {
        let kq = ks * s;
        compute += "        {\n";
        for j in 0..c.tn {
            let off = if c.b.k_fast { j * s * ldb + kq } else { kq * ldb + j * s };
            compute +=
                &format!("            let b_{j} = {};\n", frag(b_t, "B", "sb", format!("sb0 + wb + {off}u"), ldb));
        }
        for i in 0..c.tm {
            let off = if c.a.k_fast { i * s * lda + kq } else { kq * lda + i * s };
            compute +=
                &format!("            let a_{i} = {};\n", frag(a_t, "A", "sa", format!("sa0 + wa + {off}u"), lda));
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

    // The K loop, over `ahead` register sets and two workgroup buffers. Step `t` (slice t in buffer
    // t % 2): read slice t + ahead into set t % ahead, multiply buffer t % 2, store set
    // (t + 1) % ahead (slice t + 1, read `ahead - 1` steps earlier) into buffer (t + 1) % 2, one
    // barrier. Each read thus has `ahead - 1` whole steps, and the time of the current step's
    // multiplies, to arrive. The loop is unrolled by lcm(ahead, 2) so every set and buffer index is a
    // constant; slices past K read zeros (checked reads) or are skipped (fast reads).
    let (bk, sas, sbs, ahead) = (c.bk, sa_stage, sb_stage, c.ahead);
    let unroll = if ahead % 2 == 0 { ahead } else { 2 * ahead };
    let barrier = if c.probe == Probe::NoBarrier { "" } else { "        workgroupBarrier();\n" };
    let kloop = |load: &dyn Fn(u32) -> String| {
        let mut main = format!("    k0 = 0u;\n{}    so = 0u;\n{}", load(0), store(0));
        for set in 1..ahead {
            main += &format!("    k0 = {}u;\n{}", set * bk, load(set));
        }
        main += "    workgroupBarrier();\n";
        let mut body = String::new();
        for u in 0..unroll {
            body += &format!(
                "        {{\n        let sa0 = {}u;\n        let sb0 = {}u;\n        k0 = (t + {}u) * {bk}u;\n{}{compute}        so = {}u;\n{}{barrier}        }}\n",
                (u % 2) * sas,
                (u % 2) * sbs,
                u + ahead,
                load(u % ahead),
                (u + 1) % 2,
                store((u + 1) % ahead),
            );
        }
        main + &format!("    for (var t = 0u; t < steps; t += {unroll}u) {{\n{body}    }}\n")
    };
    let mut main =
        format!("    var k0 = 0u;\n    var so = 0u;\n    workgroupBarrier();\n    let zero = {{{{ZERO}}}};\n{accs}");
    if c.fast && c.a.vec && c.b.vec {
        // Workgroup-uniform (`&`, not `&&`: naga lowers a short-circuit into a local variable, which
        // its uniformity analysis takes as non-uniform): the coop ops of both branches stay in
        // uniform control flow.
        main += &format!(
            "    let interior = (m0 + {bm}u <= m) & (n0 + {bn}u <= n) & (kk % {bk}u == 0u);\n    if (interior) {{\n{}{}    }} else {{\n{}    }}\n",
            fast_setup(),
            kloop(&fast_load),
            kloop(&load),
            bm = c.bm(),
            bn = c.bn(),
        );
    } else {
        main += &kloop(&load);
    }
    // Each accumulator tile: every subgroup stores it into its slot of `sc`, then all write them out.
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

    // Operand bindings and chunk readers. `base + s * slow_stride + f * fast_stride`.
    let a = reader(c.a, c.stage, bf16, ("p.m", "p.a_so"), ("p.k", "p.a_sk"));
    let b = reader(c.b, c.stage, bf16, ("p.n", "p.b_so"), ("p.k", "p.b_sk"));
    let (dst, decls_bf16, set_x) = match c.out {
        Out::F16 => ("array<f16>", String::new(), ""),
        out => (
            if out == Out::Bf16Pairs { "array<u32>" } else { "array<f32>" },
            bf16_decls(),
            "xa = wid.z * m;\n    xb = p.mx_b + wid.z * n;",
        ),
    };
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
            format!("coopLoadT<{}>(&sc[0], {ldc}u)", mat("f32", "C")),
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
            ("SA", &num(2 * sa_stage / unit)),
            ("SB", &num(2 * sb_stage / unit)),
            (
                "SE",
                match c.stage {
                    Stage::H1 => "f16",
                    Stage::H4 => "vec4<f16>",
                },
            ),
            ("REG", reg),
            ("W", &num(w)),
            ("A1", a.scalar_binding()),
            ("B1", b.scalar_binding()),
            ("A_PART", &a.part("a1")),
            ("B_PART", &b.part("b1")),
            ("SA_STAGE", &num(sa_stage)),
            ("SB_STAGE", &num(sb_stage)),
            ("SC", &num(c.nsg() * s * c.ldc())),
            ("LDA", &num(lda)),
            ("LDB", &num(ldb)),
            ("A_FC", &num(a_tf / w)),
            ("B_FC", &num(b_tf / w)),
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
            ("SET_X", set_x),
            ("PUT", &put_fn(c)),
        ],
    )
}

/// Plain-WGSL stand-ins for the cooperative ops (`emulate`): a fragment is `(offset, row stride,
/// row-major)` into `sa`/`sb`, read when multiplied; an accumulator is the `s*s/sg` elements
/// `lane + sg*q` (row-major) of the tile that this invocation owns. Same memory layouts and the same
/// row-/column-major meaning as coopLoadT/coopLoad, so everything around them is tested.
fn emulation(s: u32, sg: u32, stage: Stage) -> String {
    let e = s * s / sg;
    let half = |arr: &str| match stage {
        Stage::H1 => format!("f32({arr}[i])"),
        Stage::H4 => format!("f32({arr}[i >> 2u][i & 3u])"),
    };
    let (ha, hb) = (half("sa"), half("sb"));
    format!(
        "
fn emu_sa(i: u32) -> f32 {{
    return {ha};
}}

fn emu_sb(i: u32) -> f32 {{
    return {hb};
}}

fn emu_at(d: vec3<u32>, r: u32, c: u32) -> u32 {{
    return select(d.x + c * d.y + r, d.x + r * d.y + c, d.z == 1u);
}}

fn emu_mma(a: vec3<u32>, b: vec3<u32>, c: array<f32, {e}>, lane: u32) -> array<f32, {e}> {{
    var r = c;
    // Trip counts from parameters (p.lane_elems = {e}, p.frag = {s}): software adapters would unroll
    // constant ones at every call site and take long to compile.
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        let row = x / {s}u;
        let col = x % {s}u;
        var acc = r[q];
        for (var k = 0u; k < p.frag; k++) {{
            acc += emu_sa(emu_at(a, row, k)) * emu_sb(emu_at(b, k, col));
        }}
        r[q] = acc;
    }}
    return r;
}}

fn emu_store(c: array<f32, {e}>, off: u32, ld: u32, lane: u32) {{
    for (var q = 0u; q < p.lane_elems; q++) {{
        let x = lane + q * {sg}u;
        sc[off + (x / {s}u) * ld + x % {s}u] = c[q];
    }}
}}
"
    )
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
    /// bf16 values, read as the 32-bit words that hold them.
    bf16: bool,
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
        if self.bf16 {
            "array<u32>"
        } else {
            "array<f16>"
        }
    }
    /// The element-by-element read of a chunk (edges, general strides): zeros past the fast extent.
    fn part(&self, buf: &str) -> String {
        if self.bf16 {
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
fn reader(o: Operand, stage: Stage, bf16: bool, mn: (&str, &str), k: (&str, &str)) -> Reader {
    let (slow, fast) = if o.k_fast { (mn, k) } else { (k, mn) };
    let vec_ty = if bf16 { "array<vec2<u32>>" } else { "array<vec4<f16>>" };
    Reader {
        stage,
        bf16,
        binding: if o.vec { vec_ty.into() } else { "array<u32>".into() },
        ns: slow.0.into(),
        nf: fast.0.into(),
        ss: slow.1.into(),
        fs: if o.vec { "1u".into() } else { fast.1.into() },
        vec: o.vec,
    }
}

/// Declarations of bf16 kernels: the line maxima, where this batch entry's lines start in them, the
/// scale exponent of a line and the scaling back of a result.
fn bf16_decls() -> String {
    format!(
        "@group(0) @binding(5) var<storage, read> mx: array<u32>;
var<private> xa: u32;
var<private> xb: u32;

{}
{}
// The power of two 2^-e that a line's values are multiplied by when staged (1 past the last line).
fn line_scale(first: u32, line: u32, lines: u32) -> f32 {{
    if (line >= lines) {{
        return 1.0;
    }}
    // e is within [-110, 115]: the exponent field stays normal.
    return bitcast<f32>(u32(127 - line_exp(mx[first + line])) << 23u);
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

// `v * 2^(ea + eb)` in two steps of the same sign: no intermediate overflows unless the result does.
fn unscale(v: f32, row: u32, col: u32) -> f32 {{
    let e = line_exp(mx[xa + row]) + line_exp(mx[xb + col]);
    let h = e / 2;
    return ldexp(ldexp(v, h), e - h);
}}
",
        crate::gpu::runtime::wgsl::PRELUDE,
        line_maxima::LINE_EXP,
    )
}

/// `fn put`: writes one accumulator tile of every subgroup from its slot of `sc` to C; `row0` and
/// `col0` place the tile within subgroup 0's block (called between barriers, after each subgroup
/// stored the tile into its slot).
fn put_fn(c: &Config) -> String {
    let (s, wg) = (c.s, c.wg());
    let (ss, slot, ldc, wmt, wnt, wn) = (s * s, s * c.ldc(), c.ldc(), c.tm * s, c.tn * s, c.wn);
    let pairs = c.out == Out::Bf16Pairs;
    let per = c.nsg() * ss / wg / if pairs { 2 } else { 1 };
    let (tile, width, col) = if pairs { (ss / 2, s / 2, "2u * (x % W2)") } else { (ss, s, "x % S") };
    let store = match c.out {
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

/// Every variant, for the translation test: both sizes, both presets, all operand stagings.
pub(crate) fn catalog() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in [16, 8] {
        for tile in [CoopTile::Large, CoopTile::Wide, CoopTile::Small] {
            for ak in [true, false] {
                for bk in [true, false] {
                    for vec in [true, false] {
                        // The A and B readers are independent: mixing vec/scalar on one side each
                        // covers every reader with half the variants.
                        let a = Operand { k_fast: ak, vec };
                        let b = Operand { k_fast: bk, vec: !vec };
                        let c = Config::preset(tile, s, 32, a, b);
                        out.push((c.key(), source(&c)));
                    }
                }
            }
        }
        // Half-depth K slices (adapters with 32 KiB of workgroup memory).
        for (ak, bk) in [(true, false), (false, true)] {
            let (a, b) = (Operand { k_fast: ak, vec: true }, Operand { k_fast: bk, vec: false });
            for tile in [CoopTile::Large, CoopTile::Wide] {
                let c = Config { bk: 16, ..Config::preset(tile, s, 32, a, b) };
                out.push((c.key(), source(&c)));
            }
        }
        // The emulated kernel (tests on adapters without cooperative matrices).
        let (a, b) = (Operand { k_fast: true, vec: true }, Operand { k_fast: false, vec: false });
        for stage in [Stage::H1, Stage::H4] {
            for ahead in [1, 2, 3, 4] {
                let c = Config { emulate: true, stage, ahead, ..Config::preset(CoopTile::Small, s, 32, a, b) };
                out.push((c.key(), source(&c)));
            }
        }
    }
    // bf16 operands: each result form with every operand staging, scalar (Metal) and vector staging,
    // cooperative and emulated; and the pass that finds the line maxima.
    for out_form in [Out::Bf16Pairs, Out::Bf16ViaF32] {
        for ak in [true, false] {
            for bk in [true, false] {
                for vec in [true, false] {
                    let (a, b) = (Operand { k_fast: ak, vec }, Operand { k_fast: bk, vec: !vec });
                    for (s, stage, emulate) in
                        [(16, Stage::H4, false), (8, Stage::H1, false), (16, Stage::H4, true), (16, Stage::H1, true)]
                    {
                        let c =
                            Config { stage, emulate, out: out_form, ..Config::preset(CoopTile::Small, s, 32, a, b) };
                        out.push((c.key(), source(&c)));
                    }
                }
            }
        }
    }
    out.push(("line_maxima".into(), line_maxima::source(false)));
    out.push(("line_maxima_x4".into(), line_maxima::source(true)));
    // Vector staging (Vulkan only, 16x16): every operand staging with each vector form, and the
    // larger sweep shapes (8 subgroups of 4x4 tiles, 16-deep K slices).
    for stage in [Stage::H4] {
        for ak in [true, false] {
            for bk in [true, false] {
                for vec in [true, false] {
                    let (a, b) = (Operand { k_fast: ak, vec }, Operand { k_fast: bk, vec: !vec });
                    for tile in [CoopTile::Large, CoopTile::Wide, CoopTile::Small] {
                        let c = Config { stage, ..Config::preset(tile, 16, 32, a, b) };
                        out.push((c.key(), source(&c)));
                    }
                    for (wm, wn) in [(2, 4), (4, 2)] {
                        let c = Config {
                            stage,
                            wm,
                            wn,
                            bk: 16,
                            ahead: 2,
                            fast: vec,
                            ..Config::preset(CoopTile::Large, 16, 32, a, b)
                        };
                        out.push((c.key(), source(&c)));
                    }
                }
            }
        }
    }
    out
}

use crate::gpu::runtime::coop::support;

fn disabled_by_env() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| !crate::settings::COOP.is_not_zero())
}

/// The staging used on Vulkan unless `KILN_COOP_STAGE=h1|h4` says otherwise.
const DEFAULT_STAGE: Stage = Stage::H4;

fn stage_from_env() -> Option<Stage> {
    static STAGE: std::sync::OnceLock<Option<Stage>> = std::sync::OnceLock::new();
    *STAGE.get_or_init(|| Stage::parse(crate::settings::COOP_STAGE.get().ok()?.as_str()))
}

/// Every choice of the kernel for one run (see [`matmul_coop_spec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CoopSpec {
    /// Subgroups along M and N.
    pub wm: u32,
    pub wn: u32,
    /// Accumulator tiles per subgroup along M and N.
    pub tm: u32,
    pub tn: u32,
    /// K slice per stage.
    pub bk: u32,
    pub stage: Stage,
    /// Slices in flight in registers (1 to 4).
    pub ahead: u32,
    /// Unchecked reads for interior tiles.
    pub fast: bool,
    /// An ablation (sweeps only: the result is wrong).
    pub probe: Probe,
}

impl CoopSpec {
    /// `WMxWN:TMxTN:BK:STAGE[:FLAG]...`, e.g. `4x2:4x4:16:h4:deep:fast`. Flags: `deep` (two slices
    /// in flight), `a3` or `a4` (three, four), `fast`, and the ablations `noload`, `nobarrier`, `nomma`.
    pub fn parse(text: &str) -> Option<CoopSpec> {
        let parts: Vec<&str> = text.split(':').collect();
        let pair = |p: &str| -> Option<(u32, u32)> {
            let (x, y) = p.split_once('x')?;
            Some((x.parse().ok()?, y.parse().ok()?))
        };
        let [w, t, bk, st, flags @ ..] = &parts[..] else { return None };
        let ((wm, wn), (tm, tn)) = (pair(w)?, pair(t)?);
        let mut spec = CoopSpec {
            wm,
            wn,
            tm,
            tn,
            bk: bk.parse().ok()?,
            stage: Stage::parse(st)?,
            ahead: 1,
            fast: false,
            probe: Probe::None,
        };
        for flag in flags {
            match *flag {
                "deep" => spec.ahead = 2,
                "a3" => spec.ahead = 3,
                "a4" => spec.ahead = 4,
                "fast" => spec.fast = true,
                "noload" => spec.probe = Probe::NoLoad,
                "nobarrier" => spec.probe = Probe::NoBarrier,
                "nomma" => spec.probe = Probe::NoMma,
                _ => return None,
            }
        }
        Some(spec)
    }
}

impl Stage {
    pub fn parse(text: &str) -> Option<Stage> {
        match text {
            "h1" => Some(Stage::H1),
            "h4" => Some(Stage::H4),
            _ => None,
        }
    }
}

fn tile_from_env() -> CoopTile {
    static TILE: std::sync::OnceLock<CoopTile> = std::sync::OnceLock::new();
    *TILE.get_or_init(|| match crate::settings::COOP_TILE.get().as_deref() {
        Ok("large") => CoopTile::Large,
        Ok("wide") => CoopTile::Wide,
        Ok("small") => CoopTile::Small,
        _ => CoopTile::Auto,
    })
}

/// `a @ b` for f16 on cooperative matrices, or `None` when this path does not apply (see the module
/// docs); the layouts are `matmul`'s: same batch dims (broadcast already applied), `(.., M, K)` and
/// `(.., K, N)`, any strides. The result is contiguous f16 `(batch.., M, N)`, each element the f32
/// sum of products rounded once to f16.
// The f16 branch of `matmul::matmul` calls this first (`matmul/mod.rs`).
#[allow(dead_code)]
pub(crate) fn try_matmul_coop(a: &GpuStorage, al: &Layout, b: &GpuStorage, bl: &Layout) -> Option<Result<GpuStorage>> {
    if disabled_by_env() {
        return None;
    }
    matmul_coop(a, al, b, bl, tile_from_env(), true, None, None)
}

/// [`try_matmul_coop`] with a forced preset, an optional size threshold, and `emulate: Some(s)` to
/// run the emulated kernel with `s x s` tiles instead (any adapter with SHADER_F16).
#[allow(clippy::too_many_arguments)]
fn matmul_coop(
    a: &GpuStorage,
    al: &Layout,
    b: &GpuStorage,
    bl: &Layout,
    tile: CoopTile,
    threshold: bool,
    emulate: Option<u32>,
    spec: Option<CoopSpec>,
) -> Option<Result<GpuStorage>> {
    let bf16 = match (a.dtype, b.dtype) {
        (DType::F16, DType::F16) => false,
        (DType::BF16, DType::BF16) => true,
        _ => return None,
    };
    if !Arc::ptr_eq(&a.ctx, &b.ctx) {
        return None;
    }
    let ctx = &a.ctx;
    let (s, sg) = match emulate {
        Some(s) => (ctx.has(wgpu::Features::SHADER_F16) && matches!(s, 8 | 16)).then_some((s, 32))?,
        None => support(ctx)?,
    };
    let rank = al.rank();
    if rank < 2 || bl.rank() != rank || al.dims()[..rank - 2] != bl.dims()[..rank - 2] {
        return None;
    }
    let (m, k, n) = (al.dims()[rank - 2], al.dims()[rank - 1], bl.dims()[rank - 1]);
    if bl.dims()[rank - 2] != k || m == 0 || n == 0 || k == 0 {
        return None;
    }
    if threshold && (m < MIN_SIDE || n < MIN_SIDE || m * n * k < MIN_WORK) {
        return None;
    }
    // bf16 pays a pass over both operands for their scales: with few rows (batched decode) the
    // memory-bound skinny kernels read the weight once and need no such pass.
    if threshold && bf16 && m.min(n) < MIN_SIDE_BF16 {
        return None;
    }
    let batch_dims = &al.dims()[..rank - 2];
    let batch: usize = batch_dims.iter().product();
    if batch == 0 {
        return None;
    }
    let (bd, bs) = collapse(batch_dims, &[&al.strides()[..rank - 2], &bl.strides()[..rank - 2]]);
    // Every index the kernel computes must fit in u32.
    let fits = wgsl::indexable;
    if bd.len() > 4 || !fits(al) || !fits(bl) || (batch * m * n) as u64 >= u32::MAX as u64 {
        return None;
    }
    let (sa, sb) = (al.strides(), bl.strides());
    // Batch strides only step with more than one batch (`collapse` gives [1] for none).
    let bstr = |i: usize| if batch > 1 { &bs[i][..] } else { &[] };
    // bf16 operands are read in place, as f16 ones are (`Config::out`).
    let ops = |w: usize| {
        (
            operand(m, sa[rank - 2], k, sa[rank - 1], al.offset(), bstr(0), a.buffer.size(), w),
            operand(n, sb[rank - 1], k, sb[rank - 2], bl.offset(), bstr(1), b.buffer.size(), w),
        )
    };
    // Vector staging on Vulkan (Metal's simdgroup loads take only scalar pointers).
    let vulkan = ctx.summary.backend == "Vulkan" || emulate.is_some();
    let stage = match spec {
        Some(sp) => sp.stage,
        None if !vulkan => Stage::H1,
        None => stage_from_env().unwrap_or(DEFAULT_STAGE),
    };
    if !vulkan && stage != Stage::H1 {
        return None;
    }
    let (a_op, b_op) = ops(stage.chunk() as usize);
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    let tiles = |c: &Config| m.div_ceil(c.bm() as usize) * n.div_ceil(c.bn() as usize);
    let fits_device = |c: &Config| {
        c.workgroup_bytes() <= ctx.limits.max_compute_workgroup_storage_size
            && c.wg() <= ctx.limits.max_compute_invocations_per_workgroup
            && c.wg() <= ctx.limits.max_compute_workgroup_size_x
            && tiles(c) <= max
    };
    let out = match (bf16, n % 2) {
        (false, _) => Out::F16,
        (true, 0) => Out::Bf16Pairs,
        (true, _) => Out::Bf16ViaF32,
    };
    let preset =
        |t: CoopTile| Config { emulate: emulate.is_some(), stage, out, ..Config::preset(t, s, sg, a_op, b_op) };
    let want = match tile {
        CoopTile::Auto if batch * tiles(&preset(CoopTile::Large)) < LARGE_MIN_TILES => CoopTile::Small,
        CoopTile::Auto => CoopTile::Large,
        t => t,
    };
    // The preset, then with half the K slice where workgroup memory is short (32 KiB adapters);
    // the automatic choice may also end on the small preset.
    let mut candidates = vec![preset(want), Config { bk: 16, ..preset(want) }];
    if tile == CoopTile::Auto {
        candidates.push(preset(CoopTile::Small));
    }
    // Vulkan, 16x16 (NVIDIA), measured on an H200 (docs/PERFORMANCE.md, session 8): interior tiles
    // on the fast reads; 8 subgroups of 4x4 accumulators (128x256 tiles) over 16-deep slices with
    // four in flight where there are 1.5 waves of such tiles or more, else 4 subgroups of 4x4
    // (128x128, two workgroups per SM) over 32-deep slices with two in flight, else the presets.
    if tile == CoopTile::Auto && stage == Stage::H4 && s == 16 {
        let big = |wm, wn, bk, ahead| Config { wm, wn, tm: 4, tn: 4, bk, ahead, fast: true, ..preset(CoopTile::Large) };
        let wide = big(2, 4, 16, 4);
        let square = big(2, 2, 32, 2);
        if batch * tiles(&wide) >= WIDE_MIN_TILES {
            candidates.insert(0, wide);
        } else if batch * tiles(&square) >= LARGE_MIN_TILES / 4 {
            candidates.insert(0, square);
        }
    }
    if let Some(sp) = spec {
        let base = preset(CoopTile::Large);
        candidates = vec![Config {
            wm: sp.wm,
            wn: sp.wn,
            tm: sp.tm,
            tn: sp.tn,
            bk: sp.bk,
            ahead: sp.ahead,
            fast: sp.fast,
            probe: sp.probe,
            ..base
        }];
    }
    let c = candidates.into_iter().find(|c| c.well_formed() && fits_device(c))?;
    if batch > max {
        return None;
    }
    Some((|| {
        if !bf16 {
            return run(a, al, b, bl, &c, (m, n, k), batch, (&bd, &bs), tiles(&c), None);
        }
        let mx = line_maxima::maxima_buffer(ctx, batch * (m + n))?;
        let lines = |lines, offset, line_stride, k_stride, strides| line_maxima::Lines {
            lines,
            k,
            offset,
            line_stride,
            k_stride,
            batch,
            dims: &bd,
            strides,
        };
        let la = lines(m, al.offset(), sa[rank - 2], sa[rank - 1], &bs[0][..]);
        let lb = lines(n, bl.offset(), sb[rank - 1], sb[rank - 2], &bs[1][..]);
        line_maxima::line_maxima(a, &la, &mx, 0)?;
        line_maxima::line_maxima(b, &lb, &mx, batch * m)?;
        run(a, al, b, bl, &c, (m, n, k), batch, (&bd, &bs), tiles(&c), Some(&mx))
    })())
}

params! {
    /// The cooperative matmul's parameters: the problem, tiles along M and N, the emulated kernel's
    /// loop bounds (elements per lane, fragment size), and where B's line maxima start in `mx`.
    struct CoopParams: MatmulShape {
        tiles_m: u32,
        tiles_n: u32,
        lane_elems: u32,
        frag: u32,
        mx_b: u32,
    }
}

/// How to stage one operand with extents `mn` (its M or N dim) and `k`, and their strides.
#[allow(clippy::too_many_arguments)]
fn operand(
    mn: usize,
    s_mn: usize,
    k: usize,
    s_k: usize,
    offset: usize,
    batch_strides: &[usize],
    bytes: u64,
    w: usize,
) -> Operand {
    // A dim of extent 1 never steps, so its stride does not matter.
    let unit = |d: usize, s: usize| d == 1 || s == 1;
    let four = |d: usize, s: usize| d == 1 || s.is_multiple_of(w);
    let aligned =
        offset.is_multiple_of(w) && batch_strides.iter().all(|s| s.is_multiple_of(w)) && bytes >= 2 * w as u64;
    if unit(k, s_k) {
        Operand { k_fast: true, vec: aligned && four(mn, s_mn) }
    } else if unit(mn, s_mn) {
        Operand { k_fast: false, vec: aligned && four(k, s_k) }
    } else {
        // General strides: element by element, along the smaller stride.
        Operand { k_fast: s_k <= s_mn, vec: false }
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    a: &GpuStorage,
    al: &Layout,
    b: &GpuStorage,
    bl: &Layout,
    c: &Config,
    (m, n, k): (usize, usize, usize),
    batch: usize,
    (bd, bs): (&[usize], &[Vec<usize>]),
    tiles: usize,
    mx: Option<&GpuStorage>,
) -> Result<GpuStorage> {
    let ctx = &a.ctx;
    let rank = al.rank();
    let bf16 = c.out.bf16();
    let inputs = 4 + bf16 as usize;
    let kernel = ctx.pipelines.get(ctx, &c.key(), inputs, || source(c))?;
    let out_dtype = match c.out {
        Out::F16 => DType::F16,
        Out::Bf16Pairs => DType::BF16,
        Out::Bf16ViaF32 => DType::F32,
    };
    let out = GpuStorage::alloc(ctx, out_dtype, batch * m * n)?;
    let st = |l: &Layout, i: usize| l.strides()[i] as u32;
    let mut shape = MatmulShape {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        a_off: al.offset() as u32,
        b_off: bl.offset() as u32,
        a_so: st(al, rank - 2),
        a_sk: st(al, rank - 1),
        b_sk: st(bl, rank - 2),
        b_so: st(bl, rank - 1),
        rank: if batch > 1 { bd.len() as u32 } else { 0 },
        ..MatmulShape::default()
    };
    if batch > 1 {
        for (i, &d) in bd.iter().enumerate() {
            shape.bdims[i] = d as u32;
            shape.a_batch[i] = bs[0][i] as u32;
            shape.b_batch[i] = bs[1][i] as u32;
        }
    }
    let params = CoopParams {
        base: shape,
        tiles_m: m.div_ceil(c.bm() as usize) as u32,
        tiles_n: n.div_ceil(c.bn() as usize) as u32,
        // Loop bounds of the emulated kernel.
        lane_elems: c.s * c.s / c.sg,
        frag: c.s,
        mx_b: (batch * m) as u32,
    };
    let groups = [tiles as u32, 1, batch as u32];
    // Each operand is bound twice: 4 halves at a time and one at a time (edges, general strides).
    let mut bufs = vec![out.buffer.raw(), a.buffer.raw(), a.buffer.raw(), b.buffer.raw(), b.buffer.raw()];
    bufs.extend(mx.map(|mx| mx.buffer.raw()));
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(ctx, &kernel, &bufs, &params.words(), groups)?;
    if c.out == Out::Bf16ViaF32 {
        return out.finish(DType::BF16);
    }
    Ok(out)
}

/// The cooperative matrix configurations of `device`'s adapter as `MxNxK ab->cr` strings, and the
/// size the f16 matmul runs with (`None`: the path is unavailable there).
pub fn coop_matmul_support(device: &crate::Device) -> (Vec<String>, Option<u32>) {
    let Some(ctx) = device.gpu_context() else { return (vec![], None) };
    let configs = ctx
        .coop_matrix
        .iter()
        .map(|p| format!("{}x{}x{} {:?}->{:?}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type))
        .collect();
    (configs, support(ctx).map(|(s, _)| s))
}

/// For tests and benchmarks: `a @ b` of two f16 GPU tensors with equal batch dims through the
/// cooperative-matrix kernel with preset `tile`, without the size threshold; `None` when the path
/// does not apply (see [`try_matmul_coop`]). `emulate: Some(s)` runs the emulated kernel with
/// `s x s` tiles (plain WGSL in place of the cooperative ops) on any adapter with SHADER_F16.
#[doc(hidden)]
pub fn matmul_coop_tensors(a: &Tensor, b: &Tensor, tile: CoopTile, emulate: Option<u32>) -> Option<Result<Tensor>> {
    matmul_coop_spec(a, b, tile, emulate, None)
}

/// [`matmul_coop_tensors`] with every choice of the kernel spelled out (`spec`: tile shape, K slice,
/// staging), for sweeps and for tests of each staging form.
#[doc(hidden)]
pub fn matmul_coop_spec(
    a: &Tensor,
    b: &Tensor,
    tile: CoopTile,
    emulate: Option<u32>,
    spec: Option<CoopSpec>,
) -> Option<Result<Tensor>> {
    if a.rank() < 2 || b.rank() != a.rank() {
        return Some(Err(Error::arg("matmul_coop", "operands must be matrices of one rank")));
    }
    // One read guard when both view the same storage: taking the same lock twice may deadlock.
    let sa = a.storage();
    let sb = if a.shares_storage_with(b) { None } else { Some(b.storage()) };
    let (Storage::Gpu(ga), Storage::Gpu(gb)) = (&*sa, sb.as_deref().unwrap_or(&*sa)) else { return None };
    let out = matmul_coop(ga, a.layout(), gb, b.layout(), tile, false, emulate, spec)?;
    let mut dims = a.dims().to_vec();
    *dims.last_mut().unwrap() = b.dims()[b.rank() - 1];
    Some(out.map(|s| Tensor::from_storage(Storage::Gpu(s), dims, a.device())))
}
