//! The quantized few-row product on 4-way integer dot products (`dot4I8Packed`, DP4A on NVIDIA,
//! `quant_i8.wgsl`) for the formats of real GGUF files (Q8_0, Q4_0, Q4_K, Q6_K): x is first put in
//! 16-bit fixed point per run of 16 values (`qrun.wgsl`, through the product's prologue), by each
//! workgroup into its own memory where that fits, else by `qx.rs` in a dispatch before; then each
//! weight word's four integers meet four x bytes in one instruction. The f32 kernel (`quant.rs`)
//! spends four to five ALU operations on every weight value (unpacking, conversion, FMA), which
//! bounds Q4_K far below the memory's rate; here a word of eight 4-bit values costs about five.
//!
//! What it computes differs from the f32 kernel only by x's rounding to 16 bits per run of 16 values
//! (a step of 1/32512 of the run's largest value), inside `qlinear`'s documented tolerance of 1e-5
//! of sum |x w| (docs/GGUF.md); a model's logits move by up to ~1.5e-4 of their scale.

use super::emit::{lane_sum, norm_scale, rows_setup, sg_args, stores_at, sum_name, x_loaders, AddRead};
use super::quant_args::{norm_sum_loop, overrides, unit_shape, Ablate, Prologue};
use super::qx::QRUN;
use crate::gpu::kit::quant_units::{fname, units};
use crate::gpu::kit::rope_store::rope_store;
use crate::gpu::pointwise::Pro;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::storage::At;
use crate::gpu::runtime::wgsl::PRELUDE;
use crate::gpu::runtime::GpuStorage;
use crate::quant::QuantType;
use crate::{DType, Result};
use std::fmt::Write;

const MATVEC: &str = include_str!("quant_i8.wgsl");
const STREAM: &str = include_str!("quant_i8_stream.wgsl");
const INT8: &str = include_str!("../kit/quant_int8.wgsl");

params! {
    /// The integer-dot product's parameters: m, n, k, the scales' word offset (doff), x's offset
    /// and row stride (values of x, or runs of `qx.rs`'s output), the addend's row stride (0 for a
    /// bias) and offset in elements (even for 16-bit outputs), the norm weight's offset, eps, the
    /// up half's offset from the gate (values, silu_mul), and the output's row stride and first
    /// column (elements; even for 16-bit outputs: a column range of a wider output); the streamed
    /// kernel's lane sets in its grid; with rope (`Out::Rope`): the head size, q and kv heads, the
    /// caches' write position, length and offsets, and the cos and sin tables' offsets.
    struct QuantI8Params {
        m: u32,
        n: u32,
        k: u32,
        doff: u32,
        x_off: u32,
        x_stride: u32,
        add_stride: u32,
        add_off: u32,
        nw_off: u32,
        eps: f32,
        up_off: u32,
        out_stride: u32,
        out_off: u32,
        sets: u32,
        d: u32,
        nh: u32,
        nkv: u32,
        pos: u32,
        len: u32,
        k_off: u32,
        v_off: u32,
        cos_off: u32,
        sin_off: u32,
    }
}

/// Where the kernel finds x's runs: made by `qx.rs` (`Runs`), or made by each workgroup itself
/// into workgroup memory from x in `xdt` through the prologue (`Local`; k at most `kcap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum XFrom {
    Runs,
    Local { xdt: DType, pro: Pro, kcap: u32 },
}

thread_local! {
    static F32_KERNEL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static GRID: std::cell::Cell<Option<(u32, bool)>> = const { std::cell::Cell::new(None) };
}

/// Workgroups of the streamed kernel (0: not streamed), the weight rows from which it streams,
/// whether several rows of x stream too, and whether it loads a step ahead (None: by format):
/// `KILN_QMV_GRID`, `KILN_QMV_STREAM` and `KILN_QMV_PREFETCH`, or a test's choice on this thread
/// (streamed for every shape).
fn grid() -> (u32, usize, bool, Option<bool>) {
    let o = overrides();
    GRID.with(|c| c.get()).map_or((o.grid, o.stream_n, false, o.prefetch), |(g, pf)| (g, 0, true, Some(pf)))
}

/// Whether the streamed product of `qt` requests each unit's words a step ahead by default: not in
/// Q6_K (past 128 registers), nor in Q8_0, whose 8B decode ran 8% more tokens/s without it once each
/// step was recorded ahead of the last token's read (278.6 against 257.2 at context 512 on an H200;
/// Q4_K_M 301 with it, 294 without; docs/PERFORMANCE.md, the seventeenth session).
fn prefetched(qt: QuantType) -> bool {
    !matches!(qt, QuantType::Q6K | QuantType::Q8_0)
}

/// Runs `f` with `g` workgroups for the streamed kernel (0: the one-pass kernel), loading a step
/// ahead or not, on this thread, so that tests make each lane set walk several groups of rows.
#[cfg(test)]
pub(crate) fn with_grid<R>(g: u32, prefetch: bool, f: impl FnOnce() -> R) -> R {
    struct Reset(Option<(u32, bool)>);
    impl Drop for Reset {
        fn drop(&mut self) {
            GRID.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(GRID.with(|c| c.replace(Some((g, prefetch)))));
    f()
}

/// Whether `qt` has integer-dot units (the formats of Q4_K_M, Q8_0 and Q4_0 files).
pub(crate) fn has_units(qt: QuantType) -> bool {
    matches!(qt, QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4K | QuantType::Q6K)
}

/// Whether a product of `qt` takes this kernel: it has units, and neither `KILN_QMV_I8=0` nor a
/// test on this thread chose the f32 kernel.
pub(crate) fn applies(qt: QuantType) -> bool {
    has_units(qt) && overrides().i8 && !F32_KERNEL.with(|c| c.get())
}

/// Runs `f` with the f32 kernel for every format (on this thread), so that tests cover it too.
#[cfg(test)]
pub(crate) fn with_f32_kernel<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            F32_KERNEL.with(|c| c.set(self.0));
        }
    }
    let _reset = Reset(F32_KERNEL.with(|c| c.replace(true)));
    f()
}

/// One integer-dot kernel: format, output dtype (f32, or x's 16-bit dtype written as words),
/// rows of x per workgroup, weight rows per lane set and lanes per set; streamed or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QuantI8 {
    pub(crate) qt: QuantType,
    pub(crate) odt: DType,
    pub(crate) mt: u32,
    pub(crate) c: u32,
    pub(crate) ln: u32,
    pub(crate) sg: bool,
    pub(crate) add: bool,
    pub(crate) x: XFrom,
    pub(crate) stream: bool,
    pub(crate) prefetch: bool,
    /// Streamed only: a part left out (`KILN_QMV_ABLATE`; wrong results).
    pub(crate) ablate: Ablate,
    /// One row of x whose output row is (part of) a stacked q/k/v row (`Out::Rope`).
    pub(crate) rope: Rope,
}

/// How a product of one row stores a stacked q/k/v row (`Out::Rope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rope {
    /// Plain stores (`Out::Fresh`, `Out::Into`).
    Off,
    /// Each set's rows are quads of head rows that rotate together (`ROPE`): q rotated into the
    /// output, k rotated and v into the caches (`kit::rope_store`). The streamed kernel finds each
    /// quad's first row (two integer divisions) once a group, not once a step for each row: an 8B
    /// q/k/v product took 19.1 us on an H200 so, 20.7 with them per row and step (the plain
    /// product: 15.0; docs/PERFORMANCE.md, the sixteenth session).
    Quads,
    /// Every row is a v head's: stored into the v cache as they are, in pairs, in place of the
    /// plain stores (`c` even).
    Values,
}

impl QuantI8 {
    /// The kernel for an `(n, k)` weight and `m` rows of x, output `odt`: one subgroup's 32 lanes
    /// a set, 4 weight rows a set, 8 from 8192 rows on (fewer as rows of x add accumulators).
    /// Measured on an H200 (docs/PERFORMANCE.md, issue 35): 32 lanes beat 64 and 128 on every
    /// decode shape (the set's sum is one subgroupAdd), and with each workgroup making x's runs
    /// itself, fewer and wider workgroups pay: 8 rows a set on 14336 rows (224 workgroups) 17.9 us
    /// against 21.9 with 4; on 4096 rows 4 rows a set (128 workgroups) 20.4 us against 25.9 with 8.
    pub(crate) fn for_problem(qt: QuantType, odt: DType, n: usize, m: usize, sg_max: Option<u32>) -> QuantI8 {
        let mt = (m.next_power_of_two() as u32).min(8);
        let o = overrides();
        let base = if n >= 8192 { 8 } else { 4 };
        let c = o.c.unwrap_or(base).min(16 / mt).max(2);
        let ln = o.ln.map_or(32, |v| v.clamp(32, 256));
        // Fewer lanes than a subgroup would mix sets in one subgroupAdd.
        let ln = ln.max(sg_max.unwrap_or(32)).min(256);
        let sg = sg_max.is_some_and(|s| s <= ln) && o.sg;
        QuantI8 {
            qt,
            odt,
            mt,
            c,
            ln,
            sg,
            add: false,
            x: XFrom::Runs,
            stream: false,
            prefetch: false,
            ablate: Ablate::None,
            rope: Rope::Off,
        }
    }

    /// The streamed kernel (`quant_i8_stream.wgsl`) for `n` weight rows of `k` values and one row of
    /// x, where subgroups have the one size `sg` (a set is one subgroup, summed by subgroupAdd alone),
    /// n reaches `KILN_QMV_STREAM`, `KILN_QMV_GRID` is not 0 and subgroupAdd is not switched off: 4
    /// weight rows a set, 2 for short products (`stream_rows`; `KILN_QMV_C` overrides), each unit's
    /// words requested a step ahead but in Q6_K, whose three words and scale a row would take the
    /// kernel past 128 registers (152 on an H200: one workgroup an SM; 128 without), and Q8_0
    /// (`prefetched`). Its workgroups each make x's runs once, then stream their rows; the one-pass
    /// kernel makes them once per group of rows. An 8B Q4_K_M decode on an H200 ran 1.10x as many tokens/s with it (four interleaved
    /// pairs of runs, each pair in its favour; single runs vary by 5-8%. Q8_0, one run: +6% at context
    /// 512, -2% at 4096; docs/PERFORMANCE.md, the thirteenth session), though its products timed alone
    /// are no faster (weights from memory: level in Q4_K, 5% slower in Q6_K; from L2: up to 15%
    /// slower).
    pub(crate) fn streamed(self, sg: Option<u32>, n: usize, k: usize) -> QuantI8 {
        let o = overrides();
        let (grid, from, rows, prefetch) = grid();
        match sg {
            Some(s) if grid > 0 && n >= from && (self.mt == 1 || rows) && o.sg && s.is_power_of_two() && s <= 256 => {
                self.stream_with(s, prefetch.unwrap_or(prefetched(self.qt)), stream_rows(self.qt, n, k, s))
            }
            _ => self,
        }
    }

    /// This kernel streamed, a set being one subgroup of `sg` lanes, `c` weight rows a set unless
    /// `KILN_QMV_C` says otherwise.
    fn stream_with(self, sg: u32, prefetch: bool, c: u32) -> QuantI8 {
        let o = overrides();
        let c = o.c.unwrap_or(c).min(16 / self.mt).max(2);
        QuantI8 { stream: true, prefetch, ln: sg, c, sg: true, ablate: o.ablate, ..self }
    }

    /// This kernel storing a stacked q/k/v row (one row of x): rows of q/k (and v) heads in quads,
    /// 4 a set unless the set's rows are a multiple of 4; rows of v heads only as they are.
    fn with_rope(self, values: bool) -> QuantI8 {
        match values {
            true => QuantI8 { rope: Rope::Values, ..self },
            false => QuantI8 { rope: Rope::Quads, c: if self.c.is_multiple_of(4) { self.c } else { 4 }, ..self },
        }
    }

    /// Bytes of workgroup memory: the lane sums, and x's runs when the workgroup makes them.
    pub(crate) fn workgroup_bytes(&self) -> usize {
        let runs = match self.x {
            XFrom::Runs => 0,
            XFrom::Local { kcap, .. } => {
                let slots = (self.mt * kcap / 16) as usize;
                16 * local_planes(slots) + 8 * local_scales(slots)
            }
        };
        (256 * self.c * self.mt) as usize * 4 + runs
    }

    pub(crate) fn key(&self) -> String {
        let sg = if self.sg { ":sg" } else { "" };
        let add = if self.add { ":add" } else { "" };
        let st = match (self.stream, self.prefetch) {
            (true, true) => ":st",
            (true, false) => ":st:np",
            _ => "",
        };
        let x = match self.x {
            XFrom::Runs => "runs".to_string(),
            XFrom::Local { xdt, pro, kcap } => format!("{xdt}:{}:{kcap}", pro.name()),
        };
        let ab = match self.ablate {
            Ablate::None => "",
            Ablate::Arith => ":ab-arith",
            Ablate::Scales => ":ab-scales",
            Ablate::X => ":ab-x",
            Ablate::Prologue => ":ab-prologue",
        };
        let rope = match self.rope {
            Rope::Off => "",
            Rope::Quads => ":rope",
            Rope::Values => ":rope-v",
        };
        format!("quant_i8:{}:{x}->{}:r{}:c{}:l{}{sg}{add}{st}{ab}{rope}", self.qt, self.odt, self.mt, self.c, self.ln)
    }

    /// Groups of `c` rows each set of the streamed kernel walks over `n` rows.
    fn groups_per_set(&self, n: usize) -> usize {
        n.div_ceil(self.c as usize).div_ceil((256 / self.ln) as usize * grid().0.max(1) as usize)
    }

    /// Weight rows (output columns) per workgroup (per step of the grid, streamed).
    fn cols(&self) -> u32 {
        256 / self.ln * self.c
    }

    pub(crate) fn source(&self) -> String {
        let (mt, c) = (self.mt, self.c);
        // A set's weight row j: col0 + j, or with rope the row of its quad that rotates with it.
        let wr = |v: String| if self.rope == Rope::Quads { format!("prow({v})") } else { v };
        let mut setup = String::new();
        if !self.stream {
            for j in 0..c {
                writeln!(setup, "    let row{j} = {};", wr(format!("min(col0 + {j}u, n - 1u)"))).unwrap();
            }
        }
        rows_setup(&mut setup, mt, c);
        // The read-only inputs after the outputs (dst; with rope also the caches), in binding order.
        let mut inputs: Vec<(&str, &str)> = vec![];
        let (mut xlocal, mut xload) = (String::new(), String::new());
        match self.x {
            XFrom::Runs => {
                inputs.extend([("xq", "vec4<u32>"), ("xs", "vec2<f32>"), ("q", "vec4<u32>")]);
                for r in 0..mt {
                    writeln!(setup, "    let xr{r} = xb{r};").unwrap();
                }
                xlocal += "fn xa(t: u32) -> u32 { return 2u * t; }\nfn sa(t: u32) -> u32 { return t; }\n";
            }
            XFrom::Local { xdt, pro, kcap } => {
                inputs.extend([("x", "vec4<u32>"), ("q", "vec4<u32>")]);
                if pro == Pro::RmsNorm {
                    inputs.push(("nw", "vec4<u32>"));
                }
                let slots = mt * kcap / 16;
                writeln!(xlocal, "var<workgroup> xq: array<vec4<u32>, {}>;", local_planes(slots as usize)).unwrap();
                writeln!(xlocal, "var<workgroup> xs: array<vec2<f32>, {}>;\n{QRUN}", local_scales(slots as usize))
                    .unwrap();
                xlocal += LOCAL_SLOTS;
                xload = x_loaders(xdt, pro);
                local_runs(&mut setup, mt, pro, self.sg, self.ablate == Ablate::Prologue);
            }
        }
        let packed = (self.odt != DType::F32).then_some(self.odt);
        let add = if self.add { AddRead::F32 } else { AddRead::None };
        // With rope every output is words (`kit::rope_store`).
        let elem = if packed.is_some() || self.rope != Rope::Off { "u32" } else { "f32" };
        let mut finish = stores_at(mt, c, false, packed, add, ("p.out_stride", " + p.out_off"));
        let mut bind = String::new();
        if self.add {
            inputs.push(("addend", elem));
        }
        if self.rope != Rope::Off {
            inputs.extend([("cs", "u32"), ("sn", "u32")]);
            for (b, cache) in [(1, "kc"), (2, "vc")] {
                writeln!(bind, "@group(0) @binding({b}) var<storage, read_write> {cache}: array<{elem}>;").unwrap();
            }
            bind += ROPE;
            bind += &rope_store(self.odt, "dst");
            finish = rope_stores(self.rope, c);
        }
        let first_in = if self.rope != Rope::Off { 3 } else { 1 };
        for (i, (name, ty)) in inputs.into_iter().enumerate() {
            writeln!(bind, "@group(0) @binding({}) var<storage, read> {name}: array<{ty}>;", first_in + i).unwrap();
        }
        let from = match self.x {
            XFrom::Runs => "made by qx.wgsl".to_string(),
            XFrom::Local { xdt, pro, .. } => {
                format!("made by each workgroup from x ({xdt}, through {}) in workgroup memory", pro.name())
            }
        };
        let f = fname(self.qt);
        let (mut first, mut rows, mut next, mut reset) = (String::new(), String::new(), String::new(), String::new());
        let mut reduce = lane_sum(mt, c, self.ln, self.sg);
        if self.stream {
            reduce.clear();
            // With quads, each quad's first row (`prow`, two divisions) once a group, in `qb*`: set
            // at the start and where a step begins a new group (`NEXT`, before its loads).
            let quads = self.rope == Rope::Quads;
            if quads {
                for qd in 0..c / 4 {
                    let qb = format!("prow(min(g * {c}u + {}u, n - 4u))", 4 * qd);
                    writeln!(first, "    var qb{qd} = {qb};").unwrap();
                    writeln!(next, "        if (s == 0u) {{ qb{qd} = {qb}; }}").unwrap();
                }
            }
            let row = |j: u32, col0: &str| {
                if quads {
                    let off = ["", " + 1u", " + p.d / 2u", " + p.d / 2u + 1u"][(j % 4) as usize];
                    format!("min(qb{}{off}, n - 1u)", j / 4)
                } else {
                    format!("min({col0} + {j}u, n - 1u)")
                }
            };
            for j in 0..c {
                let at =
                    |u: &str| format!("raw_{f}({}, min({u}, units - 1u), units, doff)", row(j, &format!("g * {c}u")));
                let here = at(&format!("lane + s * {}u", self.ln));
                if self.prefetch {
                    writeln!(first, "    var nx{j} = {};", at("lane")).unwrap();
                    writeln!(rows, "        let row{j} = {};\n        let cur{j} = nx{j};", row(j, "col0")).unwrap();
                    writeln!(next, "        nx{j} = {here};").unwrap();
                } else {
                    writeln!(rows, "        let row{j} = {};\n        let cur{j} = {here};", row(j, "col0")).unwrap();
                }
                for r in 0..mt {
                    writeln!(reduce, "            let t{} = subgroupAdd(acc{j}_{r});", j * mt + r).unwrap();
                    writeln!(reset, "            acc{j}_{r} = 0.0;").unwrap();
                }
            }
        }
        render(
            if self.stream { STREAM } else { MATVEC },
            &[
                ("PARAMS", &QuantI8Params::wgsl()),
                ("QT", self.qt.name()),
                ("ODT", self.odt.as_str()),
                ("XFROM", &from),
                ("MT", &mt.to_string()),
                ("C", &c.to_string()),
                ("LN", &self.ln.to_string()),
                ("SETS", &(256 / self.ln).to_string()),
                ("UV", &unit_shape(self.qt).0.to_string()),
                ("DST_ELEM", elem),
                ("BINDINGS", &bind),
                ("PRELUDE", PRELUDE),
                ("UNITS", &format!("{}\n{INT8}\n{xload}", units())),
                ("RED", &(256 * c * mt).to_string()),
                ("XLOCAL", &xlocal),
                ("F", fname(self.qt)),
                ("SETUP", &setup),
                ("BODY", &self.body()),
                ("REDUCE", &reduce),
                ("FIRST", &first),
                ("ROWS", &rows),
                ("NEXT", &next),
                ("RESET", &reset),
                ("FINISH", &finish),
                ("SUM", sum_name(self.sg)),
                ("SG_ARGS", sg_args(self.sg)),
            ],
        )
    }

    /// One step of a lane: each weight row's unit, then per run of 16 values each x row's two
    /// planes and scale, the row's packed integers and the integer dots.
    fn body(&self) -> String {
        let (mt, c, f) = (self.mt, self.c, fname(self.qt));
        let (_, runs) = unit_shape(self.qt);
        let o = f.to_uppercase();
        let offset = !matches!(self.qt, QuantType::Q8_0);
        let mut body = String::new();
        if self.ablate == Ablate::Arith {
            for j in 0..c {
                let words =
                    ["a", "b", "c", "h"].map(|v| format!("cur{j}.{v}.x ^ cur{j}.{v}.y ^ cur{j}.{v}.z ^ cur{j}.{v}.w"));
                writeln!(body, "        acc{j}_0 += f32(({} ^ cur{j}.s) & 1023u);", words.join(" ^ ")).unwrap();
            }
            return body;
        }
        for j in 0..c {
            if self.ablate == Ablate::Scales {
                writeln!(
                    body,
                    "        let w{j} = Unit(cur{j}.a, cur{j}.b, cur{j}.c, vec4<f32>(f32((cur{j}.h.x ^ cur{j}.s) & 3u)), \
                     vec4<f32>());"
                )
                .unwrap();
            } else if self.stream {
                writeln!(body, "        let w{j} = dec_{f}(cur{j}, row{j}, u, units);").unwrap();
            } else {
                writeln!(body, "        let w{j} = load_{f}(row{j}, u, units, doff);").unwrap();
            }
        }
        for i in 0..runs {
            for r in 0..mt {
                let (h, l, s) = if self.ablate == Ablate::X {
                    (format!("vec4<u32>(t{i}_{r})"), format!("h{i}_{r}"), "vec2<f32>(1.0, 0.5)".to_string())
                } else {
                    (format!("xq[xa(t{i}_{r})]"), format!("xq[xa(t{i}_{r}) + 1u]"), format!("xs[sa(t{i}_{r})]"))
                };
                writeln!(
                    body,
                    "        let t{i}_{r} = xr{r} + t0 + off_{f}({i}u) / 16u; let h{i}_{r} = {h}; \
                     let l{i}_{r} = {l}; let s{i}_{r} = {s};"
                )
                .unwrap();
            }
            for j in 0..c {
                let us = (0..4).map(|v| format!("qi_{f}(w{j}, {i}u, {v}u)")).collect::<Vec<_>>();
                writeln!(body, "        let u{j}_{i} = vec4<u32>({});", us.join(", ")).unwrap();
                if offset {
                    writeln!(body, "        let dm{j}_{i} = w{j}.d[{i}] * O_{o} + w{j}.m[{i}];").unwrap();
                }
                for r in 0..mt {
                    let dot = format!("idot(u{j}_{i}, h{i}_{r}, l{i}_{r})");
                    let min = if offset { format!(" - dm{j}_{i} * s{i}_{r}.y") } else { String::new() };
                    writeln!(body, "        acc{j}_{r} += w{j}.d[{i}] * s{i}_{r}.x * {dot}{min};").unwrap();
                }
            }
        }
        body
    }
}

/// Weight rows a set of the streamed kernel for an `(n, k)` weight of `qt` and sets of `sg` lanes:
/// 4, or 2 where 4-row sets would give a grid under one workgroup an SM of a large GPU (132) and a
/// set's rows take its lanes at most two steps. There the product waits on its loads, not on its
/// arithmetic: its few workgroups each stream a short row, so twice as many (each making x's runs
/// from a short x, which costs little) keep twice the loads in flight. On an H200 (8B Q4_K_M decode
/// profile, three interleaved pairs; docs/PERFORMANCE.md, the fifteenth session): the attention
/// output (Q4_K 4096 x 4096, 128 -> 256 workgroups) 509 -> 418-427 us a token, the Q6_K v rows
/// (1024 x 4096, 32 -> 64) with the head 429 -> 358-362, the token 4445 -> 4275 us (-3.8%); where k
/// is long (the down products, 7 steps a set) 2 rows cost 13-15%.
fn stream_rows(qt: QuantType, n: usize, k: usize, sg: u32) -> u32 {
    let sets = (256 / sg) as usize;
    let steps = (k / unit_shape(qt).0 as usize).div_ceil(sg as usize);
    if n.div_ceil(4 * sets) < 132 && steps <= 2 {
        2
    } else {
        4
    }
}

/// The stores of a stacked q/k/v row (`Rope`) from lane 0's sums `t0..t{c - 1}` of rows col0..,
/// in the kernel's finish.
fn rope_stores(rope: Rope, c: u32) -> String {
    let mut finish = String::new();
    match rope {
        Rope::Off => {}
        Rope::Values => {
            for j in (0..c).step_by(2) {
                writeln!(
                    finish,
                    "        if (col0 + {j}u < n) {{ let r = p.out_off + col0 + {j}u; let h = r / p.d - p.nh - p.nkv; \
                     st_v(p.v_off + (h * p.len + p.pos) * p.d + r % p.d, t{j}, t{}); }}",
                    j + 1
                )
                .unwrap();
            }
        }
        Rope::Quads => {
            for qd in 0..c / 4 {
                let (v, a) = (format!("col0 + {}u", 4 * qd), 4 * qd);
                writeln!(
                    finish,
                    "        if ({v} < n) {{ let r = p.out_off + prow({v}); rope_store(0u, r / p.d, r % p.d, \
                     vec2<f32>(t{a}, t{}), vec2<f32>(t{}, t{})); }}",
                    a + 1,
                    a + 2,
                    a + 3
                )
                .unwrap();
            }
        }
    }
    finish
}

/// With rope, the weight row of a set's row v (from 0 in this dispatch's rows, whole heads of p.d
/// values): quads of rows (i, i + 1, i + D/2, i + D/2 + 1) for each even i of a head's first half, so
/// that lane 0 of the set holds the sums that rotate together (`kit::rope_store`).
const ROPE: &str = "fn prow(v: u32) -> u32 {\n    let per = p.d / 4u;\n    let qd = v / 4u;\n    let e = v & 3u;\n    \
                    return (qd / per) * p.d + (e >> 1u) * (p.d / 2u) + 2u * (qd % per) + (e & 1u);\n}\n";

/// Where run t's two planes (`xa(t)`, `xa(t) + 1`) and scale (`sa(t)`) sit in workgroup memory: a
/// pad slot after every 8 runs' planes and every 16 runs' scales, so that the runs a subgroup's 32
/// lanes read at once (every 4th run in Q4_K, every 2nd in Q8_0 and Q4_0, pairs 8 apart in Q6_K)
/// spread evenly over the banks (4 lanes a bank quad for the planes, the fewest 16-byte reads allow;
/// 2 lanes a bank pair for the scales). Unpadded, all 32 lanes of a Q4_K plane read hit the same 4
/// of 32 banks (Q6_K: 16 lanes a bank quad). Without reading x's runs at all, an H200 took a streamed
/// Q4_K 14336 x 4096 product from memory in 18.1 us instead of 22.2 (docs/PERFORMANCE.md, the
/// fourteenth session). From `qx.rs` (storage) the runs are unpadded.
const LOCAL_SLOTS: &str =
    "fn xa(t: u32) -> u32 { return 2u * t + (t >> 3u); }\nfn sa(t: u32) -> u32 { return t + (t >> 4u); }\n";

/// Vec4 slots of `slots` runs' two planes, padded (`LOCAL_SLOTS`).
fn local_planes(slots: usize) -> usize {
    2 * slots + slots / 8 + 2
}

/// Vec2 slots of `slots` runs' scales, padded (`LOCAL_SLOTS`).
fn local_scales(slots: usize) -> usize {
    slots + slots / 16 + 1
}

/// The workgroup's own runs of its `mt` rows of x (`XFrom::Local`): the rows' RMSNorm scales
/// first (each workgroup sums the squares itself, x from cache; with subgroupAdd where `sg`), then each invocation puts every
/// 256th run of each row through `qrun` into workgroup memory (row r's runs from r * runs on).
fn local_runs(setup: &mut String, mt: u32, pro: Pro, sg: bool, skip: bool) {
    if skip {
        // `KILN_QMV_ABLATE=prologue`: no runs are made (the barrier stays).
        *setup += "    workgroupBarrier();\n";
        for r in 0..mt {
            writeln!(setup, "    let xr{r} = {r}u * runs;").unwrap();
        }
        return;
    }
    if pro == Pro::RmsNorm {
        norm_scale(setup, mt, &norm_sum_loop(mt), sg);
    }
    *setup += "    for (var t = tid; t < runs; t += 256u) {\n        let e = t * 16u;\n";
    for r in 0..mt {
        let v = |i: u32| {
            if pro == Pro::RmsNorm {
                format!("xin(xb{r}, e, {i}u) * scale{r}")
            } else {
                format!("xin(xb{r}, e, {i}u)")
            }
        };
        writeln!(
            setup,
            "        let q{r} = qrun({}, {}, {}, {});\n        let o{r} = {r}u * runs + t;\n        \
             xq[xa(o{r})] = q{r}.hi; xq[xa(o{r}) + 1u] = q{r}.lo; xs[sa(o{r})] = q{r}.s;",
            v(0),
            v(1),
            v(2),
            v(3)
        )
        .unwrap();
    }
    *setup += "    }\n    workgroupBarrier();\n";
    for r in 0..mt {
        writeln!(setup, "    let xr{r} = {r}u * runs;").unwrap();
    }
}

/// Every integer-dot variant, for the catalog (the translation test): runs made by `qx.rs` for
/// one and eight rows, and a workgroup's own runs for each input dtype and prologue; each one-pass
/// and streamed.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for qt in QuantType::ALL.into_iter().filter(|&q| has_units(q)) {
        for odt in [DType::F32, DType::BF16] {
            for mt in [1usize, 8] {
                for (sg, add) in [(None, false), (Some(32), false), (Some(32), true)] {
                    let mv = QuantI8 { add, ..QuantI8::for_problem(qt, odt, 4096, mt, sg) };
                    push(mv.key(), mv.source());
                }
                for prefetch in [true, false] {
                    let mv = QuantI8::for_problem(qt, odt, 4096, mt, Some(32)).stream_with(32, prefetch, 4);
                    push(mv.key(), mv.source());
                }
                // The ablations (`KILN_QMV_ABLATE`), so that each keeps compiling.
                for ablate in [Ablate::Arith, Ablate::Scales, Ablate::X, Ablate::Prologue]
                    .into_iter()
                    .filter(|_| odt == DType::F32)
                {
                    let mv = QuantI8 {
                        ablate,
                        ..QuantI8::for_problem(qt, odt, 4096, mt, Some(32)).stream_with(32, true, 4)
                    };
                    push(mv.key(), mv.source());
                }
            }
        }
        for xdt in [DType::F32, DType::F16, DType::BF16] {
            for pro in [Pro::Plain, Pro::RmsNorm, Pro::SiluMul] {
                for (sg, add) in [(Some(32), false), (None, true)] {
                    let x = XFrom::Local { xdt, pro, kcap: 4096 };
                    let mv = QuantI8 { add, x, ..QuantI8::for_problem(qt, xdt, 4096, 1, sg) };
                    push(mv.key(), mv.source());
                    // 4 weight rows a set, and 2 (`stream_rows`: short products).
                    for c in [4, 2] {
                        let st = QuantI8 { add: !add, ..mv }.stream_with(32, qt != QuantType::Q6K, c);
                        push(st.key(), st.source());
                    }
                    // The decode's q/k/v product with rope (`Out::Rope`), one-pass and streamed.
                    if pro == Pro::RmsNorm && !add {
                        let st = mv.stream_with(32, qt != QuantType::Q6K, 4);
                        for rope in [mv.with_rope(false), st.with_rope(false), st.with_rope(true)] {
                            push(rope.key(), rope.source());
                        }
                    }
                }
            }
        }
    }
}

/// Where a product's output goes: a fresh `(m, n)` buffer, or columns `off..off + n` of the rows
/// `stride` elements apart of `buf` (even `off` and `stride` for 16-bit outputs), or (one row of
/// x, whole heads) rows `at.r0..at.r0 + n` of a stacked q/k/v row rotated into `q` `(nh, d)` and
/// the caches (`kit::rope_store`).
pub(crate) enum Out<'a> {
    Fresh,
    Into { buf: &'a GpuStorage, off: usize, stride: usize },
    Rope { q: &'a GpuStorage, at: &'a RopeAt<'a> },
}

/// Where `Out::Rope` puts the rows `r0..` of a stacked q/k/v row (as `kv::RopeKv`, one token): the
/// caches `(1, nkv, len, d)` from `k_off` / `v_off`, written at `pos`; the cos and sin rows of `d / 2`.
pub(crate) struct RopeAt<'a> {
    pub(crate) kc: &'a GpuStorage,
    pub(crate) vc: &'a GpuStorage,
    pub(crate) r0: usize,
    pub(crate) d: usize,
    pub(crate) nh: usize,
    pub(crate) nkv: usize,
    pub(crate) pos: usize,
    pub(crate) len: usize,
    pub(crate) k_off: usize,
    pub(crate) v_off: usize,
    pub(crate) cos: At<'a>,
    pub(crate) sin: At<'a>,
}

/// `x (m, k) @ w^T (+ add)` through the prologue `pro` (x from value `x_off`, a multiple of 16),
/// output in `odt` (`out`; a fresh buffer is returned). Each workgroup makes x's runs itself where
/// they fit its memory, else `qx.rs` makes them first (one more dispatch). The addend
/// `(buf, offset, row_stride)` is in `odt` (word aligned for 16-bit outputs, as the caller checks).
#[allow(clippy::too_many_arguments)]
pub(crate) fn qmatmul_i8(
    x: &GpuStorage,
    x_off: usize,
    w: &GpuStorage,
    qt: QuantType,
    odt: DType,
    (n, k, m): (usize, usize, usize),
    add: Option<(&GpuStorage, usize, usize)>,
    pro: &Prologue,
    out: Out,
) -> Result<Option<GpuStorage>> {
    let ctx = x.ctx.clone();
    let sg_on = crate::gpu::runtime::subgroups::use_subgroups(&ctx);
    let (sg_min, sg_max) = ctx.summary.subgroup_size;
    let sg_fixed = (sg_on && sg_min == sg_max).then_some(sg_max);
    let rope = match &out {
        Out::Rope { at, .. } => Some(*at),
        _ => None,
    };
    let mut mv = QuantI8 { add: add.is_some(), ..QuantI8::for_problem(qt, odt, n, m, sg_on.then_some(sg_max)) }
        .streamed(sg_fixed, n, k);
    if let Some(at) = rope {
        mv = mv.with_rope(at.r0 >= (at.nh + at.nkv) * at.d);
    }
    let local = QuantI8 { x: XFrom::Local { xdt: x.dtype, pro: pro.pro, kcap: k.next_multiple_of(1024) as u32 }, ..mv };
    let runs;
    let mut bufs = vec![];
    let (mut x_off, mut x_stride) = (x_off, pro.x_stride);
    if local.workgroup_bytes() <= ctx.limits.max_compute_workgroup_storage_size as usize {
        mv = local;
        bufs.extend([x.buffer.raw(), w.buffer.raw()]);
        if let Some((g, _)) = &pro.norm {
            g.buf.same_ctx("qlinear", x)?;
            bufs.push(g.buf.buffer.raw());
        }
    } else {
        let norm = pro.norm.as_ref().map(|(g, e)| (g.buf, g.offset, *e));
        runs = super::qx::quantize_x(x, x_off, pro.x_stride, m, k, pro.pro, norm)?;
        bufs.extend([runs.xq.buffer.raw(), runs.xs.buffer.raw(), w.buffer.raw()]);
        (x_off, x_stride) = (0, k / 16);
    }
    let fresh = match out {
        Out::Fresh => Some(GpuStorage::alloc(&ctx, odt, m * n)?),
        Out::Into { .. } | Out::Rope { .. } => None,
    };
    let (dst, out_off, out_stride) = match (&out, &fresh) {
        (Out::Into { buf, off, stride }, _) => (*buf, *off, *stride),
        (Out::Rope { q, at }, _) => (*q, at.r0, 0),
        (Out::Fresh, Some(f)) => (f, 0, n),
        (Out::Fresh, None) => unreachable!("a fresh output was allocated"),
    };
    if let Some((a, _, _)) = add {
        bufs.push(a.buffer.raw());
    }
    let mut outs = vec![dst.buffer.raw()];
    if let Some(at) = rope {
        bufs.extend([at.cos.buf.buffer.raw(), at.sin.buf.buffer.raw()]);
        outs.extend([at.kc.buffer.raw(), at.vc.buffer.raw()]);
    }
    let kernel = ctx.pipelines.get_with(&ctx, &mv.key(), outs.len(), bufs.len(), || mv.source())?;
    let blocks = n * k / qt.block_elems();
    let (a_off, a_stride) = add.map_or((0, 0), |(_, o, s)| (o, s));
    let (nw_off, eps) = pro.norm.as_ref().map_or((0, 0.0), |(g, e)| (g.offset, *e as f32));
    let mut gx = n.div_ceil(mv.cols() as usize) as u32;
    if mv.stream {
        // At most the grid, and as many groups of rows for every set (the last ones one fewer).
        gx = n.div_ceil(mv.c as usize).div_ceil(mv.groups_per_set(n) * (256 / mv.ln) as usize) as u32;
    }
    let params = QuantI8Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        doff: crate::gpu::kit::quant_units::doff(qt, blocks),
        x_off: x_off as u32,
        x_stride: x_stride as u32,
        add_stride: a_stride as u32,
        add_off: a_off as u32,
        nw_off: nw_off as u32,
        eps,
        up_off: k as u32,
        out_stride: out_stride as u32,
        out_off: out_off as u32,
        sets: gx * (256 / mv.ln),
        d: rope.map_or(0, |a| a.d as u32),
        nh: rope.map_or(0, |a| a.nh as u32),
        nkv: rope.map_or(0, |a| a.nkv as u32),
        pos: rope.map_or(0, |a| a.pos as u32),
        len: rope.map_or(0, |a| a.len as u32),
        k_off: rope.map_or(0, |a| a.k_off as u32),
        v_off: rope.map_or(0, |a| a.v_off as u32),
        cos_off: rope.map_or(0, |a| a.cos.offset as u32),
        sin_off: rope.map_or(0, |a| a.sin.offset as u32),
    };
    let groups = [gx, m.div_ceil(mv.mt as usize) as u32, 1];
    bufs.splice(0..0, outs);
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(fresh)
}
