//! `kiln llm-bench --rows N,...`: decode steps of several sequences at once, through the path a
//! server takes (`Model::forward_batch` over sequences in one paged KV pool), so that what a row
//! costs next to one row alone (issue 35: 8 rows at most 1.3x one) and where a batched step's time
//! goes (issue 36: serving at 32 and 64 streams) are measured without a server or its load.

use crate::generate::random_ids;
use kiln::Tensor;
use kiln_llm::paged::{PagedPool, PagedSeq};
use kiln_llm::{BatchSeq, Model};
use std::time::Instant;

/// Positions per KV block (what `kiln serve` uses by default).
const BLOCK: usize = 16;
/// Untimed steps before the timed ones: the first batched step of a row count compiles its kernels
/// (products of that many rows, the paged attention), which a timed step must not include.
const WARM_STEPS: usize = 2;
/// Steps timed with per-dispatch timestamps for the profile (fewer where the context has less room
/// past the timed steps).
const PROFILE_STEPS: usize = 4;
/// Positions past the timed steps that `--rows` needs (`llm-bench` loads the model with this much more
/// room when `--rows` is given).
pub(crate) const EXTRA_POSITIONS: usize = WARM_STEPS + PROFILE_STEPS;

/// `rows` sequences, each prompted with `context` tokens of its own (a prefill per sequence), then
/// [`WARM_STEPS`] untimed greedy batched steps, `steps` timed ones, and the GPU's per-kernel profile of
/// [`PROFILE_STEPS`] more when asked for.
/// Returns (seconds of the timed steps, the profile as JSON).
fn run(
    model: &Model,
    rows: usize,
    context: usize,
    steps: usize,
    profile: bool,
) -> kiln_llm::Result<(f64, Option<serde_json::Value>)> {
    let warm = WARM_STEPS.min(model.max_context().saturating_sub(context + steps));
    let profiled =
        if profile { PROFILE_STEPS.min(model.max_context().saturating_sub(context + warm + steps)) } else { 0 };
    let total = context + warm + steps + profiled;
    let pool = PagedPool::new(model, BLOCK, rows * total.div_ceil(BLOCK))?;
    let mut seqs: Vec<PagedSeq> = (0..rows)
        .map(|_| pool.reserve(total).ok_or_else(|| kiln_llm::LlmError::Arg("the KV pool is too small".into())))
        .collect::<kiln_llm::Result<_>>()?;
    let vocab = model.config.vocab_size;
    let mut next = Vec::with_capacity(rows);
    for (i, seq) in seqs.iter_mut().enumerate() {
        let prompt = random_ids(context, vocab, (context * 1000 + i) as u64);
        let logits = model.forward_batch(&mut [BatchSeq { tokens: &prompt, kv: seq }])?;
        next.push(argmax_rows(&logits)?[0]);
    }
    let mut step = |next: &mut Vec<u32>| -> kiln_llm::Result<()> {
        let tokens: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let mut batch: Vec<BatchSeq> = seqs
            .iter_mut()
            .zip(&tokens)
            .map(|(s, t)| BatchSeq { tokens: t, kv: s as &mut dyn kiln_llm::SeqKv })
            .collect();
        *next = argmax_rows(&model.forward_batch(&mut batch)?)?;
        Ok(())
    };
    for _ in 0..warm {
        step(&mut next)?;
    }
    model.device().synchronize()?;
    let start = Instant::now();
    for _ in 0..steps {
        step(&mut next)?;
    }
    let secs = start.elapsed().as_secs_f64();
    let device = model.device();
    if profiled == 0 || !device.is_gpu() {
        return Ok((secs, None));
    }
    device.set_profiling(true)?;
    device.reset_profile();
    let r = (0..profiled).try_for_each(|_| step(&mut next));
    let table = device.profile().into_iter().map(|k| (k.kernel, k.dispatches as f64, k.total_ms)).collect();
    device.set_profiling(false)?;
    r?;
    Ok((secs, Some(kernel_table(table, rows, profiled))))
}

/// The greedy next token of every row of f32 logits `(rows, vocab)`.
fn argmax_rows(logits: &Tensor) -> kiln_llm::Result<Vec<u32>> {
    Ok(logits.argmax(-1, false)?.to_vec::<i64>()?.into_iter().map(|t| t as u32).collect())
}

/// Per-kernel GPU time of one batched step from the profile's (kernel, dispatches, total ms) over
/// `steps` steps.
fn kernel_table(table: Vec<(String, f64, f64)>, rows: usize, steps: usize) -> serde_json::Value {
    let per = steps as f64;
    let mut kernels: Vec<(String, f64, f64)> =
        table.into_iter().map(|(k, n, ms)| (k, n / per, ms * 1e3 / per)).collect();
    kernels.sort_by(|a, b| b.2.total_cmp(&a.2));
    serde_json::json!({
        "rows": rows,
        "gpu_us_per_step": kernels.iter().map(|k| k.2).sum::<f64>(),
        "dispatches_per_step": kernels.iter().map(|k| k.1).sum::<f64>(),
        "kernels": kernels.iter().map(|(k, n, us)| serde_json::json!({"kernel": k, "per_step": n, "us_per_step": us})).collect::<Vec<_>>(),
    })
}

/// The `--rows` runs at `context`: one entry per row count (step time, tokens per second, and
/// with 1 among the counts, step time over one row's), then the largest count's per-kernel profile
/// (GPU only).
pub(crate) fn batched_decode(
    model: &Model,
    counts: &[usize],
    context: usize,
    steps: usize,
    mut phase: impl FnMut(&str),
) -> kiln_llm::Result<serde_json::Value> {
    let largest = counts.iter().copied().max().unwrap_or(1);
    let mut profile = None;
    let mut times = Vec::new();
    for &rows in counts {
        phase(&format!("{steps} decode steps of a batch of {rows} at context {context}"));
        let (secs, p) = run(model, rows, context, steps, rows == largest)?;
        profile = profile.or(p);
        times.push((rows, secs));
    }
    let step_ms = |secs: f64| secs * 1e3 / steps as f64;
    let one_row = times.iter().find(|t| t.0 == 1).map(|t| step_ms(t.1));
    let runs: Vec<serde_json::Value> = times
        .iter()
        .map(|&(rows, secs)| {
            serde_json::json!({
                "rows": rows,
                "context": context,
                "steps": steps,
                "step_ms": step_ms(secs),
                "tokens_per_sec": (rows * steps) as f64 / secs,
                "x_one_row": one_row.map(|one| step_ms(secs) / one),
            })
        })
        .collect();
    Ok(serde_json::json!({"runs": runs, "profile": profile}))
}
