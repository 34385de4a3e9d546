//! The scheduler serving a model split over two devices (`kiln serve --devices`): its batched steps
//! run layer by layer on each device, with each layer's KV blocks on its device. Three greedy
//! requests served together (prompts of 8, 3 and 70 tokens: the last one over a paged chunk) give
//! the tokens the one-device model's scheduler gives. The split is the CPU and the GPU (lavapipe in
//! CI), or two handles of the CPU without a GPU.

use kiln::{DType, Device};
use kiln_llm::{LoadOptions, Model, ModelDir, Placement, SamplingParams};
use kiln_serve::metrics::Metrics;
use kiln_serve::scheduler::{Event, GenRequest, Scheduler, SchedulerOptions};
use std::sync::Arc;
use std::time::Duration;

fn dir() -> ModelDir {
    ModelDir::open(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-llm/tests/fixtures/llama")).unwrap()
}

fn opts() -> LoadOptions {
    LoadOptions { dtype: DType::F32, max_context: 128, progress: None }
}

/// Each request's tokens, the requests submitted together to a scheduler of `model`.
fn serve(model: Model, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let sched_opts = SchedulerOptions {
        max_batch: 4,
        max_queue: 4,
        prefill_chunk: 128,
        block_size: 4,
        kv_blocks: 128,
        warmup: false,
    };
    let scheduler = Scheduler::start(model, sched_opts, Arc::new(Metrics::default())).unwrap();
    let rxs: Vec<_> = prompts
        .iter()
        .map(|p| {
            let (events, rx) = tokio::sync::mpsc::unbounded_channel();
            let sampling = SamplingParams { temperature: 0.0, ..SamplingParams::default() };
            let req = GenRequest { prompt: p.clone(), max_tokens: 6, sampling, seed: 1, stop_tokens: vec![], events };
            scheduler.submit(req).unwrap();
            rx
        })
        .collect();
    let out = rxs
        .into_iter()
        .map(|mut rx| {
            let mut toks = vec![];
            loop {
                match rx.blocking_recv() {
                    Some(Event::Token(t)) => toks.push(t),
                    Some(Event::Done { .. }) => break toks,
                    other => panic!("the request ended with {other:?}"),
                }
            }
        })
        .collect();
    scheduler.begin_shutdown(Duration::ZERO);
    scheduler.join();
    out
}

#[test]
fn a_split_model_serves_the_one_device_tokens() {
    let dir = dir();
    let vocab = dir.config.vocab_size as u32;
    let prompts: Vec<Vec<u32>> =
        [8u32, 3, 70].iter().map(|&n| (0..n).map(|i| (i * 41 + n * 13 + 2) % vocab).collect()).collect();
    let one = serve(dir.load(&Device::cpu(), opts()).unwrap(), &prompts);
    assert!(one.iter().all(|t| t.len() == 6), "{one:?}");
    let second = match Device::gpu() {
        Ok(g) => g,
        Err(e) => {
            assert!(!std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1"), "KILN_REQUIRE_GPU=1: {e}");
            Device::cpu()
        }
    };
    let placement = Placement::new(vec![Device::cpu(), second], None, dir.config.num_layers).unwrap();
    let split = serve(dir.load_on(&placement, opts()).unwrap(), &prompts);
    assert_eq!(split, one, "split over {:?}", placement.devices());
    // The prompts matter: other prompts give other tokens (the comparison can fail).
    let shifted: Vec<Vec<u32>> = prompts.iter().map(|p| p.iter().map(|t| (t + 1) % vocab).collect()).collect();
    assert_ne!(serve(dir.load(&Device::cpu(), opts()).unwrap(), &shifted), one);
}
