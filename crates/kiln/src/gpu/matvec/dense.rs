//! The dense few-row product of the decode step (`Tensor::linear_fused`, `ops/decode.rs`): the
//! matrix-vector product that normalises (RMSNorm) or gates (`silu_mul`) its own input row, adds
//! the residual before its store and writes the model's dtype (`dense.wgsl`), so a decoder layer's
//! norms, casts, activations and skip connections cost no dispatch of their own.

use super::emit::{lane_sum, lanes, norm_scale, rows_setup, sg_args, stores, sum_name, AddRead};
use crate::gpu::pointwise::Pro;
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::params::params;
use crate::gpu::runtime::storage::At;
use crate::gpu::runtime::wgsl::PRELUDE;
use crate::gpu::runtime::GpuStorage;
use crate::{DType, Error, Result};
use std::fmt::Write;

params! {
    /// The product's parameters: m, n, k, x's offset and row stride and w's offset (16-byte units),
    /// the up half's offset from the gate (units, silu_mul), the norm weight's offset (units), eps,
    /// and the addend's row stride and offset (elements). (Named for the decode step: the name is
    /// the WGSL struct's too, and kernels stay as they were.)
    struct DecodeParams {
        m: u32,
        n: u32,
        k: u32,
        x_off: u32,
        x_stride: u32,
        w_off: u32,
        up_off: u32,
        nw_off: u32,
        eps: f32,
        add_stride: u32,
        add_off: u32,
    }
}

const MATVEC: &str = include_str!("dense.wgsl");

/// Rows of x a fused matvec takes (more go through the composed ops).
pub(crate) const MAX_ROWS: usize = 8;

/// One dense matvec variant (its key keeps the name `decode_matvec`, as profiles and benchmarks
/// know it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DenseMatvec {
    pub(crate) dt: DType,
    pub(crate) pro: Pro,
    /// Adds a residual (the last binding, in `dt`) before the store.
    pub(crate) add: bool,
    /// Rows of x per workgroup.
    pub(crate) mt: u32,
    /// Weight rows per lane set.
    pub(crate) c: u32,
    /// Lanes per set.
    pub(crate) ln: u32,
    /// Units per loop step.
    pub(crate) u: u32,
    /// Lanes summed with subgroupAdd first.
    pub(crate) sg: bool,
}

/// Values in one 16-byte unit of `dt`.
pub(crate) fn unit_values(dt: DType) -> usize {
    16 / dt.size_in_bytes()
}

impl DenseMatvec {
    /// The kernel for an `(n, k)` weight and `m` rows of x: 4 weight rows per set (2 with more
    /// rows of x), lanes per set so that a lane takes about 4 units, then more lanes (fewer columns
    /// per workgroup) while the grid has under ~2 workgroups per SM of a large GPU.
    pub(crate) fn for_problem(
        dt: DType,
        pro: Pro,
        add: bool,
        n: usize,
        k: usize,
        m: usize,
        sg_max: Option<u32>,
    ) -> Self {
        let mt = (m.next_power_of_two() as u32).min(MAX_ROWS as u32);
        let c = if mt <= 2 { 4 } else { 2 };
        let ln = lanes(k / unit_values(dt), 8, n, c);
        let sg = sg_max.is_some_and(|s| s <= ln);
        DenseMatvec { dt, pro, add, mt, c, ln, u: 2, sg }
    }

    pub(crate) fn key(&self) -> String {
        let sg = if self.sg { ":sg" } else { "" };
        let add = if self.add { ":add" } else { "" };
        format!(
            "decode_matvec:{}:{}:r{}:c{}:l{}:u{}{sg}{add}",
            self.dt,
            self.pro.name(),
            self.mt,
            self.c,
            self.ln,
            self.u
        )
    }

    /// Weight rows (output columns) per workgroup.
    pub(crate) fn cols(&self) -> u32 {
        256 / self.ln * self.c
    }

    /// Bindings after the output: x, w, then the norm weight and the addend where used.
    pub(crate) fn inputs(&self) -> usize {
        2 + (self.pro == Pro::RmsNorm) as usize + self.add as usize
    }

    pub(crate) fn source(&self) -> String {
        let (mt, c, uu) = (self.mt, self.c, self.u);
        let wide = self.dt != DType::F32;
        let mut setup = String::new();
        for j in 0..c {
            writeln!(setup, "    let wb{j} = p.w_off + min(col0 + {j}u, n - 1u) * units;").unwrap();
        }
        rows_setup(&mut setup, mt, c);
        if self.pro == Pro::RmsNorm {
            let mut sum = String::from("    for (var e = tid; e < units; e += 256u) {\n");
            for r in 0..mt {
                writeln!(sum, "        let v{r} = x[xb{r} + e];").unwrap();
                for h in self.halves() {
                    writeln!(sum, "        let {h}{r} = {h}(v{r}); ss{r} += dot({h}{r}, {h}{r});").unwrap();
                }
            }
            sum += "    }\n";
            norm_scale(&mut setup, mt, &sum, self.sg);
        }
        let add = if self.add { AddRead::Bits } else { AddRead::None };
        let finish = stores(mt, c, self.pro == Pro::RmsNorm, wide.then_some(self.dt), add);
        let mut extra = String::new();
        let mut b = 3;
        if self.pro == Pro::RmsNorm {
            writeln!(extra, "@group(0) @binding({b}) var<storage, read> nw: array<vec4<u32>>;").unwrap();
            b += 1;
        }
        if self.add {
            writeln!(extra, "@group(0) @binding({b}) var<storage, read> addend: array<u32>;").unwrap();
        }
        let red = 256 * (c * mt).max(if self.pro == Pro::RmsNorm { mt } else { 1 });
        render(
            MATVEC,
            &[
                ("PARAMS", &DecodeParams::wgsl()),
                ("DT", self.dt.as_str()),
                (
                    "PRO",
                    match self.pro {
                        Pro::Plain => "x",
                        Pro::RmsNorm => "RMSNorm(x) (x * norm weight, the row's scale applied to the sum)",
                        Pro::SiluMul => "silu(gate) * up of the row's two halves",
                    },
                ),
                ("MT", &mt.to_string()),
                ("C", &c.to_string()),
                ("LN", &self.ln.to_string()),
                ("U", &uu.to_string()),
                ("V", &unit_values(self.dt).to_string()),
                ("SETS", &(256 / self.ln).to_string()),
                ("DST_ELEM", if wide { "u32" } else { "f32" }),
                ("EXTRA", &extra),
                ("PRELUDE", PRELUDE),
                ("RED", &red.to_string()),
                ("HELPERS", &self.helpers()),
                ("SETUP", &setup),
                ("BODY", &self.body()),
                ("REDUCE", &lane_sum(mt, c, self.ln, self.sg)),
                ("FINISH", &finish),
                ("SUM", sum_name(self.sg)),
                ("SG_ARGS", sg_args(self.sg)),
            ],
        )
    }

    /// The 16-byte unit as f32 vectors: the even and odd values of a 16-bit unit (their order is
    /// the same for x and w, which is all a dot product needs), or the 4 values of an f32 one.
    fn halves(&self) -> &'static [&'static str] {
        if self.dt != DType::F32 {
            &["ev", "od"]
        } else {
            &["ev"]
        }
    }

    /// `ev`/`od` of the dtype, and `silu`.
    fn helpers(&self) -> String {
        let ev_od = match self.dt {
            DType::F32 => "fn ev(v: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(v); }\n".to_string(),
            DType::F16 => "fn ev(v: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(v.x).x, \
                 unpack2x16float(v.y).x, unpack2x16float(v.z).x, unpack2x16float(v.w).x); }\n\
                 fn od(v: vec4<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(v.x).y, \
                 unpack2x16float(v.y).y, unpack2x16float(v.z).y, unpack2x16float(v.w).y); }\n"
                .to_string(),
            _ => "fn ev(v: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(v << vec4<u32>(16u)); }\n\
                 fn od(v: vec4<u32>) -> vec4<f32> { return bitcast<vec4<f32>>(v & vec4<u32>(0xffff0000u)); }\n"
                .to_string(),
        };
        ev_od + "fn silu(g: vec4<f32>) -> vec4<f32> { return g / (vec4<f32>(1.0) + exp(-g)); }\n"
    }

    /// One loop step: loads first (every unit of the step, for every weight row, x row and up half
    /// or norm weight; units past the row end read the last unit and are zeroed), then the
    /// prologue applied to x and the dot products.
    fn body(&self) -> String {
        let (mt, c, uu) = (self.mt, self.c, self.u);
        let halves = self.halves();
        let mut body = String::new();
        for s in 0..uu {
            writeln!(body, "        let ok{s} = u + {s}u * {}u < units;", self.ln).unwrap();
            writeln!(body, "        let uc{s} = min(u + {s}u * {}u, units - 1u);", self.ln).unwrap();
            for j in 0..c {
                writeln!(body, "        let w{j}_{s} = select(vec4<u32>(), w[wb{j} + uc{s}], ok{s});").unwrap();
            }
            for r in 0..mt {
                writeln!(body, "        let x{r}_{s} = select(vec4<u32>(), x[xb{r} + uc{s}], ok{s});").unwrap();
                if self.pro == Pro::SiluMul {
                    writeln!(body, "        let y{r}_{s} = select(vec4<u32>(), x[xb{r} + p.up_off + uc{s}], ok{s});")
                        .unwrap();
                }
            }
            if self.pro == Pro::RmsNorm {
                writeln!(body, "        let g{s} = select(vec4<u32>(), nw[p.nw_off + uc{s}], ok{s});").unwrap();
            }
        }
        for s in 0..uu {
            for r in 0..mt {
                for h in halves {
                    let v = match self.pro {
                        Pro::Plain => format!("{h}(x{r}_{s})"),
                        Pro::RmsNorm => format!("{h}(x{r}_{s}) * {h}(g{s})"),
                        Pro::SiluMul => format!("silu({h}(x{r}_{s})) * {h}(y{r}_{s})"),
                    };
                    writeln!(body, "        let a{r}_{s}_{h} = {v};").unwrap();
                }
            }
            for j in 0..c {
                for h in halves {
                    writeln!(body, "        let b{j}_{s}_{h} = {h}(w{j}_{s});").unwrap();
                }
                for r in 0..mt {
                    let dots = halves.iter().map(|h| format!("dot(a{r}_{s}_{h}, b{j}_{s}_{h})")).collect::<Vec<_>>();
                    writeln!(body, "        acc{j}_{r} += {};", dots.join(" + ")).unwrap();
                }
            }
        }
        body
    }
}

/// Every dense matvec variant, for the catalog.
pub(crate) fn catalog(push: &mut impl FnMut(String, String)) {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for pro in [Pro::Plain, Pro::RmsNorm, Pro::SiluMul] {
            for (m, n, k) in [(1, 4096, 4096), (1, 4096, 14336), (2, 64, 64), (4, 13, 4096), (8, 4096, 4096)] {
                for (sg, add) in [(None, false), (Some(32), false), (Some(32), true)] {
                    let mv = DenseMatvec::for_problem(dt, pro, add, n, k, m, sg);
                    push(mv.key(), mv.source());
                }
            }
        }
    }
}

/// The operands of one fused matvec: x rows `x_stride` elements apart (for `SiluMul` each row
/// holds gate then up, `k` values each), the contiguous `(n, k)` weight, the `(k,)` norm weight
/// and a contiguous `(m, n)` residual. Offsets and strides of x, w and the norm weight are whole
/// 16-byte units (checked by the caller, `ops/decode.rs`); the residual's offset is even for
/// 16-bit dtypes.
pub(crate) struct MatvecArgs<'a> {
    pub(crate) x: At<'a>,
    pub(crate) x_stride: usize,
    pub(crate) w: At<'a>,
    pub(crate) norm: Option<(At<'a>, f64)>,
    pub(crate) silu_mul: bool,
    pub(crate) residual: Option<At<'a>>,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
}

/// Runs the fused matvec: a fresh `(m, n)` buffer in x's dtype.
pub(crate) fn matvec(a: &MatvecArgs) -> Result<GpuStorage> {
    let op = "linear_fused";
    let dt = a.x.buf.dtype;
    a.x.buf.same_ctx(op, a.w.buf)?;
    let ctx = a.x.buf.ctx.clone();
    let vals = unit_values(dt);
    let top = (a.w.offset + a.n * a.k).max(a.x.offset + a.m * a.x_stride) + a.m * a.n;
    if top > u32::MAX as usize {
        return Err(Error::Gpu { op, msg: format!("a ({}, {}) weight exceeds the 32-bit index range", a.n, a.k) });
    }
    let pro = match (&a.norm, a.silu_mul) {
        (Some(_), _) => Pro::RmsNorm,
        (None, true) => Pro::SiluMul,
        (None, false) => Pro::Plain,
    };
    let sg_max = crate::gpu::runtime::subgroups::use_subgroups(&ctx).then_some(ctx.summary.subgroup_size.1);
    let mv = DenseMatvec::for_problem(dt, pro, a.residual.is_some(), a.n, a.k, a.m, sg_max);
    let dst = GpuStorage::alloc(&ctx, dt, a.m * a.n)?;
    let kernel = ctx.pipelines.get(&ctx, &mv.key(), mv.inputs(), || mv.source())?;
    let mut bufs = vec![dst.buffer.raw(), a.x.buf.buffer.raw(), a.w.buf.buffer.raw()];
    let (mut nw_off, mut eps) = (0, 0.0f32);
    if let Some((nw, e)) = &a.norm {
        nw.buf.same_ctx(op, a.x.buf)?;
        bufs.push(nw.buf.buffer.raw());
        (nw_off, eps) = (nw.offset / vals, *e as f32);
    }
    let (mut r_off, mut r_stride) = (0, 0);
    if let Some(r) = &a.residual {
        r.buf.same_ctx(op, a.x.buf)?;
        bufs.push(r.buf.buffer.raw());
        (r_off, r_stride) = (r.offset, a.n);
    }
    let params = DecodeParams {
        m: a.m as u32,
        n: a.n as u32,
        k: a.k as u32,
        x_off: (a.x.offset / vals) as u32,
        x_stride: (a.x_stride / vals) as u32,
        w_off: (a.w.offset / vals) as u32,
        up_off: (a.k / vals) as u32,
        nw_off: nw_off as u32,
        eps,
        add_stride: r_stride as u32,
        add_off: r_off as u32,
    };
    let groups = [a.n.div_ceil(mv.cols() as usize) as u32, a.m.div_ceil(mv.mt as usize) as u32, 1];
    ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).dispatch(&ctx, &kernel, &bufs, &params.words(), groups)?;
    Ok(dst)
}
