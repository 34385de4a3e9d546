//! Shutdown in the scheduler: a request still waiting in the queue when the server begins to shut
//! down is refused (`Event::Refused`, which the HTTP layer answers with 503), while the running one
//! goes on. On the CPU with the fixture model.

use kiln::{DType, Device};
use kiln_llm::{LoadOptions, ModelDir, SamplingParams};
use kiln_serve::metrics::Metrics;
use kiln_serve::scheduler::{Event, GenRequest, Scheduler, SchedulerOptions};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn waiting_requests_are_refused_at_shutdown() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-llm/tests/fixtures/llama");
    let opts = LoadOptions { dtype: DType::F32, max_context: 128, progress: None };
    let model = ModelDir::open(dir).unwrap().load(&Device::cpu(), opts).unwrap();
    let sched_opts =
        SchedulerOptions { max_batch: 1, max_queue: 4, prefill_chunk: 64, block_size: 4, kv_blocks: 64, warmup: false };
    let scheduler = Scheduler::start(model, sched_opts, Arc::new(Metrics::default())).unwrap();
    let request = |max_tokens| {
        let (events, rx) = tokio::sync::mpsc::unbounded_channel();
        let sampling = SamplingParams::default();
        (GenRequest { prompt: (1..9).collect(), max_tokens, sampling, seed: 1, stop_tokens: vec![], events }, rx)
    };
    let (running, mut running_rx) = request(100);
    scheduler.submit(running).unwrap();
    assert!(matches!(running_rx.blocking_recv(), Some(Event::Token(_))));
    // One sequence a batch: this one waits behind the running one.
    let (waiting, mut waiting_rx) = request(5);
    scheduler.submit(waiting).unwrap();
    scheduler.begin_shutdown(Duration::from_secs(30));
    match waiting_rx.blocking_recv() {
        Some(Event::Refused(m)) => assert!(m.contains("shutting down"), "{m}"),
        other => panic!("a waiting request at shutdown got {other:?}"),
    }
    // The running answer goes on to its end within the grace period.
    loop {
        match running_rx.blocking_recv() {
            Some(Event::Token(_)) => {}
            Some(Event::Done { .. }) => break,
            other => panic!("the running request ended with {other:?}"),
        }
    }
    scheduler.join();
}
