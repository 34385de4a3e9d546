//! The block formats, one block at a time, by family: `legacy.rs` (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1),
//! `kquants.rs` (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), `iq4.rs` (IQ4_NL, IQ4_XS). Dequantisation follows
//! ggml's `dequantize_row_*` exactly (the same f32 operations in the same order); quantisation from
//! f32 is ggml's reference rounding where ggml has one (the legacy formats, byte for byte) and a
//! plain per-sub-block scale search elsewhere (each family's file says which).
//!
//! Blocks are seen in kiln's planar layout (`quant/mod.rs`): `body` is the block without its
//! separated f16 scale `d` where the format has one moved out (Q8_0, Q4_0, Q5_0, Q3_K, Q6_K,
//! IQ4_NL), else the whole block.

mod iq4;
mod kquants;
mod legacy;

use super::QuantType;
use half::f16;

/// Dequantises one block (`qt.block_elems()` values) into `out`.
#[inline]
pub(crate) fn dequant_block(qt: QuantType, body: &[u8], d: f16, out: &mut [f32]) {
    match qt {
        QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 => {
            legacy::dequant_block(qt, body, d, out)
        }
        QuantType::Q2K | QuantType::Q3K | QuantType::Q4K | QuantType::Q5K | QuantType::Q6K => {
            kquants::dequant_block(qt, body, d, out)
        }
        QuantType::IQ4NL | QuantType::IQ4XS => iq4::dequant_block(qt, body, d, out),
    }
}

/// Quantises one block of `x` into ggml's block bytes `out` (`qt.block_bytes()` long).
pub(crate) fn quant_block(qt: QuantType, x: &[f32], out: &mut [u8]) {
    match qt {
        QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4_1 | QuantType::Q5_0 | QuantType::Q5_1 => {
            legacy::quant_block(qt, x, out)
        }
        QuantType::Q2K | QuantType::Q3K | QuantType::Q4K | QuantType::Q5K | QuantType::Q6K => {
            kquants::quant_block(qt, x, out)
        }
        QuantType::IQ4NL | QuantType::IQ4XS => iq4::quant_block(qt, x, out),
    }
}

/// The f16 at byte `o` of a block, as f32.
pub(super) fn h16(b: &[u8], o: usize) -> f32 {
    f16::from_le_bytes([b[o], b[o + 1]]).to_f32()
}

/// The f16 nearest `v`, or the next one up when that is below `v` (a scale that must cover).
pub(super) fn f16_up(v: f32) -> f16 {
    let h = f16::from_f32(v);
    if h.to_f32() < v {
        f16::from_bits(h.to_bits() + 1)
    } else {
        h
    }
}

/// Value of largest magnitude (with its sign), ggml's `max` of `quantize_row_q4_0_ref`.
pub(super) fn signed_amax(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}
