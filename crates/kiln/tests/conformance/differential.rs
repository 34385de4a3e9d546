//! The differential search that found issue 14's disagreements: every family (comparisons, triangles,
//! unary ops and their casts to every dtype, `where`, reductions, integer and float matmul, norms,
//! softmax, flip, sdpa) on the CPU and the GPU with the same inputs (random small shapes, broadcasting,
//! transposed and stepped views, NaN/Inf and out-of-range values, every dtype), compared with each
//! other. A plain test, not per backend: it needs both; skipped without a GPU like the `gpu` halves.
use crate::common::*;
use kiln::op::{CmpOp, UnaryOp};
use kiln::{DType, Device, Result, Tensor};

const DT: [DType; 8] =
    [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32, DType::I64, DType::U8, DType::Bool];

/// CPU and GPU values agree: NaN with NaN, an infinity only with the same infinity (class and sign),
/// finite values within the dtype's tolerance relative to max(1, |value|).
fn same(a: &[f64], b: &[f64], dt: DType) -> bool {
    let tol = match dt {
        DType::F16 => 4e-3,
        DType::BF16 => 2e-2,
        _ => 1e-5,
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(&x, &y)| {
            if x.is_nan() || y.is_nan() {
                x.is_nan() && y.is_nan()
            } else if x.is_infinite() || y.is_infinite() {
                x == y
            } else {
                (x - y).abs() <= tol * (1.0 + x.abs().max(y.abs()))
            }
        })
}

/// `same` rejects what the old form let through (`inf <= inf`): an infinity against zero or a
/// finite value, one infinity against the other, a NaN against a number; and a zeroed or shifted
/// row.
#[test]
fn same_rejects_wrong_values() {
    let (inf, nan) = (f64::INFINITY, f64::NAN);
    assert!(same(&[1.0, inf, -inf, nan, 0.0], &[1.0 + 1e-6, inf, -inf, nan, -0.0], DType::F32));
    for (a, b) in [(inf, 0.0), (inf, -inf), (-inf, f64::MIN), (inf, 3e38), (nan, 0.0), (1.0, 1.001)] {
        assert!(!same(&[a], &[b], DType::F32), "{a} against {b} passes");
        assert!(!same(&[b], &[a], DType::F32), "{b} against {a} passes");
    }
    let v = random_values(64, DType::BF16, 3);
    let mut shifted = v.clone();
    shifted.rotate_left(1);
    assert!(!same(&v, &vec![0.0; 64], DType::BF16), "zeros pass");
    assert!(!same(&v, &shifted, DType::BF16), "a shifted row passes");
}

fn diff(name: &str, f: &dyn Fn(&Device) -> Result<Tensor>, gpu: &Device, bad: &mut Vec<String>) {
    let c = f(&Device::cpu());
    let g = f(gpu);
    match (c, g) {
        (Ok(c), Ok(g)) => {
            let (cv, gv) = (c.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
            if c.dtype() != g.dtype() || c.dims() != g.dims() || !same(&cv, &gv, c.dtype()) {
                let d: Vec<(usize, f64, f64)> = cv
                    .iter()
                    .zip(&gv)
                    .enumerate()
                    .filter(|(_, (x, y))| !same(&[**x], &[**y], c.dtype()))
                    .map(|(i, (x, y))| (i, *x, *y))
                    .take(4)
                    .collect();
                bad.push(format!("{name}: {:?}{:?} (i, cpu, gpu) {d:?}", c.dtype(), c.dims()));
            }
        }
        // Both refuse: for the same reason (the API checks arguments before any backend runs).
        (Err(a), Err(b)) => {
            if a.to_string() != b.to_string() {
                bad.push(format!("{name}: cpu error {a}, gpu error {b}"));
            }
        }
        (c, g) => bad.push(format!("{name}: cpu ok {} gpu ok {}", c.is_ok(), g.is_ok())),
    }
}

fn special(n: usize, dt: DType, seed: u64) -> Vec<f64> {
    let mut v = random_values(n, dt, seed);
    if dt.is_float() {
        let sp = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 300.0, -300.0, 1e5, 2.5, -2.5];
        for (i, x) in v.iter_mut().enumerate() {
            if i % 3 == 0 {
                *x = sp[(i / 3 + seed as usize) % sp.len()];
            }
        }
    }
    v
}

fn t(vals: &[f64], shape: &[usize], dt: DType, kind: Layouts, dev: &Device) -> Tensor {
    tensor_in(vals, shape, dt, kind, dev)
}

#[test]
fn cpu_and_gpu_agree() {
    let Some(gpu) = gpu_device() else { return };
    let mut bad = Vec::new();
    let kinds = ALL_LAYOUTS;
    // comparisons
    for &dt in &DT {
        for (sa, sb) in [
            (vec![2usize, 1], vec![1usize, 3]),
            (vec![2, 1], vec![2, 1]),
            (vec![3, 5], vec![5]),
            (vec![7], vec![7]),
            (vec![2, 1], vec![1, 16]),
            (vec![2, 1], vec![2, 16]),
            (vec![4, 16], vec![16]),
            (vec![4, 16], vec![4, 1]),
            (vec![64], vec![64]),
            (vec![3, 1], vec![1, 32]),
            (vec![2, 1], vec![1]),
            (vec![2, 8], vec![2, 1]),
        ] {
            for &k in &kinds {
                let (va, vb) = (special(sa.iter().product(), dt, 1), special(sb.iter().product(), dt, 2));
                for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
                    diff(
                        &format!("cmp {op:?} {dt:?} {sa:?} {sb:?} {k:?}"),
                        &|d| t(&va, &sa, dt, k, d).cmp(&t(&vb, &sb, dt, Layouts::Contiguous, d), op),
                        &gpu,
                        &mut bad,
                    );
                }
                diff(
                    &format!("cmp_scalar {dt:?} {sa:?} {k:?}"),
                    &|d| t(&va, &sa, dt, k, d).cmp_scalar(0.5, CmpOp::Gt),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("cmp_scalar lt {dt:?} {sa:?} {k:?}"),
                    &|d| t(&va, &sa, dt, k, d).cmp_scalar(1.0, CmpOp::Lt),
                    &gpu,
                    &mut bad,
                );
            }
        }
    }
    // triu / tril
    for &dt in &DT {
        for shape in [
            vec![3usize, 4],
            vec![2, 3, 5],
            vec![5, 2],
            vec![1, 7],
            vec![4, 16],
            vec![2, 8, 32],
            vec![16, 4],
            vec![3, 64],
        ] {
            for &kd in &kinds {
                let v = special(shape.iter().product(), dt, 3);
                for k in -2..=2 {
                    diff(
                        &format!("triu {dt:?} {shape:?} {kd:?} {k}"),
                        &|d| t(&v, &shape, dt, kd, d).triu(k),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("tril {dt:?} {shape:?} {kd:?} {k}"),
                        &|d| t(&v, &shape, dt, kd, d).tril(k),
                        &gpu,
                        &mut bad,
                    );
                }
            }
        }
    }
    // unary and casts
    // Every op (logical_not refuses all but bool, and both backends must refuse it alike), clamp with
    // bounds that integer dtypes round inward.
    let mut uops: Vec<UnaryOp> = UnaryOp::ALL.to_vec();
    uops.push(UnaryOp::Clamp { min: -2.5, max: 0.5 });
    for &dt in &DT {
        for shape in [vec![3usize, 5], vec![9], vec![16], vec![4, 16], vec![2, 32], vec![64]] {
            for &kd in &kinds {
                let v = special(shape.iter().product(), dt, 4);
                for &op in &uops {
                    diff(
                        &format!("unary {op:?} {dt:?} {shape:?} {kd:?}"),
                        &|d| t(&v, &shape, dt, kd, d).unary(op),
                        &gpu,
                        &mut bad,
                    );
                    for &to in &DT {
                        diff(
                            &format!("unary {op:?} {dt:?}->{to:?} {shape:?} {kd:?}"),
                            &|d| t(&v, &shape, dt, kd, d).unary(op)?.to_dtype(to),
                            &gpu,
                            &mut bad,
                        );
                    }
                }
                for &to in &DT {
                    diff(
                        &format!("cast {dt:?}->{to:?} {shape:?} {kd:?}"),
                        &|d| t(&v, &shape, dt, kd, d).to_dtype(to),
                        &gpu,
                        &mut bad,
                    );
                }
            }
        }
    }
    // where
    for &dt in &DT {
        for (sm, st, sf) in [
            (vec![2usize, 3], vec![3usize], vec![2usize, 1]),
            (vec![4, 1], vec![1, 5], vec![5]),
            (vec![3], vec![2, 3], vec![1]),
            (vec![4, 16], vec![16], vec![4, 1]),
            (vec![4, 1], vec![1, 16], vec![16]),
            (vec![2, 32], vec![2, 1], vec![1]),
            (vec![64], vec![1], vec![64]),
            (vec![1, 16], vec![4, 16], vec![4, 1]),
        ] {
            let m = random_values(sm.iter().product(), DType::Bool, 5);
            let a = special(st.iter().product(), dt, 6);
            let b = special(sf.iter().product(), DType::F32, 7);
            diff(
                &format!("where {dt:?} {sm:?} {st:?} {sf:?}"),
                &|d| {
                    Tensor::where_(
                        &t(&m, &sm, DType::Bool, Layouts::Contiguous, d),
                        &t(&a, &st, dt, Layouts::Contiguous, d),
                        &t(&b, &sf, DType::F32, Layouts::Contiguous, d),
                    )
                },
                &gpu,
                &mut bad,
            );
            diff(
                &format!("where same {dt:?} {sm:?} {st:?} {sf:?}"),
                &|d| {
                    Tensor::where_(
                        &t(&m, &sm, DType::Bool, Layouts::Transposed, d),
                        &t(&a, &st, dt, Layouts::Contiguous, d),
                        &t(&b, &sf, dt, Layouts::Contiguous, d),
                    )
                },
                &gpu,
                &mut bad,
            );
        }
    }
    // reductions
    for &dt in &DT {
        for shape in [
            vec![2usize, 3, 4, 5],
            vec![3, 1, 2, 2, 3],
            vec![5, 2, 4, 8],
            vec![7, 1, 1, 16],
            vec![3, 2, 1, 1],
            vec![300, 1, 2, 2],
        ] {
            for &kd in &kinds {
                let v = random_values(shape.iter().product(), dt, 8);
                for ax in [-4isize, -1, 0, 1] {
                    diff(
                        &format!("sum {dt:?} {shape:?} {kd:?} {ax}"),
                        &|d| t(&v, &shape, dt, kd, d).sum(&[ax], false),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("max {dt:?} {shape:?} {kd:?} {ax}"),
                        &|d| t(&v, &shape, dt, kd, d).max(&[ax], true),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("min {dt:?} {shape:?} {kd:?} {ax}"),
                        &|d| t(&v, &shape, dt, kd, d).min(&[ax], false),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("prod {dt:?} {shape:?} {kd:?} {ax}"),
                        &|d| t(&v, &shape, dt, kd, d).prod(&[ax], false),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("argmax {dt:?} {shape:?} {kd:?} {ax}"),
                        &|d| t(&v, &shape, dt, kd, d).argmax(ax, false),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("mean {dt:?} {shape:?} {kd:?} {ax}"),
                        &|d| t(&v, &shape, dt, kd, d).mean(&[ax], false),
                        &gpu,
                        &mut bad,
                    );
                }
                let vs = special(shape.iter().product(), dt, 9);
                diff(
                    &format!("sum special {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&vs, &shape, dt, kd, d).sum(&[-4], false),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("max special {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&vs, &shape, dt, kd, d).max(&[-4], false),
                    &gpu,
                    &mut bad,
                );
            }
        }
    }
    // matmul ints
    for &dt in &[DType::U8, DType::I32, DType::U32, DType::I64, DType::F32, DType::F16] {
        for (sa, sb) in [
            (vec![2usize, 3, 12], vec![12usize]),
            (vec![12usize], vec![3usize, 12, 2]),
            (vec![5, 12], vec![12, 3]),
            (vec![1, 12], vec![12, 1]),
            (vec![2, 4, 12], vec![12]),
            (vec![3, 12], vec![12]),
            (vec![1, 1, 12], vec![12]),
            (vec![12], vec![12, 4]),
            (vec![12], vec![12]),
            (vec![4, 2, 5, 12], vec![12]),
        ] {
            for &kd in &kinds {
                let a = random_values(sa.iter().product(), dt, 10);
                let mut b = random_values(sb.iter().product(), dt, 11);
                if dt == DType::U8 {
                    for x in b.iter_mut() {
                        *x = (*x * 25.0).min(255.0);
                    }
                }
                diff(
                    &format!("matmul {dt:?} {sa:?} {sb:?} {kd:?}"),
                    &|d| t(&a, &sa, dt, kd, d).matmul(&t(&b, &sb, dt, Layouts::Contiguous, d)),
                    &gpu,
                    &mut bad,
                );
            }
        }
    }
    // NaN / inf propagation: norms, softmax, sdpa, flip
    for &dt in &[DType::F32, DType::F16, DType::BF16] {
        for shape in [vec![3usize, 5], vec![2, 3, 8], vec![4, 33]] {
            for &kd in &kinds {
                let v = special(shape.iter().product(), dt, 12);
                let last = *shape.last().unwrap();
                let w = random_values(last, dt, 13);
                diff(
                    &format!("rms {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&v, &shape, dt, kd, d).rms_norm(&t(&w, &[last], dt, Layouts::Contiguous, d), 1e-5),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("ln {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&v, &shape, dt, kd, d).layer_norm(&t(&w, &[last], dt, Layouts::Contiguous, d), None, 1e-5),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("softmax {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&v, &shape, dt, kd, d).softmax(-1),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("log_softmax {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&v, &shape, dt, kd, d).log_softmax(-1),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("flip {dt:?} {shape:?} {kd:?}"),
                    &|d| t(&v, &shape, dt, kd, d).flip(&[0, -1]),
                    &gpu,
                    &mut bad,
                );
            }
        }
        for (b, h, tq, tk, hd) in [(1usize, 2usize, 3usize, 5usize, 8usize), (1, 1, 70, 70, 16), (2, 2, 1, 9, 8)] {
            for nan_where in 0..3 {
                let mut q = random_values(b * h * tq * hd, dt, 14);
                let mut k = random_values(b * h * tk * hd, dt, 15);
                let mut v = random_values(b * h * tk * hd, dt, 16);
                match nan_where {
                    0 => q[1] = f64::NAN,
                    1 => k[hd + 2] = f64::INFINITY,
                    _ => v[3] = f64::NAN,
                }
                for causal in [false, true] {
                    diff(
                        &format!("sdpa {dt:?} {b} {h} {tq} {tk} {hd} nan{nan_where} causal {causal}"),
                        &|d| {
                            t(&q, &[b, h, tq, hd], dt, Layouts::Contiguous, d).sdpa(
                                &t(&k, &[b, h, tk, hd], dt, Layouts::Contiguous, d),
                                &t(&v, &[b, h, tk, hd], dt, Layouts::Contiguous, d),
                                causal,
                                None,
                            )
                        },
                        &gpu,
                        &mut bad,
                    );
                }
            }
        }
    }
    // extra: reductions with NaN / empty axes, argmax with NaN, matmul with strided rhs, triu odd widths
    for &dt in &[DType::F32, DType::F16, DType::BF16, DType::U8, DType::Bool, DType::I32] {
        for shape in [
            vec![0usize, 2, 3, 4],
            vec![2, 0, 3, 4],
            vec![1, 2, 3, 4],
            vec![6, 5, 4, 3],
            vec![33, 2, 1, 3],
            vec![2, 3, 4, 0],
        ] {
            let v = special(shape.iter().product(), dt, 20);
            for ax in [-4isize, -3, -1] {
                diff(
                    &format!("x-sum {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Contiguous, d).sum(&[ax], false),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-mean {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Transposed, d).mean(&[ax], false),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-max {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Contiguous, d).max(&[ax], false),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-prod {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Stepped, d).prod(&[ax], false),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-argmax {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Contiguous, d).argmax(ax, false),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-argmin {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Transposed, d).argmin(ax, true),
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-sum2 {dt:?} {shape:?} {ax}"),
                    &|d| t(&v, &shape, dt, Layouts::Transposed, d).sum(&[ax, 1], true),
                    &gpu,
                    &mut bad,
                );
            }
        }
        for shape in [vec![5usize, 7], vec![3, 13], vec![9, 9], vec![4, 5, 6], vec![2, 1, 3]] {
            let v = special(shape.iter().product(), dt, 21);
            for k in [-100i64, -3, 0, 1, 4, 100] {
                for &kd in &kinds {
                    diff(
                        &format!("x-triu {dt:?} {shape:?} {k} {kd:?}"),
                        &|d| t(&v, &shape, dt, kd, d).triu(k),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("x-tril {dt:?} {shape:?} {k} {kd:?}"),
                        &|d| t(&v, &shape, dt, kd, d).tril(k),
                        &gpu,
                        &mut bad,
                    );
                }
            }
        }
    }
    for &dt in &[DType::U8, DType::I32, DType::F16] {
        for (sa, sb) in [
            (vec![2usize, 3, 12], vec![12usize]),
            (vec![12usize], vec![3usize, 12, 2]),
            (vec![4, 12], vec![12]),
            (vec![12], vec![12, 5]),
        ] {
            for &ka in &kinds {
                for &kb in &kinds {
                    let a = random_values(sa.iter().product(), dt, 22)
                        .iter()
                        .map(|x| if dt == DType::U8 { (x * 28.0).min(255.0) } else { *x })
                        .collect::<Vec<_>>();
                    let b = random_values(sb.iter().product(), dt, 23);
                    diff(
                        &format!("x-matmul {dt:?} {sa:?} {sb:?} {ka:?} {kb:?}"),
                        &|d| t(&a, &sa, dt, ka, d).matmul(&t(&b, &sb, dt, kb, d)),
                        &gpu,
                        &mut bad,
                    );
                    diff(
                        &format!("x-matmul-bc {dt:?} {sa:?} {sb:?} {ka:?} {kb:?}"),
                        &|d| {
                            t(&a, &sa, dt, ka, d).matmul(
                                &t(&b, &sb, dt, kb, d)
                                    .broadcast_to(if sb.len() == 1 { vec![2, 12] } else { sb.clone() })?
                                    .t()?
                                    .t()?,
                            )
                        },
                        &gpu,
                        &mut bad,
                    );
                }
            }
        }
    }
    for &dt in &[DType::F16, DType::BF16, DType::F32] {
        let tiny = [3e-5, -2e-7, 6e-8, 1e-38, 3.85e-4, 65504.0, 7e4, -1e-45];
        for (sm, st, sf) in [
            (vec![8usize], vec![8usize], vec![1usize]),
            (vec![2, 8], vec![8], vec![2, 1]),
            (vec![4, 16], vec![16], vec![1]),
        ] {
            let m: Vec<f64> = (0..sm.iter().product::<usize>()).map(|i| (i % 3 != 0) as u8 as f64).collect();
            let a: Vec<f64> = (0..st.iter().product::<usize>()).map(|i| tiny[i % 8]).collect();
            let b: Vec<f64> = (0..sf.iter().product::<usize>()).map(|i| tiny[(i + 3) % 8]).collect();
            for tf in [DType::F32, DType::BF16, DType::F16] {
                diff(
                    &format!("x-where {dt:?}/{tf:?} {sm:?} {st:?} {sf:?}"),
                    &|d| {
                        Tensor::where_(
                            &t(&m, &sm, DType::Bool, Layouts::Contiguous, d),
                            &t(&a, &st, dt, Layouts::Contiguous, d),
                            &t(&b, &sf, tf, Layouts::Contiguous, d),
                        )
                    },
                    &gpu,
                    &mut bad,
                );
                diff(
                    &format!("x-cast {dt:?}->{tf:?} {st:?}"),
                    &|d| t(&a, &st, dt, Layouts::Contiguous, d).to_dtype(tf),
                    &gpu,
                    &mut bad,
                );
            }
        }
    }
    assert!(bad.is_empty(), "{} disagreements:\n{}", bad.len(), bad[..bad.len().min(30)].join("\n"));
}
