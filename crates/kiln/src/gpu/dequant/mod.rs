//! Dequantisation of kiln's planar quantized weights (`quant/mod.rs`) to a float dtype: through
//! the blocks of `formats.wgsl` (`dequant.wgsl`) or, for the formats beyond Q8_0/Q4_0/Q4_K/Q6_K,
//! through the units the quantized matrix-vector product reads (`kit/quant_units.rs`,
//! `dequant_units.wgsl`).

use crate::gpu::kit::quant_units::{doff, fname, is_more, units};
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::{self, store_word, PRELUDE};
use crate::gpu::runtime::GpuStorage;
use crate::quant::QuantType;
use crate::{DType, Error, Result};

const FORMATS: &str = include_str!("formats.wgsl");
const DEQUANT: &str = include_str!("dequant.wgsl");
const DEQUANT_UNITS: &str = include_str!("dequant_units.wgsl");

params! {
    /// Dequantisation: values, and the word offset of the scale section (doff).
    struct DequantParams { n: u32, doff: u32 }
}

/// The dequantisation kernel of `qt` into `out` (f32, f16 or bf16).
pub(crate) fn dequant_source(qt: QuantType, out: DType) -> String {
    let (store, _) = store_word(out, 0);
    if is_more(qt) {
        let units = units();
        return render(
            DEQUANT_UNITS,
            &[
                ("QT", qt.name()),
                ("OUT", out.as_str()),
                ("PARAMS", &DequantParams::wgsl()),
                ("PRELUDE", PRELUDE),
                ("UNITS", &units),
                ("F", fname(qt)),
                ("STORE", &store),
            ],
        );
    }
    render(
        DEQUANT,
        &[
            ("QT", qt.name()),
            ("OUT", out.as_str()),
            ("PARAMS", &DequantParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("FORMATS", FORMATS),
            ("BS", &qt.block_elems().to_string()),
            ("F", fname(qt)),
            ("STORE", &store),
        ],
    )
}

/// Every dequantisation kernel variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for qt in QuantType::ALL {
        for out in [DType::F32, DType::F16, DType::BF16] {
            push(format!("quant_dequant:{qt}:{out}"), dequant_source(qt, out));
        }
    }
}

/// Dequantises the planar words `q` (`blocks` blocks of `qt`) into a fresh `out` buffer.
pub(crate) fn dequantize(q: &GpuStorage, qt: QuantType, blocks: usize, out: DType) -> Result<GpuStorage> {
    let ctx = q.ctx.clone();
    let n = blocks * qt.block_elems();
    if n > u32::MAX as usize || q.len > u32::MAX as usize {
        return Err(Error::Gpu { op: "dequantize", msg: format!("{n} values exceed the 32-bit index range") });
    }
    let dst = GpuStorage::alloc(&ctx, out, n)?;
    let key = format!("quant_dequant:{qt}:{out}");
    let kernel = ctx.pipelines.get(&ctx, &key, 1, || dequant_source(qt, out))?;
    let threads = n.div_ceil(wgsl::per_word(out));
    let groups = wgsl::grid(threads, 256, ctx.limits.max_compute_workgroups_per_dimension);
    let params = DequantParams { n: n as u32, doff: doff(qt, blocks) }.words();
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        &ctx,
        &kernel,
        &[dst.buffer.raw(), q.buffer.raw()],
        &params,
        groups,
    )?;
    Ok(dst)
}
