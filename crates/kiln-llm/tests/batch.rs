//! Batched forward passes (continuous batching) against one sequence at a time: the same greedy
//! tokens and the same logits (to rounding), with sequences joining, prefilling in chunks and leaving
//! while others decode, with contiguous caches and with a paged pool (blocks of 4 positions: the
//! decode steps attend through the block tables, with Gemma 2's soft cap and each model's sliding
//! window). Llama, Qwen3, Gemma 2, Phi-3 and Mistral with a window of 5 that the sequences pass, on
//! the CPU and the GPU.

mod common;

use common::{devices, fixture, row_err};
use kiln::{DType, Device};
use kiln_llm::paged::PagedPool;
use kiln_llm::{BatchSeq, LoadOptions, Model, ModelDir, SeqKv};

/// The fixtures the batched passes are checked on: one per code path (fused Llama, q/k norms, Gemma 2's
/// soft cap, window and post norms, Phi-3's stored stacks, a window that the sequences pass).
const ARCHS: [&str; 5] = ["llama", "qwen3", "gemma2", "phi3", "mistral_window"];

fn load(name: &str, dev: &Device) -> Model {
    load_ctx(name, dev, 64)
}

fn load_ctx(name: &str, dev: &Device, max_context: usize) -> Model {
    let dir = ModelDir::open(fixture(name)).unwrap();
    dir.load(dev, LoadOptions { dtype: DType::F32, max_context, progress: None }).unwrap()
}

/// Greedy tokens and each step's logits, one sequence alone through `Model::forward`.
fn alone(model: &Model, prompt: &[u32], steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let mut cache = model.new_cache();
    let mut logits = model.forward(prompt, &mut cache, false).unwrap().to_vec::<f32>().unwrap();
    let (mut toks, mut rows) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        let next = common::argmax(&logits);
        toks.push(next);
        rows.push(logits.clone());
        logits = model.forward(&[next], &mut cache, false).unwrap().to_vec::<f32>().unwrap();
    }
    (toks, rows)
}

struct Seq {
    prompt: Vec<u32>,
    /// Step at which the sequence joins the batch.
    join: usize,
    /// Prompt tokens per prefill chunk.
    chunk: usize,
    cache: Box<dyn SeqKv>,
    fed: usize,
    toks: Vec<u32>,
    rows: Vec<Vec<f32>>,
}

#[test]
fn batched_decode_equals_per_sequence_decode() {
    batched_equals_alone(false);
}

#[test]
fn paged_batched_decode_equals_per_sequence_decode() {
    batched_equals_alone(true);
}

fn batched_equals_alone(paged: bool) {
    const STEPS: usize = 10;
    for (dev, name) in devices().into_iter().flat_map(|d| ARCHS.map(|n| (d.clone(), n))) {
        let model = load_ctx(name, &dev, 128);
        let pool = PagedPool::new(&model, 4, 5 * 16).unwrap();
        let store = |n: usize| -> Box<dyn SeqKv> {
            if paged {
                Box::new(pool.reserve(n).unwrap())
            } else {
                Box::new(model.new_cache())
            }
        };
        let vocab = model.config.vocab_size as u32;
        // Prompt chunks of up to PAGED_CHUNK tokens attend through the block table when paged, the
        // 70-token one (in one chunk, next to decode rows) over its gathered keys and values.
        const { assert!(70 > kiln_llm::model::PAGED_CHUNK) };
        let prompts: Vec<Vec<u32>> = [(7u32, 5usize), (11, 1), (3, 13), (29, 8), (5, 21), (13, 70)]
            .iter()
            .map(|&(seed, n)| (0..n as u32).map(|i| (seed * 31 + i * seed * 7 + 1) % vocab).collect())
            .collect();
        let mut seqs: Vec<Seq> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| Seq {
                prompt: p.clone(),
                join: [0, 0, 2, 3, 5, 1][i],
                chunk: [64, 1, 4, 3, 6, 70][i],
                cache: store(p.len() + STEPS),
                fed: 0,
                toks: vec![],
                rows: vec![],
            })
            .collect();
        // Run until every sequence has STEPS tokens; a sequence leaves when it has them.
        for step in 0..100 {
            let active: Vec<usize> =
                (0..seqs.len()).filter(|&i| seqs[i].join <= step && seqs[i].toks.len() < STEPS).collect();
            if active.is_empty() {
                break;
            }
            let inputs: Vec<Vec<u32>> = active
                .iter()
                .map(|&i| {
                    let s = &seqs[i];
                    if s.fed < s.prompt.len() {
                        s.prompt[s.fed..(s.fed + s.chunk).min(s.prompt.len())].to_vec()
                    } else {
                        vec![*s.toks.last().unwrap()]
                    }
                })
                .collect();
            let logits = {
                let refs = seqs.iter_mut().enumerate().filter(|(i, _)| active.contains(i)).map(|(_, s)| s);
                let mut batch: Vec<BatchSeq> =
                    refs.zip(&inputs).map(|(s, t)| BatchSeq { tokens: t, kv: s.cache.as_mut() }).collect();
                model.forward_batch(&mut batch).unwrap().to_vec::<f32>().unwrap()
            };
            let v = vocab as usize;
            assert_eq!(logits.len(), active.len() * v);
            for (r, &i) in active.iter().enumerate() {
                let s = &mut seqs[i];
                let prefilling = s.fed < s.prompt.len();
                s.fed += inputs[r].len();
                if prefilling && s.fed < s.prompt.len() {
                    continue; // a chunk before the last: its logits are not used
                }
                let row = logits[r * v..(r + 1) * v].to_vec();
                s.toks.push(common::argmax(&row));
                s.rows.push(row);
            }
        }
        for (i, s) in seqs.iter().enumerate() {
            let (toks, rows) = alone(&model, &s.prompt, STEPS);
            assert_eq!(
                s.toks, toks,
                "{name} {dev} paged {paged}: sequence {i} (prompt {:?}): batched vs alone tokens",
                s.prompt
            );
            for (j, (a, b)) in s.rows.iter().zip(&rows).enumerate() {
                let e = row_err(a, b);
                assert!(e < 1e-4, "{name} {dev} paged {paged}: sequence {i} step {j}: logits differ by {e}");
            }
            assert_eq!(s.cache.len(), s.prompt.len() + STEPS - 1);
        }
    }
}

#[test]
fn batch_errors_name_the_problem() {
    let model = load("llama", &Device::cpu());
    let mut c = model.new_cache();
    let e = model.forward_batch(&mut []).unwrap_err().to_string();
    assert!(e.contains("no sequences"), "{e}");
    let e = model.forward_batch(&mut [BatchSeq { tokens: &[], kv: &mut c }]).unwrap_err().to_string();
    assert!(e.contains("sequence 0 has no tokens"), "{e}");
    let long = vec![1u32; 65];
    let e = model.forward_batch(&mut [BatchSeq { tokens: &long, kv: &mut c }]).unwrap_err().to_string();
    assert!(e.contains("past the context of 64"), "{e}");
    let bad = [model.config.vocab_size as u32];
    let e = model.forward_batch(&mut [BatchSeq { tokens: &bad, kv: &mut c }]).unwrap_err().to_string();
    assert!(e.contains("outside the vocabulary"), "{e}");
    assert_eq!(c.len(), 0, "a refused batch leaves the cache alone");
}
