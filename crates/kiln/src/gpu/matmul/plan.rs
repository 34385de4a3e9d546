//! Which matmul kernel runs: plans, the fixed heuristic, the candidates autotune times, the K split
//! of a plan, and the shape bucket autotune caches a winner under.

use super::problem::{is_float, Mode, Problem};
use super::skinny::Skinny;
use super::tiled::{Tile, TILES};
use crate::DType;

/// The kernel of a plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kernel {
    Naive,
    Tiled(Tile),
    Skinny,
}

/// A kernel, whether it runs on the transposed problem, and how many ways K is split
/// (0: chosen from the shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) kernel: Kernel,
    pub(crate) swap: bool,
    pub(crate) splits: usize,
}

/// Workgroups that fill a large GPU (H200: 132 SMs with several resident workgroups each).
const FILL: usize = 1024;
/// Output tiles from which the large configurations fill the GPU without splitting K.
const TILES_ENOUGH: usize = 192;
/// K from which a product with too few large tiles takes them anyway, with K split.
const DEEP_K: usize = 2048;
/// At most this many output rows (or, transposed, columns) take the skinny kernels.
pub(crate) const SKINNY_MAX: usize = 64;

impl Plan {
    pub(crate) const NAIVE: Plan = Plan { kernel: Kernel::Naive, swap: false, splits: 1 };

    pub(crate) fn tiled(t: Tile, splits: usize) -> Plan {
        Plan { kernel: Kernel::Tiled(t), swap: false, splits }
    }
    pub(crate) fn skinny(swap: bool, splits: usize) -> Plan {
        Plan { kernel: Kernel::Skinny, swap, splits }
    }

    /// `naive`, `tiled:128x128:s1`, `skinny:s0:t` (`t`: transposed).
    pub(crate) fn encode(&self) -> String {
        let kernel = match self.kernel {
            Kernel::Naive => "naive".to_string(),
            Kernel::Tiled(t) => format!("tiled:{}", t.name),
            Kernel::Skinny => "skinny".to_string(),
        };
        format!("{kernel}:s{}{}", self.splits, if self.swap { ":t" } else { "" })
    }

    pub(crate) fn decode(s: &str) -> Option<Plan> {
        let mut parts = s.split(':');
        let kernel = match parts.next()? {
            "naive" => Kernel::Naive,
            "tiled" => Kernel::Tiled(Tile::by_name(parts.next()?)?),
            "skinny" => Kernel::Skinny,
            _ => return None,
        };
        let splits = parts.next()?.strip_prefix('s')?.parse().ok()?;
        let swap = match parts.next() {
            None => false,
            Some("t") => true,
            Some(_) => return None,
        };
        parts.next().is_none().then_some(Plan { kernel, swap, splits })
    }
}

fn tiles(p: &Problem, t: &Tile) -> usize {
    p.m.div_ceil(t.bm as usize) * p.n.div_ceil(t.bn as usize) * p.batch
}

/// The plan without autotune. Integers: naive. Up to 64 rows: skinny (streams B once); else up to
/// 64 columns: skinny on the transposed problem. Otherwise tiled: 128x128 (its 8-deep variant first
/// for f32 whose operands are both read as K-contiguous vectors, or where only that fits the
/// adapter) when that gives at least 192 tiles (about a full wave on an H200's 132 SMs, and more);
/// with fewer, the same with K split where K is at least `DEEP_K`; else 128x64 with enough tiles,
/// else 64x64 with K split until about 256 workgroups run. `KILN_MATMUL_TILE` names the tile
/// instead (K split automatically). Tiles the adapter cannot run are skipped; naive if none fit.
pub(crate) fn heuristic(p: &Problem, limits: &wgpu::Limits) -> Plan {
    if !is_float(p.dt) {
        return Plan::NAIVE;
    }
    if p.m <= SKINNY_MAX {
        return Plan::skinny(false, 0);
    }
    if p.n <= SKINNY_MAX {
        return Plan::skinny(true, 0);
    }
    let fit: Vec<Tile> = TILES.iter().copied().filter(|t| t.fits(limits)).collect();
    if let Some(t) = forced_tile().and_then(|f| fit.iter().find(|t| t.name == f.name)) {
        return Plan::tiled(*t, 0);
    }
    // f32 with both operands K-contiguous vectors (`linear`): the 8-deep slices first. The driver
    // gives that kernel 128 registers (two workgroups an SM) where the 16-deep one takes 217 (one);
    // measured on an H200 (docs/PERFORMANCE.md, eleventh session), f32 `linear` 2048 x 4096 -> 4096
    // 2214 -> 1993 us, 512 x 4096 -> 14336 2239 -> 2014; other layouts were slower on it (777 x 4096
    // x 3000 matmul 842 -> 1025 us).
    let order = if p.dt == DType::F32 && p.a.mode() == Mode::K4 && p.b.mode() == Mode::K4 {
        ["128x128k8", "128x128"]
    } else {
        ["128x128", "128x128k8"]
    };
    let large = || order.iter().filter_map(|name| fit.iter().find(|t| t.name == *name));
    if let Some(t) = large().find(|t| tiles(p, t) >= TILES_ENOUGH) {
        return Plan::tiled(*t, 1);
    }
    // Too few large tiles, but K deep: the same tiles with K split, before 128x64 or 64x64 ones
    // (H200 f32, eleventh session: 128x64 ran at 12-18 TFLOPS, 64x64 at 10-17, 128x128 at 19-35;
    // 777 x 4096 x 3000 1589 -> 845 us, `linear` 96 x 4096 -> 14336 975 -> 587, 1000 x 4104 ->
    // 2050 1010 -> 863).
    if p.k >= DEEP_K {
        if let Some(t) = large().next() {
            return Plan::tiled(*t, 0);
        }
    }
    if let Some(t) = fit.iter().find(|t| t.name == "128x64" && tiles(p, t) >= TILES_ENOUGH) {
        return Plan::tiled(*t, 1);
    }
    match fit.iter().find(|t| t.name == "64x64").or(fit.last()) {
        Some(t) => Plan::tiled(*t, 0),
        None => Plan::NAIVE,
    }
}

/// The tile `KILN_MATMUL_TILE` names (for A/B runs), read once.
fn forced_tile() -> Option<Tile> {
    static T: std::sync::OnceLock<Option<Tile>> = std::sync::OnceLock::new();
    *T.get_or_init(|| crate::settings::MATMUL_TILE.get().ok().and_then(|n| Tile::by_name(&n)))
}

/// What autotune times for `p`: every tile that fits (unsplit, and split when that adds
/// workgroups), skinny unsplit, with its automatic split and a quarter and four times that (plain and
/// transposed when the rows or columns are few enough), and naive.
pub(crate) fn candidates(p: &Problem, limits: &wgpu::Limits) -> Vec<Plan> {
    if !is_float(p.dt) {
        return vec![Plan::NAIVE];
    }
    let mut out = vec![heuristic(p, limits)];
    for t in TILES.iter().filter(|t| t.fits(limits)) {
        out.push(Plan::tiled(*t, 1));
        out.push(Plan::tiled(*t, 0));
    }
    for (swap, rows) in [(false, p.m), (true, p.n)] {
        if rows <= 4 * SKINNY_MAX {
            let q = if swap { p.transposed() } else { p.clone() };
            let s = skinny_splits(&q);
            for splits in [0, 1, (s / 4).max(1), s * 4] {
                out.push(Plan::skinny(swap, splits));
            }
        }
    }
    out.push(Plan::NAIVE);
    let mut unique: Vec<Plan> = Vec::new();
    for c in out {
        let (k, s) = chunking(&if c.swap { p.transposed() } else { p.clone() }, &c);
        let same = |u: &Plan| {
            u.kernel == c.kernel
                && u.swap == c.swap
                && chunking(&if u.swap { p.transposed() } else { p.clone() }, u) == (k, s)
        };
        if !unique.iter().any(same) {
            unique.push(c);
        }
    }
    unique
}

/// The automatic K split of the skinny kernel: enough workgroups to fill the GPU, while each split
/// keeps four loop steps and the partial sums stay under 1/8 of B's traffic.
fn skinny_splits(p: &Problem) -> usize {
    let s = Skinny::for_problem(p);
    let groups = p.n.div_ceil(s.cols_per_group() as usize) * p.m.div_ceil(s.rows as usize) * p.batch;
    let want = FILL.div_ceil(groups);
    let cap = (p.k / (16 * p.m)).min(p.k / (4 * s.k_step())).max(1);
    want.min(cap)
}

/// The automatic K split of a tiled plan: none when the tiles fill the GPU, else enough to reach
/// about 256 workgroups with at least 256 k per split.
fn tiled_splits(p: &Problem, t: &Tile) -> usize {
    let n = tiles(p, t);
    if n >= TILES_ENOUGH {
        1
    } else {
        256usize.div_ceil(n).min(p.k / 256).max(1)
    }
}

/// (K per split, number of splits) of `plan` on `p` (already transposed if the plan says so).
/// Splits are whole loop steps of the kernel, and few enough that no loop runs more than 32768
/// times (lavapipe stops loops at 65535 iterations) and the grid stays within 65535.
pub(crate) fn chunking(p: &Problem, plan: &Plan) -> (usize, usize) {
    let (step, auto) = match plan.kernel {
        Kernel::Naive => return (p.k, 1),
        Kernel::Tiled(t) => (t.bk as usize, tiled_splits(p, &t)),
        Kernel::Skinny => (Skinny::for_problem(p).k_step(), skinny_splits(p)),
    };
    let want = if plan.splits == 0 { auto } else { plan.splits };
    let min_splits = p.k.div_ceil(step * 32768);
    let splits = want.clamp(min_splits.max(1), 65535);
    let chunk = p.k.div_ceil(splits).div_ceil(step) * step;
    (chunk, p.k.div_ceil(chunk))
}

/// The shape bucket autotune caches under: dtype, both operands' load modes, and M, N, K and the
/// batch rounded up to powers of two.
pub(crate) fn tune_key(p: &Problem) -> String {
    let b = |x: usize| x.next_power_of_two();
    format!(
        "matmul:{}:a{}:b{}:m{}:n{}:k{}:x{}",
        p.dt,
        p.a.mode().name(),
        p.b.mode().name(),
        b(p.m),
        b(p.n),
        b(p.k),
        b(p.batch)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Layout};

    fn problem(dt: DType, m: usize, k: usize, n: usize) -> Problem {
        Problem::new(dt, &Layout::contiguous([m, k]), &Layout::contiguous([k, n])).unwrap()
    }

    fn limits(workgroup_bytes: u32) -> wgpu::Limits {
        wgpu::Limits { max_compute_workgroup_storage_size: workgroup_bytes, ..wgpu::Limits::default() }
    }

    #[test]
    fn heuristic_choices() {
        let h200 = limits(48 << 10);
        let name = |p: Plan| p.encode();
        assert_eq!(name(heuristic(&problem(DType::F32, 4096, 4096, 4096), &h200)), "tiled:128x128:s1");
        assert_eq!(name(heuristic(&problem(DType::F32, 2048, 2048, 2048), &h200)), "tiled:128x128:s1");
        assert_eq!(name(heuristic(&problem(DType::F32, 1024, 1024, 1024), &h200)), "tiled:64x64:s0");
        // Few large tiles but K deep: the large tiles, K split.
        assert_eq!(name(heuristic(&problem(DType::F32, 777, 4096, 3000), &h200)), "tiled:128x128:s0");
        assert_eq!(name(heuristic(&problem(DType::F16, 1, 4096, 4096), &h200)), "skinny:s0");
        assert_eq!(name(heuristic(&problem(DType::F32, 64, 4096, 11008), &h200)), "skinny:s0");
        assert_eq!(name(heuristic(&problem(DType::BF16, 4096, 4096, 3), &h200)), "skinny:s0:t");
        assert_eq!(name(heuristic(&problem(DType::I32, 4096, 4096, 4096), &h200)), "naive:s1");
        // f32 `linear` (the weight K-contiguous): the 8-deep slices; f16 keeps the 16-deep ones.
        let weight = Layout::contiguous([4096, 2048]).permute("t", &[1, 0]).unwrap();
        let linear = |dt| Problem::new(dt, &Layout::contiguous([2048, 2048]), &weight).unwrap();
        assert_eq!(name(heuristic(&linear(DType::F32), &h200)), "tiled:128x128k8:s1");
        assert_eq!(name(heuristic(&linear(DType::F16), &h200)), "tiled:128x128:s1");
        // Apple's 32 KiB still takes the largest tile; WebGPU's default 16 KiB the 8-deep one.
        assert_eq!(name(heuristic(&problem(DType::F32, 4096, 4096, 4096), &limits(32 << 10))), "tiled:128x128:s1");
        assert_eq!(name(heuristic(&problem(DType::F32, 4096, 4096, 4096), &limits(16 << 10))), "tiled:128x128k8:s1");
        assert_eq!(name(heuristic(&problem(DType::F32, 4096, 4096, 4096), &limits(4 << 10))), "naive:s1");
    }

    #[test]
    fn splits_fill_the_gpu_within_bounds() {
        let h200 = limits(48 << 10);
        // 1 x 4096 @ 4096 x 4096: 128 wide-k column blocks, split 4 ways (each split keeps four
        // loop steps of 256 k) into 512 workgroups.
        let p = problem(DType::F32, 1, 4096, 4096);
        assert_eq!(chunking(&p, &heuristic(&p, &h200)), (1024, 4));
        // 16 x 4096 @ 4096 x 4096: 2 row blocks x 16 column blocks of 256, split 16 ways.
        let p = problem(DType::F32, 16, 4096, 4096);
        assert_eq!(chunking(&p, &heuristic(&p, &h200)), (256, 16));
        // Split-K of a few big tiles; huge K keeps every loop under lavapipe's cap.
        let p = problem(DType::F32, 128, 1 << 20, 128);
        let (chunk, splits) = chunking(&p, &Plan::tiled(TILES[0], 0));
        assert!(chunk % 16 == 0 && chunk / 16 <= 32768 && splits * chunk >= p.k && splits > 1, "{chunk} {splits}");
        let (chunk, splits) = chunking(&p, &Plan::skinny(false, 1));
        assert!(chunk / 16 <= 32768 && (splits - 1) * chunk < p.k, "{chunk} {splits}");
        assert_eq!(chunking(&p, &Plan::NAIVE), (1 << 20, 1));
        // Candidates are distinct and include the heuristic's choice.
        let p = problem(DType::F32, 300, 500, 40);
        let c = candidates(&p, &h200);
        assert_eq!(c[0], heuristic(&p, &h200));
        assert!(c.contains(&Plan::NAIVE) && c.iter().any(|p| p.swap));
    }

    #[test]
    fn plans_round_trip() {
        let mut plans = vec![Plan::NAIVE, Plan::skinny(true, 0), Plan::skinny(false, 17)];
        plans.extend(TILES.iter().map(|t| Plan::tiled(*t, 3)));
        for p in plans {
            assert_eq!(Plan::decode(&p.encode()), Some(p), "{}", p.encode());
        }
        for bad in ["", "tiled", "tiled:1x1:s1", "skinny:x", "naive:s1:q", "naive:s1:t:x", "gemm:s1"] {
            assert_eq!(Plan::decode(bad), None, "{bad}");
        }
    }
}
