//! `kiln chat` and `kiln llm-bench` on the tiny Llama fixture (CPU, greedy): chat's answers are the
//! library's greedy answers to the conversation so far (rendered with the model's chat template),
//! `/reset` starts over, a system message counts; llm-bench's JSON describes the model and the runs
//! it was asked for, and runs that do not fit the context are refused before loading. (A chat that
//! fills the context drops its oldest turns: `cli.rs` tests that; the line editor, Ctrl-C and the
//! commands on a terminal: `chat_tty.rs`.)

use kiln::{DType, Device};
use kiln_llm::{generate, GenerateOptions, LoadOptions, Message, ModelDir, SamplingParams, TokenStream};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Output, Stdio};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kiln-llm/tests/fixtures/llama");

/// Runs `kiln args` with `input` on its stdin.
fn kiln(args: &[&str], input: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env_remove("KILN_DEVICE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kiln");
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The greedy answer of the fixture to `messages` (at most `max_tokens`), without its stop token,
/// computed with kiln-llm directly: (the text as the conversation keeps it, `Tokenizer::decode`; the
/// text `kiln chat` prints, through `TokenStream`, which holds back a trailing incomplete UTF-8
/// sequence, as random-weight fixtures end with byte tokens).
fn answer(messages: &[Message], max_tokens: usize) -> (String, String) {
    let dir = ModelDir::open(FIXTURE).unwrap();
    let model = dir.load(&Device::cpu(), LoadOptions { dtype: DType::F32, max_context: 4096, progress: None }).unwrap();
    let tok = dir.tokenizer().unwrap();
    let prompt = dir.chat_template().unwrap().render(messages, true).unwrap();
    let ids = tok.encode(&prompt, false).unwrap();
    let stops = dir.stop_tokens(&tok).unwrap();
    let opts = GenerateOptions { max_tokens, sampling: SamplingParams::default(), seed: 0, stop_tokens: stops.clone() };
    let (out, _) = generate(&model, &mut model.new_cache(), &ids, &opts, |_| Ok(())).unwrap();
    let reply: Vec<u32> = out.into_iter().filter(|t| !stops.contains(t)).collect();
    let mut stream = TokenStream::new(&tok);
    let printed: String = reply.iter().map(|&id| stream.push(id).unwrap()).collect();
    (tok.decode(&reply, true).unwrap(), printed)
}

const CHAT: [&str; 11] =
    ["chat", "--model", FIXTURE, "--device", "cpu", "--max-tokens", "8", "--temperature", "0", "--repeat-penalty", "1"];

#[test]
fn chat_answers_are_the_greedy_answers_to_the_conversation() {
    let o = kiln(&CHAT, "Hello kiln\nWhat next?\n/exit\nnot read\n");
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let (first, first_out) = answer(&[Message::new("user", "Hello kiln")], 8);
    let (_, second_out) = answer(
        &[Message::new("user", "Hello kiln"), Message::new("assistant", &first), Message::new("user", "What next?")],
        8,
    );
    assert!(!first_out.is_empty() || !second_out.is_empty(), "the fixture should answer something");
    assert_eq!(text(&o.stdout), format!("{first_out}\n{second_out}\n"));
    // Stats per answer on stderr.
    assert_eq!(text(&o.stderr).matches("tokens/s (decode)").count(), 2, "{}", text(&o.stderr));
}

#[test]
fn chat_reset_starts_over_and_system_messages_count() {
    let o = kiln(&CHAT, "Hello kiln\n/reset\n\nHello kiln\n");
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let (_, a) = answer(&[Message::new("user", "Hello kiln")], 8);
    assert_eq!(text(&o.stdout), format!("{a}\n{a}\n"), "after /reset the same question gets the same answer");
    let mut args = CHAT.to_vec();
    args.extend(["--system", "You are a potter."]);
    let o = kiln(&args, "Hello kiln\n");
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let (_, a) = answer(&[Message::new("system", "You are a potter."), Message::new("user", "Hello kiln")], 8);
    assert_eq!(text(&o.stdout), format!("{a}\n"));
}

#[test]
fn llm_bench_reports_the_model_and_the_runs_asked_for() {
    let args = [
        "llm-bench",
        "--model",
        FIXTURE,
        "--device",
        "cpu",
        "--prefill",
        "16",
        "--contexts",
        "8,24",
        "--decode-tokens",
        "3",
        "--rows",
        "1,3",
    ];
    let o = kiln(&args, "");
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("llm-bench prints JSON");
    // Every phase is announced as it starts (one line each when stderr is not a terminal).
    let err = text(&o.stderr);
    for phase in [
        "warm-up ...",
        "prefill of 16 tokens (untimed) ...",
        "prefill of 16 tokens, timed run 1 of 2 ...",
        "prefill of 16 tokens, timed run 2 of 2 ...",
        "3 decode steps at context 8 ...",
        "3 decode steps at context 24 ...",
        "3 decode steps of a batch of 1 at context 8 ...",
        "3 decode steps of a batch of 3 at context 8 ...",
    ] {
        assert!(err.lines().any(|l| l == phase), "no line {phase:?} in {err}");
    }
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{FIXTURE}/config.json")).unwrap()).unwrap();
    assert_eq!(v["engine"], "kiln");
    assert_eq!(v["dtype"], "f32");
    assert_eq!(v["layers"], config["num_hidden_layers"]);
    assert_eq!(v["hidden"], config["hidden_size"]);
    assert_eq!(v["vocab"], config["vocab_size"]);
    assert!(v["weight_bytes"].as_u64().unwrap() > 0);
    assert_eq!(v["prefill"]["tokens"], 16);
    let secs = v["prefill"]["secs"].as_f64().unwrap();
    assert!(secs > 0.0 && (v["prefill"]["tokens_per_sec"].as_f64().unwrap() - 16.0 / secs).abs() < 1e-6 * 16.0 / secs);
    let decode = v["decode"].as_array().unwrap();
    assert_eq!(decode.iter().map(|d| d["context"].as_u64().unwrap()).collect::<Vec<_>>(), vec![8, 24]);
    for d in decode {
        assert_eq!(d["steps"], 3);
        let s = d["secs"].as_f64().unwrap();
        assert!(s > 0.0 && (d["tokens_per_sec"].as_f64().unwrap() - 3.0 / s).abs() < 1e-6 * 3.0 / s, "{d}");
    }
    assert!(v["decode_profile"].is_null(), "no GPU profile on the CPU");
    // Batched steps (`--rows`) at the first context, each count's step time against one row's.
    let runs = v["batched_decode"]["runs"].as_array().unwrap();
    assert_eq!(runs.iter().map(|r| r["rows"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 3]);
    let one = runs[0]["step_ms"].as_f64().unwrap();
    for r in runs {
        assert_eq!((r["context"].as_u64(), r["steps"].as_u64()), (Some(8), Some(3)), "{r}");
        let (rows, ms) = (r["rows"].as_f64().unwrap(), r["step_ms"].as_f64().unwrap());
        assert!(ms > 0.0 && (r["tokens_per_sec"].as_f64().unwrap() - rows * 1e3 / ms).abs() < 1e-6 * rows * 1e3 / ms);
        assert!((r["x_one_row"].as_f64().unwrap() - ms / one).abs() < 1e-9, "{r}");
    }
    assert!(v["batched_decode"]["profile"].is_null(), "no GPU profile on the CPU");
    // Runs that do not fit the context are refused before the weights load, naming the numbers.
    let small = ["llm-bench", "--model", FIXTURE, "--device", "cpu", "--max-context", "32", "--prefill", "16"];
    let refused = |extra: &[&str], want: &str| {
        let o = kiln(&[&small[..], extra].concat(), "");
        assert!(!o.status.success());
        let err = text(&o.stderr);
        assert!(err.contains(want), "{extra:?}: {err}");
        assert!(!err.contains("loaded in"), "refused after loading: {err}");
    };
    // Decoding 30 tokens after a 30-token prompt needs 60 positions.
    refused(&["--contexts", "30", "--decode-tokens", "30"], "the runs need 60 positions, the context is 32");
    // The default 32 decode steps leave no room for a prompt in 32 positions.
    refused(&[], "--decode-tokens 32 leaves no room for a prompt in a context of 32");
    // What fits runs: 4 steps at context 28 is exactly 32 positions.
    let o = kiln(&[&small[..], &["--contexts", "28", "--decode-tokens", "4"]].concat(), "");
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).expect("llm-bench prints JSON");
    assert_eq!(v["decode"][0]["context"], 28);
    assert_eq!(v["decode"][0]["steps"], 4);
}
