//! Quantized weights on the GPU (kiln's planar layout, `quant/mod.rs`): dequantisation to a float
//! dtype (`quant_dequant.wgsl`) and the few-row matrix product that reads the packed weight
//! directly (`quant_matvec.wgsl`); both read blocks through `quant_formats.wgsl`.

use super::kernels::render;
use super::wgsl::{self, store_word, PRELUDE};
use super::GpuStorage;
use crate::quant::QuantType;
use crate::{DType, Error, Result};
use std::fmt::Write;

const FORMATS: &str = include_str!("quant_formats.wgsl");
const DEQUANT: &str = include_str!("quant_dequant.wgsl");
const MATVEC: &str = include_str!("quant_matvec.wgsl");

/// Rows of x per matvec workgroup.
pub(crate) const ROWS: [u32; 4] = [1, 2, 4, 8];

/// The suffix of the format's WGSL functions.
fn fname(qt: QuantType) -> &'static str {
    match qt {
        QuantType::Q8_0 => "q8_0",
        QuantType::Q4_0 => "q4_0",
        QuantType::Q4K => "q4_k",
        QuantType::Q6K => "q6_k",
    }
}

/// Word offset of the scale section (0 for Q4_K, which has none).
fn doff(qt: QuantType, blocks: usize) -> u32 {
    (blocks * qt.body_bytes() / 4) as u32
}

/// The dequantisation kernel of `qt` into `out` (f32, f16 or bf16).
pub(crate) fn dequant_source(qt: QuantType, out: DType) -> String {
    let (store, _) = store_word(out, 0);
    render(
        DEQUANT,
        &[
            ("QT", qt.name()),
            ("OUT", out.as_str()),
            ("PRELUDE", PRELUDE),
            ("FORMATS", FORMATS),
            ("BS", &qt.block_elems().to_string()),
            ("F", fname(qt)),
            ("STORE", &store),
        ],
    )
}

/// The matvec kernel of `qt` for blocks of `mt` rows.
pub(crate) fn matvec_source(qt: QuantType, mt: u32) -> String {
    let (mut setup, mut body, mut stash, mut reduce, mut finish) =
        (String::new(), String::new(), String::new(), String::new(), String::new());
    for i in 0..mt {
        writeln!(setup, "    var acc{i} = 0.0;").unwrap();
        writeln!(setup, "    let xr{i} = p[4] + min(m0 + {i}u, m - 1u) * k4;").unwrap();
        writeln!(stash, "    red[{i}u * 256u + tid] = acc{i};").unwrap();
        writeln!(reduce, "            red[{i}u * 256u + tid] += red[{i}u * 256u + tid + h];").unwrap();
        writeln!(finish, "        if (m0 + {i}u < m) {{ dst[(m0 + {i}u) * n + col] = red[{i}u * 256u + tid]; }}")
            .unwrap();
    }
    let f = fname(qt);
    for g in 0..2 {
        writeln!(body, "        let v{g} = ld_{f}(b, s, {g}u);").unwrap();
    }
    for g in 0..2 {
        for j in 0..4 {
            let c = 4 * g + j;
            writeln!(body, "        let w{c} = wq_{f}(v{g}, s, {g}u, {j}u, sc);").unwrap();
            for i in 0..mt {
                writeln!(body, "        acc{i} += dot(w{c}, x[xr{i} + xo + {c}u]);").unwrap();
            }
        }
    }
    render(
        MATVEC,
        &[
            ("QT", qt.name()),
            ("MT", &mt.to_string()),
            ("FORMATS", FORMATS),
            ("RED", &(256 * mt).to_string()),
            ("UPB", &(qt.block_elems() / 32).to_string()),
            ("F", fname(qt)),
            ("SETUP", &setup),
            ("BODY", &body),
            ("STASH", &stash),
            ("REDUCE", &reduce),
            ("FINISH", &finish),
        ],
    )
}

/// Every quant kernel variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for qt in QuantType::ALL {
        for out in [DType::F32, DType::F16, DType::BF16] {
            push(format!("quant_dequant:{qt}:{out}"), dequant_source(qt, out));
        }
        for mt in ROWS {
            push(format!("quant_matvec:{qt}:r{mt}"), matvec_source(qt, mt));
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
    let params = [n as u32, doff(qt, blocks)];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        &ctx,
        &kernel,
        &[dst.buffer.raw(), q.buffer.raw()],
        &params,
        groups,
    )?;
    Ok(dst)
}

/// `x (m, k) @ w^T` (f32 `x` from element `x_off`, `w` the `(n, k)` planar words of `qt`): a fresh
/// `(m, n)` f32 buffer.
pub(crate) fn qmatmul(
    x: &GpuStorage,
    x_off: usize,
    w: &GpuStorage,
    qt: QuantType,
    n: usize,
    k: usize,
    m: usize,
) -> Result<GpuStorage> {
    let op = "qlinear";
    x.same_ctx(op, w)?;
    let ctx = x.ctx.clone();
    if (n * k).max(m * k) > u32::MAX as usize {
        return Err(Error::Gpu { op, msg: format!("a ({n}, {k}) weight exceeds the 32-bit index range") });
    }
    // x is read as vec4s: copy it when its offset is not a multiple of 4 elements.
    let copy;
    let (xs, off) = if x_off.is_multiple_of(4) {
        (x, x_off / 4)
    } else {
        let l = crate::Layout::new(vec![m * k].into(), vec![1], x_off);
        copy = crate::backend::BackendStorage::copy_contiguous(x, &l)?;
        (&copy, 0)
    };
    let mt = (m.next_power_of_two() as u32).min(8);
    let dst = GpuStorage::alloc(&ctx, DType::F32, m * n)?;
    let key = format!("quant_matvec:{qt}:r{mt}");
    let kernel = ctx.pipelines.get(&ctx, &key, 2, || matvec_source(qt, mt))?;
    let blocks = n * k / qt.block_elems();
    let params = [m as u32, n as u32, k as u32, doff(qt, blocks), off as u32];
    let groups = [n.div_ceil(8) as u32, m.div_ceil(mt as usize) as u32, 1];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(
        &ctx,
        &kernel,
        &[dst.buffer.raw(), xs.buffer.raw(), w.buffer.raw()],
        &params,
        groups,
    )?;
    Ok(dst)
}
