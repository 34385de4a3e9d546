//! `kiln`: the command line tool of the kiln tensor library.
//!
//! - `kiln info [--json]`: version, compiled-in backends, the devices found and what they offer.
//! - `kiln bench [--device cpu|gpu|gpu:N|auto] [--json] [--filter SUBSTR] [--quick] [--runs N]`: times
//!   a fixed set of ops and reports throughput against the machine's limits.
//! - `kiln generate`, `kiln llm-bench`: Llama-family models (src/generate.rs); `kiln chat` (src/chat.rs).
//!
//! Every command that takes `--device` falls back to `KILN_DEVICE`, then `auto` ([`open_device`]);
//! the model commands also take `--devices` and `--split`, one model over several (src/devices.rs).
//! - `kiln serve`: an OpenAI-compatible HTTP server (src/serve.rs, crates/kiln-serve).

#[macro_use]
mod out;
mod batched;
mod bench;
mod chat;
mod devices;
mod generate;
mod info;
mod limits;
mod progress;
mod serve;
mod sysinfo;

use clap::{Args, Parser, Subcommand};
use kiln::{Device, DeviceRequest};
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
    /// Chat with an instruction-tuned model (its chat template); /help lists the chat's commands.
    Chat(chat::ChatArgs),
    /// Time prefill and decode of a model at given context lengths (JSON on stdout).
    LlmBench(generate::LlmBenchArgs),
    /// Serve a model over an OpenAI-compatible HTTP API (continuous batching).
    Serve(serve::ServeArgs),
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Device to run on: cpu, gpu, gpu:N or auto [default: $KILN_DEVICE, else auto].
    #[arg(long, value_parser = parse_device)]
    device: Option<DeviceRequest>,
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
    #[arg(long, value_name = "N", allow_hyphen_values = true, value_parser = generate::parse_positive)]
    runs: Option<usize>,
}

/// `--device`'s parser (kiln's one parser of device names, also behind `KILN_DEVICE`).
fn parse_device(s: &str) -> Result<DeviceRequest, String> {
    s.parse::<DeviceRequest>().map_err(|e| e.to_string())
}

/// The device a command runs on: `--device` if given, else `KILN_DEVICE`, else `auto`.
pub fn device_request(flag: Option<DeviceRequest>) -> Result<DeviceRequest, String> {
    match flag {
        Some(r) => Ok(r),
        None => DeviceRequest::from_env().map_err(|e| e.to_string()),
    }
}

/// Opens [`device_request`]'s device.
pub fn open_device(flag: Option<DeviceRequest>) -> Result<Device, String> {
    let req = device_request(flag)?;
    req.open().map_err(|e| format!("cannot open device {req}: {e}"))
}

/// Mesa's Vulkan drivers print `error: XDG_RUNTIME_DIR is invalid or not set in the environment`
/// on every adapter probe when the variable is unset or not a folder (a headless box, `sudo`, a
/// container). Then point it at a private empty directory of this process before anything probes a GPU, so the
/// noise never reaches the user; the directory is returned to be removed at exit.
fn quiet_mesa_runtime_dir() -> Option<std::path::PathBuf> {
    let set = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir());
    if !cfg!(target_os = "linux") || set {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("kiln-runtime-{}", std::process::id()));
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(&dir).ok()?;
    // Still single-threaded: nothing reads the environment concurrently.
    std::env::set_var("XDG_RUNTIME_DIR", &dir);
    Some(dir)
}

fn bench(args: BenchArgs) -> ExitCode {
    let device = match open_device(args.device) {
        Ok(d) => d,
        Err(e) => {
            errln!("kiln bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let cfg = bench::BenchConfig { quick: args.quick, filter: args.filter.clone(), runs: args.runs };
    // On a terminal one line rewritten in place; piped (CI logs, `| tee`), one plain line per case.
    let terminal = std::io::stderr().is_terminal();
    let report = bench::run(&device, &cfg, |name| {
        if terminal {
            errs!("\r\x1b[2Krunning {name} ...");
        } else {
            errln!("running {name} ...");
        }
    });
    if terminal {
        errs!("\r\x1b[2K");
    }
    if report.rows.is_empty() {
        errln!("kiln bench: no benchmark name contains '{}'", args.filter.unwrap_or_default());
        return ExitCode::FAILURE;
    }
    let cpu = sysinfo::CpuInfo::detect();
    if args.json {
        bench::report::print_json(&report, &cpu);
    } else {
        bench::report::print_table(&report, &cpu);
    }
    // KILN_PROFILE=1 times every GPU kernel (serialising the GPU, so the table above is slower).
    let profile = device.profile();
    if !profile.is_empty() {
        errln!("\nper-kernel GPU time (KILN_PROFILE=1):\n{}", kiln::gpu::format_report(&profile));
    }
    ExitCode::SUCCESS
}

/// The folder of [`quiet_mesa_runtime_dir`], removed when the process ends.
static RUNTIME_DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

fn remove_runtime_dir() {
    if let Some(dir) = RUNTIME_DIR.get() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Ends the process now with `code` (a closed stdout, see src/out.rs), cleaning up as `main` does.
pub fn exit(code: i32) -> ! {
    remove_runtime_dir();
    std::process::exit(code)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(dir) = quiet_mesa_runtime_dir() {
        let _ = RUNTIME_DIR.set(dir);
    }
    let code = run(cli);
    remove_runtime_dir();
    code
}

fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Info { json } => {
            info::run(json);
            ExitCode::SUCCESS
        }
        Command::Bench(args) => bench(args),
        Command::Generate(args) => generate::generate(args),
        Command::Chat(args) => chat::chat(args),
        Command::LlmBench(args) => generate::llm_bench(args),
        Command::Serve(args) => serve::serve(args),
    }
}
