//! The quantized formats as units, one lane's step along a packed weight row: Q8_0, Q4_0, Q4_K and
//! Q6_K read with 16-byte loads (`quant_units.wgsl`); the other formats read by words, on the
//! helpers of `quant_word_units.wgsl`, one file per format family: `quant_word_legacy.wgsl` (Q4_1,
//! Q5_0, Q5_1), `quant_word_kquants.wgsl` (Q2_K, Q3_K, Q5_K), `quant_word_iq4.wgsl` (IQ4_NL,
//! IQ4_XS). Also the names and section offsets of kiln's planar layout (`quant/mod.rs`) that the
//! kernels reading them share.

use crate::quant::QuantType;

const UNITS: &str = include_str!("quant_units.wgsl");
/// Units of the formats beyond Q8_0/Q4_0/Q4_K/Q6_K: the shared helpers, then each family.
const WORD_UNITS: &str = concat!(
    include_str!("quant_word_units.wgsl"),
    include_str!("quant_word_legacy.wgsl"),
    include_str!("quant_word_kquants.wgsl"),
    include_str!("quant_word_iq4.wgsl"),
);

/// Every format's unit functions (`load_*`, `q_*`, `pos_*`, `off_*`), as one WGSL piece.
pub(crate) fn units() -> String {
    format!("{UNITS}\n{WORD_UNITS}")
}

/// The suffix of the format's WGSL functions.
pub(crate) fn fname(qt: QuantType) -> &'static str {
    match qt {
        QuantType::Q8_0 => "q8_0",
        QuantType::Q4_0 => "q4_0",
        QuantType::Q4K => "q4_k",
        QuantType::Q6K => "q6_k",
        QuantType::Q4_1 => "q4_1",
        QuantType::Q5_0 => "q5_0",
        QuantType::Q5_1 => "q5_1",
        QuantType::Q2K => "q2_k",
        QuantType::Q3K => "q3_k",
        QuantType::Q5K => "q5_k",
        QuantType::IQ4NL => "iq4_nl",
        QuantType::IQ4XS => "iq4_xs",
    }
}

/// Formats whose units are read by words (`quant_word_*.wgsl`; dequantised through them).
pub(crate) fn is_more(qt: QuantType) -> bool {
    !matches!(qt, QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4K | QuantType::Q6K)
}

/// Word offset of the scale section (0 for Q4_K, which has none).
pub(crate) fn doff(qt: QuantType, blocks: usize) -> u32 {
    (blocks * qt.body_bytes() / 4) as u32
}
