//! `kiln generate`, `kiln chat` and `kiln llm-bench`: Llama-family models from Hugging Face folders
//! or GGUF files through kiln-llm, tokens streamed as they come, prefill/decode speed and peak GPU memory at the end.

use crate::limits;
use crate::progress::LoadProgress;
use crate::sysinfo::human_bytes;
use clap::Args;
use kiln::quant::QuantType;
use kiln::{DType, Device, DeviceRequest};
use kiln_llm::{
    GenerateOptions, GenerateStats, LoadOptions, Message, Model, ModelSource, SamplingParams, TokenStream, Tokenizer,
};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct ModelArgs {
    /// Hugging Face model folder (config.json, model.safetensors[.index.json], tokenizer.json) or a
    /// GGUF file (llama.cpp's format: llama/qwen2; f32/f16/bf16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0,
    /// Q2_K..Q6_K, IQ4_NL/IQ4_XS tensors).
    #[arg(long, value_name = "DIR|FILE.gguf")]
    pub(crate) model: PathBuf,
    /// A Hugging Face tokenizer.json to use instead of the model's own (needed for GGUF files whose
    /// tokenizer kiln cannot build from the metadata: other than `gpt2` BPE and `llama` SentencePiece).
    #[arg(long, value_name = "FILE")]
    pub(crate) tokenizer: Option<PathBuf>,
    /// Device to run on: cpu, gpu, gpu:N or auto [default: $KILN_DEVICE, else auto].
    #[arg(long, value_parser = crate::parse_device)]
    device: Option<DeviceRequest>,
    /// Weights, activations and KV cache dtype: f32, f16 or bf16 (default: the model's own dtype on a
    /// GPU, f32 on the CPU; GGUF files: f16 on a GPU; quantized weights stay quantized).
    #[arg(long, value_parser = parse_dtype)]
    dtype: Option<DType>,
    /// KV cache length in positions, at most the model's max_position_embeddings [default: 4096;
    /// llm-bench: what its runs need].
    #[arg(long, value_parser = parse_positive)]
    max_context: Option<usize>,
    /// Quantize the dense projections after loading: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k,
    /// q5_k, q6_k, iq4_nl or iq4_xs (the embedding table
    /// stays in --dtype; weights whose input size is not a multiple of the block take Q8_0).
    #[arg(long, value_parser = parse_quant)]
    quantize: Option<QuantType>,
}

#[derive(Args, Debug)]
pub struct SamplingArgs {
    /// 0 is greedy decoding.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Sample from the K most likely tokens only.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample from the smallest set of tokens whose probability reaches P.
    #[arg(long)]
    top_p: Option<f64>,
    /// Penalise the last 64 tokens (1 = off, 1.1 is typical).
    #[arg(long, default_value_t = 1.0)]
    repeat_penalty: f32,
    /// Seed of the sampler (the same seed gives the same text).
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

impl SamplingArgs {
    fn params(&self) -> SamplingParams {
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            repeat_penalty: self.repeat_penalty,
            repeat_last_n: 64,
        }
    }
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// The prompt (the tokenizer adds BOS if the model wants it).
    #[arg(long)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256, value_parser = parse_positive)]
    max_tokens: usize,
    /// Do not stop at the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// A system message to start the conversation with.
    #[arg(long)]
    system: Option<String>,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 1024, value_parser = parse_positive)]
    max_tokens: usize,
}

#[derive(Args, Debug)]
pub struct LlmBenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt length of the timed prefill [default: 2048, at most the context].
    #[arg(long, value_parser = parse_positive)]
    prefill: Option<usize>,
    /// Context lengths at which decoding is timed, comma-separated [default: 512,4096, each at most
    /// the context less --decode-tokens].
    #[arg(long, value_delimiter = ',', value_parser = parse_positive)]
    contexts: Option<Vec<usize>>,
    /// Decode steps timed at each context.
    #[arg(long, default_value_t = 32, value_parser = parse_positive)]
    decode_tokens: usize,
}

/// A count that must be at least 1 (`--max-tokens 0` would time nothing, `--max-context 0` hold nothing).
fn parse_positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_quant(s: &str) -> Result<QuantType, String> {
    QuantType::ALL.into_iter().find(|q| q.name().eq_ignore_ascii_case(s)).ok_or_else(|| {
        let names: Vec<String> = QuantType::ALL.iter().map(|q| q.name().to_lowercase()).collect();
        format!("unknown quantization '{s}': expected one of {}", names.join(", "))
    })
}

fn parse_dtype(s: &str) -> Result<DType, String> {
    match DType::parse(s) {
        Some(d @ (DType::F32 | DType::F16 | DType::BF16)) => Ok(d),
        _ => Err(format!("unknown dtype '{s}': expected f32, f16 or bf16")),
    }
}

/// `--tokenizer FILE` if given, else the model's own.
pub(crate) fn tokenizer_of(dir: &ModelSource, file: Option<&PathBuf>) -> Result<Tokenizer, String> {
    match file {
        Some(f) => Tokenizer::from_file(f),
        None => dir.tokenizer(),
    }
    .map_err(|e| e.to_string())
}

/// Opens the device and the model (config, tokenizer metadata, mapped weights): everything but
/// loading the weights, so that a missing file or a bad argument fails in a moment.
fn open_source(args: &ModelArgs) -> Result<(Device, ModelSource), String> {
    let device = crate::open_device(args.device)?;
    let src = ModelSource::open(&args.model).map_err(|e| e.to_string())?;
    Ok((device, src))
}

/// Opens the device and the model, checks the files and the context, and loads the weights (for
/// `kiln serve`).
pub(crate) fn open(args: &ModelArgs) -> Result<(ModelSource, Model), String> {
    let (device, src) = open_source(args)?;
    tokenizer_of(&src, args.tokenizer.as_ref())?;
    let (ctx, note) = limits::context(src.config(), args.max_context);
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let model = load(args, &device, &src, ctx)?;
    Ok((src, model))
}

/// Prints the model and the memory estimate, checks it fits and loads the weights with a KV cache
/// of `max_context` positions (progress for large models).
fn load(args: &ModelArgs, device: &Device, dir: &ModelSource, max_context: usize) -> Result<Model, String> {
    let c = dir.config();
    let dtype = args.dtype.unwrap_or(match (dir, c.saved_dtype) {
        (ModelSource::Gguf(_), _) if device.is_gpu() => DType::F16,
        (ModelSource::Dir(_), Some(d @ (DType::F16 | DType::BF16))) if device.is_gpu() => d,
        _ => DType::F32,
    });
    let est = dir.estimate(dtype, max_context);
    let ctx = kiln_llm::model::effective_context(c, max_context);
    eprintln!(
        "model: {:?}, {} layers, hidden {}, {}/{} heads, vocab {} on {device} in {dtype}",
        c.arch, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size
    );
    eprintln!(
        "memory estimate: weights {} + KV cache {} ({ctx} positions) = {}",
        human_bytes(est.weight_bytes),
        human_bytes(est.kv_cache_bytes),
        human_bytes(est.total())
    );
    let mut progress = LoadProgress::new(est.weight_bytes);
    let start = Instant::now();
    let opts = LoadOptions { dtype, max_context, progress: progress.callback.take() };
    let mut model = dir.load(device, opts).map_err(|e| e.to_string())?;
    device.synchronize().map_err(|e| e.to_string())?;
    progress.finish();
    eprintln!("loaded in {:.1} s", start.elapsed().as_secs_f64());
    if let Some(qt) = args.quantize {
        let start = Instant::now();
        let n = model.quantize(qt).map_err(|e| e.to_string())?;
        device.synchronize().map_err(|e| e.to_string())?;
        eprintln!(
            "quantized {n} weights to {qt} in {:.1} s: weights now {}",
            start.elapsed().as_secs_f64(),
            human_bytes(model.weight_bytes())
        );
    }
    Ok(model)
}

fn print_stats(s: &GenerateStats) {
    let mut line = format!(
        "prompt: {} tokens, {:.1} tokens/s (prefill) | generated: {} tokens, {:.1} tokens/s (decode)",
        s.prompt_tokens,
        s.prefill_tokens_per_sec(),
        s.generated_tokens,
        s.decode_tokens_per_sec()
    );
    if let Some(p) = s.peak_gpu_bytes {
        line += &format!(" | peak GPU memory {}", human_bytes(p));
    }
    eprintln!("\n{line}");
}

pub fn generate(args: GenerateArgs) -> ExitCode {
    match run_generate(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln generate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_generate(args: GenerateArgs) -> Result<(), String> {
    kiln_llm::Sampler::new(args.sampling.params(), 0).map_err(|e| e.to_string())?;
    if args.prompt.is_empty() {
        return Err("the prompt is empty: pass some text with --prompt".into());
    }
    let (device, dir) = open_source(&args.model)?;
    // Every file the run needs and the prompt's length are checked before the weights load.
    let tok = tokenizer_of(&dir, args.model.tokenizer.as_ref())?;
    let stop_tokens = if args.ignore_eos { vec![] } else { dir.stop_tokens(&tok).map_err(|e| e.to_string())? };
    let prompt = tok.encode(&args.prompt, true).map_err(|e| e.to_string())?;
    let (ctx, note) = limits::context(dir.config(), args.model.max_context);
    if let Some(note) = note {
        eprintln!("{note}");
    }
    limits::check_prompt(dir.config(), prompt.len(), ctx)?;
    let model = load(&args.model, &device, &dir, ctx)?;
    let opts = GenerateOptions {
        max_tokens: args.max_tokens,
        sampling: args.sampling.params(),
        seed: args.sampling.seed,
        stop_tokens,
    };
    let mut stream = TokenStream::new(&tok);
    let mut out = std::io::stdout();
    print!("{}", args.prompt);
    let (answer, stats) = kiln_llm::generate(&model, &mut model.new_cache(), &prompt, &opts, |id| {
        let piece = stream.push(id)?;
        print!("{piece}");
        let _ = out.flush();
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    println!();
    print_stats(&stats);
    let last_is_stop = answer.last().is_some_and(|t| opts.stop_tokens.contains(t));
    if let Some(m) = limits::cut_short(dir.config(), model.max_context(), answer.len(), args.max_tokens, last_is_stop) {
        eprintln!("{m}");
    }
    Ok(())
}

pub fn chat(args: ChatArgs) -> ExitCode {
    match run_chat(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln chat: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_chat(args: ChatArgs) -> Result<(), String> {
    kiln_llm::Sampler::new(args.sampling.params(), 0).map_err(|e| e.to_string())?;
    let (device, dir) = open_source(&args.model)?;
    // Every file the chat needs is checked before the weights load.
    let tok = tokenizer_of(&dir, args.model.tokenizer.as_ref())?;
    let template = dir.chat_template().map_err(|e| e.to_string())?;
    let stop_tokens = dir.stop_tokens(&tok).map_err(|e| e.to_string())?;
    let (ctx, note) = limits::context(dir.config(), args.model.max_context);
    if let Some(note) = note {
        eprintln!("{note}");
    }
    let model = load(&args.model, &device, &dir, ctx)?;
    let ctx = model.max_context();
    let mut messages: Vec<Message> = args.system.iter().map(|s| Message::new("system", s)).collect();
    let mut cache = model.new_cache();
    // The tokens whose keys and values are in the cache: a new turn reuses them when the new prompt
    // starts with them, else the cache starts over.
    let mut cached: Vec<u32> = Vec::new();
    // Room kept for an answer when old turns are dropped: --max-tokens, at most a quarter of the context.
    let reserve = args.max_tokens.min(ctx / 4).max(1);
    let count = |m: &[Message]| -> Result<usize, String> {
        let text = template.render(m, true).map_err(|e| e.to_string())?;
        Ok(tok.encode(&text, false).map_err(|e| e.to_string())?.len())
    };
    eprintln!("chat: type a message and press enter; /reset starts over, /exit (or end of input) quits");
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    loop {
        eprint!("> ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            break;
        }
        let line = line.trim();
        match line {
            "" => continue,
            "/exit" => break,
            "/reset" => {
                messages.retain(|m| m.role == "system");
                cache.reset();
                cached.clear();
                continue;
            }
            _ => {}
        }
        messages.push(Message::new("user", line));
        // A full context drops the oldest turns (the system prompt stays), as chat programs do.
        match limits::fit_history(&mut messages, ctx - reserve, count) {
            Ok(0) => {}
            Ok(n) => eprintln!(
                "(the conversation filled the context of {ctx} positions: dropped the {n} oldest messages; \
                 /reset starts over)"
            ),
            Err(e) => {
                messages.pop();
                eprintln!(
                    "this message does not fit: {e} (the context of {ctx} positions less {reserve} for the \
                     answer); send a shorter one or raise --max-context"
                );
                continue;
            }
        }
        let text = template.render(&messages, true).map_err(|e| e.to_string())?;
        let ids = tok.encode(&text, false).map_err(|e| e.to_string())?;
        if !(ids.len() > cached.len() && ids.starts_with(&cached)) {
            cache.reset();
            cached.clear();
        }
        let new = &ids[cached.len()..];
        let room = ctx.saturating_sub(ids.len());
        let opts = GenerateOptions {
            max_tokens: args.max_tokens.min(room),
            sampling: args.sampling.params(),
            seed: args.sampling.seed.wrapping_add(messages.len() as u64),
            stop_tokens: stop_tokens.clone(),
        };
        let mut stream = TokenStream::new(&tok);
        let (answer, stats) = kiln_llm::generate(&model, &mut cache, new, &opts, |id| {
            if !stop_tokens.contains(&id) {
                print!("{}", stream.push(id)?);
                let _ = out.flush();
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        println!();
        print_stats(&stats);
        let last_is_stop = answer.last().is_some_and(|t| stop_tokens.contains(t));
        if answer.len() < args.max_tokens && !last_is_stop {
            eprintln!(
                "(the answer was cut at {} tokens: the context of {ctx} positions is full; the oldest turns \
                 make room for the next message)",
                answer.len()
            );
        }
        // Every answer token but the last went through the model.
        cached = ids;
        cached.extend_from_slice(&answer[..answer.len().saturating_sub(1)]);
        let reply: Vec<u32> = answer.into_iter().filter(|t| !stop_tokens.contains(t)).collect();
        messages.push(Message::new("assistant", &tok.decode(&reply, true).map_err(|e| e.to_string())?));
    }
    Ok(())
}

pub fn llm_bench(args: LlmBenchArgs) -> ExitCode {
    match run_llm_bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kiln llm-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Random prompt ids (seeded), all inside the vocabulary.
fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % vocab as u64) as u32
        })
        .collect()
}

/// Greedy steps after a prompt of `context` tokens: (prefill seconds, decode seconds).
fn timed_run(model: &Model, context: usize, steps: usize) -> kiln_llm::Result<(f64, f64)> {
    let mut cache = model.new_cache();
    let prompt = random_ids(context, model.config.vocab_size, context as u64);
    let start = Instant::now();
    let logits = model.forward(&prompt, &mut cache, false)?;
    let mut next = logits.argmax(-1, false)?.to_vec::<i64>()?[0] as u32;
    let prefill = start.elapsed().as_secs_f64();
    let start = Instant::now();
    for _ in 0..steps {
        let logits = model.forward(&[next], &mut cache, false)?;
        next = logits.argmax(-1, false)?.to_vec::<i64>()?[0] as u32;
    }
    Ok((prefill, start.elapsed().as_secs_f64()))
}

/// Where a decode step's time goes on a GPU: dispatches per token (counted in a normal run) and each
/// kernel's GPU time per token (8 steps with per-dispatch timestamps, which serialise the GPU; the
/// wall time of those steps is not a speed). `None` on the CPU.
fn decode_profile(model: &Model, context: usize) -> kiln_llm::Result<Option<serde_json::Value>> {
    const STEPS: usize = 8;
    let device = model.device();
    if !device.is_gpu() {
        return Ok(None);
    }
    let context = context.min(model.max_context().saturating_sub(STEPS)).max(1);
    // Counters of a prefill-only run and of prefill + STEPS: their difference is the steps'.
    let counted = |steps: usize| -> kiln_llm::Result<(u64, u64)> {
        let (d0, s0) = device.gpu_counters().expect("a GPU");
        timed_run(model, context, steps)?;
        let (d1, s1) = device.gpu_counters().expect("a GPU");
        Ok((d1 - d0, s1 - s0))
    };
    let ((d0, s0), (d1, s1)) = (counted(0)?, counted(STEPS)?);
    // The same run again with timestamps: the prefill's share is removed by a prefill-only run.
    let profiled = |steps: usize| -> kiln_llm::Result<std::collections::HashMap<String, (u64, f64)>> {
        device.set_profiling(true)?;
        device.reset_profile();
        let r = timed_run(model, context, steps);
        let table = device.profile().into_iter().map(|k| (k.kernel, (k.dispatches, k.total_ms))).collect();
        device.set_profiling(false)?;
        r.map(|_| table)
    };
    let (with, without) = (profiled(STEPS)?, profiled(0)?);
    let mut kernels: Vec<(String, f64, f64)> = with
        .into_iter()
        .map(|(name, (n, ms))| {
            let (n0, ms0) = without.get(&name).copied().unwrap_or((0, 0.0));
            (name, (n - n0) as f64 / STEPS as f64, (ms - ms0) * 1e3 / STEPS as f64)
        })
        .filter(|k| k.1 > 0.0)
        .collect();
    kernels.sort_by(|a, b| b.2.total_cmp(&a.2));
    let gpu_us: f64 = kernels.iter().map(|k| k.2).sum();
    Ok(Some(serde_json::json!({
        "context": context,
        "dispatches_per_token": (d1 - d0) as f64 / STEPS as f64,
        "submits_per_token": (s1 - s0) as f64 / STEPS as f64,
        "gpu_us_per_token": gpu_us,
        "kernels": kernels.iter().map(|(k, n, us)| serde_json::json!({"kernel": k, "per_token": n, "us_per_token": us})).collect::<Vec<_>>(),
    })))
}

fn run_llm_bench(args: LlmBenchArgs) -> Result<(), String> {
    let (device, dir) = open_source(&args.model)?;
    let plan = limits::bench_plan(
        dir.config(),
        args.prefill,
        args.contexts.clone(),
        args.decode_tokens,
        args.model.max_context,
    )?;
    eprintln!(
        "runs: prefill of {} tokens, {} decode steps at context {:?}",
        plan.prefill, plan.decode_tokens, plan.contexts
    );
    let model = load(&args.model, &device, &dir, plan.max_context)?;
    let err = |e: kiln_llm::LlmError| e.to_string();
    let device: &Device = model.device();
    eprintln!("warm-up ...");
    let warm = 64.min(model.max_context() / 2).max(1);
    timed_run(&model, warm, 4.min(model.max_context() - warm)).map_err(err)?;
    timed_run(&model, plan.prefill, 0).map_err(err)?;
    device.reset_peak_memory();
    let mut prefill_best = f64::INFINITY;
    for _ in 0..2 {
        prefill_best = prefill_best.min(timed_run(&model, plan.prefill, 0).map_err(err)?.0);
    }
    let mut decode = Vec::new();
    for &ctx in &plan.contexts {
        let (_, secs) = timed_run(&model, ctx, plan.decode_tokens).map_err(err)?;
        decode.push(serde_json::json!({
            "context": ctx,
            "steps": plan.decode_tokens,
            "secs": secs,
            "tokens_per_sec": plan.decode_tokens as f64 / secs,
        }));
        eprintln!("decode at context {ctx}: {:.1} tokens/s", plan.decode_tokens as f64 / secs);
    }
    eprintln!("prefill of {} tokens: {:.1} tokens/s", plan.prefill, plan.prefill as f64 / prefill_best);
    let profile = decode_profile(&model, plan.contexts.first().copied().unwrap_or(plan.prefill)).map_err(err)?;
    let c = dir.config();
    let report = serde_json::json!({
        "engine": "kiln",
        "device": device.name(),
        "dtype": model.dtype().as_str(),
        "quantize": args.model.quantize.map(|q| q.name()),
        "layers": c.num_layers,
        "hidden": c.hidden_size,
        "vocab": c.vocab_size,
        "weight_bytes": model.weight_bytes(),
        "kv_bytes_per_position": c.kv_bytes_per_position(model.dtype()),
        "prefill": {"tokens": plan.prefill, "secs": prefill_best, "tokens_per_sec": plan.prefill as f64 / prefill_best},
        "decode": decode,
        "peak_gpu_bytes": device.memory_stats().map(|m| m.peak_bytes),
        "decode_profile": profile,
    });
    println!("{report:#}");
    Ok(())
}
