//! Rotary embedding (`rope`, `rope_with_tables`, `rope_tables`) against a plain f64 reference, both
//! pairings, and the fused kernel against `kiln::composed::rope`.
//!
//! The reference rotates with the tables rounded to the tensor's dtype (what the op uses), so the
//! measured error is the kernel's: two products and a sum in f32, one output rounding (factor 4).

use crate::backend_tests;
use crate::bounds::{assert_catches_wrong, check_bounded};
use crate::common::*;
use kiln::{composed, DType, Device, RopeLayout, Tensor};

const LAYOUTS: [RopeLayout; 2] = [RopeLayout::HalfSplit, RopeLayout::Interleaved];

/// `(t, d/2)` cos and sin of `(offset + p) * theta^(-2i/d)`, in f64.
fn ref_tables(t: usize, d: usize, offset: usize, theta: f64) -> (Vec<f64>, Vec<f64>) {
    let mut c = Vec::new();
    let mut s = Vec::new();
    for p in 0..t {
        for i in 0..d / 2 {
            let a = (offset + p) as f64 * theta.powf(-2.0 * i as f64 / d as f64);
            c.push(a.cos());
            s.push(a.sin());
        }
    }
    (c, s)
}

/// Rotates each `(b, h, t, d)` row: pair `(a, b)` becomes `(a cos - b sin, b cos + a sin)`.
fn ref_rope(x: &RefArray, cos: &[f64], sin: &[f64], layout: RopeLayout) -> RefArray {
    let (t, d) = (x.shape[2], x.shape[3]);
    let h = d / 2;
    let mut out = x.data.clone();
    // With d == 0 there is no data, hence no row.
    for (r, row) in x.data.chunks(d.max(1)).enumerate() {
        let p = r % t;
        for i in 0..h {
            let (ia, ib) = match layout {
                RopeLayout::HalfSplit => (i, i + h),
                RopeLayout::Interleaved => (2 * i, 2 * i + 1),
            };
            let (c, s) = (cos[p * h + i], sin[p * h + i]);
            out[r * d + ia] = row[ia] * c - row[ib] * s;
            out[r * d + ib] = row[ib] * c + row[ia] * s;
        }
    }
    RefArray::new(x.shape.clone(), out)
}

const SHAPES: [[usize; 4]; 5] = [[1, 1, 1, 2], [2, 3, 5, 6], [1, 2, 7, 64], [1, 1, 3, 128], [2, 1, 33, 8]];

fn rope_matches_reference(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (si, shape) in SHAPES.iter().enumerate() {
            let (t, d) = (shape[2], shape[3]);
            let n: usize = shape.iter().product();
            let vals = round_to(&random_values(n, dtype, 300 + si as u64), dtype);
            let r = RefArray::new(shape.to_vec(), vals.clone());
            for offset in [0, 5, 1000] {
                let (c, s) = ref_tables(t, d, offset, 10000.0);
                let (c, s) = (round_to(&c, dtype), round_to(&s, dtype));
                if t * d >= 64 {
                    // The tolerance catches wrong rotations: the angles of the next position (a
                    // shifted index) and the first quarter of each row's pairs (the fast-turning
                    // ones) left unrotated (a dropped block), as well as zeros and a shifted result.
                    for layout in LAYOUTS {
                        let want = ref_rope(&r, &c, &s, layout).data;
                        let bound = tol_bounds(&want, dtype, 4.0);
                        let (c1, s1) = ref_tables(t, d, offset + 1, 10000.0);
                        let next = ref_rope(&r, &round_to(&c1, dtype), &round_to(&s1, dtype), layout).data;
                        let ctx = format!("rope control {dtype} {shape:?} offset {offset} {layout:?}");
                        assert!(check_bounded(&next, &want, &bound).is_err(), "{ctx}: the next position's angles pass");
                        let (mut c2, mut s2) = (c.clone(), s.clone());
                        for (i, (cv, sv)) in c2.iter_mut().zip(s2.iter_mut()).enumerate() {
                            if i % (d / 2) < (d / 8).max(1) {
                                (*cv, *sv) = (1.0, 0.0);
                            }
                        }
                        let dropped = ref_rope(&r, &c2, &s2, layout).data;
                        assert_catches_wrong(&want, &bound, &dropped, &ctx);
                    }
                }
                for kind in ALL_LAYOUTS {
                    let x = tensor_in(&vals, shape, dtype, kind, dev);
                    for layout in LAYOUTS {
                        let got = x.rope(offset, 10000.0, layout).unwrap();
                        let ctx = format!("rope {shape:?} offset {offset} {layout:?} {kind:?}");
                        assert_close(&got, &ref_rope(&r, &c, &s, layout), 4.0, &ctx);
                    }
                }
            }
        }
    }
}

fn rope_tables_match_reference(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (t, d, offset, theta) in
            [(1, 2, 0, 10000.0), (5, 6, 3, 10000.0), (17, 128, 4096, 500000.0), (0, 4, 0, 10.0)]
        {
            let (c, s) = Tensor::rope_tables(t, d, offset, theta, dtype, dev).unwrap();
            let (rc, rs) = ref_tables(t, d, offset, theta);
            let ctx = format!("rope_tables t {t} d {d} offset {offset}");
            // Angles up to ~4e3 rad: f64 sin/cos of them are accurate to ~1e-12 relative to the angle.
            let f = if dtype == DType::F64 { 1e3 } else { 1.0 };
            assert_close(&c, &RefArray::new(vec![t, d / 2], rc), f, &ctx);
            assert_close(&s, &RefArray::new(vec![t, d / 2], rs), f, &ctx);
        }
    }
}

fn rope_with_custom_tables(dev: &Device) {
    let shape = [2, 2, 9, 10];
    let n: usize = shape.iter().product();
    for dtype in supported(dev, &FLOATS) {
        let vals = round_to(&random_values(n, dtype, 400), dtype);
        let r = RefArray::new(shape.to_vec(), vals.clone());
        // Arbitrary (not unit-norm) tables stored in f32: cast to the tensor's dtype by the op.
        let c = round_to(&round_to(&random_values(9 * 5, DType::F32, 401), DType::F32), dtype);
        let s = round_to(&round_to(&random_values(9 * 5, DType::F32, 402), DType::F32), dtype);
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&vals, &shape, dtype, kind, dev);
            let (ct, st) =
                (tensor_in(&c, &[9, 5], DType::F32, kind, dev), tensor_in(&s, &[9, 5], DType::F32, kind, dev));
            for layout in LAYOUTS {
                let got = x.rope_with_tables(&ct, &st, layout).unwrap();
                assert_close(
                    &got,
                    &ref_rope(&r, &c, &s, layout),
                    4.0,
                    &format!("rope_with_tables {layout:?} {kind:?}"),
                );
            }
        }
        // NaN in x stays in its pair.
        let mut nv = vals.clone();
        nv[3] = f64::NAN;
        let x = tensor(&nv, &shape, dtype, dev);
        let ct = tensor(&c, &[9, 5], dtype, dev);
        let st = tensor(&s, &[9, 5], dtype, dev);
        for layout in LAYOUTS {
            let got = x.rope_with_tables(&ct, &st, layout).unwrap();
            let exp = ref_rope(&RefArray::new(shape.to_vec(), nv.clone()), &c, &s, layout);
            assert_close(&got, &exp, 4.0, &format!("rope nan {layout:?}"));
        }
    }
}

fn rope_empty_and_errors(dev: &Device) {
    for shape in [[0, 2, 3, 4], [1, 2, 0, 4], [1, 2, 3, 0]] {
        let x = Tensor::zeros(shape, DType::F32, dev).unwrap();
        assert_eq!(x.rope(0, 10000.0, RopeLayout::HalfSplit).unwrap().dims(), &shape);
    }
    let x = Tensor::zeros((1, 2, 3, 5), DType::F32, dev).unwrap();
    assert_err(x.rope(0, 10000.0, RopeLayout::HalfSplit), &["rope", "even", "5", "(1, 2, 3, 5)"]);
    let x = Tensor::zeros((2, 3, 4), DType::F32, dev).unwrap();
    assert_err(x.rope(0, 10000.0, RopeLayout::Interleaved), &["rope", "(2, 3, 4)"]);
    let x = Tensor::zeros((1, 2, 3, 4), DType::I32, dev).unwrap();
    assert_err(x.rope(0, 10000.0, RopeLayout::HalfSplit), &["rope", "i32"]);
    let x = Tensor::zeros((1, 2, 3, 4), DType::F32, dev).unwrap();
    assert_err(x.rope(0, 0.0, RopeLayout::HalfSplit), &["rope_tables", "theta"]);
    assert_err(x.rope(0, f64::NAN, RopeLayout::HalfSplit), &["rope_tables", "theta"]);
    let (c, s) = Tensor::rope_tables(4, 4, 0, 10000.0, DType::F32, dev).unwrap();
    assert_err(x.rope_with_tables(&c, &s, RopeLayout::HalfSplit), &["rope", "(3, 2)", "(4, 2)"]);
    let (c, s) = Tensor::rope_tables(3, 4, 0, 10000.0, DType::F32, dev).unwrap();
    let ci = c.to_dtype(DType::I64).unwrap();
    assert_err(x.rope_with_tables(&ci, &s, RopeLayout::HalfSplit), &["rope", "i64"]);
    assert_err(Tensor::rope_tables(3, 3, 0, 10000.0, DType::F32, dev), &["rope_tables", "even"]);
    assert_err(Tensor::rope_tables(3, 4, 0, 10000.0, DType::U8, dev), &["rope_tables", "u8"]);
}

fn fused_matches_composed_rope(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        for (si, shape) in SHAPES.iter().enumerate() {
            let n: usize = shape.iter().product();
            let vals = random_values(n, dtype, 500 + si as u64);
            let (c, s) = Tensor::rope_tables(shape[2], shape[3], 7, 10000.0, dtype, dev).unwrap();
            for kind in ALL_LAYOUTS {
                let x = tensor_in(&vals, shape, dtype, kind, dev);
                for layout in LAYOUTS {
                    let fused = x.rope_with_tables(&c, &s, layout).unwrap();
                    let comp = composed::rope(&x, &c, &s, layout).unwrap();
                    assert_close(
                        &fused,
                        &RefArray::of(&comp),
                        4.0,
                        &format!("rope fused vs composed {shape:?} {layout:?}"),
                    );
                }
            }
        }
    }
}

/// `rope` reads its tables from a per-device cache (positions `0..` a power of two, regrown when an
/// offset passes it): the result must equal `rope_with_tables` on freshly built tables exactly, for
/// decode-style offsets crossing the first cached range (256) and for a `(b, t, h, d)` projection
/// viewed as `(b, h, t, d)` (read through its strides on the GPU).
fn rope_cached_tables_are_exact(dev: &Device) {
    for dtype in supported(dev, &FLOATS) {
        let (b, h, d) = (1, 3, 8);
        for (t, offsets) in [(1usize, [0usize, 254, 255, 256, 300]), (3, [1, 253, 254, 511, 512])] {
            for &offset in &offsets {
                let vals = round_to(&random_values(b * t * h * d, dtype, 500 + offset as u64), dtype);
                // Stored (b, t, h, d), viewed (b, h, t, d).
                let x = tensor(&vals, &[b, t, h, d], dtype, dev).permute(&[0, 2, 1, 3]).unwrap();
                for layout in LAYOUTS {
                    let got = x.rope(offset, 10000.0, layout).unwrap();
                    let (c, s) = Tensor::rope_tables(t, d, offset, 10000.0, dtype, dev).unwrap();
                    let want = x.rope_with_tables(&c, &s, layout).unwrap();
                    let ctx = format!("rope {dtype} t {t} offset {offset} {layout:?}");
                    assert_eq!(got.dims(), want.dims(), "{ctx}");
                    let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
                    assert!(g.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits()), "{ctx}: {g:?} vs {w:?}");
                }
            }
        }
    }
}

backend_tests!(
    rope_cached_tables_are_exact,
    rope_matches_reference,
    rope_tables_match_reference,
    rope_with_custom_tables,
    rope_empty_and_errors,
    fused_matches_composed_rope,
);
