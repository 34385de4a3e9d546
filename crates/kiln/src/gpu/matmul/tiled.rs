//! The register-blocked matmul kernel (`tiled.wgsl`) for float dtypes: its tile
//! configurations and the generated, fully unrolled load / multiply / store code of one
//! configuration, dtype and pair of operand layout modes.

use super::problem::{vec_loader, MatmulParams, Mode, BASES};
use crate::gpu::runtime::kernels::render;
use crate::gpu::runtime::wgsl::{loader, PRELUDE};
use crate::DType;
use std::fmt::Write;

const TILED: &str = include_str!("tiled.wgsl");

/// One tile configuration: a `bm x bn` output tile per workgroup, `bk`-deep slices of A and B in
/// workgroup memory (double-buffered), a `tm x tn` micro-tile per invocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tile {
    pub(crate) name: &'static str,
    pub(crate) bm: u32,
    pub(crate) bn: u32,
    pub(crate) bk: u32,
    pub(crate) tm: u32,
    pub(crate) tn: u32,
}

/// Every configuration, largest first. The heuristic and autotune choose among those that fit the
/// adapter's workgroup limits (the largest needs 32 KiB of workgroup memory, Apple's limit). The
/// 8-deep 128x128 variant halves the workgroup memory and the registers holding the next slice, at
/// twice the barriers: an autotune candidate.
pub(crate) const TILES: [Tile; 6] = [
    Tile { name: "128x128", bm: 128, bn: 128, bk: 16, tm: 8, tn: 8 },
    Tile { name: "128x128k8", bm: 128, bn: 128, bk: 8, tm: 8, tn: 8 },
    Tile { name: "128x64", bm: 128, bn: 64, bk: 16, tm: 8, tn: 8 },
    Tile { name: "64x64", bm: 64, bn: 64, bk: 16, tm: 8, tn: 8 },
    Tile { name: "64x64t4", bm: 64, bn: 64, bk: 16, tm: 4, tn: 4 },
    Tile { name: "32x32", bm: 32, bn: 32, bk: 16, tm: 4, tn: 4 },
];

impl Tile {
    /// Invocations along n and along m.
    fn wgx(&self) -> u32 {
        self.bn / self.tn
    }
    fn wgy(&self) -> u32 {
        self.bm / self.tm
    }
    pub(crate) fn threads(&self) -> u32 {
        self.wgx() * self.wgy()
    }
    /// Bytes of workgroup memory: two slices of A and of B in f32.
    pub(crate) fn workgroup_bytes(&self) -> u32 {
        2 * self.bk * (self.bm + self.bn) * 4
    }
    /// Whether the adapter can run this configuration.
    pub(crate) fn fits(&self, limits: &wgpu::Limits) -> bool {
        self.workgroup_bytes() <= limits.max_compute_workgroup_storage_size
            && self.threads() <= limits.max_compute_invocations_per_workgroup
            && self.threads() <= limits.max_compute_workgroup_size_x
    }
    pub(crate) fn by_name(name: &str) -> Option<Tile> {
        TILES.iter().copied().find(|t| t.name == name)
    }
}

/// One operand as the generator sees it: `a` (rows m) or `b` (columns n).
struct Side {
    /// Prefix of its generated names, binding, loaders, workgroup arrays.
    x: &'static str,
    buf: &'static str,
    ld: &'static str,
    lv: &'static str,
    shared: &'static str,
    /// Tile extent along its outer axis, the matrix extent, origin, strides (outer, k), base.
    bo: u32,
    extent: &'static str,
    origin: &'static str,
    so: &'static str,
    sk: &'static str,
    base: &'static str,
    mode: Mode,
}

/// The WGSL of `tile` for float `dt` with A loaded in mode `am` and B in mode `bm`.
pub(crate) fn source(tile: &Tile, dt: DType, am: Mode, bm: Mode) -> String {
    let a = Side {
        x: "a",
        buf: "in0",
        ld: "ld0",
        lv: "lv0",
        shared: "ta",
        bo: tile.bm,
        extent: "m",
        origin: "m0",
        so: "sam",
        sk: "sak",
        base: "base.x",
        mode: am,
    };
    let b = Side {
        x: "b",
        buf: "in1",
        ld: "ld1",
        lv: "lv1",
        shared: "tb",
        bo: tile.bn,
        extent: "n",
        origin: "n0",
        so: "sbn",
        sk: "sbk",
        base: "base.y",
        mode: bm,
    };
    let mut loaders = String::new();
    for s in [&a, &b] {
        if s.mode.is_vec() {
            loaders += &vec_loader(s.lv, s.buf, dt);
        } else {
            loaders += &loader(s.ld, s.buf, dt);
        }
    }
    let (mut setup, mut load, mut store0, mut store1) = (String::new(), String::new(), String::new(), String::new());
    for s in [&a, &b] {
        side_code(tile, s, &mut setup, &mut load, &mut store0, &mut store1);
    }
    for (r, h) in micro(tile) {
        writeln!(setup, "    var c_{r}_{h} = vec4<f32>();").unwrap();
    }
    let ct = |n: u32| n.to_string();
    render(
        TILED,
        &[
            ("A_ELEM", am.elem(dt)),
            ("B_ELEM", bm.elem(dt)),
            ("PARAMS", &MatmulParams::wgsl()),
            ("PRELUDE", PRELUDE),
            ("LOADERS", &loaders),
            ("BASES", BASES),
            ("BM4", &ct(tile.bm / 4)),
            ("BN4", &ct(tile.bn / 4)),
            ("BM", &ct(tile.bm)),
            ("BN", &ct(tile.bn)),
            ("BK", &ct(tile.bk)),
            ("TM", &ct(tile.tm)),
            ("TN", &ct(tile.tn)),
            ("WGX4", &ct(4 * tile.wgx())),
            ("WGY4", &ct(4 * tile.wgy())),
            ("WGX", &ct(tile.wgx())),
            ("NT", &ct(tile.threads())),
            ("SETUP", &setup),
            ("LOAD", &load),
            ("STORE0", &store0),
            ("STORE1", &store1),
            ("COMPUTE0", &compute(tile, 0)),
            ("COMPUTE1", &compute(tile, 1)),
            ("WRITE", &write_out(tile)),
        ],
    )
}

/// (row, column group) of every vec4 accumulator: `tm` rows by `tn / 4` groups of 4 columns.
fn micro(tile: &Tile) -> impl Iterator<Item = (u32, u32)> {
    let tn4 = tile.tn / 4;
    (0..tile.tm).flat_map(move |r| (0..tn4).map(move |h| (r, h)))
}

/// Loads and stores of one operand. Each invocation moves `chunks` groups of 4 elements per slice:
/// along k (modes K4/K1, four consecutive k of one row) or along the outer axis (O4/O1). The
/// invariant coordinates are computed once in `setup`.
fn side_code(tile: &Tile, s: &Side, setup: &mut String, load: &mut String, st0: &mut String, st1: &mut String) {
    let nt = tile.threads();
    let (bk4, bo4) = (tile.bk / 4, s.bo / 4);
    let chunks = tile.bk * s.bo / 4 / nt;
    let x = s.x;
    for c in 0..chunks {
        let idx = format!("(tid + {}u)", c * nt);
        if s.mode.along_k() {
            writeln!(setup, "    let {x}o{c} = {idx} / {bk4}u;").unwrap();
            writeln!(setup, "    let {x}k{c} = ({idx} % {bk4}u) * 4u;").unwrap();
        } else {
            writeln!(setup, "    let {x}k{c} = {idx} / {bo4}u;").unwrap();
            writeln!(setup, "    let {x}o{c} = ({idx} % {bo4}u) * 4u;").unwrap();
        }
        writeln!(setup, "    let {x}g{c} = {} + {x}o{c};", s.origin).unwrap();
        writeln!(setup, "    let {x}a{c} = {} + {x}g{c} * {};", s.base, s.so).unwrap();
        writeln!(setup, "    var {x}r{c} = vec4<f32>();").unwrap();
        let (ext, sk, so) = (s.extent, s.sk, s.so);
        let body = match s.mode {
            Mode::K4 => format!(
                "let k = kt + {x}k{c}; {x}r{c} = select(vec4<f32>(), {lv}({x}a{c} + k), \
                 (vec4<u32>(k) + I4 < vec4<u32>(kend)) & vec4<bool>({x}g{c} < {ext}));",
                lv = s.lv
            ),
            Mode::O4 => format!(
                "let k = kt + {x}k{c}; {x}r{c} = select(vec4<f32>(), {lv}({x}a{c} + k * {sk}), \
                 (vec4<u32>({x}g{c}) + I4 < vec4<u32>({ext})) & vec4<bool>(k < kend));",
                lv = s.lv
            ),
            Mode::K1 => {
                let parts: Vec<String> = (0..4)
                    .map(|j| {
                        format!("select(0.0, {ld}({x}a{c} + (k + {j}u) * {sk}), ok && k + {j}u < kend)", ld = s.ld)
                    })
                    .collect();
                format!("let k = kt + {x}k{c}; let ok = {x}g{c} < {ext}; {x}r{c} = vec4<f32>({});", parts.join(", "))
            }
            Mode::O1 => {
                let parts: Vec<String> = (0..4)
                    .map(|j| format!("select(0.0, {ld}(e + {j}u * {so}), ok && {x}g{c} + {j}u < {ext})", ld = s.ld))
                    .collect();
                format!(
                    "let k = kt + {x}k{c}; let ok = k < kend; let e = {x}a{c} + k * {sk}; {x}r{c} = vec4<f32>({});",
                    parts.join(", ")
                )
            }
        };
        writeln!(load, "            {{ {body} }}").unwrap();
        for (buf, st) in [(0, &mut *st0), (1, &mut *st1)] {
            let arr = format!("{}{buf}", s.shared);
            if s.mode.along_k() {
                for (j, comp) in ["x", "y", "z", "w"].iter().enumerate() {
                    writeln!(st, "            {arr}[{x}k{c} + {j}u][{x}o{c} >> 2u][{x}o{c} & 3u] = {x}r{c}.{comp};")
                        .unwrap();
                }
            } else {
                writeln!(st, "            {arr}[{x}k{c}][{x}o{c} >> 2u] = {x}r{c};").unwrap();
            }
        }
    }
}

/// The unrolled multiply of one staged slice (buffer `buf`) into the accumulators.
fn compute(tile: &Tile, buf: u32) -> String {
    let (tm4, tn4) = (tile.tm / 4, tile.tn / 4);
    let (wgx, wgy) = (tile.wgx(), tile.wgy());
    let comps = ["x", "y", "z", "w"];
    let mut out = String::new();
    for k in 0..tile.bk {
        out += "        {\n";
        for g in 0..tm4 {
            writeln!(out, "            let ka{g} = ta{buf}[{k}][ty + {}u];", g * wgy).unwrap();
        }
        for h in 0..tn4 {
            writeln!(out, "            let kb{h} = tb{buf}[{k}][tx + {}u];", h * wgx).unwrap();
        }
        for (r, h) in micro(tile) {
            let (g, i) = (r / 4, r % 4);
            writeln!(out, "            c_{r}_{h} = fma(vec4<f32>(ka{g}.{}), kb{h}, c_{r}_{h});", comps[i as usize])
                .unwrap();
        }
        out += "        }\n";
    }
    out
}

/// Masked scalar stores of the micro-tile through the output strides.
fn write_out(tile: &Tile) -> String {
    let (tm4, tn4) = (tile.tm / 4, tile.tn / 4);
    let (wgx, wgy) = (tile.wgx(), tile.wgy());
    let comps = ["x", "y", "z", "w"];
    let mut out = String::new();
    for h in 0..tn4 {
        writeln!(out, "    let col{h} = n0 + (tx + {}u) * 4u;", h * wgx).unwrap();
    }
    for g in 0..tm4 {
        for i in 0..4 {
            let r = g * 4 + i;
            writeln!(out, "    let row{r} = m0 + (ty + {}u) * 4u + {i}u;", g * wgy).unwrap();
            writeln!(out, "    if (row{r} < m) {{").unwrap();
            for h in 0..tn4 {
                for (j, comp) in comps.iter().enumerate() {
                    writeln!(
                        out,
                        "        if (col{h} + {j}u < n) {{ dst[cbase + row{r} * som + (col{h} + {j}u) * son] = \
                         bitcast<u32>(c_{r}_{h}.{comp}); }}"
                    )
                    .unwrap();
                }
            }
            out += "    }\n";
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_divide_evenly() {
        for t in TILES {
            assert_eq!(t.tm % 4, 0, "{t:?}");
            assert_eq!(t.tn % 4, 0, "{t:?}");
            assert_eq!(t.bm % t.tm, 0, "{t:?}");
            assert_eq!(t.bn % t.tn, 0, "{t:?}");
            assert_eq!((t.bk * t.bm / 4) % t.threads(), 0, "{t:?}: A slice per invocation");
            assert_eq!((t.bk * t.bn / 4) % t.threads(), 0, "{t:?}: B slice per invocation");
            assert!(t.workgroup_bytes() <= 32 * 1024, "{t:?} must fit Apple's 32 KiB");
            assert!(t.threads() <= 256, "{t:?} must fit WebGPU's 256 invocations");
        }
    }
}
