//! The spellings of the kernel's choices: `KILN_COOP`, `KILN_COOP_TILE`, `KILN_COOP_STAGE` and the
//! sweep specs (`CoopSpec`, e.g. `4x2:4x4:16:h4:deep:fast`).

use super::config::{CoopTile, Probe, Stage};

pub(super) fn disabled_by_env() -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *OFF.get_or_init(|| !crate::settings::COOP.is_not_zero())
}

/// The staging used on Vulkan unless `KILN_COOP_STAGE=h1|h4` says otherwise.
pub(super) const DEFAULT_STAGE: Stage = Stage::H4;

pub(super) fn stage_from_env() -> Option<Stage> {
    static STAGE: std::sync::OnceLock<Option<Stage>> = std::sync::OnceLock::new();
    *STAGE.get_or_init(|| Stage::parse(crate::settings::COOP_STAGE.get().ok()?.as_str()))
}

/// Every choice of the kernel for one run (`plan.rs`; tests and sweeps pass one through
/// `kiln::gpu_probes::matmul_coop_spec`).
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
    /// K split over this many workgroups per output tile (1: no split), their partial products
    /// summed by a second pass (`splitsum.wgsl`).
    pub splits: u32,
    /// f16 operands read and held as 32-bit words (`Config::words`).
    pub words: bool,
}

impl CoopSpec {
    /// `WMxWN:TMxTN:BK:STAGE[:FLAG]...`, e.g. `4x2:4x4:16:h4:deep:fast`. Flags: `deep` (two slices
    /// in flight), `a3` or `a4` (three, four), `fast`, `w` (f16 read as words), `kN` (K split N
    /// ways, 2 to 64), and the ablations `noload`, `nobarrier`, `nomma`, `noconv`.
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
            splits: 1,
            words: false,
        };
        for flag in flags {
            if let Some(n) = flag.strip_prefix('k').and_then(|n| n.parse::<u32>().ok()) {
                if !(2..=64).contains(&n) {
                    return None;
                }
                spec.splits = n;
                continue;
            }
            match *flag {
                "deep" => spec.ahead = 2,
                "a3" => spec.ahead = 3,
                "a4" => spec.ahead = 4,
                "fast" => spec.fast = true,
                "w" => spec.words = true,
                "noload" => spec.probe = Probe::NoLoad,
                "nobarrier" => spec.probe = Probe::NoBarrier,
                "nomma" => spec.probe = Probe::NoMma,
                "noconv" => spec.probe = Probe::NoConv,
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

pub(super) fn tile_from_env() -> CoopTile {
    static TILE: std::sync::OnceLock<CoopTile> = std::sync::OnceLock::new();
    *TILE.get_or_init(|| match crate::settings::COOP_TILE.get().as_deref() {
        Ok("large") => CoopTile::Large,
        Ok("wide") => CoopTile::Wide,
        Ok("small") => CoopTile::Small,
        _ => CoopTile::Auto,
    })
}
