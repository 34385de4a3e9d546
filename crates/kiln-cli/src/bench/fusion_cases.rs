//! `kiln::compile` against the eager ops (issue 26): `sqrt(a*a + b*b)` and `exp(-(x*x))` on flat f32
//! (64M elements; the target is >= 85% of copy bandwidth, >= 3x the eager chain), RMSNorm and
//! GELU-tanh written with primitives against kiln's own kernels (target: within 1.2x), a softmax
//! written with primitives (a max row, then an exp-sum row) against kiln's softmax, and the host
//! cost of a cached compiled call against one eager op. Every `fused_*` row has an `eager_*` (or
//! `kiln_*`) row of the same shape next to it. Compile time of a first call is printed by
//! `cargo run --release -p kiln --example compile_overhead`.

use super::builders::{case, count, Bound, Case, Op, F32, SEED_A, SEED_B};
use kiln::{compile, Compiled, DType, Result, Tensor};
use std::sync::Arc;

fn hypot(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.add(&x[1].mul(&x[1])?)?.sqrt()?])
}

fn gauss(x: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![x[0].mul(&x[0])?.neg()?.exp()?])
}

fn rmsnorm(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let ms = x[0].mul(&x[0])?.mean(&[-1], true)?;
    Ok(vec![x[0].mul(&ms.add_scalar(1e-5)?.rsqrt()?)?.mul(&x[1])?])
}

fn softmax(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let e = x[0].sub(&x[0].max(&[-1], true)?)?.exp()?;
    Ok(vec![e.div(&e.sum(&[-1], true)?)?])
}

fn gelu_tanh(x: &[Tensor]) -> Result<Vec<Tensor>> {
    let x = &x[0];
    let inner = x.add(&x.mul(x)?.mul(x)?.mul_scalar(0.044715)?)?.mul_scalar(0.7978845608028654)?;
    Ok(vec![x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)?])
}

type F = fn(&[Tensor]) -> Result<Vec<Tensor>>;

/// A fused (compiled, warmed by the untimed runs) and an eager row of `f` over inputs of `shapes`.
fn pair(name: &str, f: F, shapes: Vec<Vec<usize>>, shape: String, bytes: f64) -> [Case; 2] {
    let mk = |fused: bool, shapes: Vec<Vec<usize>>| {
        move |inp: &mut super::builders::Inputs| -> Result<Op> {
            let xs: Vec<Tensor> = shapes
                .iter()
                .enumerate()
                .map(|(i, s)| inp.randn(s.clone(), DType::F32, SEED_A + i as u64))
                .collect::<Result<_>>()?;
            if fused {
                let c: Arc<Compiled> = Arc::new(compile(f));
                Ok(Box::new(move || Ok(c.call(&xs)?.remove(0))) as Op)
            } else {
                Ok(Box::new(move || Ok(f(&xs)?.remove(0))) as Op)
            }
        }
    };
    [
        case(
            format!("fused_{name}"),
            shape.clone(),
            DType::F32,
            Bound::Memory,
            Some(bytes),
            None,
            mk(true, shapes.clone()),
        ),
        case(format!("eager_{name}"), shape, DType::F32, Bound::Memory, Some(bytes), None, mk(false, shapes)),
    ]
}

/// The set: `n` flat elements, rows of `d` over `rows` rows (the CPU runs the quick sizes).
pub fn all(quick: bool) -> Vec<Case> {
    let n = if quick { 1 << 20 } else { 64 << 20 };
    let (rows, d) = if quick { (256, 4096) } else { (16384, 4096) };
    let rb = F32 * (2 * rows * d + d) as f64;
    let mut v = vec![];
    v.extend(pair("hypot", hypot, vec![vec![n], vec![n]], count(n), 3.0 * F32 * n as f64));
    v.extend(pair("gauss", gauss, vec![vec![n]], count(n), 2.0 * F32 * n as f64));
    v.extend(pair("rmsnorm_prims", rmsnorm, vec![vec![rows, d], vec![d]], format!("{rows}x{d}"), rb));
    v.push(case("kiln_rms_norm", format!("{rows}x{d}"), DType::F32, Bound::Memory, Some(rb), None, move |inp| {
        let x = inp.randn((rows, d), DType::F32, SEED_A)?;
        let w = inp.randn(d, DType::F32, SEED_B)?;
        Ok(Box::new(move || x.rms_norm(&w, 1e-5)) as Op)
    }));
    let sb = 2.0 * F32 * (rows * d) as f64;
    v.extend(pair("softmax_prims", softmax, vec![vec![rows, d]], format!("{rows}x{d}"), sb));
    v.push(case("kiln_softmax", format!("{rows}x{d}"), DType::F32, Bound::Memory, Some(sb), None, move |inp| {
        let x = inp.randn((rows, d), DType::F32, SEED_A)?;
        Ok(Box::new(move || x.softmax(-1)) as Op)
    }));
    let gb = 2.0 * F32 * n as f64;
    v.extend(pair("gelu_tanh_prims", gelu_tanh, vec![vec![n]], count(n), gb));
    v.push(case("kiln_gelu_tanh", count(n), DType::F32, Bound::Memory, Some(gb), None, move |inp| {
        let x = inp.randn(n, DType::F32, SEED_A)?;
        Ok(Box::new(move || x.gelu()) as Op)
    }));
    // Host cost of one cached compiled call (a 3-op chain, one kernel) against one eager op.
    v.push(case("launch_compiled_call", "1024".into(), DType::F32, Bound::Launch { ops: 1 }, None, None, |inp| {
        let xs = vec![inp.randn(1024, DType::F32, SEED_A)?];
        let c = Arc::new(compile(gauss));
        Ok(Box::new(move || Ok(c.call(&xs)?.remove(0))) as Op)
    }));
    v.push(case("launch_eager_op", "1024".into(), DType::F32, Bound::Launch { ops: 1 }, None, None, |inp| {
        let x = inp.randn(1024, DType::F32, SEED_A)?;
        Ok(Box::new(move || x.exp()) as Op)
    }));
    v
}
