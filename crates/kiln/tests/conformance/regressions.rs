//! Wrong answers found by differential testing (issue 21: a CPU/GPU fuzz and a NumPy oracle), each
//! with the fixed inputs that showed it, checked against an exact or f64 reference on every backend:
//! causal attention rows without a visible key, `pow` special cases, f64 support per device,
//! log-softmax and layer norm of large equal values, `silu_mul(-inf, y)`, exact integer floor
//! division and remainder, float floor division and remainder computed in f32 and rounded once,
//! `signbit` of NaN, custom kernels given more inputs than they bind, and `cos` over its documented
//! range.

use crate::backend_tests;
use crate::common::*;
use kiln::{DType, Device, Shape, Tensor};

/// `got` equals `want` bit for bit in the sense that matters: NaN where NaN is expected, the same
/// value otherwise, and the same sign where the value is zero.
fn assert_same_values(got: &[f64], want: &[f64], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_nan() { g.is_nan() } else { g == w && g.is_sign_negative() == w.is_sign_negative() };
        assert!(ok, "{ctx}: element {i}: got {g:?}, expected {w:?}");
    }
}

// --- Attention: every output row is written ------------------------------------------------------

/// Plain causal/non-causal attention in f64 with kiln's conventions (queries are the last `tq` of the
/// `tk` positions; a row with no visible key is zeros).
fn attention_ref(q: &RefArray, k: &RefArray, v: &RefArray, causal: bool) -> RefArray {
    let (b, hq, tq, d) = (q.shape[0], q.shape[1], q.shape[2], q.shape[3]);
    let (hkv, tk, dv) = (k.shape[1], k.shape[2], v.shape[3]);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; b * hq * tq * dv];
    for bi in 0..b {
        for h in 0..hq {
            let hk = h / (hq / hkv);
            for i in 0..tq {
                let vis = if causal { (i as i64 + 1 + tk as i64 - tq as i64).clamp(0, tk as i64) as usize } else { tk };
                if vis == 0 {
                    continue;
                }
                let s: Vec<f64> = (0..vis)
                    .map(|j| (0..d).map(|e| q.get(&[bi, h, i, e]) * k.get(&[bi, hk, j, e])).sum::<f64>() * scale)
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = w.iter().sum();
                for c in 0..dv {
                    out[((bi * hq + h) * tq + i) * dv + c] =
                        (0..vis).map(|j| w[j] * v.get(&[bi, hk, j, c])).sum::<f64>() / sum;
                }
            }
        }
    }
    RefArray::new(vec![b, hq, tq, dv], out)
}

/// Causal attention with more queries than keys: the first `tq - tk` rows see no key and must be
/// zeros on every kernel path (the GPU's prefill and decode kernels returned early for a block or
/// row chunk without visible keys and left its rows unwritten: NaN under poisoning). Shapes cover
/// the decode kernel (tq <= 8, with grouped-query row chunks), the prefill kernel (whole 64-row
/// blocks without keys), and longer key ranges.
fn causal_sdpa_rows_without_keys_are_zeros(dev: &Device) {
    let shapes: [(usize, usize, usize, usize, usize, usize); 6] = [
        // (hq, hkv, tq, tk, d, dv)
        (1, 1, 5, 1, 4, 4),
        (4, 1, 8, 2, 16, 16),
        (2, 2, 7, 0, 8, 8),
        (1, 1, 100, 3, 8, 12),
        (2, 1, 150, 20, 64, 64),
        (1, 1, 300, 260, 32, 40),
    ];
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (n, &(hq, hkv, tq, tk, d, dv)) in shapes.iter().enumerate() {
            let seed = 100 + n as u64;
            let q = rand_tensor(&[1, hq, tq, d], dt, seed, dev);
            let k = rand_tensor(&[1, hkv, tk, d], dt, seed + 1, dev);
            let v = rand_tensor(&[1, hkv, tk, dv], dt, seed + 2, dev);
            let want = attention_ref(&RefArray::of(&q), &RefArray::of(&k), &RefArray::of(&v), true);
            let got = q.sdpa(&k, &v, true, None).unwrap();
            let ctx = format!("causal sdpa {dt} hq {hq} hkv {hkv} tq {tq} tk {tk} d {d} dv {dv}");
            assert_close(&got, &want, 20.0, &ctx);
            // The rows without a key are exactly zero.
            let rows = RefArray::of(&got);
            for i in 0..tq.saturating_sub(tk) {
                for h in 0..hq {
                    for c in 0..dv {
                        assert_eq!(rows.get(&[0, h, i, c]), 0.0, "{ctx}: row {i} head {h} col {c}");
                    }
                }
            }
        }
    }
}

// --- pow: C99 special cases -----------------------------------------------------------------------

/// `pow` of the special cases IEEE/C99 defines, against Rust's `powf` (C's `pow`): a negative infinite
/// base with non-integer, odd and even powers, and `(-1)^+-inf` (the GPU gave NaN for these).
fn pow_special_cases_follow_c(dev: &Device) {
    let inf = f64::INFINITY;
    let pairs = [
        (-inf, -0.5),
        (-inf, 2.5),
        (-inf, 0.5),
        (-1.0, inf),
        (-1.0, -inf),
        (-inf, 3.0),
        (-inf, -3.0),
        (-inf, 2.0),
        (-inf, -2.0),
        (-inf, inf),
        (-inf, -inf),
        (-0.5, inf),
        (-2.0, inf),
        (-0.5, -inf),
        (-2.0, -inf),
        (-2.0, 3.0),
        (-2.0, 0.5),
        (inf, -0.5),
        (0.5, inf),
        (-0.0, -3.0),
        (1.0, f64::NAN),
        (f64::NAN, 0.0),
    ];
    for dt in supported(dev, &FLOATS) {
        let a: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let b: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let (ta, tb) = (tensor(&a, &[a.len()], dt, dev), tensor(&b, &[b.len()], dt, dev));
        let got = ta.pow(&tb).unwrap().to_f64_vec().unwrap();
        let want: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x.powf(*y)).collect();
        assert_same_values(&got, &want, &format!("pow {dt} of {pairs:?}"));
    }
}

// --- f64: one rule, stated per device --------------------------------------------------------------

/// Each device says which dtypes it supports, and an unsupported one is the same error on every path
/// (creation, upload, cast); the supported ones all work.
fn dtype_support_is_stated_and_enforced(dev: &Device) {
    let dts = dev.dtypes();
    for dt in DType::ALL {
        assert_eq!(dts.contains(&dt), dev.supports_dtype(dt), "{dt}");
        let host = Tensor::zeros(3, dt, &Device::cpu()).unwrap();
        if dev.supports_dtype(dt) {
            assert_eq!(Tensor::zeros(3, dt, dev).unwrap().dtype(), dt);
            assert_eq!(host.to_device(dev).unwrap().dtype(), dt);
            assert_eq!(Tensor::zeros(3, DType::F32, dev).unwrap().to_dtype(dt).unwrap().dtype(), dt);
        } else {
            assert_err(Tensor::zeros(3, dt, dev), &["f64", "f32"]);
            assert_err(host.to_device(dev), &["f64", "f32"]);
            assert_err(Tensor::zeros(3, DType::F32, dev).unwrap().to_dtype(dt), &["f64", "f32"]);
        }
    }
    if dev.is_cpu() {
        assert_eq!(dts, DType::ALL.to_vec());
    } else {
        assert_eq!(dts, DType::ALL.into_iter().filter(|&d| d != DType::F64).collect::<Vec<_>>());
    }
}

// --- Row kernels on large common values ------------------------------------------------------------

/// `log_softmax` of rows whose entries share a large value: `x - (max + ln sum)` rounded the
/// `ln sum` away on the CPU (`[1e10, 1e10]` gave `[0, 0]`, `[1e6, 1e6]` -0.6875).
fn log_softmax_of_large_equal_values(dev: &Device) {
    for dt in supported(dev, &[DType::F32, DType::F64, DType::BF16]) {
        let rows = [[1e10, 1e10, 1e10, 1e10], [1e6, 1e6, 1e6, 1e6], [1e10, 1e10, 1e10, -1e10], [3e7, 3e7, -5.0, 3e7]];
        let vals: Vec<f64> = round_to(&rows.concat(), dt);
        let x = tensor(&vals, &[4, 4], dt, dev);
        let mut want = Vec::new();
        for r in vals.chunks(4) {
            let m = r.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = r.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            want.extend(r.iter().map(|v| (v - m) - lse));
        }
        assert_close(&x.log_softmax(-1).unwrap(), &RefArray::new(vec![4, 4], want), 4.0, &format!("log_softmax {dt}"));
    }
}

/// `layer_norm` of rows of equal large values is the bias exactly: the CPU's mean (`sum * (1/d)`)
/// missed the value by an ulp, so every `x - mean` was an ulp and the normalised row +-1
/// (`[1e10; 3]` with `w = [1, 2, 3]`, `b = [.5, -.5, .25]` gave `b - w`).
fn layer_norm_of_equal_large_values(dev: &Device) {
    for dt in supported(dev, &FLOATS) {
        let big = if dt == DType::F16 { 6e4 } else { 1e10 };
        for d in [3usize, 7, 300, 5000] {
            let x = tensor(&vec![big; 2 * d], &[2, d], dt, dev);
            let w: Vec<f64> = round_to(&(0..d).map(|i| 1.0 + i as f64).collect::<Vec<_>>(), dt);
            let b: Vec<f64> = round_to(&(0..d).map(|i| [0.5, -0.5, 0.25][i % 3]).collect::<Vec<_>>(), dt);
            let (tw, tb) = (tensor(&w, &[d], dt, dev), tensor(&b, &[d], dt, dev));
            let got = x.layer_norm(&tw, Some(&tb), 1e-5).unwrap();
            let want = RefArray::new(vec![2, d], [b.clone(), b.clone()].concat());
            assert_close(&got, &want, 2.0, &format!("layer_norm {dt} of equal {big} (d {d})"));
        }
    }
}

/// `silu_mul(-inf, y)` is `silu(-inf) * y = -0 * y` (the CPU gave NaN, the GPU -0).
fn silu_mul_at_negative_infinity(dev: &Device) {
    for dt in supported(dev, &FLOATS) {
        let g = [f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY, f64::INFINITY, 0.0];
        let u = [2.0, -3.0, 0.0, 1.5, 4.0];
        let got = tensor(&g, &[5], dt, dev).silu_mul(&tensor(&u, &[5], dt, dev)).unwrap();
        let want = [-0.0, 0.0, -0.0, 1.5 * f64::INFINITY, 0.0];
        assert_same_values(&got.to_f64_vec().unwrap(), &want, &format!("silu_mul {dt}"));
        let silu_ref = tensor(&g, &[5], dt, dev).silu().unwrap().mul(&tensor(&u, &[5], dt, dev)).unwrap();
        assert_same_values(&got.to_f64_vec().unwrap(), &silu_ref.to_f64_vec().unwrap(), "silu_mul = silu * u");
    }
}

// --- Floor division and remainder ------------------------------------------------------------------

/// Python's floor division and remainder on exact integers, NumPy's zero-divisor results (0, 0) and
/// `MIN // -1 = MIN` (wrapping).
fn int_divmod_ref(a: i128, b: i128, min: i128) -> (i128, i128) {
    if b == 0 {
        return (0, 0);
    }
    if a == min && b == -1 {
        return (min, 0);
    }
    let (q, r) = (a / b, a % b);
    if r != 0 && ((r < 0) != (b < 0)) {
        (q - 1, r + b)
    } else {
        (q, r)
    }
}

fn int_case<T: kiln::WithDType + Copy + Into<i128>>(dev: &Device, a: Vec<T>, b: Vec<T>, min: i128) {
    let n = a.len();
    let dt = T::DTYPE;
    let (ta, tb) = (Tensor::from_vec(a.clone(), n, dev).unwrap(), Tensor::from_vec(b.clone(), n, dev).unwrap());
    let q = ta.floor_div(&tb).unwrap();
    let r = ta.remainder(&tb).unwrap();
    assert_eq!((q.dtype(), r.dtype()), (dt, dt));
    let (q, r) = (q.to_vec::<T>().unwrap(), r.to_vec::<T>().unwrap());
    for i in 0..n {
        let (x, y) = (a[i].into(), b[i].into());
        let (wq, wr) = int_divmod_ref(x, y, min);
        assert_eq!((q[i].into(), r[i].into()), (wq, wr), "{dt}: {x} // {y} and {x} % {y}");
    }
}

/// Integer `floor_div` and `remainder` are exact integer arithmetic (they went through f32:
/// `int64 16777217 // 1` gave 16777216, `int32 (-51963695 * 7 + 3) // 7` gave -51963692).
fn integer_floor_div_and_remainder_are_exact(dev: &Device) {
    let mut rng = rng(21);
    use rand::RngExt;
    let signed = |r: &mut rand_chacha::ChaCha8Rng, span: i64| -> i64 { r.random_range(-span..=span) };
    // i64: values past 2^24 and 2^53, both signs, zero divisors, MIN // -1.
    let mut a: Vec<i64> = vec![16777217, 2147483647, -51963695 * 7 + 3, i64::MIN, i64::MIN, 7, -7, 0, 5, i64::MAX];
    let mut b: Vec<i64> = vec![1, 1, 7, -1, 3, 0, 2, -5, -2, -7];
    for _ in 0..500 {
        a.push(signed(&mut rng, i64::MAX / 2));
        let span = if rng.random::<bool>() { 1000 } else { i64::MAX / 4 };
        b.push(signed(&mut rng, span));
    }
    int_case(dev, a, b, i64::MIN as i128);
    let mut a: Vec<i32> = vec![-51963695 * 7 + 3, 16777217, i32::MIN, i32::MIN, 7, -7, 0, i32::MAX, -1];
    let mut b: Vec<i32> = vec![7, 3, -1, 7, 0, -2, 3, -7, 2];
    for _ in 0..500 {
        a.push(signed(&mut rng, i32::MAX as i64) as i32);
        let span = if rng.random::<bool>() { 50 } else { i32::MAX as i64 };
        b.push(signed(&mut rng, span) as i32);
    }
    int_case(dev, a, b, i32::MIN as i128);
    let mut a: Vec<u32> = vec![u32::MAX, 16777217, 5, 0];
    let mut b: Vec<u32> = vec![1, 3, 0, 0];
    for _ in 0..300 {
        a.push(rng.random());
        b.push(if rng.random::<bool>() { rng.random_range(0..100) } else { rng.random() });
    }
    int_case(dev, a, b, 0);
    let a: Vec<u8> = (0..=255u8).collect();
    let b: Vec<u8> = (0..=255u8).map(|i| i.wrapping_mul(37) % 17).collect();
    int_case(dev, a, b, 0);
}

/// NumPy's float floor division and remainder of `a` and `b` (f64 values of the dtype's numbers),
/// computed exactly and rounded to f32 and then to `dt` (f16/bf16 compute in f32 and round once):
/// `a % b = a - floor(a / b) * b` with the sign of `b` (a zero takes `b`'s sign), `a // b` the floor.
fn float_divmod_ref(a: f64, b: f64, dt: DType) -> (f64, f64) {
    let r32 = |v: f64| round_to(&[v], if dt == DType::F64 { DType::F64 } else { DType::F32 })[0];
    let fin = |v: f64| round_to(&[r32(v)], dt)[0];
    if b == 0.0 {
        return (fin(a / b), f64::NAN);
    }
    if a.is_nan() || b.is_nan() || a.is_infinite() {
        return (f64::NAN, f64::NAN);
    }
    if b.is_infinite() {
        // fmod(a, +-inf) = a; a nonzero a of the other sign moves to b (and the quotient to -1).
        if a != 0.0 && (a < 0.0) != (b < 0.0) {
            return (-1.0, b);
        }
        let q = if (a < 0.0) != (b < 0.0) { -0.0 } else { 0.0 };
        return (q, if a == 0.0 { 0.0f64.copysign(b) } else { a });
    }
    // a and b are f32 (or f64) numbers: a / b in f64 is within an ulp of the quotient, whose floor
    // is exact for these small quotients; the remainder a - q b is exact in f64 for f32 inputs.
    let q = (a / b).floor();
    let q = if q * b > a && b > 0.0 || q * b < a && b < 0.0 { q - 1.0 } else { q };
    // The remainder from the exact fmod (Rust's `%`), moved by b when the signs differ: exact in
    // f64 for f32 inputs, one rounding for f64 ones (as NumPy's `mod += b`).
    let f = a % b;
    let m = if f != 0.0 && (f < 0.0) != (b < 0.0) { f + b } else { f };
    let m = if m == 0.0 { 0.0f64.copysign(b) } else { m };
    let fq = if q == 0.0 && (a < 0.0) != (b < 0.0) { -0.0 } else { q };
    (fin(fq), fin(m))
}

/// Float `floor_div` and `remainder` follow NumPy's fmod-based formula computed in f32 (f64 for f64)
/// and rounded once: bf16 `12.5 // 0.6953` is 17 (the bf16 quotient used to be rounded before the
/// floor: 18), and `%` was off by 1-2 ulp in f32 and 11% in bf16. Random pairs, zeros, infinities.
fn float_floor_div_and_remainder_round_once(dev: &Device) {
    let mut a = vec![12.5, 7.0, -7.0, 7.0, -7.0, 0.0, -0.0, 1.0, -1.0, f64::INFINITY, 3.0, -3.0, 0.0, 5.5, -1.0];
    let mut b =
        vec![0.6953, 2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, 0.0, 2.0, f64::INFINITY, f64::INFINITY, 0.0, -0.25, 1e-3];
    let r1 = random_values(2000, DType::F32, 7);
    let r2 = random_values(2000, DType::F32, 8);
    for (x, y) in r1.iter().zip(&r2) {
        a.push(x * 10.0);
        b.push(if y.abs() < 1e-3 { 0.5 } else { *y });
    }
    let n = a.len();
    for dt in supported(dev, &FLOATS) {
        let (av, bv) = (round_to(&a, dt), round_to(&b, dt));
        let (ta, tb) = (tensor(&av, &[n], dt, dev), tensor(&bv, &[n], dt, dev));
        let q = ta.floor_div(&tb).unwrap().to_f64_vec().unwrap();
        let r = ta.remainder(&tb).unwrap().to_f64_vec().unwrap();
        for i in 0..n {
            let (wq, wr) = float_divmod_ref(av[i], bv[i], dt);
            let ctx = format!("{dt}: {} // {} and %", av[i], bv[i]);
            assert_same_values(&[q[i], r[i]], &[wq, wr], &ctx);
        }
    }
}

// --- Signs ------------------------------------------------------------------------------------------

/// `signbit` reads the sign bit: true for -NaN, -0.0, -inf and negatives (NumPy: `signbit(-nan)`
/// is True; a composition of comparisons gave False); `x < 0` for signed integers.
fn signbit_reads_the_sign_bit(dev: &Device) {
    let bits = [0xffc0_0000u32, 0x7fc0_0000, 0x8000_0000, 0, 0xff80_0000, 0x7f80_0000, 0xbf80_0000, 0x3f80_0000];
    let want = [true, false, true, false, true, false, true, false];
    let host =
        Tensor::from_vec(bits.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>(), 8, &Device::cpu()).unwrap();
    for dt in supported(dev, &FLOATS) {
        let x = host.to_dtype(dt).unwrap().to_device(dev).unwrap();
        assert_eq!(x.signbit().unwrap().to_vec::<bool>().unwrap(), want, "signbit {dt}");
        // Through a strided view too.
        let s = x.slice(0, 0, 8, 2).unwrap();
        assert_eq!(s.signbit().unwrap().to_vec::<bool>().unwrap(), [true, true, true, true], "signbit {dt} view");
    }
    for dt in [DType::I32, DType::I64, DType::U32, DType::U8, DType::Bool] {
        let x = tensor(&[-3.0, 0.0, 1.0], &[3], if dt == DType::I32 || dt == DType::I64 { dt } else { DType::U8 }, dev)
            .to_dtype(dt)
            .unwrap();
        let want = if dt == DType::I32 || dt == DType::I64 { vec![true, false, false] } else { vec![false; 3] };
        assert_eq!(x.signbit().unwrap().to_vec::<bool>().unwrap(), want, "signbit {dt}");
    }
}

// --- Custom kernels ---------------------------------------------------------------------------------

const COPY_KERNEL: &str = "
@group(0) @binding(0) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    if (g.x < arrayLength(&out)) { out[g.x] = a[g.x] * 2.0; }
}";

/// A custom kernel given more inputs than it declares bindings for is an error naming the unbound
/// binding (wgpu accepts the pipeline and the extra input was silently ignored).
fn custom_kernel_with_unbound_inputs_is_an_error(dev: &Device) {
    let a = tensor(&[1.0, 2.0, 3.0], &[3], DType::F32, dev);
    let outs = [(Shape::from(3), DType::F32)];
    let two = dev.custom_kernel(COPY_KERNEL, "main", &[&a, &a], &outs, [1, 1, 1], &[]);
    if dev.is_cpu() {
        assert_err(two, &["custom_kernel", "GPU"]);
        return;
    }
    assert_err(two, &["custom_kernel", "binding 2", "input 1"]);
    let one = dev.custom_kernel(COPY_KERNEL, "main", &[&a], &outs, [1, 1, 1], &[]).unwrap();
    assert_eq!(one[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0]);
    // Two outputs where the shader has one output and one input binding: binding 1 is read-only in
    // the shader, which wgpu reports; nothing is silently dropped.
    let two_outs = [(Shape::from(3), DType::F32), (Shape::from(3), DType::F32)];
    assert!(dev.custom_kernel(COPY_KERNEL, "main", &[], &two_outs, [1, 1, 1], &[]).is_err());
}

// --- cos and sin: the documented range ---------------------------------------------------------------

/// `sin`/`cos` of f32 arguments with |x| <= 1e5, the range the README documents, agree with f64
/// within 2e-6 on every backend (beyond it the GPU's two-constant argument reduction drifts: lavapipe's
/// cos(7.57e10) is 0.955 where the CPU gives -0.628).
fn sin_cos_accurate_in_documented_range(dev: &Device) {
    let mut x: Vec<f64> = random_values(4000, DType::F32, 5).iter().map(|v| v * 3e4).collect();
    x.extend([1e5, -1e5, 99999.5, 65536.0, 31415.926, -77777.7, 0.0, std::f64::consts::PI, 1e-20]);
    let x = round_to(&x, DType::F32);
    let t = tensor(&x, &[x.len()], DType::F32, dev);
    let n = x.len();
    assert_close_tol(&t.cos().unwrap(), &RefArray::new(vec![n], x.iter().map(|v| v.cos()).collect()), 2e-6, 0.0, "cos");
    assert_close_tol(&t.sin().unwrap(), &RefArray::new(vec![n], x.iter().map(|v| v.sin()).collect()), 2e-6, 0.0, "sin");
}

backend_tests!(
    causal_sdpa_rows_without_keys_are_zeros,
    pow_special_cases_follow_c,
    dtype_support_is_stated_and_enforced,
    log_softmax_of_large_equal_values,
    layer_norm_of_equal_large_values,
    silu_mul_at_negative_infinity,
    integer_floor_div_and_remainder_are_exact,
    float_floor_div_and_remainder_round_once,
    signbit_reads_the_sign_bit,
    custom_kernel_with_unbound_inputs_is_an_error,
    sin_cos_accurate_in_documented_range,
);
