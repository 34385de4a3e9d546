//! Cancellation in the scheduler: a client that stops listening mid-answer (drops its receiver, as
//! the HTTP layer does when the connection closes) has its sequence leave the batch at the next
//! token boundary: `cancelled_total` rises by exactly one, its KV blocks go back to the pool, and
//! far fewer tokens than asked for are generated (a scheduler that ignored the drop would run the
//! answer to `max_tokens` and free the blocks just the same). The scheduler then serves the next
//! request whole. On the CPU with the fixture model (a few hundred milliseconds).

use kiln::{DType, Device};
use kiln_llm::{LoadOptions, ModelDir, SamplingParams};
use kiln_serve::metrics::Metrics;
use kiln_serve::scheduler::{Event, GenRequest, Scheduler, SchedulerOptions};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn request(prompt: Vec<u32>, max_tokens: usize) -> (GenRequest, tokio::sync::mpsc::UnboundedReceiver<Event>) {
    let (events, rx) = tokio::sync::mpsc::unbounded_channel();
    let sampling = SamplingParams::default();
    (GenRequest { prompt, max_tokens, sampling, seed: 1, stop_tokens: vec![], events }, rx)
}

fn wait_for(what: &str, pred: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(30);
    while !pred() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn dropped_receiver_cancels_the_sequence() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-llm/tests/fixtures/llama");
    let opts = LoadOptions { dtype: DType::F32, max_context: 128, progress: None };
    let model = ModelDir::open(dir).unwrap().load(&Device::cpu(), opts).unwrap();
    let metrics = Arc::new(Metrics::default());
    let sched_opts = SchedulerOptions {
        max_batch: 4,
        max_queue: 4,
        prefill_chunk: 64,
        block_size: 4,
        kv_blocks: 256,
        warmup: false,
    };
    let scheduler = Scheduler::start(model, sched_opts, metrics.clone()).unwrap();
    let max_tokens = 110;
    let (req, mut rx) = request((1..9).collect(), max_tokens);
    scheduler.submit(req).unwrap();
    for _ in 0..3 {
        match rx.blocking_recv() {
            Some(Event::Token(_)) => {}
            other => panic!("expected a token, got {other:?}"),
        }
    }
    wait_for("the running sequence to hold KV blocks", || metrics.kv_blocks_used.load(Ordering::SeqCst) > 0);
    drop(rx);
    wait_for("the cancellation", || metrics.cancelled_total.load(Ordering::SeqCst) == 1);
    wait_for("the KV blocks to come back", || metrics.kv_blocks_used.load(Ordering::SeqCst) == 0);
    let generated = metrics.completion_tokens_total.load(Ordering::SeqCst);
    assert!((3..max_tokens as u64).contains(&generated), "{generated} tokens generated for a cancelled answer");
    assert_eq!(metrics.cancelled_total.load(Ordering::SeqCst), 1, "one cancellation, counted once");

    // The next request runs to its end and is not counted as cancelled.
    let (req, mut rx) = request((3..7).collect(), 5);
    scheduler.submit(req).unwrap();
    let mut tokens = 0;
    loop {
        match rx.blocking_recv() {
            Some(Event::Token(_)) => tokens += 1,
            Some(Event::Done { completion_tokens, .. }) => break assert_eq!((completion_tokens, tokens), (5, 5)),
            other => panic!("the second request ended with {other:?}"),
        }
    }
    assert_eq!(metrics.cancelled_total.load(Ordering::SeqCst), 1);
    scheduler.begin_shutdown(Duration::ZERO);
    scheduler.join();
}
