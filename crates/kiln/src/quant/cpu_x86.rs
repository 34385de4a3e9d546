//! x86-64 kernels of the quantized matrix product for few rows (`cpu.rs`), for the 32-value formats
//! Q8_0, Q4_0 and Q4_1 (llama.cpp's common small-model files): each weight block is dequantised in
//! registers to exactly the f32 values `dequant_block` gives (q * d is exact in f32 for these
//! formats, and Q4_1's + m is one rounding, as in ggml) and multiplied into f32 activations with FMAs.
//! Only the order of the f32 sums differs from the scalar path: the activations stay f32 (llama.cpp
//! rounds them to 8 bits; kiln's real-model test holds kiln to llama.cpp's f32 run).
//!
//! One input row (decode) runs fully in registers; more rows dequantise each weight row once into a
//! buffer and take its dot products with every input row. AVX-512 where the CPU has it, else AVX2.

use super::QuantType;
use std::arch::x86_64::*;

/// The instruction set the kernels run with, detected once.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Isa {
    Avx512,
    Avx2,
}

/// The ISA these kernels can use on this CPU for `qt`, or `None` (scalar path).
pub(super) fn isa(qt: QuantType) -> Option<Isa> {
    use std::sync::OnceLock;
    static ISA: OnceLock<Option<Isa>> = OnceLock::new();
    if !matches!(qt, QuantType::Q8_0 | QuantType::Q4_0 | QuantType::Q4_1) {
        return None;
    }
    *ISA.get_or_init(|| {
        use std::arch::is_x86_feature_detected as has;
        if crate::settings::CPU_QUANT_SCALAR.is_one() {
            return None;
        }
        let avx2 = has!("avx2") && has!("fma") && has!("f16c");
        if avx2 && has!("avx512f") && !crate::settings::CPU_NO_AVX512.is_one() {
            Some(Isa::Avx512)
        } else if avx2 {
            Some(Isa::Avx2)
        } else {
            None
        }
    })
}

/// The formats as const parameters (the kernels are compiled once per format, the format's `match`
/// folded away).
const Q8_0: u8 = 0;
const Q4_0: u8 = 1;
const Q4_1: u8 = 2;

#[inline(always)]
const fn qt_of(q: u8) -> QuantType {
    match q {
        Q8_0 => QuantType::Q8_0,
        Q4_0 => QuantType::Q4_0,
        _ => QuantType::Q4_1,
    }
}

/// Runs `$f::<Q>($args)` with `Q` the const of `$qt`.
macro_rules! by_format {
    ($qt:expr, $f:ident($($a:expr),*)) => {
        match $qt {
            QuantType::Q8_0 => $f::<Q8_0>($($a),*),
            QuantType::Q4_0 => $f::<Q4_0>($($a),*),
            QuantType::Q4_1 => $f::<Q4_1>($($a),*),
            qt => unreachable!("no x86 kernel for {qt}"),
        }
    };
}

/// Where block `b` of a weight lives: its body and its f16 scale(s), read straight from the planar
/// bytes (see `mod.rs`).
#[derive(Clone, Copy)]
pub(super) struct Blocks<'a> {
    qt: QuantType,
    bytes: &'a [u8],
    blocks: usize,
}

impl<'a> Blocks<'a> {
    pub(super) fn new(qt: QuantType, bytes: &'a [u8], blocks: usize) -> Self {
        let need = blocks * qt.body_bytes() + if qt == QuantType::Q4_1 { 0 } else { 2 * blocks };
        assert!(bytes.len() >= need, "planar bytes too short for {blocks} {qt} blocks");
        Blocks { qt, bytes, blocks }
    }
}

/// `out[r] = w[row0 + r] . x` for the `out.len()` weight rows from `row0` (`bpr` blocks each) and
/// one input row `x` (`bpr * 32` values).
pub(super) fn matvec_rows(isa: Isa, w: Blocks, row0: usize, bpr: usize, x: &[f32], out: &mut [f32]) {
    assert!(x.len() >= bpr * 32 && (row0 + out.len()) * bpr <= w.blocks);
    // SAFETY: `isa` was detected on this CPU (`isa()`), and every block read is within the planar
    // bytes (checked by `Blocks::new` and the assertion above).
    unsafe {
        match isa {
            Isa::Avx512 => by_format!(w.qt, matvec_avx512(w, row0, bpr, x, out)),
            Isa::Avx2 => by_format!(w.qt, matvec_avx2(w, row0, bpr, x, out)),
        }
    }
}

/// Dequantises weight row `row` (`bpr` blocks) into `dst` (`bpr * 32` values).
pub(super) fn dequant_row(isa: Isa, w: Blocks, row: usize, bpr: usize, dst: &mut [f32]) {
    assert!(dst.len() >= bpr * 32 && (row + 1) * bpr <= w.blocks);
    // SAFETY: as in `matvec_rows`.
    unsafe {
        match isa {
            Isa::Avx512 => by_format!(w.qt, dequant_row_avx512(w, row, bpr, dst)),
            Isa::Avx2 => by_format!(w.qt, dequant_row_avx2(w, row, bpr, dst)),
        }
    }
}

/// `a . b` (equal lengths, a multiple of 32).
pub(super) fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    assert!(a.len() == b.len() && a.len().is_multiple_of(32));
    // SAFETY: `isa` was detected on this CPU; the loops stay within the slices.
    unsafe {
        match isa {
            Isa::Avx512 => dot_avx512(a, b),
            Isa::Avx2 => dot_avx2(a, b),
        }
    }
}

/// The scale `d` (and Q4_1's `m`, else 0) of block `b`, as f32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales<const Q: u8>(w: Blocks, b: usize) -> (__m128, *const u8) {
    let p = w.bytes.as_ptr();
    match qt_of(Q) {
        // d and m are the block's first 4 bytes.
        QuantType::Q4_1 => {
            let body = p.add(b * 20);
            let dm = std::ptr::read_unaligned(body as *const i32);
            (_mm_cvtph_ps(_mm_cvtsi32_si128(dm)), body.add(4))
        }
        qt => {
            let body = qt.body_bytes();
            let d = std::ptr::read_unaligned(p.add(w.blocks * body + 2 * b) as *const u16);
            (_mm_cvtph_ps(_mm_cvtsi32_si128(d as i32)), p.add(b * body))
        }
    }
}

// ---- AVX2: a block is 4 vectors of 8 ----

/// Block `b` dequantised: values 0..8, 8..16, 16..24, 24..32.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block_avx2<const Q: u8>(w: Blocks, b: usize) -> [__m256; 4] {
    let (s, q) = scales::<Q>(w, b);
    let d = _mm256_broadcastss_ps(s);
    let f = |v: __m128i| _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
    match qt_of(Q) {
        QuantType::Q8_0 => {
            let lo = _mm_loadu_si128(q as *const __m128i);
            let hi = _mm_loadu_si128(q.add(16) as *const __m128i);
            let g = |v: __m128i| _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)), d);
            [g(lo), g(_mm_srli_si128(lo, 8)), g(hi), g(_mm_srli_si128(hi, 8))]
        }
        qt => {
            let qs = _mm_loadu_si128(q as *const __m128i);
            let mask = _mm_set1_epi8(0x0F);
            let lo = _mm_and_si128(qs, mask);
            let hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
            let raw = [f(lo), f(_mm_srli_si128(lo, 8)), f(hi), f(_mm_srli_si128(hi, 8))];
            if qt == QuantType::Q4_1 {
                let m = _mm256_broadcastss_ps(_mm_movehdup_ps(s));
                raw.map(|v| _mm256_fmadd_ps(v, d, m))
            } else {
                // (q - 8) * d: the subtraction is exact.
                let eight = _mm256_set1_ps(8.0);
                raw.map(|v| _mm256_mul_ps(_mm256_sub_ps(v, eight), d))
            }
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum256(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn matvec_avx2<const Q: u8>(w: Blocks, row0: usize, bpr: usize, x: &[f32], out: &mut [f32]) {
    let xp = x.as_ptr();
    for (r, o) in out.iter_mut().enumerate() {
        let first = (row0 + r) * bpr;
        let mut acc = [_mm256_setzero_ps(); 4];
        for j in 0..bpr {
            let v = block_avx2::<Q>(w, first + j);
            let xj = xp.add(32 * j);
            for t in 0..4 {
                acc[t] = _mm256_fmadd_ps(v[t], _mm256_loadu_ps(xj.add(8 * t)), acc[t]);
            }
        }
        *o = hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dequant_row_avx2<const Q: u8>(w: Blocks, row: usize, bpr: usize, dst: &mut [f32]) {
    let dp = dst.as_mut_ptr();
    for j in 0..bpr {
        let v = block_avx2::<Q>(w, row * bpr + j);
        for (t, v) in v.into_iter().enumerate() {
            _mm256_storeu_ps(dp.add(32 * j + 8 * t), v);
        }
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    for i in (0..a.len()).step_by(32) {
        for (t, a) in acc.iter_mut().enumerate() {
            let o = i + 8 * t;
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(o)), _mm256_loadu_ps(bp.add(o)), *a);
        }
    }
    hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
}

// ---- AVX-512: a block is 2 vectors of 16 ----

/// Block `b` dequantised: values 0..16, 16..32.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn block_avx512<const Q: u8>(w: Blocks, b: usize) -> [__m512; 2] {
    let (s, q) = scales::<Q>(w, b);
    let d = _mm512_broadcastss_ps(s);
    match qt_of(Q) {
        QuantType::Q8_0 => {
            let g = |p: *const u8| {
                let v = _mm_loadu_si128(p as *const __m128i);
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v)), d)
            };
            [g(q), g(q.add(16))]
        }
        qt => {
            // The block's 16 levels (q * d + m, or (q - 8) * d: one rounding, as `dequant_block`),
            // then each value looked up by its nibble (a permute reads the low 4 bits of each index).
            let iota = _mm512_setr_ps(0., 1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12., 13., 14., 15.);
            let levels = if qt == QuantType::Q4_1 {
                _mm512_fmadd_ps(iota, d, _mm512_broadcastss_ps(_mm_movehdup_ps(s)))
            } else {
                _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(8.0)), d)
            };
            let bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(q as *const __m128i));
            [_mm512_permutexvar_ps(bytes, levels), _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), levels)]
        }
    }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn matvec_avx512<const Q: u8>(w: Blocks, row0: usize, bpr: usize, x: &[f32], out: &mut [f32]) {
    let xp = x.as_ptr();
    for (r, o) in out.iter_mut().enumerate() {
        let first = (row0 + r) * bpr;
        // Two blocks per step on four independent sums (FMA latency).
        let mut acc = [_mm512_setzero_ps(); 4];
        let mut j = 0;
        while j + 2 <= bpr {
            let (v0, v1) = (block_avx512::<Q>(w, first + j), block_avx512::<Q>(w, first + j + 1));
            let xj = xp.add(32 * j);
            acc[0] = _mm512_fmadd_ps(v0[0], _mm512_loadu_ps(xj), acc[0]);
            acc[1] = _mm512_fmadd_ps(v0[1], _mm512_loadu_ps(xj.add(16)), acc[1]);
            acc[2] = _mm512_fmadd_ps(v1[0], _mm512_loadu_ps(xj.add(32)), acc[2]);
            acc[3] = _mm512_fmadd_ps(v1[1], _mm512_loadu_ps(xj.add(48)), acc[3]);
            j += 2;
        }
        if j < bpr {
            let v = block_avx512::<Q>(w, first + j);
            let xj = xp.add(32 * j);
            acc[0] = _mm512_fmadd_ps(v[0], _mm512_loadu_ps(xj), acc[0]);
            acc[1] = _mm512_fmadd_ps(v[1], _mm512_loadu_ps(xj.add(16)), acc[1]);
        }
        *o = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
    }
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn dequant_row_avx512<const Q: u8>(w: Blocks, row: usize, bpr: usize, dst: &mut [f32]) {
    let dp = dst.as_mut_ptr();
    for j in 0..bpr {
        let [a, b] = block_avx512::<Q>(w, row * bpr + j);
        _mm512_storeu_ps(dp.add(32 * j), a);
        _mm512_storeu_ps(dp.add(32 * j + 16), b);
    }
}

#[target_feature(enable = "avx512f,fma")]
unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 2];
    for i in (0..a.len()).step_by(32) {
        acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(ap.add(i)), _mm512_loadu_ps(bp.add(i)), acc[0]);
        acc[1] = _mm512_fmadd_ps(_mm512_loadu_ps(ap.add(i + 16)), _mm512_loadu_ps(bp.add(i + 16)), acc[1]);
    }
    _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]))
}
