//! The kernel's specialisation (`Config`: fragment and subgroup sizes, head sizes, dtype, the
//! workgroup's shape; its workgroup memory and pipeline key), the ablations that time its parts, and
//! its parameters.

use super::super::params::AttnParams;
use crate::gpu::runtime::params::params;

/// One specialisation of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Cooperative matrix size (16 or 8) and subgroup size (also the query rows of a subgroup: one
    /// per lane).
    pub(crate) s: u32,
    pub(crate) sg: u32,
    /// Halves per workgroup-memory element: 4 (`vec4<f16>`, Vulkan) or 1 (Metal).
    pub(crate) unit: u32,
    /// Head sizes rounded up to a multiple of `s`.
    pub(crate) d: u32,
    pub(crate) dv: u32,
    /// bf16 inputs (scaled per line into f16), else f16.
    pub(crate) bf16: bool,
    /// Output: the input dtype in pairs (even dv), else f32.
    pub(crate) pairs: bool,
    /// Subgroups per workgroup, keys per tile and lanes per query row (1 or 2).
    pub(crate) nsg: u32,
    pub(crate) bk: u32,
    pub(crate) lpr: u32,
    pub(crate) emulate: bool,
    /// A part left out, to see what it costs (`KILN_COOP_ATTN_ABLATE`; wrong results).
    pub(crate) ablate: Ablate,
}

/// The parts of the kernel an ablation can leave out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ablate {
    None,
    /// Staging the key and value tiles.
    Stage,
    /// The scores' products.
    Scores,
    /// The maximum and the probabilities.
    Softmax,
    /// P v.
    Pv,
}

impl Ablate {
    pub(super) fn from_env() -> Ablate {
        match crate::settings::COOP_ATTN_ABLATE.get().as_deref() {
            Ok("stage") => Ablate::Stage,
            Ok("scores") => Ablate::Scores,
            Ok("softmax") => Ablate::Softmax,
            Ok("pv") => Ablate::Pv,
            _ => Ablate::None,
        }
    }
}

impl Config {
    /// Query rows of a subgroup and of the workgroup.
    pub(super) fn r(&self) -> u32 {
        self.sg / self.lpr
    }
    pub(super) fn bq(&self) -> u32 {
        self.nsg * self.r()
    }
    pub(super) fn pad(&self) -> u32 {
        if self.unit == 4 {
            8
        } else {
            4
        }
    }
    /// Row strides in halves of the staged queries and keys, values and probabilities.
    pub(super) fn strides(&self) -> (u32, u32, u32) {
        (self.d + self.pad(), self.dv + self.pad(), self.bk + self.pad())
    }
    /// Row stride in f32 of the scores (16-byte multiples, conflict-free 16-byte reads).
    pub(super) fn ls(&self) -> u32 {
        self.bk + 4
    }
    /// Halves of `sk`: the key tile, then the workgroup's probabilities.
    pub(super) fn sk_halves(&self) -> u32 {
        let (lq, _, lp) = self.strides();
        (self.bk * lq).max(self.bq() * lp)
    }
    /// Bytes of workgroup memory.
    pub(crate) fn workgroup_bytes(&self) -> u32 {
        let (lq, lv, _) = self.strides();
        2 * (self.bq() * lq + self.sk_halves() + self.bk * lv)
            + 4 * self.bq() * self.ls()
            + 32
            + if self.bf16 { 4 * self.bk } else { 0 }
    }
    pub(crate) fn key(&self) -> String {
        format!(
            "attention_flash_coop{}:{}x{}:sg{}:u{}:d{}:dv{}:{}:{}:nsg{}:bk{}:lpr{}{}",
            if self.emulate { "_emulated" } else { "" },
            self.s,
            self.s,
            self.sg,
            self.unit,
            self.d,
            self.dv,
            if self.bf16 { "bf16" } else { "f16" },
            if self.pairs { "pairs" } else { "f32" },
            self.nsg,
            self.bk,
            self.lpr,
            if self.ablate == Ablate::None { String::new() } else { format!(":ablate-{:?}", self.ablate) }
        )
    }
}

params! {
    /// The coop flash kernel's parameters: those of the flash kernel (`blocks` the query blocks; no
    /// splits), where the q, k and v line maxima start in `mx` (bf16), and the emulated kernel's
    /// loop bounds (elements per lane, fragment size).
    pub(super) struct CoopAttnParams: AttnParams {
        xq: u32,
        xk: u32,
        xv: u32,
        lane_elems: u32,
    }
}
