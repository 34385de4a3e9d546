//! Edge cases from the fuzzer (issue 14): sizes that cannot be allocated or whose element counts
//! overflow must be errors (never an abort or a panic), and ops where the CPU and the GPU used to
//! disagree (NaN in comparisons, sub-word outputs, float-to-int casts, saturating transcendental
//! functions, NaN propagation, integer matmul, absurd attention scales) are checked against a plain
//! f64 reference on every backend, so the backends agree by agreeing with the reference.

use crate::backend_tests;
use crate::common::*;
use kiln::op::{CmpOp, UnaryOp};
use kiln::{DType, Device, Error, KvCache, Tensor};

const ALL: [DType; 9] =
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I64, DType::U8, DType::Bool];

/// Values with the specials the fuzzer found: NaN, both infinities, both zeros, values outside the
/// u8 and f16 ranges, halves.
fn specials(n: usize, seed: u64) -> Vec<f64> {
    let sp = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 300.0, -300.0, 1e5, 2.5, -2.5];
    let mut v = random_values(n, DType::F32, seed);
    for (i, x) in v.iter_mut().enumerate() {
        if i % 3 == 0 {
            *x = sp[(i / 3 + seed as usize) % sp.len()];
        }
    }
    v
}

/// An allocation-sized request must come back as an `Err`: host or device out of memory, or too
/// large to represent.
fn assert_alloc_err<T: std::fmt::Debug>(r: kiln::Result<T>, what: &str) {
    match r {
        Err(Error::HostOutOfMemory { .. } | Error::OutOfMemory { .. } | Error::TooLarge { .. }) => {}
        Err(Error::Gpu { .. } | Error::InvalidArgument { .. }) => {}
        other => panic!("{what}: expected an allocation error, got {other:?}"),
    }
}

// Sizes are past 2^47 bytes (the user address space of x86-64 and arm64), so they fail whatever the
// kernel's overcommit policy; the sizes (4 TiB) fail the same way where the OS refuses them.
fn huge_allocations_are_errors(dev: &Device) {
    let big = 1usize << 46;
    assert_alloc_err(Tensor::zeros((big, 16), DType::F32, dev), "zeros");
    assert_alloc_err(Tensor::full(1.5, (big, 16), DType::U8, dev), "full");
    assert_alloc_err(Tensor::arange(0.0, 1e18, DType::F32, dev), "arange");
    assert_alloc_err(Tensor::eye(1 << 24, DType::F32, dev), "eye");
    assert_alloc_err(Tensor::linspace(0.0, 1.0, 1 << 45, DType::F32, dev), "linspace");
    assert_alloc_err(Tensor::rand(0.0, 1.0, (big, 4), DType::F32, 1, dev), "rand");
    assert_alloc_err(Tensor::randn(0.0, 1.0, (big, 4), DType::F32, 1, dev), "randn");
    let x = tensor(&[1.0, 2.0], &[2], DType::F32, dev);
    assert_alloc_err(x.pad(&[(0, 1 << 50)], 0.0), "pad");
    assert_alloc_err(x.pad(&[(usize::MAX, 1)], 0.0), "pad overflow");
    // A broadcast view costs nothing; its result does.
    let wide = tensor(&[1.0], &[1, 1], DType::F32, dev).broadcast_to((1usize << 25, 1usize << 25)).unwrap();
    assert_alloc_err(wide.add_scalar(1.0), "add on a broadcast view");
    assert_alloc_err(wide.contiguous(), "contiguous of a broadcast view");
    assert_alloc_err(Tensor::rope_tables(1 << 44, 64, 0, 1e4, DType::F32, dev), "rope_tables");
    let k = rand_tensor(&[1, 1, 1, 8], DType::F32, 2, dev);
    let mut cache = KvCache::new(1 << 45);
    assert_alloc_err(cache.append(&k, &k), "kv cache");
    // Nothing was poisoned: the device still works.
    assert_exact(&x.add_scalar(1.0).unwrap(), &RefArray::new(vec![2], vec![2.0, 3.0]), "after the errors");
}

fn overflowing_shapes_are_refused(dev: &Device) {
    let one = tensor(&[1.0], &[1, 1], DType::F32, dev);
    let too_large = |r: kiln::Result<Tensor>, what: &str| match r {
        Err(Error::TooLarge { .. }) => {}
        other => panic!("{what}: expected TooLarge, got {:?}", other.map(|t| t.dims().to_vec())),
    };
    too_large(one.broadcast_to((usize::MAX, usize::MAX)), "broadcast_to");
    too_large(one.expand((1usize << 32, 1usize << 32)), "expand");
    too_large(one.broadcast_to((1usize << 63, 2)), "broadcast_to 2^64");
    let empty = tensor(&[], &[0], DType::F32, dev);
    too_large(empty.reshape((1usize << 63, 4, 0)), "reshape of an empty tensor");
    too_large(Tensor::from_vec(Vec::<f32>::new(), (1usize << 63, 2), dev), "from_vec");
    too_large(Tensor::zeros((1usize << 62, 1usize << 3), DType::U8, dev), "zeros");
    too_large(Tensor::zeros((1usize << 61, 8), DType::F32, dev), "zeros, bytes overflow");
    // Empty shapes with large dims are fine while the other dims fit.
    let e = empty.reshape((1usize << 40, 0, 3)).unwrap();
    assert_eq!(e.elem_count(), 0);
    assert_eq!(e.sum(&[0], false).unwrap().dims(), &[0, 3]);
    // index_select of the (usize::MAX, usize::MAX) view the fuzzer built cannot happen: the view is
    // refused above; a large but valid view selects fine.
    let ids = Tensor::from_vec(vec![0i64, 0], 2, dev).unwrap();
    let v = one.broadcast_to((3, 1usize << 20)).unwrap().narrow(1, 5, 4).unwrap();
    assert_exact(&v.index_select(&ids, 0).unwrap(), &RefArray::new(vec![2, 4], vec![1.0; 8]), "index_select");
    // A custom kernel's output shape is checked the same way (the CPU refuses custom kernels).
    let src = "@group(0) @binding(0) var<storage, read_write> o: array<u32>;\n\
               @compute @workgroup_size(1) fn main() { o[0] = 1u; }";
    let r = dev.custom_kernel(src, "main", &[], &[((1usize << 32, 1usize << 32).into(), DType::F32)], [1, 1, 1], &[]);
    if dev.is_cpu() {
        assert!(r.is_err());
    } else {
        assert!(matches!(r, Err(Error::TooLarge { .. })), "custom kernel: {:?}", r.map(|v| v.len()));
    }
}

/// NaN is unequal to everything: `ne` true, all other comparisons false (the GPU's `!=` was an
/// ordered comparison, false for NaN).
fn comparisons_with_nan(dev: &Device) {
    let ops = [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge];
    let f = |op: CmpOp, a: f64, b: f64| match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    };
    let shapes: [(&[usize], &[usize]); 5] =
        [(&[2, 1], &[1, 3]), (&[2, 1], &[2, 16]), (&[4, 16], &[16]), (&[64], &[64]), (&[3, 1], &[1, 32])];
    for dt in supported(dev, &[DType::F32, DType::F16, DType::BF16, DType::F64]) {
        for (sa, sb) in shapes {
            for kind in ALL_LAYOUTS {
                let va = round_to(&specials(sa.iter().product(), 1), dt);
                let vb = round_to(&specials(sb.iter().product(), 2), dt);
                let (a, b) = (tensor_in(&va, sa, dt, kind, dev), tensor(&vb, sb, dt, dev));
                let (ra, rb) = (RefArray::new(sa.to_vec(), va.clone()), RefArray::new(sb.to_vec(), vb.clone()));
                let shape = broadcast_shape(sa, sb);
                let n: usize = shape.iter().product();
                let out = RefArray::new(shape.clone(), vec![0.0; n]);
                for op in ops {
                    let exp: Vec<f64> = (0..n)
                        .map(|i| {
                            let idx = out.unravel(i);
                            f(op, ra.get_broadcast(&idx), rb.get_broadcast(&idx)) as u8 as f64
                        })
                        .collect();
                    let got = a.cmp(&b, op).unwrap();
                    assert_eq!(got.dtype(), DType::Bool);
                    assert_exact(
                        &got,
                        &RefArray::new(shape.clone(), exp),
                        &format!("{op:?} {dt} {sa:?} {sb:?} {kind:?}"),
                    );
                }
            }
        }
    }
}

/// `triu`/`tril` on the packed dtypes (bool, u8: four per GPU word) and on every other dtype.
fn triangles_on_every_dtype(dev: &Device) {
    for dt in supported(dev, &ALL) {
        for shape in [&[5usize, 7][..], &[3, 13], &[4, 16], &[2, 3, 5], &[1, 9], &[6, 1]] {
            let vals =
                round_to(&random_values(shape.iter().product(), dt, 3).iter().map(|x| x + 1.0).collect::<Vec<_>>(), dt);
            let r = RefArray::new(shape.to_vec(), vals.clone());
            let (m, n) = (shape[shape.len() - 2] as i64, shape[shape.len() - 1] as i64);
            for kind in ALL_LAYOUTS {
                let x = tensor_in(&vals, shape, dt, kind, dev);
                for k in [-100i64, -2, 0, 1, 3, 100] {
                    for upper in [true, false] {
                        let exp: Vec<f64> = (0..vals.len())
                            .map(|i| {
                                let idx = r.unravel(i);
                                let (row, col) = (idx[idx.len() - 2] as i64, idx[idx.len() - 1] as i64);
                                let keep = if upper { col - row >= k } else { col - row <= k };
                                debug_assert!(row < m && col < n);
                                if keep {
                                    vals[i]
                                } else {
                                    0.0
                                }
                            })
                            .collect();
                        let got = if upper { x.triu(k) } else { x.tril(k) }.unwrap();
                        assert_exact(
                            &got,
                            &RefArray::new(shape.to_vec(), exp),
                            &format!("{dt} {shape:?} {kind:?} k={k} upper={upper}"),
                        );
                    }
                }
            }
        }
    }
}

/// Float to integer/bool conversion, on both backends the rule of Rust's `as`: truncate toward zero,
/// saturate at the type's range, NaN to 0; to bool: `x != 0` (NaN is true).
fn cast_ref(x: f64, to: DType) -> f64 {
    let x32 = x as f32;
    match to {
        DType::U8 => x32 as u8 as f64,
        DType::I32 => x32 as i32 as f64,
        DType::U32 => x32 as u32 as f64,
        DType::I64 => x32 as i64 as f64,
        DType::I8 => x32 as i8 as f64,
        DType::I16 => x32 as i16 as f64,
        DType::U16 => x32 as u16 as f64,
        DType::U64 => x32 as u64 as f64,
        DType::Bool => (x32 != 0.0) as u8 as f64,
        _ => unreachable!(),
    }
}

fn float_to_int_casts(dev: &Device) {
    let vals =
        [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 300.0, -5.5, 2.7, -0.0, 255.9, 256.0, 3e9, -3e9, 1e30, 0.25];
    for from in [DType::F32, DType::F16, DType::BF16] {
        let v = round_to(&vals, from);
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&v, &[v.len()], from, kind, dev);
            for to in [
                DType::U8,
                DType::I32,
                DType::U32,
                DType::I64,
                DType::Bool,
                DType::I8,
                DType::I16,
                DType::U16,
                DType::U64,
            ] {
                let exp = v.iter().map(|&x| cast_ref(x, to)).collect();
                assert_exact(
                    &x.to_dtype(to).unwrap(),
                    &RefArray::new(vec![v.len()], exp),
                    &format!("{from} -> {to} {kind:?}"),
                );
            }
        }
    }
}

/// Float-only unary ops on integer and bool inputs (computed in f32), then cast to u8/bool/i32, and on
/// float inputs with infinities: tanh must round like the reference near +-1 (tanh(9) is below 1 in
/// f32, so it casts to 0), gelu keeps its tiny negative tail (nonzero, so `true` as bool), and silu and
/// both gelus give -0 at -inf (their limit), not NaN.
fn unary_ops_cast_to_small_outputs(dev: &Device) {
    let ints: Vec<f64> = vec![-10.0, -9.0, -3.0, -1.0, 0.0, 1.0, 2.0, 9.0, 10.0, 25.0, 7.0, 4.0];
    let gelu_tanh = |x: f64| {
        let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
        x / (1.0 + (-2.0 * u).exp())
    };
    let cases: [(UnaryOp, &dyn Fn(f64) -> f64); 5] = [
        (UnaryOp::Tanh, &|x: f64| x.tanh()),
        (UnaryOp::Sigmoid, &|x: f64| 1.0 / (1.0 + (-x).exp())),
        (UnaryOp::Silu, &|x: f64| x / (1.0 + (-x).exp())),
        (UnaryOp::GeluTanh, &gelu_tanh),
        (UnaryOp::Exp, &|x: f64| x.exp()),
    ];
    for from in supported(dev, &[DType::I32, DType::I64, DType::U8]) {
        let v: Vec<f64> = if from == DType::U8 { ints.iter().map(|x| x.abs()).collect() } else { ints.clone() };
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&v, &[3, 4], from, kind, dev);
            for (op, f) in cases {
                let y = x.unary(op).unwrap();
                assert_eq!(y.dtype(), DType::F32, "{op:?} of {from}");
                let exact: Vec<f64> = v.iter().map(|&x| f(x)).collect();
                assert_close(&y, &RefArray::new(vec![3, 4], exact.clone()), 4.0, &format!("{op:?} {from} {kind:?}"));
                for to in [DType::U8, DType::Bool, DType::I32] {
                    let exp = exact.iter().map(|&e| cast_ref(e, to)).collect();
                    let got = y.to_dtype(to).unwrap();
                    assert_exact(&got, &RefArray::new(vec![3, 4], exp), &format!("{op:?} {from} -> {to} {kind:?}"));
                }
            }
        }
    }
    for dt in [DType::F32, DType::BF16, DType::F16] {
        let v = [f64::NEG_INFINITY, f64::INFINITY, f64::NAN, -10.0, -0.76, 0.5, 9.0, -9.0];
        let x = tensor(&v, &[8], dt, dev);
        let minus_zero_at_neg_inf = |op: UnaryOp| {
            let y = x.unary(op).unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            assert!(y[0] == 0.0 && y[0].is_sign_negative(), "{op:?}(-inf) in {dt}: {}", y[0]);
            assert_eq!(y[1], f32::INFINITY, "{op:?}(inf) in {dt}");
            assert!(y[2].is_nan(), "{op:?}(NaN) in {dt}");
            // The gelus' tails at -10 (~1e-37, ~1e-23) are below the f16 range.
            if op == UnaryOp::Silu || dt != DType::F16 {
                assert!(y[3] < 0.0, "{op:?}(-10) in {dt} must keep its negative tail: {}", y[3]);
            }
        };
        for op in [UnaryOp::Silu, UnaryOp::GeluTanh, UnaryOp::GeluErf] {
            minus_zero_at_neg_inf(op);
        }
        let t = x.tanh().unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let exp: Vec<f32> =
            round_to(&v.iter().map(|x| x.tanh()).collect::<Vec<_>>(), dt).iter().map(|&x| x as f32).collect();
        assert_eq!((t[0], t[1]), (-1.0, 1.0), "tanh(+-inf) in {dt}");
        assert!(t[2].is_nan());
        for i in 3..8 {
            assert!(
                (t[i] - exp[i]).abs() <= 2.0 * (exp[i].abs() * f32::EPSILON).max(1e-30) + tol(dt).0 as f32,
                "tanh({}) in {dt}: {} vs {}",
                v[i],
                t[i],
                exp[i]
            );
        }
        if dt == DType::F32 {
            // The sample: tanh(+-9) in f32 is 0.99999994, which truncates to 0.
            let i = x.tanh().unwrap().to_dtype(DType::I32).unwrap().to_vec::<i32>().unwrap();
            assert_eq!((i[6], i[7]), (0, 0), "tanh(+-9) as i32");
        }
    }
}

/// `where` with broadcast mixed-dtype branches (promoted to f32), small and subnormal values kept.
fn where_broadcast_mixed(dev: &Device) {
    let vals = [3.85e-4, 3e-5, -2e-7, 6e-8, 1e-38, 65504.0, -7e4, 1.5];
    let cases: [(&[usize], &[usize], &[usize]); 4] =
        [(&[2, 8], &[8], &[2, 1]), (&[4, 1], &[1, 16], &[16]), (&[4, 16], &[16], &[1]), (&[3], &[2, 3], &[1])];
    for (ta, fa) in
        [(DType::BF16, DType::F32), (DType::F16, DType::F32), (DType::BF16, DType::F16), (DType::F32, DType::F32)]
    {
        for (sm, st, sf) in cases {
            let m: Vec<f64> = (0..sm.iter().product::<usize>()).map(|i| (i % 3 != 0) as u8 as f64).collect();
            let t = round_to(&(0..st.iter().product::<usize>()).map(|i| vals[i % 8]).collect::<Vec<_>>(), ta);
            let f = round_to(&(0..sf.iter().product::<usize>()).map(|i| vals[(i + 3) % 8]).collect::<Vec<_>>(), fa);
            let out_dt = ta.promote(fa);
            let (rm, rt, rf) = (
                RefArray::new(sm.to_vec(), m.clone()),
                RefArray::new(st.to_vec(), t.clone()),
                RefArray::new(sf.to_vec(), f.clone()),
            );
            let shape = broadcast_shape(&broadcast_shape(sm, st), sf);
            let o = RefArray::new(shape.clone(), vec![0.0; shape.iter().product()]);
            let exp: Vec<f64> = (0..o.data.len())
                .map(|i| {
                    let idx = o.unravel(i);
                    if rm.get_broadcast(&idx) != 0.0 {
                        rt.get_broadcast(&idx)
                    } else {
                        rf.get_broadcast(&idx)
                    }
                })
                .collect();
            let exp = round_to(&exp, out_dt);
            let got =
                Tensor::where_(&tensor(&m, sm, DType::Bool, dev), &tensor(&t, st, ta, dev), &tensor(&f, sf, fa, dev))
                    .unwrap();
            assert_eq!(got.dtype(), out_dt);
            assert_exact(&got, &RefArray::new(shape.clone(), exp), &format!("where {ta}/{fa} {sm:?} {st:?} {sf:?}"));
        }
    }
}

/// NaN and infinities propagate the same way on every backend: a row with a NaN (or an infinity that
/// makes the row's arithmetic NaN) is NaN in softmax and the norms, flip moves NaN like any value,
/// and sdpa rows that see a NaN key, value or query are NaN.
fn nan_propagation(dev: &Device) {
    for dt in supported(dev, &[DType::F32, DType::F16, DType::BF16]) {
        let (rows, cols) = (4usize, 33usize);
        let mut v = random_values(rows * cols, dt, 30);
        v[5] = f64::NAN; // row 0
        v[cols + 7] = f64::INFINITY; // row 1
        v[2 * cols + 1] = f64::NEG_INFINITY; // row 2; row 3 stays finite
        let v = round_to(&v, dt);
        let w = tensor(&vec![1.0; cols], &[cols], dt, dev);
        // Plain f64 references: NaN and infinities go through the arithmetic as IEEE says (softmax of a
        // row with +inf is NaN: inf - inf; rms_norm of it is 0 where x is finite, NaN at the inf).
        let per_row = |f: &dyn Fn(&[f64]) -> Vec<f64>| -> RefArray {
            RefArray::new(vec![rows, cols], v.chunks(cols).flat_map(f).collect())
        };
        let softmax = per_row(&|r| {
            let m =
                r.iter().fold(f64::NEG_INFINITY, |a, &b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) });
            let e: Vec<f64> = r.iter().map(|x| (x - m).exp()).collect();
            let s: f64 = e.iter().sum();
            e.iter().map(|x| x / s).collect()
        });
        let rms = per_row(&|r| {
            let ms = r.iter().map(|x| x * x).sum::<f64>() / cols as f64;
            r.iter().map(|x| x / (ms + 1e-5).sqrt()).collect()
        });
        let layer = per_row(&|r| {
            let mean = r.iter().sum::<f64>() / cols as f64;
            let var = r.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / cols as f64;
            r.iter().map(|x| (x - mean) / (var + 1e-5).sqrt()).collect()
        });
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&v, &[rows, cols], dt, kind, dev);
            assert_close(&x.rms_norm(&w, 1e-5).unwrap(), &rms, 8.0, &format!("rms_norm {dt} {kind:?}"));
            assert_close(&x.layer_norm(&w, None, 1e-5).unwrap(), &layer, 8.0, &format!("layer_norm {dt} {kind:?}"));
            assert_close(&x.softmax(-1).unwrap(), &softmax, 8.0, &format!("softmax {dt} {kind:?}"));
            let flipped = x.flip(&[0, 1]).unwrap().to_f64_vec().unwrap();
            let exp: Vec<f64> = v.iter().rev().copied().collect();
            assert!(flipped.iter().zip(&exp).all(|(a, e)| a == e || (a.is_nan() && e.is_nan())), "flip {dt} {kind:?}");
        }
        // sdpa: NaN in query row 1 of head 0, in key 3 of head 1 (every query that sees it), and in
        // value 2 of head 2.
        let (h, tq, tk, d) = (3usize, 5usize, 6usize, 8usize);
        let mut q = random_values(h * tq * d, dt, 31);
        let mut k = random_values(h * tk * d, dt, 32);
        let mut vv = random_values(h * tk * d, dt, 33);
        q[d + 2] = f64::NAN;
        k[(tk + 3) * d + 1] = f64::NAN;
        vv[(2 * tk + 2) * d + 4] = f64::NAN;
        let (q, k, vv) = (
            tensor(&q, &[1, h, tq, d], dt, dev),
            tensor(&k, &[1, h, tk, d], dt, dev),
            tensor(&vv, &[1, h, tk, d], dt, dev),
        );
        for causal in [false, true] {
            let o = q.sdpa(&k, &vv, causal, None).unwrap().to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap();
            for hh in 0..h {
                for i in 0..tq {
                    let visible = if causal { (i + 1 + tk - tq).min(tk) } else { tk };
                    let row = &o[(hh * tq + i) * d..(hh * tq + i + 1) * d];
                    let nan = match hh {
                        0 => i == 1,
                        1 => visible > 3,
                        _ => visible > 2,
                    };
                    if nan {
                        // A NaN key or query poisons the whole row; a NaN value only its column (but
                        // every weight is positive, so that column is NaN).
                        let col_only = hh == 2;
                        assert!(
                            if col_only { row[4].is_nan() } else { row.iter().all(|x| x.is_nan()) },
                            "sdpa {dt} causal={causal} head {hh} query {i}: {row:?}"
                        );
                    } else {
                        assert!(
                            !row.iter().any(|x| x.is_nan()),
                            "sdpa {dt} causal={causal} head {hh} query {i}: {row:?}"
                        );
                    }
                }
            }
        }
    }
}

/// A NaN value at a key whose weight underflows to 0 still makes the rows that see it NaN (0 * NaN),
/// in the prefill kernel's masked tiles too (they skipped every zero weight), and a NaN value at a
/// masked key never reaches the rows that cannot see it (the decode kernel added 0 * NaN).
fn sdpa_nan_value_at_negligible_key(dev: &Device) {
    for (tq, tk) in [(12usize, 12usize), (3, 9), (70, 70)] {
        let d = 8;
        let q = random_values(tq * d, DType::F32, 70).iter().map(|x| x.abs() + 0.5).collect::<Vec<_>>();
        let mut k = random_values(tk * d, DType::F32, 71);
        let mut v = random_values(tk * d, DType::F32, 72);
        let j = tk / 2;
        for c in 0..d {
            k[j * d + c] = -60.0; // score of key j: about -60 * 8 * 1 / sqrt(8), far below the others
        }
        v[j * d + 3] = f64::NAN;
        let (qt, kt, vt) = (
            tensor(&q, &[1, 1, tq, d], DType::F32, dev),
            tensor(&k, &[1, 1, tk, d], DType::F32, dev),
            tensor(&v, &[1, 1, tk, d], DType::F32, dev),
        );
        for causal in [false, true] {
            let o = qt.sdpa(&kt, &vt, causal, None).unwrap().to_vec::<f32>().unwrap();
            for i in 0..tq {
                let visible = if causal { (i + 1 + tk - tq).min(tk) } else { tk };
                let row = &o[i * d..(i + 1) * d];
                assert_eq!(row[3].is_nan(), visible > j, "tq {tq} tk {tk} causal {causal} query {i}: {row:?}");
                assert!(row.iter().enumerate().all(|(c, x)| c == 3 || x.is_finite()), "{row:?}");
            }
        }
    }
}

/// Reductions over axis -4 (the leading axis of rank 4) of f16, including empty axes and NaN.
fn reduce_leading_axis_f16(dev: &Device) {
    for shape in [&[2usize, 3, 4, 5][..], &[0, 2, 3, 4], &[6, 5, 4, 3], &[33, 2, 1, 3], &[2, 3, 4, 0], &[1, 2, 1, 8]] {
        let n: usize = shape.iter().product();
        let mut vals = random_values(n, DType::F16, 40);
        if n > 7 {
            vals[7] = f64::NAN;
        }
        let vals = round_to(&vals, DType::F16);
        let out_shape = shape[1..].to_vec();
        let m: usize = out_shape.iter().product();
        let fold = |init: f64, f: &dyn Fn(f64, f64) -> f64| -> Vec<f64> {
            (0..m).map(|j| (0..shape[0]).fold(init, |acc, i| f(acc, vals[i * m + j]))).collect()
        };
        for kind in ALL_LAYOUTS {
            let x = tensor_in(&vals, shape, DType::F16, kind, dev);
            let sum = RefArray::new(out_shape.clone(), round_to(&fold(0.0, &|a, b| a + b), DType::F16));
            assert_close(&x.sum(&[-4], false).unwrap(), &sum, 8.0, &format!("sum {shape:?} {kind:?}"));
            let prod = RefArray::new(out_shape.clone(), round_to(&fold(1.0, &|a, b| a * b), DType::F16));
            assert_close(&x.prod(&[-4], false).unwrap(), &prod, 8.0, &format!("prod {shape:?} {kind:?}"));
            if shape[0] > 0 {
                let max = fold(f64::NEG_INFINITY, &|a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) });
                assert_exact(
                    &x.max(&[-4], false).unwrap(),
                    &RefArray::new(out_shape.clone(), max),
                    &format!("max {shape:?} {kind:?}"),
                );
                let mean: Vec<f64> = fold(0.0, &|a, b| a + b).iter().map(|s| s / shape[0] as f64).collect();
                assert_close(
                    &x.mean(&[-4], false).unwrap(),
                    &RefArray::new(out_shape.clone(), round_to(&mean, DType::F16)),
                    8.0,
                    &format!("mean {shape:?} {kind:?}"),
                );
            } else {
                assert!(x.max(&[-4], false).is_err(), "max over an empty axis");
            }
        }
    }
}

/// Integer matmul wraps (u8: modulo 256) on every backend, with broadcasting against a vector and
/// strided operands.
fn int_matmul_broadcast(dev: &Device) {
    let cases: [(&[usize], &[usize]); 5] =
        [(&[2, 3, 12], &[12]), (&[12], &[3, 12, 2]), (&[4, 12], &[12]), (&[12], &[12, 5]), (&[2, 1, 4, 12], &[12])];
    for dt in [DType::U8, DType::I32, DType::U32, DType::I64] {
        let wrap = |x: i128| -> f64 {
            match dt {
                DType::U8 => x.rem_euclid(256) as f64,
                DType::U32 => x.rem_euclid(1 << 32) as f64,
                DType::I32 => x as i32 as f64,
                _ => x as i64 as f64,
            }
        };
        for (sa, sb) in cases {
            let a: Vec<f64> =
                random_values(sa.iter().product(), DType::U8, 50).iter().map(|x| (x * 28.0).min(255.0)).collect();
            let b: Vec<f64> = random_values(sb.iter().product(), DType::U8, 51).iter().map(|x| x * 7.0).collect();
            // The reference: promote vectors like matmul does, then exact sums.
            let (a2, b2) = (
                if sa.len() == 1 { vec![1, sa[0]] } else { sa.to_vec() },
                if sb.len() == 1 { vec![sb[0], 1] } else { sb.to_vec() },
            );
            let (m, k, n) = (a2[a2.len() - 2], a2[a2.len() - 1], b2[b2.len() - 1]);
            let batch = broadcast_shape(&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
            let (ra, rb) = (RefArray::new(a2.clone(), a.clone()), RefArray::new(b2.clone(), b.clone()));
            let mut full = batch.clone();
            full.extend([m, n]);
            let o = RefArray::new(full.clone(), vec![0.0; full.iter().product()]);
            let exp: Vec<f64> = (0..o.data.len())
                .map(|e| {
                    let idx = o.unravel(e);
                    let (i, j) = (idx[idx.len() - 2], idx[idx.len() - 1]);
                    let s: i128 = (0..k)
                        .map(|kk| {
                            let mut ia = idx.clone();
                            *ia.last_mut().unwrap() = kk;
                            ia[idx.len() - 2] = i;
                            let mut ib = idx.clone();
                            ib[idx.len() - 2] = kk;
                            *ib.last_mut().unwrap() = j;
                            (ra.get_broadcast(&ia) * rb.get_broadcast(&ib)) as i128
                        })
                        .sum();
                    wrap(s)
                })
                .collect();
            let mut out_shape: Vec<usize> = batch.clone();
            if sa.len() > 1 {
                out_shape.push(m);
            }
            if sb.len() > 1 {
                out_shape.push(n);
            }
            for kind in ALL_LAYOUTS {
                let got = tensor_in(&a, sa, dt, kind, dev).matmul(&tensor_in(&b, sb, dt, kind, dev)).unwrap();
                assert_exact(
                    &got,
                    &RefArray::new(out_shape.clone(), exp.clone()),
                    &format!("{dt} {sa:?} @ {sb:?} {kind:?}"),
                );
            }
        }
    }
}

/// A scale f32 cannot hold (or NaN, inf) is refused; large finite ones are computed.
fn sdpa_scale_is_checked(dev: &Device) {
    let q = rand_tensor(&[1, 1, 2, 4], DType::F32, 60, dev);
    for bad in [1e300, f64::INFINITY, f64::NAN, -1e39] {
        assert_err(q.sdpa(&q, &q, false, Some(bad)), &["sdpa", "scale"]);
    }
    // A large finite scale: the f64 softmax of the scaled scores (almost one-hot) times the values.
    let qv = q.to_f64_vec().unwrap();
    let row = |i: usize| &qv[i * 4..i * 4 + 4];
    let mut want = Vec::new();
    for i in 0..2 {
        let s: Vec<f64> = (0..2).map(|j| 1e3 * row(i).iter().zip(row(j)).map(|(a, b)| a * b).sum::<f64>()).collect();
        let m = s[0].max(s[1]);
        let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        want.extend((0..4).map(|c| (w[0] * row(0)[c] + w[1] * row(1)[c]) / (w[0] + w[1])));
    }
    let o = q.sdpa(&q, &q, false, Some(1e3)).unwrap();
    // Scores of magnitude ~1e3 carry an absolute error ~1e3 * 8 * 2^-24 into the weights.
    assert_close_tol(&o, &RefArray::new(vec![1, 1, 2, 4], want), 1e-3, 1e-3, "sdpa scale 1e3");
}

backend_tests!(
    huge_allocations_are_errors,
    overflowing_shapes_are_refused,
    comparisons_with_nan,
    triangles_on_every_dtype,
    float_to_int_casts,
    unary_ops_cast_to_small_outputs,
    where_broadcast_mixed,
    nan_propagation,
    reduce_leading_axis_f16,
    int_matmul_broadcast,
    sdpa_scale_is_checked,
    sdpa_nan_value_at_negligible_key,
);
