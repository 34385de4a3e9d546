//! `kiln generate` and `kiln llm-bench`, and what they share with `kiln chat` (src/chat.rs) and
//! `kiln serve`: Llama-family models from Hugging Face folders or GGUF files through kiln-llm, tokens
//! streamed as they come, prefill/decode speed and peak GPU memory at the end.

use crate::devices::{DeviceList, LayerSplit};
use crate::limits;
use crate::progress::{LoadProgress, Phases};
use crate::sysinfo::human_bytes;
use clap::Args;
use kiln::quant::QuantType;
use kiln::{DType, Device, DeviceRequest};
use kiln_llm::{
    GenerateOptions, GenerateStats, LoadOptions, Model, ModelSource, Placement, SamplingParams, TokenStream, Tokenizer,
};
use std::io::Read;
use std::path::{Path, PathBuf};
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
    #[arg(long, value_parser = crate::parse_device, conflicts_with = "devices")]
    device: Option<DeviceRequest>,
    /// Split the model's layers over several devices, in order (e.g. gpu:0,gpu:1 or cpu,gpu:0): the
    /// embedding with the first, the final norm and LM head with the last, hidden states moved
    /// through host memory between them; GPUs take layers in proportion to their free memory (a CPU
    /// what they cannot hold) unless --split says.
    #[arg(long, value_name = "DEV,DEV,..", value_parser = crate::devices::parse_devices)]
    pub(crate) devices: Option<DeviceList>,
    /// Layers per device of --devices, e.g. 20,12 (they must add up to the model's layer count).
    #[arg(long, value_name = "N,N,..", requires = "devices", value_parser = crate::devices::parse_split)]
    split: Option<LayerSplit>,
    /// Weights, activations and KV cache dtype: f32, f16 or bf16 (default: the model's own dtype on a
    /// GPU, f32 on the CPU; GGUF files: f16 on a GPU; quantized weights stay quantized).
    #[arg(long, value_parser = parse_dtype)]
    dtype: Option<DType>,
    /// KV cache length in positions, at most the model's max_position_embeddings [default: 4096;
    /// llm-bench: what its runs need].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_positive)]
    pub(crate) max_context: Option<usize>,
    /// Quantize the dense projections after loading: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k,
    /// q5_k, q6_k, iq4_nl or iq4_xs (the embedding table
    /// stays in --dtype; weights whose input size is not a multiple of the block take Q8_0).
    #[arg(long, value_parser = parse_quant)]
    quantize: Option<QuantType>,
}

/// Sampling flags. Each one not given comes from the model's `generation_config.json`, else from
/// kiln's defaults ([`SamplingParams::chat_defaults`]: those of llama.cpp and Ollama for chat).
#[derive(Args, Debug)]
pub struct SamplingArgs {
    /// Softmax temperature; 0 is greedy decoding [default: the model's generation_config.json, else 0.8].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_temperature)]
    temperature: Option<f64>,
    /// Sample from the K most likely tokens only; 0 turns it off [default: generation_config.json, else 40].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_count)]
    top_k: Option<usize>,
    /// Sample from the smallest set of tokens whose probability reaches P; 1 turns it off
    /// [default: generation_config.json, else 0.95].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_top_p)]
    top_p: Option<f64>,
    /// Sample only from the tokens at least P times as likely as the most likely one; 0 turns it off
    /// [default: generation_config.json, else 0 (off)].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_min_p)]
    min_p: Option<f64>,
    /// Divide the logits of recent tokens by this (1 turns it off) [default: generation_config.json's
    /// repetition_penalty, else 1.1].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_repeat_penalty)]
    repeat_penalty: Option<f32>,
    /// How many of the last tokens the repeat penalty looks at.
    #[arg(long, default_value_t = 64, allow_hyphen_values = true, value_parser = parse_count)]
    repeat_last_n: usize,
    /// Seed of the sampler (the same seed gives the same text).
    #[arg(long, default_value_t = 0, allow_hyphen_values = true, value_parser = parse_seed)]
    pub(crate) seed: u64,
}

impl SamplingArgs {
    /// The flags given, over the model's defaults ([`ModelSource::sampling_defaults`]); the line
    /// that says what was chosen goes to stderr.
    pub(crate) fn params(&self, src: &ModelSource) -> Result<SamplingParams, String> {
        let (mut p, from_file) = src.sampling_defaults().map_err(|e| e.to_string())?;
        if let Some(t) = self.temperature {
            p.temperature = t;
        }
        if let Some(k) = self.top_k {
            p.top_k = Some(k);
        }
        if let Some(top_p) = self.top_p {
            p.top_p = Some(top_p);
        }
        if let Some(min_p) = self.min_p {
            p.min_p = Some(min_p);
        }
        if let Some(r) = self.repeat_penalty {
            p.repeat_penalty = r;
        }
        p.repeat_last_n = self.repeat_last_n;
        kiln_llm::Sampler::new(p.clone(), 0).map_err(|e| e.to_string())?;
        let what = if p.temperature == 0.0 {
            "greedy".to_string()
        } else {
            let k = p.top_k.filter(|&k| k > 0).map_or("off".into(), |k| k.to_string());
            let top_p = p.top_p.filter(|&x| x < 1.0).map_or("off".into(), |x| x.to_string());
            let min_p = p.min_p.filter(|&x| x > 0.0).map_or("off".into(), |x| x.to_string());
            format!("temperature {}, top-k {k}, top-p {top_p}, min-p {min_p}, seed {}", p.temperature, self.seed)
        };
        let penalty = if p.repeat_penalty == 1.0 {
            "no repeat penalty".to_string()
        } else {
            format!("repeat penalty {} over the last {}", p.repeat_penalty, p.repeat_last_n)
        };
        let source = if from_file { "generation_config.json and flags" } else { "kiln's defaults and flags" };
        errln!("sampling: {what}, {penalty} ({source})");
        Ok(p)
    }
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: SamplingArgs,
    /// The prompt (the tokenizer adds BOS if the model wants it); `-` reads it from stdin.
    #[arg(long, allow_hyphen_values = true)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256, allow_hyphen_values = true, value_parser = parse_positive)]
    max_tokens: usize,
    /// Do not stop at the end-of-sequence token.
    #[arg(long)]
    ignore_eos: bool,
}

#[derive(Args, Debug)]
pub struct LlmBenchArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Prompt length of the timed prefill [default: 2048, at most the context].
    #[arg(long, allow_hyphen_values = true, value_parser = parse_positive)]
    prefill: Option<usize>,
    /// Context lengths at which decoding is timed, comma-separated [default: 512,4096, each at most
    /// the context less --decode-tokens].
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = parse_positive)]
    contexts: Option<Vec<usize>>,
    /// Decode steps timed at each context.
    #[arg(long, default_value_t = 32, allow_hyphen_values = true, value_parser = parse_positive)]
    decode_tokens: usize,
    /// Also time batched decode steps of this many sequences at once, comma-separated (e.g.
    /// 1,8,32), at the first context, through a paged KV pool as `kiln serve` runs them; the largest
    /// count's step is profiled per kernel on a GPU.
    #[arg(long, value_delimiter = ',', allow_hyphen_values = true, value_parser = parse_positive)]
    rows: Option<Vec<usize>>,
}

// Numeric flags take values that start with a hyphen (`allow_hyphen_values`), so that
// `--temperature -1` reaches these parsers, and every bad value gets clap's frame and exit status 2:
// `error: invalid value '-1' for '--temperature <TEMPERATURE>': must be >= 0 (0 is greedy decoding)`.

/// A count that must be at least 1 (`--max-tokens 0` would time nothing, `--max-context 0` hold nothing).
pub(crate) fn parse_positive(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(_) => Err("must be a whole number, at least 1".into()),
    }
}

/// A count that may be 0.
fn parse_count(s: &str) -> Result<usize, String> {
    s.trim().parse::<usize>().map_err(|_| "must be a whole number >= 0".into())
}

fn parse_seed(s: &str) -> Result<u64, String> {
    s.trim().parse::<u64>().map_err(|_| format!("must be a whole number from 0 to {}", u64::MAX))
}

/// A finite number, or why not.
fn parse_number(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => Err("must be a number".into()),
    }
}

fn parse_temperature(s: &str) -> Result<f64, String> {
    let t = parse_number(s)?;
    if t < 0.0 {
        return Err("must be >= 0 (0 is greedy decoding)".into());
    }
    Ok(t)
}

fn parse_top_p(s: &str) -> Result<f64, String> {
    let p = parse_number(s)?;
    if !(p > 0.0 && p <= 1.0) {
        return Err("must be in (0, 1] (1 turns top-p off)".into());
    }
    Ok(p)
}

fn parse_min_p(s: &str) -> Result<f64, String> {
    let p = parse_number(s)?;
    if !(0.0..=1.0).contains(&p) {
        return Err("must be in [0, 1] (0 turns min-p off)".into());
    }
    Ok(p)
}

fn parse_repeat_penalty(s: &str) -> Result<f32, String> {
    let r = parse_number(s)?;
    if r <= 0.0 {
        return Err("must be > 0 (1 turns it off)".into());
    }
    Ok(r as f32)
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

/// `--tokenizer FILE` if given, else the model's own, checked against the model's embedding: a
/// tokenizer of another model is an error (its text would be garbage), the model's own a warning.
pub(crate) fn tokenizer_of(dir: &ModelSource, file: Option<&PathBuf>) -> Result<Tokenizer, String> {
    let rows = dir.config().vocab_size;
    match file {
        Some(f) => {
            let tok = Tokenizer::from_file(f).map_err(|e| e.to_string())?;
            tok.check_vocab(rows).map_err(|e| format!("--tokenizer {}: {e}", f.display()))?;
            Ok(tok)
        }
        None => {
            let tok = dir.tokenizer().map_err(|e| e.to_string())?;
            if let Err(e) = tok.check_vocab(rows) {
                errln!("warning: {e}");
            }
            Ok(tok)
        }
    }
}

/// What `--model` names: a model folder, or a `.gguf` file, also the one `.gguf` file of a folder
/// without `config.json`. A path that does not exist and reads as a Hugging Face id (`org/name`)
/// gets the command that downloads it.
pub(crate) fn model_path(path: &Path) -> Result<PathBuf, String> {
    if path.is_dir() && !path.join("config.json").exists() {
        let mut ggufs: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")))
            .collect();
        ggufs.sort();
        match ggufs.as_slice() {
            [] => {}
            [one] => {
                errln!("note: {} holds no config.json; using its GGUF file {}", path.display(), one.display());
                return Ok(one.clone());
            }
            many => {
                let names: Vec<String> =
                    many.iter().map(|p| p.file_name().unwrap_or_default().to_string_lossy().into_owned()).collect();
                return Err(format!(
                    "{} holds {} GGUF files ({}): pass the .gguf file to use",
                    path.display(),
                    many.len(),
                    names.join(", ")
                ));
            }
        }
    }
    if !path.exists() {
        if let Some(id) = hub_id(path) {
            let name = id.rsplit('/').next().unwrap_or(id);
            return Err(format!(
                "no such file or folder '{id}'. kiln reads models from disk; if '{id}' is a Hugging Face \
                 model id, download it first:\n  huggingface-cli download {id} --local-dir {name}\n\
                 then pass --model {name}"
            ));
        }
    }
    Ok(path.to_path_buf())
}

/// `org/name` when `path` reads as a Hugging Face model id: two parts of letters, digits, `-`, `_`
/// and `.`, the first not starting with `.`, and no file extension kiln reads.
fn hub_id(path: &Path) -> Option<&str> {
    let s = path.to_str()?;
    let (org, name) = s.split_once('/')?;
    let part = |p: &str| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let ok = part(org) && part(name) && !org.starts_with('.') && !name.ends_with(".gguf");
    ok.then_some(s)
}

/// Opens the device (or the devices of `--devices`, with the layers placed) and the model (config,
/// tokenizer metadata, mapped weights): everything but loading the weights, so that a missing file
/// or a bad argument fails in a moment.
pub(crate) fn open_source(args: &ModelArgs) -> Result<(Placement, ModelSource), String> {
    let path = model_path(&args.model)?;
    let devices = crate::devices::open(args.device, args.devices.as_ref())?;
    devices.iter().for_each(warn_software_gpu);
    let src = ModelSource::open(&path).map_err(|e| e.to_string())?;
    let placement = crate::devices::placement(devices, args.split.as_ref(), src.config().num_layers)?;
    Ok((placement, src))
}

/// A software GPU (lavapipe, llvmpipe, SwiftShader) runs models slower than the CPU backend.
fn warn_software_gpu(device: &Device) {
    if let Some(a) = device.gpu_info().filter(|a| a.software) {
        errln!("warning: {device} is a software GPU ({}): it runs models slower than --device cpu", a.name);
    }
}

/// Opens the device and the model, checks the files and the context, and loads the weights (for
/// `kiln serve`).
pub(crate) fn open(args: &ModelArgs) -> Result<(ModelSource, Model), String> {
    let (placement, src) = open_source(args)?;
    tokenizer_of(&src, args.tokenizer.as_ref())?;
    let (ctx, note) = limits::context(src.config(), args.max_context);
    if let Some(note) = note {
        errln!("{note}");
    }
    let model = load(args, &placement, &src, ctx)?;
    Ok((src, model))
}

/// Prints the model and the memory estimate, checks it fits and loads the weights with a KV cache
/// of `max_context` positions (progress for large models).
pub(crate) fn load(
    args: &ModelArgs,
    placement: &Placement,
    dir: &ModelSource,
    max_context: usize,
) -> Result<Model, String> {
    let c = dir.config();
    // The GPU defaults where every device is a GPU.
    let gpu = placement.devices().iter().all(Device::is_gpu);
    let dtype = args.dtype.unwrap_or(match (dir, c.saved_dtype) {
        (ModelSource::Gguf(_), _) if gpu => DType::F16,
        (ModelSource::Dir(_), Some(d @ (DType::F16 | DType::BF16))) if gpu => d,
        _ => DType::F32,
    });
    let est = dir.estimate(dtype, max_context);
    // Without --split, the layers follow the devices' free memory (the estimate says how much a
    // layer takes).
    let by_memory;
    let placement = if placement.is_split() && args.split.is_none() {
        by_memory =
            Placement::by_memory(placement.devices().to_vec(), c.num_layers, &est).map_err(|e| e.to_string())?;
        &by_memory
    } else {
        placement
    };
    let device = crate::devices::describe(placement);
    let ctx = kiln_llm::model::effective_context(c, max_context);
    errln!(
        "model: {:?}, {} layers, hidden {}, {}/{} heads, vocab {} on {device} in {dtype}",
        c.arch,
        c.num_layers,
        c.hidden_size,
        c.num_heads,
        c.num_kv_heads,
        c.vocab_size
    );
    errln!(
        "memory estimate: weights {} + KV cache {} ({ctx} positions) = {}",
        human_bytes(est.weight_bytes),
        human_bytes(est.kv_cache_bytes),
        human_bytes(est.total())
    );
    let mut progress = LoadProgress::new(est.weight_bytes);
    let start = Instant::now();
    let opts = LoadOptions { dtype, max_context, progress: progress.callback.take() };
    let mut model = if placement.is_split() { dir.load_on(placement, opts) } else { dir.load(placement.first(), opts) }
        .map_err(|e| e.to_string())?;
    let sync = || placement.devices().iter().try_for_each(|d| d.synchronize()).map_err(|e| e.to_string());
    sync()?;
    progress.finish();
    errln!("loaded in {:.1} s", start.elapsed().as_secs_f64());
    if let Some(qt) = args.quantize {
        let start = Instant::now();
        let n = model.quantize(qt).map_err(|e| e.to_string())?;
        sync()?;
        errln!(
            "quantized {n} weights to {qt} in {:.1} s: weights now {}",
            start.elapsed().as_secs_f64(),
            human_bytes(model.weight_bytes())
        );
    }
    Ok(model)
}

pub(crate) fn print_stats(s: &GenerateStats) {
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
    errln!("\n{line}");
}

pub fn generate(args: GenerateArgs) -> ExitCode {
    match run_generate(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("kiln generate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run_generate(args: GenerateArgs) -> Result<(), String> {
    let prompt_text = if args.prompt == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| format!("cannot read the prompt from stdin: {e}"))?;
        // A file or `echo` ends with a newline that is not part of the prompt.
        let trimmed = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t));
        trimmed.map_or(text.clone(), str::to_string)
    } else {
        args.prompt.clone()
    };
    if prompt_text.is_empty() {
        let from = if args.prompt == "-" { "stdin gave no text" } else { "pass some text with --prompt" };
        return Err(format!("the prompt is empty: {from}"));
    }
    let (placement, dir) = open_source(&args.model)?;
    let sampling = args.sampling.params(&dir)?;
    // Every file the run needs and the prompt's length are checked before the weights load.
    let tok = tokenizer_of(&dir, args.model.tokenizer.as_ref())?;
    let stop_tokens = if args.ignore_eos { vec![] } else { dir.stop_tokens(&tok).map_err(|e| e.to_string())? };
    let prompt = tok.encode(&prompt_text, true).map_err(|e| e.to_string())?;
    let (ctx, note) = limits::context(dir.config(), args.model.max_context);
    if let Some(note) = note {
        errln!("{note}");
    }
    limits::check_prompt(dir.config(), prompt.len(), ctx)?;
    let model = load(&args.model, &placement, &dir, ctx)?;
    let opts = GenerateOptions { max_tokens: args.max_tokens, sampling, seed: args.sampling.seed, stop_tokens };
    let mut stream = TokenStream::new(&tok);
    out!("{prompt_text}");
    let result = kiln_llm::generate(&model, &mut model.new_cache(), &prompt, &opts, |id| {
        let piece = stream.push(id)?;
        out!("{piece}");
        Ok(())
    });
    // The text ends its line, also when an error follows it on stderr.
    outln!();
    let (answer, stats) = result.map_err(|e| e.to_string())?;
    print_stats(&stats);
    let last_is_stop = answer.last().is_some_and(|t| opts.stop_tokens.contains(t));
    if let Some(m) = limits::cut_short(dir.config(), model.max_context(), answer.len(), args.max_tokens, last_is_stop) {
        errln!("{m}");
    }
    Ok(())
}

pub fn llm_bench(args: LlmBenchArgs) -> ExitCode {
    match run_llm_bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("kiln llm-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Random prompt ids (seeded), all inside the vocabulary.
pub(crate) fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
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

/// Greedy steps after a prompt of `context` tokens, as `kiln generate` decodes
/// (`kiln_llm::decode_greedy`): (prefill seconds, up to the first token read; decode seconds).
fn timed_run(model: &Model, context: usize, steps: usize) -> kiln_llm::Result<(f64, f64)> {
    let mut cache = model.new_cache();
    let prompt = random_ids(context, model.config.vocab_size, context as u64);
    let start = Instant::now();
    let logits = model.forward(&prompt, &mut cache, false)?;
    let mut first = None;
    kiln_llm::decode_greedy(model, &mut cache, &logits, steps + 1, &[], |_| {
        first.get_or_insert_with(Instant::now);
        Ok(())
    })?;
    let first = first.expect("decode_greedy hands over at least one token");
    Ok(((first - start).as_secs_f64(), first.elapsed().as_secs_f64()))
}

/// Each of `steps` greedy steps after a prompt of `context` tokens in a span of its own
/// (`Device::measure`), read before the next is recorded: (wall seconds of the steps, the GPU's
/// seconds from each step's first kernel to its last, gaps between them included; `None` without
/// GPU timestamps). Their difference is what the host adds between tokens when it waits for each.
fn span_run(model: &Model, context: usize, steps: usize) -> kiln_llm::Result<(f64, Option<f64>)> {
    let device = model.device();
    let mut cache = model.new_cache();
    let prompt = random_ids(context, model.config.vocab_size, context as u64);
    let logits = model.forward(&prompt, &mut cache, false)?;
    let mut next = logits.argmax(-1, false)?.to_vec::<i64>()?[0] as u32;
    let (start, mut gpu) = (Instant::now(), Some(0.0));
    for _ in 0..steps {
        let step = device.measure(|| {
            let logits = model.forward(&[next], &mut cache, false);
            logits
                .map_err(|e| kiln::Error::InvalidArgument { op: "decode step", msg: e.to_string() })?
                .argmax(-1, false)
        })?;
        next = step.value.to_vec::<i64>()?[0] as u32;
        gpu = gpu.filter(|_| step.gpu_timestamps).map(|g| g + step.seconds);
    }
    Ok((start.elapsed().as_secs_f64(), gpu))
}

/// On a GPU, untimed decode steps for [`WARM_SECS`] first: an idle GPU runs at low clocks and needs
/// about half a second of load to reach full speed (docs/PERFORMANCE.md, "GPU clocks"), and a short
/// model's timed steps (64 of a 1B model: 0.15 s) would otherwise be measured on the way up.
fn warm_clocks(model: &Model) -> kiln_llm::Result<()> {
    if !model.device().is_gpu() {
        return Ok(());
    }
    let start = Instant::now();
    let context = 64.min(model.max_context() / 2).max(1);
    while start.elapsed().as_secs_f64() < WARM_SECS {
        timed_run(model, context, 16.min(model.max_context() - context))?;
    }
    Ok(())
}

/// Seconds of untimed decode before each timed decode run on a GPU.
const WARM_SECS: f64 = 0.6;

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
    let (wall, span) = span_run(model, context, STEPS)?;
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
        "waited_step_us": wall * 1e6 / STEPS as f64,
        "waited_step_gpu_span_us": span.map(|s| s * 1e6 / STEPS as f64),
        "kernels": kernels.iter().map(|(k, n, us)| serde_json::json!({"kernel": k, "per_token": n, "us_per_token": us})).collect::<Vec<_>>(),
    })))
}

fn run_llm_bench(args: LlmBenchArgs) -> Result<(), String> {
    let (placement, dir) = open_source(&args.model)?;
    let mut plan = limits::bench_plan(
        dir.config(),
        args.prefill,
        args.contexts.clone(),
        args.decode_tokens,
        args.model.max_context,
    )?;
    if args.rows.is_some() && args.model.max_context.is_none() {
        // Room for the batched runs' warm-up and profiled steps past the timed ones, within the model's limit.
        plan.max_context = (plan.max_context + crate::batched::EXTRA_POSITIONS).min(limits::model_limit(dir.config()));
    }
    errln!(
        "runs: prefill of {} tokens, {} decode steps at context {:?}",
        plan.prefill,
        plan.decode_tokens,
        plan.contexts
    );
    let model = load(&args.model, &placement, &dir, plan.max_context)?;
    let err = |e: kiln_llm::LlmError| e.to_string();
    let device: &Device = model.device();
    // warm-up, 3 prefills, a decode run per context, the GPU's profile, and a run per row count.
    let row_counts = args.rows.clone().unwrap_or_default();
    let mut phases = Phases::new(4 + plan.contexts.len() as u64 + u64::from(device.is_gpu()) + row_counts.len() as u64);
    phases.start("warm-up");
    let warm = 64.min(model.max_context() / 2).max(1);
    timed_run(&model, warm, 4.min(model.max_context() - warm)).map_err(err)?;
    phases.start(&format!("prefill of {} tokens (untimed)", plan.prefill));
    timed_run(&model, plan.prefill, 0).map_err(err)?;
    model.placement().devices().iter().for_each(Device::reset_peak_memory);
    let mut prefill_best = f64::INFINITY;
    for run in 1..=2 {
        phases.start(&format!("prefill of {} tokens, timed run {run} of 2", plan.prefill));
        prefill_best = prefill_best.min(timed_run(&model, plan.prefill, 0).map_err(err)?.0);
    }
    let mut decode = Vec::new();
    for &ctx in &plan.contexts {
        phases.start(&format!("{} decode steps at context {ctx}", plan.decode_tokens));
        warm_clocks(&model).map_err(err)?;
        let (_, secs) = timed_run(&model, ctx, plan.decode_tokens).map_err(err)?;
        decode.push(serde_json::json!({
            "context": ctx,
            "steps": plan.decode_tokens,
            "secs": secs,
            "tokens_per_sec": plan.decode_tokens as f64 / secs,
        }));
        phases.println(&format!("decode at context {ctx}: {:.1} tokens/s", plan.decode_tokens as f64 / secs));
    }
    phases.println(&format!("prefill of {} tokens: {:.1} tokens/s", plan.prefill, plan.prefill as f64 / prefill_best));
    if device.is_gpu() {
        phases.start("per-kernel profile of a decode step");
    }
    let first = plan.contexts.first().copied().unwrap_or(plan.prefill);
    let profile = decode_profile(&model, first).map_err(err)?;
    let batched = if row_counts.is_empty() {
        None
    } else {
        Some(
            crate::batched::batched_decode(&model, &row_counts, first, plan.decode_tokens, |p| phases.start(p))
                .map_err(err)?,
        )
    };
    phases.finish();
    let c = dir.config();
    let report = serde_json::json!({
        "engine": "kiln",
        "device": model.placement().devices().iter().map(Device::name).collect::<Vec<_>>().join(","),
        "dtype": model.dtype().as_str(),
        "quantize": args.model.quantize.map(|q| q.name()),
        "layers": c.num_layers,
        "hidden": c.hidden_size,
        "vocab": c.vocab_size,
        "weight_bytes": model.weight_bytes(),
        "kv_bytes_per_position": c.kv_bytes_per_position(model.dtype()),
        "prefill": {"tokens": plan.prefill, "secs": prefill_best, "tokens_per_sec": plan.prefill as f64 / prefill_best},
        "decode": decode,
        "peak_gpu_bytes": model.placement().devices().iter().filter_map(|d| d.memory_stats()).map(|m| m.peak_bytes).reduce(|a, b| a + b),
        "decode_profile": profile,
        "batched_decode": batched,
    });
    outln!("{report:#}");
    Ok(())
}
