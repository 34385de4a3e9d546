//! The skinny matmul kernels for few output rows (matrix-vector and small-batch LLM shapes), where
//! the product is bound by streaming B: `skinny_n.wgsl` when B is read along n (its columns
//! are the fast axis), `skinny_k.wgsl` when B is read along k. Both stream B exactly once per
//! block of up to 16 rows and split K over workgroups to fill the GPU.

use super::problem::{vec_loader, MatmulParams, Mode, Problem, BASES};
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::DType;
use std::fmt::Write;

const SKINNY_N: &str = include_str!("skinny_n.wgsl");
const SKINNY_K: &str = include_str!("skinny_k.wgsl");

/// One skinny kernel variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Skinny {
    pub(crate) dt: DType,
    /// Output rows per workgroup (1, 2, 4, 8 or 16).
    pub(crate) rows: u32,
    /// B read along k (`matmul_skinny_k`) rather than along n.
    pub(crate) along_k: bool,
    /// Vector loads of A (along k) and of B.
    pub(crate) a_vec: bool,
    pub(crate) b_vec: bool,
    /// B read along n by a workgroup of 8 column lanes x 32 k lanes (32 columns, two groups of four
    /// k per lane and step) instead of 64 x 4 (256 columns): matrix-vector shapes fill the GPU with
    /// little or no K split, saving the split sum's dispatch.
    pub(crate) wide: bool,
}

/// Output rows per workgroup.
pub(crate) const ROWS: [u32; 5] = [1, 2, 4, 8, 16];

impl Skinny {
    /// The variant for `p` (a float problem): B's layout picks the kernel, M the row block.
    pub(crate) fn for_problem(p: &Problem) -> Skinny {
        let bm = p.b.mode();
        let along_k = bm.along_k();
        let rows = (p.m.next_power_of_two() as u32).min(max_rows());
        // Wide-k when one row block covers M and 32-column workgroups alone nearly fill an H200.
        let wide = !along_k && p.m <= 8 && p.n.div_ceil(32) * p.batch >= 96 && wide_enabled();
        Skinny { dt: p.dt, rows, along_k, a_vec: p.a.mode() == Mode::K4, b_vec: bm.is_vec(), wide }
    }

    /// Output columns one workgroup covers.
    pub(crate) fn cols_per_group(&self) -> u32 {
        4 * self.lanes().0
    }

    /// (column lanes, k lanes, groups of four k per lane and step) of the along-n kernel; the
    /// along-k kernel has 8 column groups of 32 k lanes.
    fn lanes(&self) -> (u32, u32, u32) {
        match (self.along_k, self.wide) {
            (true, _) => (8, 32, 1),
            (false, true) => (8, 32, 2),
            (false, false) => (64, 4, 1),
        }
    }

    /// Granularity of a K split: the k one loop step of a workgroup covers.
    pub(crate) fn k_step(&self) -> usize {
        let (_, kl, u) = self.lanes();
        4 * (kl * u) as usize
    }

    pub(crate) fn key(&self) -> String {
        let kind = if self.along_k { "k" } else { "n" };
        let v = |b: bool| if b { "v" } else { "s" };
        let wide = if self.wide { ":w" } else { "" };
        format!("matmul_skinny_{kind}:{}:r{}:a{}:b{}{wide}", self.dt, self.rows, v(self.a_vec), v(self.b_vec))
    }

    /// Every variant of float `dt`, for the catalog.
    pub(crate) fn all(dt: DType) -> Vec<Skinny> {
        let mut out = Vec::new();
        for rows in ROWS {
            for b_vec in [false, true] {
                for a_vec in [false, true] {
                    for (along_k, wide) in [(false, false), (true, false), (false, true)] {
                        // The wide-k shape serves one row block of up to 8 rows.
                        if wide && rows > 8 {
                            continue;
                        }
                        out.push(Skinny { dt, rows, along_k, a_vec, b_vec, wide });
                    }
                }
            }
        }
        out
    }
}

/// The largest row block: 16 (a batched decode step of 16-64 sequences reads each weight 1-4
/// times, not 2-8), `KILN_SKINNY_ROWS=8` (or 1, 2, 4) for A/B runs.
fn max_rows() -> u32 {
    static ROWS_MAX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ROWS_MAX.get_or_init(|| {
        crate::settings::SKINNY_ROWS.get().ok().and_then(|v| v.parse().ok()).filter(|r| ROWS.contains(r)).unwrap_or(16)
    })
}

/// Whether the wide-k shape may be chosen (`KILN_SKINNY_WIDE=0` turns it off, for A/B runs).
fn wide_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| crate::settings::SKINNY_WIDE.is_not_zero())
}

/// The pieces of a skinny kernel that its two forms fill: helper functions, the setup before the
/// K loop, the loop's body, and the reduction and stores after it.
#[derive(Default)]
struct Parts {
    loaders: String,
    setup: String,
    body: String,
    finish: String,
}

/// The WGSL of variant `s`.
pub(crate) fn source(s: &Skinny) -> String {
    let dt = s.dt;
    let mut p = Parts { loaders: loader("ld0", "in0", dt), ..Parts::default() };
    if s.a_vec {
        p.loaders = vec_loader("lv0", "in0", dt);
    }
    if s.b_vec {
        p.loaders += &vec_loader("lv1", "in1", dt);
    } else {
        p.loaders += &loader("ld1", "in1", dt);
    }
    let rows = s.rows;
    for i in 0..rows {
        writeln!(p.setup, "    let ar{i} = base.x + min(m0 + {i}u, m - 1u) * sam;").unwrap();
    }
    let b_elem = if s.b_vec { Mode::O4.elem(dt) } else { "u32" };
    let a_elem = if s.a_vec { Mode::K4.elem(dt) } else { "u32" };
    p.loaders += &if s.a_vec {
        "fn lda(e: u32, k: u32, sak: u32) -> vec4<f32> { return lv0(e + k); }\n".to_string()
    } else {
        "fn lda(e: u32, k: u32, sak: u32) -> vec4<f32> { return vec4<f32>(ld0(e + k * sak), \
         ld0(e + (k + 1u) * sak), ld0(e + (k + 2u) * sak), ld0(e + (k + 3u) * sak)); }\n"
            .to_string()
    };
    let template = if s.along_k {
        along_k(s, &mut p);
        SKINNY_K
    } else {
        along_n(s, &mut p);
        SKINNY_N
    };
    render(
        template,
        &[
            ("A_ELEM", a_elem),
            ("B_ELEM", b_elem),
            ("PARAMS", &MatmulParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &p.loaders),
            ("BASES", BASES),
            ("MT", &rows.to_string()),
            ("CL", &s.lanes().0.to_string()),
            ("KL", &s.lanes().1.to_string()),
            ("U", &s.lanes().2.to_string()),
            ("SETUP", &p.setup),
            ("BODY", &p.body),
            ("FINISH", &p.finish),
        ],
    )
}

/// B read along K (`skinny_k.wgsl`): each group of 32 k lanes owns 4 columns, its lanes reading
/// consecutive 4-element pieces of them; each row's 4 sums summed over the group by a tree.
fn along_k(s: &Skinny, p: &mut Parts) {
    let rows = s.rows;
    p.loaders += &if s.b_vec {
        "fn ldb(e: u32, k: u32, sbk: u32) -> vec4<f32> { return lv1(e + k); }\n".to_string()
    } else {
        "fn ldb(e: u32, k: u32, sbk: u32) -> vec4<f32> { return vec4<f32>(ld1(e + k * sbk), \
         ld1(e + (k + 1u) * sbk), ld1(e + (k + 2u) * sbk), ld1(e + (k + 3u) * sbk)); }\n"
            .to_string()
    };
    for c in 0..4 {
        writeln!(p.setup, "    let bc{c} = base.y + min(n0 + {c}u, n - 1u) * sbn;").unwrap();
        writeln!(p.body, "        let b{c} = select(vec4<f32>(), ldb(bc{c}, k, sbk), ok);").unwrap();
    }
    for i in 0..rows {
        for c in 0..4 {
            writeln!(p.setup, "    var acc{i}_{c} = 0.0;").unwrap();
        }
        writeln!(p.body, "        let a{i} = select(vec4<f32>(), lda(ar{i}, k, sak), ok);").unwrap();
        for c in 0..4 {
            writeln!(p.body, "        acc{i}_{c} += dot(a{i}, b{c});").unwrap();
        }
        writeln!(p.finish, "    red[tid] = vec4<f32>(acc{i}_0, acc{i}_1, acc{i}_2, acc{i}_3);").unwrap();
        p.finish += "    workgroupBarrier();\n";
        p.finish += "    for (var s = 16u; s > 0u; s >>= 1u) {\n";
        p.finish += "        if (kl < s) { red[tid] += red[tid + s]; }\n";
        p.finish += "        workgroupBarrier();\n    }\n";
        writeln!(p.finish, "    if (kl == 0u && m0 + {i}u < m) {{").unwrap();
        p.finish += "        let v = red[tid];\n";
        store4(&mut p.finish, i);
        p.finish += "    }\n";
    }
}

/// B read along N (`skinny_n.wgsl`): each invocation owns 4 columns and reads groups of four
/// consecutive k, `u` groups a step with all loads first; the k lanes of a column summed by a tree.
fn along_n(s: &Skinny, p: &mut Parts) {
    let rows = s.rows;
    p.loaders += &if s.b_vec {
        "fn ldb(e: u32, sbn: u32) -> vec4<f32> { return lv1(e); }\n".to_string()
    } else {
        "fn ldb(e: u32, sbn: u32) -> vec4<f32> { return vec4<f32>(ld1(e), ld1(e + sbn), ld1(e + 2u * sbn), \
         ld1(e + 3u * sbn)); }\n"
            .to_string()
    };
    let (_, kl, u) = s.lanes();
    // Group g of a step: k rows kg..kg+4 (kg = k + 4 KL g); rows past kend read row k (in
    // bounds) and are zeroed. All loads of the step come first.
    for g in 0..u {
        let kg = if g == 0 { "k".to_string() } else { format!("k{g}") };
        if g > 0 {
            writeln!(p.body, "        let {kg} = k + {}u;", 4 * kl * g).unwrap();
        }
        writeln!(p.body, "        let ok{g} = vec4<u32>({kg}) + I4 < vec4<u32>(kend);").unwrap();
        for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
            writeln!(
                p.body,
                "        let b{g}_{j} = select(vec4<f32>(), ldb(bcol + select(k, {kg} + {j}u, ok{g}.{comp}) * sbk, sbn), ok{g}.{comp});"
            )
            .unwrap();
        }
        for i in 0..rows {
            writeln!(
                p.body,
                "        let a{i}_{g} = select(vec4<f32>(), lda(ar{i}, select(k, {kg}, ok{g}.x), sak), ok{g});"
            )
            .unwrap();
        }
    }
    for i in 0..rows {
        writeln!(p.setup, "    var acc{i} = vec4<f32>();").unwrap();
        for g in 0..u {
            for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                writeln!(p.body, "        acc{i} = fma(vec4<f32>(a{i}_{g}.{comp}), b{g}_{j}, acc{i});").unwrap();
            }
        }
        // Tree sum over the k lanes (lanes kl and kl + s hold the same columns).
        writeln!(p.finish, "    red[tid] = acc{i};").unwrap();
        p.finish += "    workgroupBarrier();\n";
        p.finish += "    for (var s = KL / 2u; s > 0u; s >>= 1u) {\n";
        p.finish += "        if (kl < s) { red[tid] += red[tid + s * CL]; }\n";
        p.finish += "        workgroupBarrier();\n    }\n";
        writeln!(p.finish, "    if (kl == 0u && m0 + {i}u < m) {{").unwrap();
        p.finish += "        let v = red[tid];\n";
        store4(&mut p.finish, i);
        p.finish += "    }\n    workgroupBarrier();\n";
    }
}

/// Stores `v` (columns n0..n0+4 of row m0 + i) where the columns exist.
fn store4(out: &mut String, i: u32) {
    writeln!(out, "        let o = cbase + (m0 + {i}u) * som + n0 * son;").unwrap();
    for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
        writeln!(out, "        if (n0 + {j}u < n) {{ dst[o + {j}u * son] = bitcast<u32>(v.{comp}); }}").unwrap();
    }
}
