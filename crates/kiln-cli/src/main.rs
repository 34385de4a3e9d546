//! `kiln`: the command line tool of the kiln tensor library.
//!
//! - `kiln info [--json]`: version, compiled-in backends, the devices found and what they offer.
//! - `kiln bench [--device cpu|gpu|auto] [--json] [--filter SUBSTR] [--quick] [--runs N]`: times a
//!   fixed set of ops and reports throughput against the machine's limits.
//! - `kiln generate`, `kiln chat`, `kiln llm-bench`: Llama-family models (src/generate.rs).
//! - `kiln serve`: an OpenAI-compatible HTTP server (src/serve.rs, crates/kiln-serve).

mod bench;
mod generate;
mod info;
mod serve;
mod sysinfo;

use clap::{Args, Parser, Subcommand};
use kiln::DeviceRequest;
use std::io::IsTerminal;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "kiln", version, about = "kiln: device info, benchmarks and LLM inference")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show kiln's version, the backends compiled in and the devices found.
    Info {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Time a set of ops on a device (element-wise, reductions, norms, matmul, attention).
    Bench(BenchArgs),
    /// Generate text from a prompt with a Hugging Face Llama-family model (tokens streamed).
    Generate(generate::GenerateArgs),
    /// Chat with an instruction-tuned model (its chat template), one message per line.
    Chat(generate::ChatArgs),
    /// Time prefill and decode of a model at given context lengths (JSON on stdout).
    LlmBench(generate::LlmBenchArgs),
    /// Serve a model over an OpenAI-compatible HTTP API (continuous batching).
    Serve(serve::ServeArgs),
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Device to run on: cpu, gpu, gpu:N or auto.
    #[arg(long, default_value = "auto", value_parser = parse_device)]
    device: DeviceRequest,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// Only run benchmarks whose name contains this substring (or one of its comma-separated parts).
    #[arg(long, value_name = "SUBSTR")]
    filter: Option<String>,
    /// Small shapes and three runs each (a smoke test, e.g. for CI).
    #[arg(long)]
    quick: bool,
    /// Exact number of timed runs per benchmark (default: 5 to 50 within a 1.5 s budget).
    #[arg(long, value_name = "N")]
    runs: Option<usize>,
}

fn parse_device(s: &str) -> Result<DeviceRequest, String> {
    DeviceRequest::parse(s).ok_or_else(|| format!("unknown device '{s}': expected cpu, gpu, gpu:N or auto"))
}

fn bench(args: BenchArgs) -> ExitCode {
    let device = match args.device.open() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kiln bench: cannot open device: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cfg = bench::BenchConfig { quick: args.quick, filter: args.filter.clone(), runs: args.runs };
    let show_progress = std::io::stderr().is_terminal();
    let report = bench::run(&device, &cfg, |name| {
        if show_progress {
            eprint!("\r\x1b[2Krunning {name} ...");
        }
    });
    if show_progress {
        eprint!("\r\x1b[2K");
    }
    if report.rows.is_empty() {
        eprintln!("kiln bench: no benchmark name contains '{}'", args.filter.unwrap_or_default());
        return ExitCode::FAILURE;
    }
    let cpu = sysinfo::CpuInfo::detect();
    if args.json {
        bench::print_json(&report, &cpu);
    } else {
        bench::print_table(&report, &cpu);
    }
    // KILN_PROFILE=1 times every GPU kernel (serialising the GPU, so the table above is slower).
    let profile = device.profile();
    if !profile.is_empty() {
        eprintln!("\nper-kernel GPU time (KILN_PROFILE=1):\n{}", kiln::gpu::format_report(&profile));
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Info { json } => {
            info::run(json);
            ExitCode::SUCCESS
        }
        Command::Bench(args) => bench(args),
        Command::Generate(args) => generate::generate(args),
        Command::Chat(args) => generate::chat(args),
        Command::LlmBench(args) => generate::llm_bench(args),
        Command::Serve(args) => serve::serve(args),
    }
}
