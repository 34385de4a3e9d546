//! The kernel's specialisations: tile presets, how each operand and the result are staged, and the
//! derived sizes every other part of the cooperative matmul reads (`Config`), and the kernel's
//! parameters (`CoopParams`).

use crate::gpu::matmul::problem::MatmulShape;
use crate::gpu::runtime::params::params;

/// Halves of padding after each staged tile row: keeps rows 16-byte aligned (cooperative loads need
/// it) and spreads the rows of one fragment over different memory banks.
pub(super) const PAD: u32 = 8;

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
    pub(super) fn unit(self) -> u32 {
        match self {
            Stage::H1 => 1,
            Stage::H4 => 4,
        }
    }
    /// Halves per global read (one chunk).
    pub(crate) fn chunk(self) -> u32 {
        4
    }
    pub(super) fn name(self) -> &'static str {
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
    /// Split K: workgroup row `y` takes K from `y * p.kper` (a whole number of slices) and writes its
    /// f32 partial product (unscaled for bf16) to plane `y` of `dst`, `p.part` elements apart; a
    /// second pass sums the planes (`splitsum.wgsl`).
    pub(crate) split: bool,
    /// f16 operands read from memory as the 32-bit words that hold them (two halves each), kept in
    /// registers as words and converted to f16 when staged, as bf16 operands are (their form
    /// always). On NVIDIA's Vulkan compiler a `vec4<f16>` register set cost more than its words.
    pub(crate) words: bool,
    /// bf16 only: A comes already scaled and rounded to f16 by its line maxima pass
    /// (`line_maxima::maxima_scaled`, contiguous), so only B is converted when staged; the epilogue
    /// still scales back by both operands' line exponents.
    pub(crate) a16: bool,
}

/// Ablations for `examples/coop_sweep.rs` (results are wrong with any but `None`): `NoLoad` reads no
/// global memory in the K loop (the staged values are constants), `NoBarrier` drops the K loop's
/// barrier, `NoMma` drops the multiply-adds (fragments are still loaded), `NoConv` stages bf16
/// words as if they held f16 values (no scaling, no conversion).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    None,
    NoLoad,
    NoBarrier,
    NoMma,
    NoConv,
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
    pub(super) fn bf16(self) -> bool {
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
            split: false,
            words: false,
            a16: false,
        }
    }

    pub(super) fn bm(&self) -> u32 {
        self.wm * self.tm * self.s
    }
    pub(super) fn bn(&self) -> u32 {
        self.wn * self.tn * self.s
    }
    pub(super) fn nsg(&self) -> u32 {
        self.wm * self.wn
    }
    pub(super) fn wg(&self) -> u32 {
        self.nsg() * self.sg
    }
    /// (slow, fast) extents of the staged A tile.
    pub(super) fn a_tile(&self) -> (u32, u32) {
        if self.a.k_fast {
            (self.bm(), self.bk)
        } else {
            (self.bk, self.bm())
        }
    }
    pub(super) fn b_tile(&self) -> (u32, u32) {
        if self.b.k_fast {
            (self.bn(), self.bk)
        } else {
            (self.bk, self.bn())
        }
    }
    /// Row stride of the epilogue tiles: padded against bank conflicts, except with 8 subgroups,
    /// where the padding would push the 16x16 kernel past 48 KiB.
    pub(super) fn ldc(&self) -> u32 {
        if self.nsg() > 4 {
            self.s
        } else {
            self.s + 4
        }
    }
    /// Halves in one stage of each operand.
    pub(super) fn stages(&self) -> (u32, u32) {
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
            "matmul_coop{}{}:{s}x{s}:sg{}:{}x{}:{}x{}:bk{}:{}{}{}{}{}{}{}:A={}:B={}",
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
            if self.split { ":splitk" } else { "" },
            if self.words && !self.out.bf16() { ":w" } else { "" },
            if self.a16 && self.out.bf16() { ":a16" } else { "" },
            if self.probe == Probe::None { String::new() } else { format!(":{:?}", self.probe) },
            op(self.a),
            op(self.b),
            s = self.s
        )
    }

    /// Whether the tile shapes divide evenly among the invocations (true for every preset).
    pub(super) fn well_formed(&self) -> bool {
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

/// How to stage one operand with extents `mn` (its M or N dim) and `k`, and their strides.
#[allow(clippy::too_many_arguments)]
pub(super) fn operand(
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

params! {
    /// The cooperative matmul's parameters: the problem, tiles along M and N, the emulated kernel's
    /// loop bounds (elements per lane, fragment size), and for split K the depth of each split and
    /// the distance between the partial products' planes.
    pub(super) struct CoopParams: MatmulShape {
        tiles_m: u32,
        tiles_n: u32,
        lane_elems: u32,
        frag: u32,
        kper: u32,
        part: u32,
    }
}
