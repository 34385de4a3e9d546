//! The integer dtypes i8, i16, u16 and u64 against exact integer references (i128 arithmetic) on
//! every backend: full-range random values, odd sizes, strided views, broadcasting, empty tensors.
//!
//! Semantics checked (NumPy's): arithmetic wraps around (`i8 127 + 1 = -128`, `u16 0 - 1 = 65535`);
//! floor division rounds toward -inf and the remainder takes the divisor's sign; **division by
//! zero gives 0 for both** (NumPy's result, without its warning); `MIN // -1` wraps to `MIN`; casts
//! from floats truncate toward zero (and saturate out of range, NaN giving 0: Rust's `as`, where
//! NumPy leaves the result undefined); casts between integers wrap; promotion follows the array API
//! table. On a GPU, i8/i16/u16 are stored packed (four or two to a 32-bit word) and computed in
//! 32-bit registers; u64 is stored as word pairs and its arithmetic runs on a host copy, like i64.

use crate::backend_tests;
use crate::common::rng;
use kiln::{DType, Device, Tensor, WithDType};
use rand::RngExt;

/// An integer element type with its exact value as i128.
trait Int: WithDType + Into<i128> + TryFrom<i128> {
    const BITS: u32;
    const SIGNED: bool;
    /// `v` wrapped into the type (two's complement, like NumPy's overflow).
    fn wrap(v: i128) -> Self {
        let m = 1i128 << Self::BITS;
        let mut r = v.rem_euclid(m);
        if Self::SIGNED && r >= m / 2 {
            r -= m;
        }
        Self::try_from(r).ok().expect("in range after wrapping")
    }
    fn min_v() -> i128 {
        if Self::SIGNED {
            -(1i128 << (Self::BITS - 1))
        } else {
            0
        }
    }
    fn max_v() -> i128 {
        if Self::SIGNED {
            (1i128 << (Self::BITS - 1)) - 1
        } else {
            (1i128 << Self::BITS) - 1
        }
    }
}

macro_rules! int {
    ($t:ty, $signed:expr) => {
        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            const SIGNED: bool = $signed;
        }
    };
}
int!(i8, true);
int!(i16, true);
int!(u16, false);
int!(u64, false);

/// `n` random values over the whole range of `T`, with its extremes, 0, 1 and -1 mixed in.
fn values<T: Int>(n: usize, seed: u64) -> Vec<T> {
    let mut r = rng(seed);
    let special = [T::min_v(), T::max_v(), 0, 1, -1, T::min_v() + 1, T::max_v() - 1];
    (0..n)
        .map(
            |i| {
                if i % 5 == 2 {
                    T::wrap(special[(i / 5) % special.len()])
                } else {
                    T::wrap(r.random::<u64>() as i128)
                }
            },
        )
        .collect()
}

fn exact<T: Int>(v: &[T]) -> Vec<i128> {
    v.iter().map(|&x| x.into()).collect()
}

/// NumPy's `floor_divide` and `remainder` of exact integers; a zero divisor gives (0, 0).
fn floor_divmod(a: i128, b: i128) -> (i128, i128) {
    if b == 0 {
        return (0, 0);
    }
    let (q, r) = (a / b, a % b);
    if r != 0 && ((r < 0) != (b < 0)) {
        (q - 1, r + b)
    } else {
        (q, r)
    }
}

/// Shapes with odd sizes (not multiples of the 4 or 2 elements a GPU word packs), and empty ones.
const SHAPES: [&[usize]; 6] = [&[1], &[7], &[3, 5], &[2, 3, 9], &[0], &[4, 0]];

fn binary_ops_wrap<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    for (k, shape) in SHAPES.iter().enumerate() {
        let n: usize = shape.iter().product();
        let a = values::<T>(n, 10 + k as u64);
        let mut b = values::<T>(n, 20 + k as u64);
        // Zero divisors and MIN // -1 included.
        for (i, v) in b.iter_mut().enumerate() {
            if i % 4 == 1 {
                *v = T::wrap(0);
            } else if i % 6 == 3 && T::SIGNED {
                *v = T::wrap(-1);
            }
        }
        let ta = Tensor::from_slice(&a, shape.to_vec(), dev).unwrap();
        let tb = Tensor::from_slice(&b, shape.to_vec(), dev).unwrap();
        let (ea, eb) = (exact(&a), exact(&b));
        let check = |name: &str, got: Tensor, f: &dyn Fn(i128, i128) -> i128| {
            assert_eq!(got.dtype(), dt, "{name} {dt}");
            assert_eq!(got.dims(), *shape, "{name} {dt}");
            let want: Vec<T> = ea.iter().zip(&eb).map(|(&x, &y)| T::wrap(f(x, y))).collect();
            assert_eq!(got.to_vec::<T>().unwrap(), want, "{name} {dt} {shape:?}");
        };
        check("add", ta.add(&tb).unwrap(), &|x, y| x + y);
        check("sub", ta.sub(&tb).unwrap(), &|x, y| x - y);
        check("mul", ta.mul(&tb).unwrap(), &|x, y| x.wrapping_mul(y));
        check("maximum", ta.maximum(&tb).unwrap(), &|x, y| x.max(y));
        check("minimum", ta.minimum(&tb).unwrap(), &|x, y| x.min(y));
        check("floor_div", ta.floor_div(&tb).unwrap(), &|x, y| floor_divmod(x, y).0);
        check("remainder", ta.remainder(&tb).unwrap(), &|x, y| floor_divmod(x, y).1);
        // Integer powers with small exponents (wrapping), negative exponents of 1/-1/others.
        let e: Vec<T> = (0..n).map(|i| T::wrap([0, 1, 2, 3, 7, 13, -1, -2][i % 8])).collect();
        let te = Tensor::from_slice(&e, shape.to_vec(), dev).unwrap();
        let want: Vec<T> = ea
            .iter()
            .zip(exact(&e))
            .map(|(&x, p)| {
                if p < 0 {
                    T::wrap(match x {
                        1 => 1,
                        -1 => {
                            if p % 2 == 0 {
                                1
                            } else {
                                -1
                            }
                        }
                        _ => 0,
                    })
                } else {
                    // Square and multiply, wrapping (exponents of u64 reach 2^64 - 1).
                    let (mut acc, mut base, mut k) = (T::wrap(1), T::wrap(x), p as u128);
                    while k > 0 {
                        if k & 1 == 1 {
                            acc = T::wrap(Into::<i128>::into(acc).wrapping_mul(base.into()));
                        }
                        base = T::wrap(Into::<i128>::into(base).wrapping_mul(base.into()));
                        k >>= 1;
                    }
                    acc
                }
            })
            .collect();
        assert_eq!(ta.pow(&te).unwrap().to_vec::<T>().unwrap(), want, "pow {dt} {shape:?}");
        // Comparisons.
        let lt: Vec<bool> = ea.iter().zip(&eb).map(|(x, y)| x < y).collect();
        assert_eq!(ta.lt(&tb).unwrap().to_vec::<bool>().unwrap(), lt, "lt {dt}");
        let eq: Vec<bool> = ea.iter().zip(&eb).map(|(x, y)| x == y).collect();
        assert_eq!(ta.eq(&tb).unwrap().to_vec::<bool>().unwrap(), eq, "eq {dt}");
        let ge: Vec<bool> = ea.iter().zip(&eb).map(|(x, y)| x >= y).collect();
        assert_eq!(ta.ge(&tb).unwrap().to_vec::<bool>().unwrap(), ge, "ge {dt}");
    }
}

fn wraparound_at_the_edges<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    let max = Tensor::from_slice(&[T::wrap(T::max_v()); 5], vec![5], dev).unwrap();
    let min = Tensor::from_slice(&[T::wrap(T::min_v()); 5], vec![5], dev).unwrap();
    let one = Tensor::from_slice(&[T::wrap(1)], vec![1], dev).unwrap();
    assert_eq!(max.add(&one).unwrap().to_vec::<T>().unwrap(), vec![T::wrap(T::min_v()); 5], "{dt}");
    assert_eq!(min.sub(&one).unwrap().to_vec::<T>().unwrap(), vec![T::wrap(T::max_v()); 5], "{dt}");
    assert_eq!(
        max.mul(&max).unwrap().to_vec::<T>().unwrap(),
        vec![T::wrap(T::max_v().wrapping_mul(T::max_v())); 5],
        "{dt}"
    );
    // neg and abs of MIN wrap to MIN (NumPy); unsigned neg wraps to 2^bits - x.
    assert_eq!(min.neg().unwrap().to_vec::<T>().unwrap(), vec![T::wrap(-T::min_v()); 5], "{dt}");
    assert_eq!(min.abs().unwrap().to_vec::<T>().unwrap(), vec![T::wrap(T::min_v().abs()); 5], "{dt}");
    assert_eq!(one.neg().unwrap().to_vec::<T>().unwrap(), vec![T::wrap(-1)], "{dt}");
    if T::SIGNED {
        let m1 = Tensor::from_slice(&[T::wrap(-1)], vec![1], dev).unwrap();
        assert_eq!(min.floor_div(&m1).unwrap().to_vec::<T>().unwrap(), vec![T::wrap(T::min_v()); 5], "{dt}");
        assert_eq!(min.remainder(&m1).unwrap().to_vec::<T>().unwrap(), vec![T::wrap(0); 5], "{dt}");
    }
    // Scalars take the tensor's dtype and wrap the same way; an out-of-range scalar is an Err.
    assert_eq!(max.add_scalar(1.0).unwrap().to_vec::<T>().unwrap(), vec![T::wrap(T::min_v()); 5], "{dt}");
    assert!(max.add_scalar(T::max_v() as f64 * 4.0 + 4.0).is_err(), "{dt}");
}

fn unary_ops<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    let a = values::<T>(37, 3);
    let t = Tensor::from_slice(&a, vec![37], dev).unwrap();
    let e = exact(&a);
    let map = |f: &dyn Fn(i128) -> i128| e.iter().map(|&x| T::wrap(f(x))).collect::<Vec<T>>();
    assert_eq!(t.neg().unwrap().to_vec::<T>().unwrap(), map(&|x| -x), "neg {dt}");
    assert_eq!(t.abs().unwrap().to_vec::<T>().unwrap(), map(&|x| x.abs()), "abs {dt}");
    assert_eq!(t.sign().unwrap().to_vec::<T>().unwrap(), map(&|x| x.signum()), "sign {dt}");
    assert_eq!(t.square().unwrap().to_vec::<T>().unwrap(), map(&|x| x.wrapping_mul(x)), "square {dt}");
    assert_eq!(t.relu().unwrap().to_vec::<T>().unwrap(), map(&|x| x.max(0)), "relu {dt}");
    assert_eq!(t.clamp(-3.5, 1000.5).unwrap().to_vec::<T>().unwrap(), map(&|x| x.clamp(-3, 1000)), "clamp {dt}");
    let sb: Vec<bool> = e.iter().map(|&x| x < 0).collect();
    assert_eq!(t.signbit().unwrap().to_vec::<bool>().unwrap(), sb, "signbit {dt}");
    // Float-only ops compute in f32.
    let sq = t.sqrt().unwrap();
    assert_eq!(sq.dtype(), DType::F32);
}

/// Strided views (transposed, stepped, offset) and broadcasting, for data and results.
fn views_and_broadcasting<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    let (m, n) = (5, 7);
    let a = values::<T>(m * n, 40);
    let b = values::<T>(n, 41);
    let ta = Tensor::from_slice(&a, vec![m, n], dev).unwrap();
    let tb = Tensor::from_slice(&b, vec![n], dev).unwrap();
    let (ea, eb) = (exact(&a), exact(&b));
    // Row broadcast.
    let want: Vec<T> = (0..m * n).map(|i| T::wrap(ea[i] - eb[i % n])).collect();
    assert_eq!(ta.sub(&tb).unwrap().to_vec::<T>().unwrap(), want, "row broadcast {dt}");
    // Transposed view against a column broadcast.
    let at = ta.t().unwrap();
    let col = tb.narrow(0, 1, m).unwrap().reshape(vec![m, 1]).unwrap().t().unwrap();
    let want: Vec<T> = (0..n * m).map(|i| T::wrap(ea[(i % m) * n + i / m].wrapping_mul(eb[1 + i % m]))).collect();
    assert_eq!(at.mul(&col).unwrap().to_vec::<T>().unwrap(), want, "transposed {dt}");
    // A stepped view with an offset: elements 1, 3, 5 of each row.
    let s = ta.slice(1, 1, n, 2).unwrap();
    let want: Vec<T> = (0..m).flat_map(|r| [1, 3, 5].map(|c| a[r * n + c])).collect();
    assert_eq!(s.to_vec::<T>().unwrap(), want, "stepped copy {dt}");
    assert_eq!(s.contiguous().unwrap().to_vec::<T>().unwrap(), want, "stepped contiguous {dt}");
    let want_max: Vec<T> = (0..m)
        .map(|r| *[1, 3, 5].map(|c| a[r * n + c]).iter().max_by_key(|v| Into::<i128>::into(**v)).unwrap())
        .collect();
    assert_eq!(s.max(&[1], false).unwrap().to_vec::<T>().unwrap(), want_max, "max of stepped {dt}");
    // where over views.
    let mask = ta.gt(&tb).unwrap();
    let w = Tensor::where_(&mask, &ta, &tb.broadcast_to(vec![m, n]).unwrap()).unwrap();
    let want: Vec<T> = (0..m * n).map(|i| if ea[i] > eb[i % n] { a[i] } else { b[i % n] }).collect();
    assert_eq!(w.to_vec::<T>().unwrap(), want, "where {dt}");
}

fn reductions<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    for (k, shape) in [[3usize, 5], [1, 9], [4, 1], [0, 3], [6, 33]].iter().enumerate() {
        let n = shape[0] * shape[1];
        let a = values::<T>(n, 60 + k as u64);
        let t = Tensor::from_slice(&a, shape.to_vec(), dev).unwrap();
        let e = exact(&a);
        let rows = |f: &dyn Fn(&[i128]) -> i128| -> Vec<i128> {
            (0..shape[0]).map(|r| f(&e[r * shape[1]..(r + 1) * shape[1]])).collect()
        };
        // Sums: i8/i16/u16 into i64, u64 into u64, both wrapping.
        let sum = t.sum(&[1], false).unwrap();
        let want = rows(&|r| r.iter().sum());
        if dt == DType::U64 {
            assert_eq!(sum.dtype(), DType::U64);
            assert_eq!(
                sum.to_vec::<u64>().unwrap(),
                want.iter().map(|&v| u64::wrap(v)).collect::<Vec<_>>(),
                "sum {dt}"
            );
        } else {
            assert_eq!(sum.dtype(), DType::I64);
            assert_eq!(sum.to_vec::<i64>().unwrap(), want.iter().map(|&v| v as i64).collect::<Vec<_>>(), "sum {dt}");
        }
        if shape[1] > 0 {
            let mx = t.max(&[1], false).unwrap();
            assert_eq!(mx.dtype(), dt);
            let want: Vec<T> = rows(&|r| *r.iter().max().unwrap()).into_iter().map(T::wrap).collect();
            assert_eq!(mx.to_vec::<T>().unwrap(), want, "max {dt} {shape:?}");
            let want: Vec<T> = rows(&|r| *r.iter().min().unwrap()).into_iter().map(T::wrap).collect();
            assert_eq!(t.min(&[1], false).unwrap().to_vec::<T>().unwrap(), want, "min {dt} {shape:?}");
            // First index of the maximum.
            let want: Vec<i64> = rows(&|r| {
                let m = *r.iter().max().unwrap();
                r.iter().position(|&v| v == m).unwrap() as i128
            })
            .into_iter()
            .map(|v| v as i64)
            .collect();
            assert_eq!(t.argmax(1, false).unwrap().to_vec::<i64>().unwrap(), want, "argmax {dt} {shape:?}");
        }
        if shape[0] > 0 {
            // Down the columns (the transposed-reduction path).
            let want: Vec<T> =
                (0..shape[1]).map(|c| T::wrap((0..shape[0]).map(|r| e[r * shape[1] + c]).min().unwrap())).collect();
            assert_eq!(t.min(&[0], false).unwrap().to_vec::<T>().unwrap(), want, "min axis 0 {dt} {shape:?}");
        }
        // cumsum along rows.
        let cs = t.cumsum(1).unwrap();
        let mut want = Vec::with_capacity(n);
        for r in 0..shape[0] {
            let mut acc = 0i128;
            for c in 0..shape[1] {
                acc += e[r * shape[1] + c];
                want.push(acc);
            }
        }
        if dt == DType::U64 {
            assert_eq!(
                cs.to_vec::<u64>().unwrap(),
                want.iter().map(|&v| u64::wrap(v)).collect::<Vec<_>>(),
                "cumsum {dt}"
            );
        } else {
            assert_eq!(cs.to_vec::<i64>().unwrap(), want.iter().map(|&v| v as i64).collect::<Vec<_>>(), "cumsum {dt}");
        }
    }
}

fn casts<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    // Floats truncate toward zero and saturate; NaN gives 0 (Rust's `as`).
    let f = [
        0.0f32,
        -0.0,
        0.9,
        -0.9,
        1.5,
        -1.5,
        126.7,
        -127.9,
        200.2,
        -300.0,
        40000.0,
        -70000.5,
        3e9,
        -3e9,
        1e19,
        3e19,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        65535.9,
        12345.0,
    ];
    let tf = Tensor::from_slice(&f, vec![f.len()], dev).unwrap();
    let sat = |x: f32| -> i128 {
        if x.is_nan() {
            0
        } else {
            (x.trunc() as f64).clamp(T::min_v() as f64, T::max_v() as f64) as i128
        }
    };
    let want: Vec<T> = f.iter().map(|&x| T::wrap(sat(x).clamp(T::min_v(), T::max_v()))).collect();
    assert_eq!(tf.to_dtype(dt).unwrap().to_vec::<T>().unwrap(), want, "f32 -> {dt}");
    let tf16 = tf.to_dtype(DType::F16).unwrap();
    let want: Vec<T> = tf16
        .to_vec::<half::f16>()
        .unwrap()
        .iter()
        .map(|&x| T::wrap(sat(x.to_f32()).clamp(T::min_v(), T::max_v())))
        .collect();
    assert_eq!(tf16.to_dtype(dt).unwrap().to_vec::<T>().unwrap(), want, "f16 -> {dt}");
    // To floats: exact for 8 and 16 bits, one rounding for u64 (like Rust's `as`).
    let a = values::<T>(41, 70);
    let t = Tensor::from_slice(&a, vec![41], dev).unwrap();
    let want: Vec<f32> = exact(&a).iter().map(|&v| v as f32).collect();
    assert_eq!(t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), want, "{dt} -> f32");
    let want: Vec<bool> = exact(&a).iter().map(|&v| v != 0).collect();
    assert_eq!(t.to_dtype(DType::Bool).unwrap().to_vec::<bool>().unwrap(), want, "{dt} -> bool");
    // Between integers: wrapping (sign extension from signed types), both ways with every int.
    fn to_all<T: Int, U: Int>(t: &Tensor, a: &[T]) {
        let want: Vec<U> = exact(a).iter().map(|&v| U::wrap(v)).collect();
        assert_eq!(t.to_dtype(U::DTYPE).unwrap().to_vec::<U>().unwrap(), want, "{} -> {}", T::DTYPE, U::DTYPE);
        let back: Vec<T> = want.iter().map(|&v| T::wrap(v.into())).collect();
        let u = Tensor::from_slice(&want, vec![want.len()], &t.device().clone()).unwrap();
        assert_eq!(u.to_dtype(T::DTYPE).unwrap().to_vec::<T>().unwrap(), back, "{} -> {}", U::DTYPE, T::DTYPE);
    }
    to_all::<T, i8>(&t, &a);
    to_all::<T, i16>(&t, &a);
    to_all::<T, u16>(&t, &a);
    to_all::<T, u64>(&t, &a);
    for (u, f) in [(DType::I32, 32u32), (DType::I64, 64)] {
        let want: Vec<i64> = exact(&a)
            .iter()
            .map(|&v| {
                let m = 1i128 << f;
                let r = v.rem_euclid(m);
                (if r >= m / 2 { r - m } else { r }) as i64
            })
            .collect();
        assert_eq!(t.to_dtype(u).unwrap().to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap(), want, "{dt} -> {u}");
    }
    let want: Vec<u8> = exact(&a).iter().map(|&v| v.rem_euclid(256) as u8).collect();
    assert_eq!(t.to_dtype(DType::U8).unwrap().to_vec::<u8>().unwrap(), want, "{dt} -> u8");
    let want: Vec<u32> = exact(&a).iter().map(|&v| v.rem_euclid(1 << 32) as u32).collect();
    assert_eq!(t.to_dtype(DType::U32).unwrap().to_vec::<u32>().unwrap(), want, "{dt} -> u32");
    // A strided view casts too.
    let s = t.slice(0, 3, 41, 3).unwrap();
    let want: Vec<f32> = exact(&a).iter().skip(3).step_by(3).map(|&v| v as f32).collect();
    assert_eq!(s.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap(), want, "strided {dt} -> f32");
}

fn indexing_and_matmul<T: Int>(dev: &Device) {
    let dt = T::DTYPE;
    let (r, c) = (6, 5);
    let a = values::<T>(r * c, 80);
    let t = Tensor::from_slice(&a, vec![r, c], dev).unwrap();
    // Data of T selected by ids of T (ids of every new dtype are accepted).
    let ids: Vec<T> = [5, 0, 3, 3, 1].iter().map(|&v| T::wrap(v)).collect();
    let ti = Tensor::from_slice(&ids, vec![5], dev).unwrap();
    let sel = t.index_select(&ti, 0).unwrap();
    let want: Vec<T> = [5usize, 0, 3, 3, 1].iter().flat_map(|&i| a[i * c..(i + 1) * c].to_vec()).collect();
    assert_eq!(sel.to_vec::<T>().unwrap(), want, "index_select rows {dt}");
    let cols: Vec<T> = [4, 1, 0].iter().map(|&v| T::wrap(v)).collect();
    let sel = t.index_select(&Tensor::from_slice(&cols, vec![3], dev).unwrap(), 1).unwrap();
    let want: Vec<T> = (0..r).flat_map(|i| [4usize, 1, 0].map(|j| a[i * c + j])).collect();
    assert_eq!(sel.to_vec::<T>().unwrap(), want, "index_select cols {dt}");
    let g_ids: Vec<i64> = (0..r * c).map(|i| ((i * 7) % r) as i64).collect();
    let g = t.gather(0, &Tensor::from_slice(&g_ids, vec![r, c], dev).unwrap()).unwrap();
    let want: Vec<T> = (0..r * c).map(|i| a[g_ids[i] as usize * c + i % c]).collect();
    assert_eq!(g.to_vec::<T>().unwrap(), want, "gather {dt}");
    // Matmul wraps like the elementwise ops.
    let b = values::<T>(c * 3, 81);
    let tb = Tensor::from_slice(&b, vec![c, 3], dev).unwrap();
    let (ea, eb) = (exact(&a), exact(&b));
    let want: Vec<T> = (0..r * 3)
        .map(|i| {
            T::wrap((0..c).fold(0i128, |s, k| s.wrapping_add(ea[(i / 3) * c + k].wrapping_mul(eb[k * 3 + i % 3]))))
        })
        .collect();
    assert_eq!(t.matmul(&tb).unwrap().to_vec::<T>().unwrap(), want, "matmul {dt}");
    // Joins keep the dtype.
    let j = Tensor::concat(&[&t, &t.narrow(0, 1, 2).unwrap()], 0).unwrap();
    assert_eq!(j.dtype(), dt);
    let want: Vec<T> = a.iter().chain(&a[c..3 * c]).copied().collect();
    assert_eq!(j.to_vec::<T>().unwrap(), want, "concat {dt}");
    // Creation.
    let z = Tensor::full(-1.0, vec![3, 3], dt, dev).unwrap();
    assert_eq!(z.to_vec::<T>().unwrap(), vec![T::wrap(if T::SIGNED { -1 } else { 0 }); 9], "full {dt}");
    let ar = Tensor::arange(0.0, 11.0, dt, dev).unwrap();
    assert_eq!(ar.to_vec::<T>().unwrap(), (0..11).map(T::wrap).collect::<Vec<_>>(), "arange {dt}");
}

fn run_all<T: Int>(dev: &Device) {
    binary_ops_wrap::<T>(dev);
    wraparound_at_the_edges::<T>(dev);
    unary_ops::<T>(dev);
    views_and_broadcasting::<T>(dev);
    reductions::<T>(dev);
    casts::<T>(dev);
    indexing_and_matmul::<T>(dev);
}

fn int8(dev: &Device) {
    run_all::<i8>(dev);
}
fn int16(dev: &Device) {
    run_all::<i16>(dev);
}
fn uint16(dev: &Device) {
    run_all::<u16>(dev);
}
fn uint64(dev: &Device) {
    run_all::<u64>(dev);
    // Values past 2^63 and 2^53 move and compare exactly.
    let big = [u64::MAX, 1 << 63, (1 << 53) + 1, 0, 12345678901234567890];
    let t = Tensor::from_slice(&big, vec![5], dev).unwrap();
    assert_eq!(t.to_vec::<u64>().unwrap(), big);
    let other = Tensor::from_slice(&[(1u64 << 63) - 1; 5], vec![5], dev).unwrap();
    assert_eq!(t.gt(&other).unwrap().to_vec::<bool>().unwrap(), big.map(|v| v > (1 << 63) - 1).to_vec());
}

/// Mixed dtypes promote by the array API table and compute exactly in the result dtype.
fn promotion(dev: &Device) {
    let i8s = Tensor::from_slice(&[-128i8, 127, -1], vec![3], dev).unwrap();
    let u8s = Tensor::from_slice(&[255u8, 255, 1], vec![3], dev).unwrap();
    let s = i8s.add(&u8s).unwrap();
    assert_eq!(s.dtype(), DType::I16);
    assert_eq!(s.to_vec::<i16>().unwrap(), vec![127, 382, 0]);
    let u16s = Tensor::from_slice(&[65535u16, 0, 7], vec![3], dev).unwrap();
    let p = u16s.mul(&i8s).unwrap();
    assert_eq!(p.dtype(), DType::I32);
    assert_eq!(p.to_vec::<i32>().unwrap(), vec![-128 * 65535, 0, -7]);
    let u64s = Tensor::from_slice(&[u64::MAX, 3, 4], vec![3], dev).unwrap();
    assert_eq!(u64s.add(&u16s).unwrap().dtype(), DType::U64);
    assert_eq!(u64s.add(&u16s).unwrap().to_vec::<u64>().unwrap(), vec![65534, 3, 11]);
    let i16s = Tensor::from_slice(&[1i16, -2, 3], vec![3], dev).unwrap();
    let f = i16s.mul(&Tensor::from_slice(&[half::f16::from_f32(0.5); 3], vec![3], dev).unwrap()).unwrap();
    assert_eq!(f.dtype(), DType::F16);
    assert_eq!(i16s.div(&i16s).unwrap().dtype(), DType::F32);
}

backend_tests!(int8, int16, uint16, uint64, promotion);
