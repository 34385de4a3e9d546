//! The parameters of the attention kernels that several files launch: the flash and decode kernels
//! (and the coop flash kernel, which extends them) and the combine kernel.

use crate::gpu::runtime::params::params;

params! {
    /// The flash and decode kernels' parameters: sizes (b, hq, hkv, tq, tk, d, dv), the score scale,
    /// causal (1), blocks per head (query blocks, or row chunks in the decode kernel), value chunks,
    /// key splits and keys per split, 1 when partial rows are written, workgroups, where the partial
    /// rows start, q, k and v as views (offset, then strides along b, h, t and e), the scores' soft
    /// cap and its inverse (0: none) and the sliding window (0: none; mask.wgsl).
    pub(crate) struct AttnParams {
        b: u32,
        hq: u32,
        hkv: u32,
        tq: u32,
        tk: u32,
        d: u32,
        dv: u32,
        scale: f32,
        causal: u32,
        blocks: u32,
        vchunks: u32,
        splits: u32,
        per_split: u32,
        partial: u32,
        groups: u32,
        part_start: u32,
        q_off: u32,
        q_sb: u32,
        q_sh: u32,
        q_st: u32,
        q_se: u32,
        k_off: u32,
        k_sb: u32,
        k_sh: u32,
        k_st: u32,
        k_se: u32,
        v_off: u32,
        v_sb: u32,
        v_sh: u32,
        v_st: u32,
        v_se: u32,
        softcap: f32,
        softcap_inv: f32,
        window: u32,
    }
}

params! {
    /// The combine kernel's parameters: rows, dv, splits, keys per split, tq, tk, causal (1), where
    /// the partial rows start, column quads per row (<= 64), the sliding window (0: none).
    pub(crate) struct CombineParams {
        rows: u32,
        dv: u32,
        splits: u32,
        per_split: u32,
        tq: u32,
        tk: u32,
        causal: u32,
        part_start: u32,
        quads: u32,
        window: u32,
    }
}
