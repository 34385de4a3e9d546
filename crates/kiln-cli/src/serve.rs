//! `kiln serve`: loads a model as `kiln generate` does and serves it over an OpenAI-compatible HTTP
//! API (crates/kiln-serve).

use crate::generate::{open, tokenizer_of, ModelArgs};
use clap::Args;
use kiln_serve::scheduler::SchedulerOptions;
use kiln_serve::{Engine, ServeOptions};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on (127.0.0.1: this machine only; 0.0.0.0 opens it to the network).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Require `Authorization: Bearer KEY` on /v1/* (else 401).
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// Keys from a file or KILN_API_KEY, timeouts, limits, allowed hosts and origins.
    #[command(flatten)]
    http: kiln_serve::HttpArgs,
    /// Most sequences decoded together in one batch.
    #[arg(long, default_value_t = 32)]
    max_batch: usize,
    /// Most requests waiting for a place in the batch; past it requests get 429.
    #[arg(long, default_value_t = 64)]
    max_queue: usize,
    /// Most prompt tokens prefilled per step, over all sequences (prompts that arrive together
    /// share a step up to this budget; long prompts go in chunks between decode steps).
    #[arg(long, default_value_t = 512)]
    prefill_chunk: usize,
    /// KV cache positions of all sequences together (paged: blocks of --block-size); default
    /// max-batch x min(max-context, 2048).
    #[arg(long)]
    kv_positions: Option<usize>,
    /// Positions per KV block.
    #[arg(long, default_value_t = 16)]
    block_size: usize,
    /// Model id reported by /v1/models (default: the model's file or folder name).
    #[arg(long)]
    served_model_name: Option<String>,
    /// On a GPU, run synthetic bursts (1 to --max-batch requests) before listening, so that the
    /// kernels of every batch shape are compiled before the first clients wait on them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    warmup: bool,
    /// Seconds running answers may go on after SIGINT/SIGTERM.
    #[arg(long, default_value_t = 10.0, allow_hyphen_values = true, value_parser = parse_grace)]
    shutdown_grace: f64,
}

/// `--shutdown-grace`: seconds, at least 0 (a bad value gets clap's frame, as in src/generate.rs).
fn parse_grace(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err("must be a number of seconds >= 0".into()),
    }
}

pub fn serve(args: ServeArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("kiln serve: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: ServeArgs) -> Result<(), String> {
    // Bind first, so that a busy port fails in a moment rather than after loading and warming up
    // the model; the server then serves on this listener.
    let http = args.http.options()?;
    let listener = kiln_serve::bind(&args.host, args.port)?;
    let (src, model) = open(&args.model)?;
    let tokenizer = tokenizer_of(&src, args.model.tokenizer.as_ref())?;
    let stop_tokens = src.stop_tokens(&tokenizer).map_err(|e| e.to_string())?;
    let template = match src.chat_template() {
        Ok(t) => Some(t),
        Err(e) => {
            errln!("kiln serve: no chat template ({e}): /v1/chat/completions will answer 400");
            None
        }
    };
    let ctx = model.max_context();
    let positions = args.kv_positions.unwrap_or(args.max_batch.max(1) * ctx.min(2048)).max(ctx.min(args.block_size));
    let kv_blocks = positions.div_ceil(args.block_size.max(1));
    let model_name = args.served_model_name.clone().unwrap_or_else(|| {
        let p = &args.model.model;
        p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
    });
    errln!(
        "kiln serve: batch up to {} sequences, queue {}, KV pool {} blocks of {} positions, context {ctx}",
        args.max_batch,
        args.max_queue,
        kv_blocks,
        args.block_size
    );
    kiln_serve::serve_on(
        listener,
        Engine { model, tokenizer, template, stop_tokens, model_name },
        ServeOptions {
            host: args.host,
            port: args.port,
            api_key: args.api_key,
            scheduler: SchedulerOptions {
                max_batch: args.max_batch,
                max_queue: args.max_queue,
                prefill_chunk: args.prefill_chunk,
                block_size: args.block_size,
                kv_blocks,
                warmup: args.warmup,
            },
            shutdown_grace: Duration::from_secs_f64(args.shutdown_grace),
        },
        http,
    )
}
