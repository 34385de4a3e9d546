//! A Q4_K_M file written by llama.cpp's own quantizer (`fixtures/q4_k_m/`: the tiny Llama shape, layer
//! 1 with `v_proj` and `down_proj` in Q6_K beside Q4_K, as real Q4_K_M files mix them): the quantized
//! model against the same file with its weights dequantised (dense products), the GPU against the CPU,
//! and the dispatches of a GPU decode step.

mod common;
use common::{devices, f32_opts, fixture, prefill_decode_logits, worst_row_err};
use kiln::Device;
use kiln_llm::{GgufModel, Model};

/// The GPU's dispatch counters are per device: the tests of this file take turns.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The quantized path equals the dequantised weights up to f32 summation order on the CPU (1e-4 of
/// max(1, |row|)) and, on a GPU, up to x's 16-bit rounding in the integer-dot products (4e-4;
/// docs/GGUF.md); the GPU's quantized model gives the CPU's logits within the same 4e-4. Another
/// first token moves the logits a hundred times past the bound.
#[test]
fn q4_k_m_matches_its_dequantized_weights_on_every_device() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let g = GgufModel::open(fixture("q4_k_m/model.gguf")).unwrap();
    let cpu = prefill_decode_logits(&g.load(&Device::cpu(), f32_opts()).unwrap());
    for dev in devices() {
        let qm = g.load(&dev, f32_opts()).unwrap();
        let (q, d) =
            (prefill_decode_logits(&qm), prefill_decode_logits(&g.load_dequantized(&dev, f32_opts()).unwrap()));
        let tol = if dev.is_gpu() { 4e-4 } else { 1e-4 };
        let err = worst_row_err(&q, &d);
        eprintln!("{dev}: Q4_K_M against its dequantised weights {err:.2e}");
        assert!(err <= tol, "{dev}: Q4_K_M against its dequantised weights {err:.2e} > {tol:.0e}");
        let err = worst_row_err(&q, &cpu);
        assert!(err <= 4e-4, "{dev}: Q4_K_M on {dev} against the CPU {err:.2e}");
        // Negative control: another first token moves the logits far outside the bound.
        let wrong = qm.forward(&[2, 5, 9, 2, 7], &mut qm.new_cache(), true).unwrap().to_vec2::<f32>().unwrap();
        assert!(worst_row_err(&wrong, &q[..5]) > 100.0 * tol, "{dev}: the comparison cannot tell prompts apart");
    }
}

/// On a GPU a decode step of the Q4_K_M file takes the fused path in both layers: exactly one
/// dispatch more than the same file with dense weights (whose q/k/v are one stacked product): the
/// mixed layer's q/k/v are two products (q and k stacked in Q4_K, v in Q6_K) written into one q/k/v
/// row, and nothing else differs (no separate norm, rope or cache copy).
#[test]
fn q4_k_m_decode_takes_the_fused_path() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let g = GgufModel::open(fixture("q4_k_m/model.gguf")).unwrap();
    for dev in devices().into_iter().filter(Device::is_gpu) {
        // The second decode step (the first may still carry the prefill's recording).
        let per_step = |m: &Model| {
            let mut cache = m.new_cache();
            m.forward(&[1, 5, 9], &mut cache, false).unwrap().to_vec2::<f32>().unwrap();
            m.forward(&[4], &mut cache, false).unwrap().to_vec2::<f32>().unwrap();
            let (d0, _) = dev.gpu_counters().unwrap();
            m.forward(&[6], &mut cache, false).unwrap().to_vec2::<f32>().unwrap();
            dev.gpu_counters().unwrap().0 - d0
        };
        let (q, d) =
            (per_step(&g.load(&dev, f32_opts()).unwrap()), per_step(&g.load_dequantized(&dev, f32_opts()).unwrap()));
        eprintln!("{dev}: decode step dispatches: Q4_K_M {q}, dense {d}");
        assert_eq!(q, d + 1, "{dev}: Q4_K_M {q} dispatches a step, dense {d}");
    }
}
