//! The activation side of the integer-dot quantized products (`quant_i8.rs`): rows of x, through
//! the product's prologue (RMSNorm or silu_mul), as 16-bit fixed point per run of 16 values in two
//! planes of signed bytes plus each run's scale and sum (`qx.wgsl`, on `qrun.wgsl`), in a dispatch
//! of its own: for the products whose rows of x do not fit a workgroup's memory (which make their
//! runs themselves otherwise, with no dispatch; e.g. 8 rows of 4096 values need 80 KiB).

use super::emit::x_loaders;
use crate::gpu::pointwise::Pro;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::wgsl::PRELUDE;
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Result};

const QX: &str = include_str!("qx.wgsl");
pub(super) const QRUN: &str = include_str!("qrun.wgsl");

params! {
    /// The activation quantizer's parameters: k (values per row, a multiple of 16), x's offset in
    /// values (a multiple of 16) and row stride, the norm weight's offset, eps, and the up half's
    /// offset from the gate (silu_mul).
    struct QxParams {
        k: u32,
        x_off: u32,
        x_stride: u32,
        nw_off: u32,
        eps: f32,
        up_off: u32,
    }
}

/// x's runs as the integer-dot products read them: `xq` (two vec4 words a run) and `xs` (a run's
/// scale and sum, two f32).
pub(crate) struct QuantizedX {
    pub(crate) xq: GpuStorage,
    pub(crate) xs: GpuStorage,
}

pub(crate) fn key(xdt: DType, pro: Pro) -> String {
    format!("qx:{xdt}:{}", pro.name())
}

pub(crate) fn source(xdt: DType, pro: Pro) -> String {
    let scale = if pro == Pro::RmsNorm {
        // The row's sum of squares by every workgroup of the row (k values from cache).
        "    var ss = 0.0;\n    for (var e = lid * 16u; e < p.k; e += 1024u) {\n        \
         for (var i = 0u; i < 4u; i++) { let v = xv(xb + e, i); ss += dot(v, v); }\n    }\n    \
         red[lid] = ss;\n    workgroupBarrier();\n    for (var s = 32u; s > 0u; s >>= 1u) {\n        \
         if (lid < s) { red[lid] += red[lid + s]; }\n        workgroupBarrier();\n    }\n    \
         let scale = inverseSqrt(red[0] / f32(p.k) + p.eps);"
    } else {
        "    let scale = 1.0;"
    };
    let norm = if pro == Pro::RmsNorm { "@group(0) @binding(3) var<storage, read> nw: array<vec4<u32>>;" } else { "" };
    render(
        QX,
        &[
            ("XDT", xdt.as_str()),
            ("PRO", pro.name()),
            ("NORM_BINDING", norm),
            ("PARAMS", &QxParams::wgsl()),
            ("XLOAD", &format!("{PRELUDE}\n{}", x_loaders(xdt, pro))),
            ("SCALE", scale),
            ("QRUN", QRUN),
        ],
    )
}

/// `m` rows of x (from value `x_off`, a multiple of 16, rows `x_stride` apart; `k` a multiple of
/// 16) through `pro`, with the norm weight `(buf, offset, eps)` for RMSNorm.
pub(crate) fn quantize_x(
    x: &GpuStorage,
    x_off: usize,
    x_stride: usize,
    m: usize,
    k: usize,
    pro: Pro,
    norm: Option<(&GpuStorage, usize, f64)>,
) -> Result<QuantizedX> {
    let ctx = x.ctx.clone();
    let runs = k / 16;
    let xq = GpuStorage::alloc(&ctx, DType::U32, m * runs * 8)?;
    let xs = GpuStorage::alloc(&ctx, DType::F32, m * runs * 2)?;
    let inputs = 1 + norm.is_some() as usize;
    let kernel = ctx.pipelines.get_with(&ctx, &key(x.dtype, pro), 2, inputs, || source(x.dtype, pro))?;
    let (nw_off, eps) = norm.map_or((0, 0.0), |(_, o, e)| (o, e as f32));
    let params = QxParams {
        k: k as u32,
        x_off: x_off as u32,
        x_stride: x_stride as u32,
        nw_off: nw_off as u32,
        eps,
        up_off: k as u32,
    };
    let mut bufs = vec![xq.buffer.raw(), xs.buffer.raw(), x.buffer.raw()];
    if let Some((g, _, _)) = norm {
        bufs.push(g.buffer.raw());
    }
    let groups = [runs.div_ceil(64) as u32, m as u32, 1];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(QuantizedX { xq, xs })
}

/// Every activation quantizer, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for xdt in [DType::F32, DType::F16, DType::BF16] {
        for pro in [Pro::Plain, Pro::RmsNorm, Pro::SiluMul] {
            push(key(xdt, pro), source(xdt, pro));
        }
    }
}
