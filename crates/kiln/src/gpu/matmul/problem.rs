//! The problem as the kernels see it: operands with normalised strides and merged batch dims, each
//! operand's load mode, and the shared WGSL pieces (batch bases, vector loaders).

use crate::gpu::runtime::params::params;
use crate::layout::collapse;
use crate::{DType, Error, Layout, Result};

/// `fn bases(batch) -> vec3<u32>`: the element offsets of A and B and the output offset of one batch.
pub(crate) const BASES: &str = r#"
fn bases(bi: u32) -> vec3<u32> {
    var a = p.a_off;
    var b = p.b_off;
    var rem = bi;
    for (var d = p.rank; d > 0u; d--) {
        let i = d - 1u;
        let idx = rem % p.bdims[i];
        rem /= p.bdims[i];
        a += idx * p.a_batch[i];
        b += idx * p.b_batch[i];
    }
    return vec3<u32>(a, b, bi * p.c_bs);
}
"#;

params! {
    /// The product as every matmul kernel sees it. Strides are in elements; `a_so`/`b_so` run along
    /// A's rows and B's columns, `a_sk`/`b_sk` along k.
    pub(crate) struct MatmulShape {
        m: u32,
        n: u32,
        k: u32,
        a_off: u32,
        b_off: u32,
        a_so: u32,
        a_sk: u32,
        b_sk: u32,
        b_so: u32,
        /// Merged batch rank (<= 4), its dims and each operand's strides along them.
        rank: u32,
        bdims: [u32; 4],
        a_batch: [u32; 4],
        b_batch: [u32; 4],
    }
}

params! {
    /// The parameters of the naive, tiled and skinny kernels (the split-K sum has its own).
    pub(crate) struct MatmulParams: MatmulShape {
        /// Output strides: row, column, batch.
        c_rs: u32,
        c_cs: u32,
        c_bs: u32,
        /// K splits, K per split, and elements between the splits' partial outputs (0: one split).
        splits: u32,
        kchunk: u32,
        part_len: u32,
        /// The first batch of this dispatch.
        first_batch: u32,
        /// Row blocks of the grid.
        mblocks: u32,
    }
}

/// How a kernel loads one operand: four elements at a time along k or along the operand's outer
/// axis (its rows for A, columns for B), as one vector load (unit stride on that axis, 4-element
/// alignment of the offset and of every other stride) or as four scalar loads (any strides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    K4,
    O4,
    K1,
    O1,
}

impl Mode {
    pub(crate) const ALL: [Mode; 4] = [Mode::K4, Mode::O4, Mode::K1, Mode::O1];

    pub(crate) fn is_vec(self) -> bool {
        matches!(self, Mode::K4 | Mode::O4)
    }
    pub(crate) fn along_k(self) -> bool {
        matches!(self, Mode::K4 | Mode::K1)
    }
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::K4 => "k4",
            Mode::O4 => "o4",
            Mode::K1 => "k1",
            Mode::O1 => "o1",
        }
    }
    /// The element type the operand's binding is declared with.
    pub(crate) fn elem(self, dt: DType) -> &'static str {
        match (self.is_vec(), dt) {
            (false, _) => "u32",
            (true, DType::F32) => "vec4<f32>",
            (true, _) => "vec2<u32>",
        }
    }
}

/// `fn {name}(e: u32) -> vec4<f32>`: elements e..e+4 (e a multiple of 4) of float `dt` from the
/// vector-typed binding `buf`.
pub(crate) fn vec_loader(name: &str, buf: &str, dt: DType) -> String {
    let body = match dt {
        DType::F32 => format!("return {buf}[e >> 2u];"),
        DType::F16 => format!("let w = {buf}[e >> 2u]; return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));"),
        DType::BF16 => format!(
            "let w = {buf}[e >> 2u]; return vec4<f32>(bitcast<f32>(w.x << 16u), bitcast<f32>(w.x & 0xffff0000u), \
             bitcast<f32>(w.y << 16u), bitcast<f32>(w.y & 0xffff0000u));"
        ),
        _ => unreachable!("vector loads are only generated for float dtypes"),
    };
    format!("fn {name}(e: u32) -> vec4<f32> {{ {body} }}\n")
}

/// Whether `dt` takes the float kernels (tiled, skinny); integers take the naive kernel.
pub(crate) fn is_float(dt: DType) -> bool {
    matches!(dt, DType::F32 | DType::F16 | DType::BF16)
}

/// One operand: element offset, stride along its outer axis (rows of A, columns of B) and along k,
/// and its merged batch strides. Strides of length-1 axes are 0.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Operand {
    pub(crate) off: usize,
    pub(crate) so: usize,
    pub(crate) sk: usize,
    pub(crate) batch: [usize; 4],
}

impl Operand {
    /// How a kernel loads it.
    pub(crate) fn mode(&self) -> Mode {
        let aligned = |other: usize| [self.off, other].iter().chain(&self.batch).all(|s| s.is_multiple_of(4));
        if self.sk == 1 && aligned(self.so) {
            Mode::K4
        } else if self.so == 1 && aligned(self.sk) {
            Mode::O4
        } else if self.sk <= self.so {
            Mode::K1
        } else {
            Mode::O1
        }
    }
}

/// A batched product C[b] (m x n) = A[b] (m x k) @ B[b] (k x n) as the kernels see it. `swapped`
/// problems compute C^T = B^T A^T: the output is then written with transposed strides.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    pub(crate) dt: DType,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) batch: usize,
    /// Merged batch dims (empty when `batch` is 1).
    pub(crate) bdims: Vec<usize>,
    pub(crate) a: Operand,
    pub(crate) b: Operand,
    pub(crate) swapped: bool,
}

impl Problem {
    pub(crate) fn new(dt: DType, al: &Layout, bl: &Layout) -> Result<Problem> {
        let rank = al.rank();
        let (m, k) = (al.dims()[rank - 2], al.dims()[rank - 1]);
        let n = bl.dims()[rank - 1];
        let batch_dims = &al.dims()[..rank - 2];
        let batch: usize = batch_dims.iter().product();
        let (bd, bs) = collapse(batch_dims, &[&al.strides()[..rank - 2], &bl.strides()[..rank - 2]]);
        if bd.len() > 4 {
            return Err(Error::Gpu {
                op: "matmul",
                msg: format!("batch dims {batch_dims:?} do not merge into 4 or fewer"),
            });
        }
        let batched = batch > 1;
        let strides = |s: &[usize]| {
            let mut out = [0; 4];
            if batched {
                out[..s.len()].copy_from_slice(s);
            }
            out
        };
        let z = |len: usize, s: usize| if len == 1 { 0 } else { s };
        let (sa, sb) = (al.strides(), bl.strides());
        let a = Operand { off: al.offset(), so: z(m, sa[rank - 2]), sk: z(k, sa[rank - 1]), batch: strides(&bs[0]) };
        let b = Operand { off: bl.offset(), so: z(n, sb[rank - 1]), sk: z(k, sb[rank - 2]), batch: strides(&bs[1]) };
        let bdims = if batched { bd } else { vec![] };
        Ok(Problem { dt, m, n, k, batch, bdims, a, b, swapped: false })
    }

    /// The same product computed as C^T = B^T A^T.
    pub(crate) fn transposed(&self) -> Problem {
        Problem { m: self.n, n: self.m, a: self.b, b: self.a, swapped: !self.swapped, ..self.clone() }
    }

    /// The parameters for `splits` splits of `kchunk` and `mblocks` (first batch 0).
    pub(crate) fn params(&self, splits: usize, kchunk: usize, mblocks: usize) -> MatmulParams {
        let len = self.batch * self.m * self.n;
        // The output is (batch, M, N) of the original product: transposed strides when swapped.
        let (som, son) = if self.swapped { (1, self.m) } else { (self.n, 1) };
        let mut shape = MatmulShape {
            m: self.m as u32,
            n: self.n as u32,
            k: self.k as u32,
            a_off: self.a.off as u32,
            b_off: self.b.off as u32,
            a_so: self.a.so as u32,
            a_sk: self.a.sk as u32,
            b_sk: self.b.sk as u32,
            b_so: self.b.so as u32,
            rank: self.bdims.len() as u32,
            ..MatmulShape::default()
        };
        for (i, &d) in self.bdims.iter().enumerate() {
            shape.bdims[i] = d as u32;
            shape.a_batch[i] = self.a.batch[i] as u32;
            shape.b_batch[i] = self.b.batch[i] as u32;
        }
        MatmulParams {
            base: shape,
            c_rs: som as u32,
            c_cs: son as u32,
            c_bs: (self.m * self.n) as u32,
            splits: splits as u32,
            kchunk: kchunk as u32,
            part_len: if splits > 1 { len as u32 } else { 0 },
            mblocks: mblocks as u32,
            first_batch: 0,
        }
    }
}
