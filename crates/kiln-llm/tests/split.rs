//! One model's layers split over several devices (`Placement`): the logits of a prefill and of decode
//! steps through the split KV cache equal those of the model on one device. The splits: the CPU
//! twice (the placement logic alone), and with a GPU: CPU then GPU, GPU then CPU, and two separate
//! devices on the one GPU adapter (`Device::gpu_nth_separate`: lavapipe in CI), so that the hidden
//! states really move through host memory between devices.

mod common;
use common::{devices, f32_opts, fixture, prefill_decode_logits, worst_row_err};
use kiln::Device;
use kiln_llm::{BatchSeq, GgufModel, ModelDir, Placement};

/// The device lists to split over: two handles of the CPU, and with a GPU the CPU and the GPU both
/// ways plus the GPU and a second, separate device on its adapter.
fn splits() -> Vec<Vec<Device>> {
    let cpu = Device::cpu();
    let mut out = vec![vec![cpu.clone(), cpu.clone()]];
    if let Some(gpu) = devices().into_iter().find(Device::is_gpu) {
        let other = Device::gpu_nth_separate(gpu.gpu_info().unwrap().index).unwrap();
        other.set_poison(true);
        assert!(other != gpu, "a separate device is not the cached one");
        out.extend([vec![cpu.clone(), gpu.clone()], vec![gpu.clone(), cpu], vec![gpu, other]]);
    }
    out
}

fn assert_close(name: &str, devs: &[Device], a: &[Vec<f32>], b: &[Vec<f32>]) {
    assert_within(name, devs, a, b, 1e-4);
}

fn assert_within(name: &str, devs: &[Device], a: &[Vec<f32>], b: &[Vec<f32>], tol: f64) {
    let worst = worst_row_err(a, b);
    let names: Vec<String> = devs.iter().map(|d| d.to_string()).collect();
    assert!(worst <= tol, "{name} split over {names:?}: relative logit error {worst:.2e} > {tol:.0e}");
    eprintln!("{name} split over {names:?}: worst relative logit error {worst:.2e}");
}

/// llama (2 layers, its own LM head), qwen2 (biases, a tied head: copied to the last device) and
/// gemma2 (the composed path, tied head, post norms).
#[test]
fn split_safetensors_models_give_the_one_device_logits() {
    for name in ["llama", "qwen2", "gemma2"] {
        let dir = ModelDir::open(fixture(name)).unwrap();
        let reference = prefill_decode_logits(&dir.load(&Device::cpu(), f32_opts()).unwrap());
        let layers = dir.config.num_layers;
        for devs in splits() {
            let p = Placement::new(devs.clone(), None, layers).unwrap();
            assert_eq!(p.counts(), [1, 1], "{name}: one layer each");
            let model = dir.load_on(&p, f32_opts()).unwrap();
            assert!(model.placement().is_split());
            assert_close(name, &devs, &prefill_decode_logits(&model), &reference);
        }
    }
}

/// A quantized GGUF file (Q8_0 projections stay quantized on their devices) and Qwen2's tied
/// quantized head, moved to the last device. A split over GPU devices only must give the one-GPU
/// logits (1e-4); one with the CPU in it, the CPU's within 5e-4: the GPU's quantized products take
/// integer dots on x rounded to 16 bits per run of 16 values (docs/GGUF.md), about 1.5e-5 of each
/// product, which two layers and the head carry to ~1.2e-4 of the logits.
#[test]
fn split_gguf_models_give_the_one_device_logits() {
    for file in ["llama/model-q8_0.gguf", "qwen2/model-q8_0.gguf"] {
        let g = GgufModel::open(fixture(file)).unwrap();
        let on_cpu = prefill_decode_logits(&g.load(&Device::cpu(), f32_opts()).unwrap());
        for devs in splits() {
            let p = Placement::new(devs.clone(), Some(&[1, 1]), g.config.num_layers).unwrap();
            let split = prefill_decode_logits(&g.load_on(&p, f32_opts()).unwrap());
            if devs.iter().all(Device::is_gpu) {
                let on_gpu = prefill_decode_logits(&g.load(&devs[0], f32_opts()).unwrap());
                assert_close(file, &devs, &split, &on_gpu);
            } else {
                assert_within(file, &devs, &split, &on_cpu, 5e-4);
            }
        }
    }
}

/// The serving path (batched, paged KV) refuses a split model with a clear error.
#[test]
fn batched_forward_refuses_a_split_model() {
    let dir = ModelDir::open(fixture("llama")).unwrap();
    let cpu = Device::cpu();
    let model = dir.load_on(&Placement::new(vec![cpu.clone(), cpu], None, 2).unwrap(), f32_opts()).unwrap();
    let mut c = model.new_cache();
    let e = model.forward_batch(&mut [BatchSeq { tokens: &[1, 2], kv: &mut c }]).unwrap_err().to_string();
    assert!(e.contains("split over several devices are not supported"), "{e}");
}
