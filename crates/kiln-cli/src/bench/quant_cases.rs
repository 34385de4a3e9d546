//! Quantized matrix-vector benchmarks (`Tensor::qlinear` with M = 1, the decode step of a quantized
//! LLM): Llama-sized weights of 4096x4096 (attention projections) and 14336x4096 (the MLP of
//! Llama 3 8B) in each quantized format. Bytes are the packed weight plus the input and output
//! vectors, so GB/s compares with the copy bandwidth (the target is 80% of it). Weights are random
//! normals quantized on the host before timing. The `_dram` rows cycle through copies of the weight
//! larger than L2 together, so that each product reads its weight from memory, as a decode step does.

use super::builders::{case, Bound, Case, Op, SEED_A, SEED_B};
use kiln::quant::{QTensor, QuantType};
use kiln::{DType, Tensor};

/// The cases: full-size shapes (an attention projection, the MLP's up and down projections of
/// Llama 3 8B), or small ones for `--quick`; f32 input, and bf16 input (read and written by the
/// kernel, as in a bf16 model's decode step); on a GPU, without `--quick`, the `_dram` rows too.
pub fn all(quick: bool, gpu: bool) -> Vec<Case> {
    let dims: [(usize, usize); 3] =
        if quick { [(512, 512), (1536, 512), (512, 1536)] } else { [(4096, 4096), (14336, 4096), (4096, 14336)] };
    let shapes: Vec<(usize, usize, DType)> =
        [DType::F32, DType::BF16].into_iter().flat_map(|dt| dims.map(|(n, k)| (n, k, dt))).collect();
    let mut v = Vec::new();
    for qt in QuantType::ALL {
        for &(n, k, dt) in &shapes {
            let weight = (n * k / qt.block_elems() * qt.block_bytes()) as f64;
            let bytes = weight + (dt.size_in_bytes() * (n + k)) as f64;
            let suffix = if dt == DType::F32 { String::new() } else { format!("_{dt}") };
            let name = format!("qmatvec_{}_{n}x{k}{suffix}", qt.name().to_lowercase());
            v.push(case(
                name,
                format!("1x{k} {dt} @ ({n}x{k} {qt})^T"),
                dt,
                Bound::Memory,
                Some(bytes),
                None,
                move |inp| {
                    let w = QTensor::quantize(&inp.randn((n, k), DType::F32, SEED_B)?, qt)?;
                    let x = inp.randn((1, k), dt, SEED_A)?;
                    Ok(Box::new(move || x.qlinear(&w, None)) as Op)
                },
            ));
        }
    }
    if gpu && !quick {
        v.extend(dram_cases());
    }
    v
}

/// Bytes of weight copies a `_dram` case cycles through: three times a large GPU's L2 (50 MB on
/// an H100/H200), so that each call reads its weight from memory, as a decode step does (the rows
/// above re-read one weight, which stays in L2 when it fits).
pub(super) const DRAM_BYTES: usize = 150 << 20;

/// An op that applies `f` to the next of `copies` at each call (a `_dram` case's rotation through
/// copies of its operand that do not fit in L2 together).
pub(super) fn cycling<T: 'static>(copies: Vec<T>, f: impl Fn(&T) -> kiln::Result<Tensor> + 'static) -> Op {
    let next = std::cell::Cell::new(0usize);
    Box::new(move || {
        let i = next.get();
        next.set((i + 1) % copies.len());
        f(&copies[i])
    })
}

/// The decode step's quantized products (bf16 x) with the weight read from DRAM: each call takes
/// the next of enough copies of the weight that none is still in L2.
fn dram_cases() -> Vec<Case> {
    let shapes = [(QuantType::Q4K, 14336, 4096), (QuantType::Q4K, 4096, 4096), (QuantType::Q6K, 4096, 14336)];
    shapes
        .into_iter()
        .map(|(qt, n, k)| {
            let weight = n * k / qt.block_elems() * qt.block_bytes();
            let bytes = (weight + 2 * (n + k)) as f64;
            let name = format!("qmatvec_{}_{n}x{k}_bf16_dram", qt.name().to_lowercase());
            case(
                name,
                format!("1x{k} bf16 @ ({n}x{k} {qt})^T, {} copies", DRAM_BYTES.div_ceil(weight)),
                DType::BF16,
                Bound::Memory,
                Some(bytes),
                None,
                move |inp| {
                    let w = QTensor::quantize(&inp.randn((n, k), DType::F32, SEED_B)?, qt)?;
                    let raw = w.to_raw()?;
                    let ws = (0..DRAM_BYTES.div_ceil(weight))
                        .map(|_| QTensor::from_raw(&raw, qt, (n, k), w.device()))
                        .collect::<kiln::Result<Vec<_>>>()?;
                    let x = inp.randn((1, k), DType::BF16, SEED_A)?;
                    Ok(cycling(ws, move |w| x.qlinear(w, None)))
                },
            )
        })
        .collect()
}
