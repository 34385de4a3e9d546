//! One model's layers split over several devices (`Placement`): the logits of a prefill and of decode
//! steps through the split KV cache equal those of the model on one device. The splits: the CPU
//! twice (the placement logic alone), and with a GPU: CPU then GPU, GPU then CPU, and two separate
//! devices on the one GPU adapter (`Device::gpu_nth_separate`: lavapipe in CI), so that the hidden
//! states really move through host memory between devices.

mod common;
use common::{devices, f32_opts, fixture, prefill_decode_logits, worst_row_err};
use kiln::Device;
use kiln_llm::paged::PagedPool;
use kiln_llm::{BatchSeq, GgufModel, LoadOptions, Model, ModelDir, Placement, SeqKv};

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

/// The serving path: batched passes over a paged pool whose layers live on their devices (decode
/// rows and short prompt chunks through the block tables, a 70-token prompt over its gathered keys)
/// and a contiguous cache give, step by step, the one-device model's batched logits.
#[test]
fn split_batched_passes_give_the_one_device_logits() {
    let dir = ModelDir::open(fixture("llama")).unwrap();
    let opts = || LoadOptions { max_context: 96, ..f32_opts() };
    let reference = dir.load(&Device::cpu(), opts()).unwrap();
    let vocab = dir.config.vocab_size as u32;
    let prompts: Vec<Vec<u32>> =
        [5u32, 3, 70].iter().map(|&n| (0..n).map(|i| (i * 37 + n * 11 + 1) % vocab).collect()).collect();
    let run = |model: &Model| -> Vec<Vec<f32>> {
        let pool = PagedPool::new(model, 4, 64).unwrap();
        let mut stores: Vec<Box<dyn SeqKv>> =
            vec![Box::new(pool.reserve(16).unwrap()), Box::new(pool.reserve(16).unwrap()), Box::new(model.new_cache())];
        let mut inputs = prompts.clone();
        let mut out = vec![];
        for _ in 0..4 {
            let mut batch: Vec<BatchSeq> =
                stores.iter_mut().zip(&inputs).map(|(s, t)| BatchSeq { tokens: t, kv: s.as_mut() }).collect();
            let logits = model.forward_batch(&mut batch).unwrap().to_vec::<f32>().unwrap();
            let rows: Vec<Vec<f32>> = logits.chunks(vocab as usize).map(<[f32]>::to_vec).collect();
            inputs = rows.iter().map(|r| vec![common::argmax(r)]).collect();
            out.extend(rows);
        }
        out
    };
    let expected = run(&reference);
    for devs in splits() {
        let model = dir.load_on(&Placement::new(devs.clone(), None, 2).unwrap(), opts()).unwrap();
        assert_close("llama batched", &devs, &run(&model), &expected);
    }
    // Negative control: the same passes with the prompts' last tokens changed do not match.
    let other = {
        let mut p = prompts.clone();
        p.iter_mut().for_each(|p| *p.last_mut().unwrap() = (*p.last().unwrap() + 1) % vocab);
        p
    };
    let model = dir.load(&Device::cpu(), opts()).unwrap();
    let pool = PagedPool::new(&model, 4, 64).unwrap();
    let mut s0 = pool.reserve(16).unwrap();
    let (mut s1, mut s2) = (pool.reserve(16).unwrap(), model.new_cache());
    let mut batch = [
        BatchSeq { tokens: &other[0], kv: &mut s0 },
        BatchSeq { tokens: &other[1], kv: &mut s1 },
        BatchSeq { tokens: &other[2], kv: &mut s2 },
    ];
    let changed = model.forward_batch(&mut batch).unwrap().to_vec::<f32>().unwrap();
    let changed: Vec<Vec<f32>> = changed.chunks(vocab as usize).map(<[f32]>::to_vec).collect();
    assert!(worst_row_err(&changed, &expected[..3]) > 1e-2, "the control must differ");
}
