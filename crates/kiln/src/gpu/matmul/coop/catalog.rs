//! Every kernel variant of the cooperative matmul, for the shader-translation test.

use super::config::{Config, CoopTile, Operand, Out, Stage};
use super::emit::source;
use super::launch::splitsum_source;
use crate::gpu::pointwise::line_maxima;

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
                        // A scaled to f16 by its maxima pass (read along K only).
                        if ak {
                            let c = Config { a16: true, ..c };
                            out.push((c.key(), source(&c)));
                        }
                    }
                }
            }
        }
    }
    out.push(("line_maxima".into(), line_maxima::source(false)));
    out.push(("line_maxima_x4".into(), line_maxima::source(true)));
    out.push(("line_maxima_whole".into(), line_maxima::whole_source(false)));
    out.push(("line_maxima_whole_scaled".into(), line_maxima::whole_source(true)));
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
    // Split K: f16 and bf16 partial products (cooperative 16x16 and 8x8, emulated), the few-row
    // tiles the automatic choice takes for them, and the sums of their planes.
    let (a, b) = (Operand { k_fast: true, vec: true }, Operand { k_fast: true, vec: true });
    for out_form in [Out::F16, Out::Bf16Pairs, Out::Bf16ViaF32] {
        for (s, stage, emulate) in [(16, Stage::H4, false), (8, Stage::H1, false), (16, Stage::H4, true)] {
            let c =
                Config { stage, emulate, out: out_form, split: true, ..Config::preset(CoopTile::Small, s, 32, a, b) };
            out.push((c.key(), source(&c)));
        }
        for ((tm, tn, bk), split) in [(2, 1, 64), (4, 1, 64), (6, 2, 32)].into_iter().zip([true, false, true]) {
            let base = Config::preset(CoopTile::Large, 16, 32, a, b);
            let c = Config {
                wm: 1,
                wn: 4,
                tm,
                tn,
                bk,
                stage: Stage::H4,
                ahead: 4,
                fast: true,
                out: out_form,
                split,
                ..base
            };
            out.push((c.key(), source(&c)));
            if out_form == Out::F16 {
                // f16 read as words (`Config::words`), checked and fast reads.
                let w = Config { words: true, ..c };
                out.push((w.key(), source(&w)));
            }
        }
    }
    // f16 words on scalar staging and scalar (strided) operands, cooperative and emulated.
    let (a, b) = (Operand { k_fast: false, vec: false }, Operand { k_fast: true, vec: true });
    for (s, stage, emulate) in [(8, Stage::H1, false), (16, Stage::H4, true)] {
        let c = Config { stage, emulate, words: true, ..Config::preset(CoopTile::Small, s, 32, a, b) };
        out.push((c.key(), source(&c)));
    }
    out.push(("matmul_coop_splitsum_f16".into(), splitsum_source(false)));
    out.push(("matmul_coop_splitsum_bf16".into(), splitsum_source(true)));
    out
}
