//! Smoke tests of the `kiln` binary: it runs, its JSON parses, bad input fails with a message.

use serde_json::Value;
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).env_remove("KILN_DEVICE").output().expect("run kiln")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn info_prints_version_backends_and_cpu() {
    let o = kiln(&["info"]);
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
    assert!(out.contains("cpu") && out.contains("gpu"), "{out}");
    assert!(out.contains("rayon threads"), "{out}");
}

#[test]
fn info_json_parses() {
    let o = kiln(&["info", "--json"]);
    assert!(o.status.success());
    let v: Value = serde_json::from_str(&stdout(&o)).expect("info --json is JSON");
    assert_eq!(v["kiln_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["backends"]["cpu"], "built");
    let cpu = &v["devices"][0]["cpu"];
    assert!(cpu["logical_cores"].as_u64().unwrap() >= 1);
    assert!(cpu["rayon_threads"].as_u64().unwrap() >= 1);
    assert!(cpu["simd"].is_array());
}

#[test]
fn bench_quick_add_json() {
    let o = kiln(&["bench", "--quick", "--filter", "add", "--json", "--device", "cpu"]);
    assert!(o.status.success(), "stderr: {}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("bench --json is JSON");
    assert_eq!(v["device"], "cpu");
    let rows = v["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        assert!(row["name"].as_str().unwrap().contains("add"));
        // Either it ran (a positive median) or it says why not.
        match row["status"].as_str().unwrap() {
            "ok" => assert!(row["median_s"].as_f64().unwrap() > 0.0 && row["gbps"].as_f64().unwrap() > 0.0),
            "error" => assert!(!row["error"].as_str().unwrap().is_empty()),
            s => panic!("unknown status {s}"),
        }
    }
    assert!(v["copy_bandwidth"]["gbps"].as_f64().unwrap() > 0.0);
}

#[test]
fn bench_table_lists_rows() {
    let o = kiln(&["bench", "--quick", "--filter", "sum_all", "--runs", "1"]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("sum_all") && out.contains("median"), "{out}");
}

#[test]
fn bad_flag_fails_with_message() {
    let o = kiln(&["bench", "--no-such-flag"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--no-such-flag"));
}

#[test]
fn bad_device_and_empty_filter_fail() {
    let o = kiln(&["bench", "--device", "tpu"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("tpu"));
    let o = kiln(&["bench", "--quick", "--filter", "no_such_bench"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no_such_bench"));
}

#[test]
fn gpu_bench_runs_or_fails_cleanly() {
    let o = kiln(&["bench", "--quick", "--device", "gpu", "--filter", "add", "--json"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        assert!(o.status.success(), "{stderr}");
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("bench --json prints JSON");
        assert!(v.to_string().contains("add"), "{v}");
    } else if !o.status.success() {
        assert!(stderr.contains("gpu"), "{stderr}");
    }
}

#[test]
fn info_lists_gpu_adapters_when_present() {
    let o = kiln(&["info", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices[0]["kind"], "cpu");
    if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") {
        let gpu = devices.iter().find(|d| d["kind"] == "gpu").expect("a GPU adapter is listed");
        assert!(gpu["max_storage_binding"].as_u64().unwrap() > 0);
        assert!(gpu["backend"].as_str().is_some());
    }
}

/// `kiln generate --model FILE.gguf` (greedy, f32, CPU) prints what the Hugging Face folder it was
/// converted from prints, with its own tokenizer or `--tokenizer tokenizer.json`; a missing model
/// fails with a message naming it.
#[test]
fn generate_from_gguf_matches_the_safetensors_folder() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../kiln-llm/tests/fixtures/llama");
    let gguf = format!("{fixtures}/model-f32.gguf");
    let tok = format!("{fixtures}/tokenizer.json");
    let common = [
        "--device",
        "cpu",
        "--prompt",
        "The kiln fires the clay pots",
        "--max-tokens",
        "12",
        "--ignore-eos",
        "--temperature",
        "0",
        "--repeat-penalty",
        "1",
    ];
    let run = |model: &[&str]| {
        let mut args = vec!["generate"];
        args.extend_from_slice(model);
        args.extend_from_slice(&common);
        let o = kiln(&args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        stdout(&o)
    };
    let want = run(&["--model", fixtures]);
    // The text of transformers' greedy continuation (its token ids in expected.json).
    let e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{fixtures}/expected.json")).unwrap()).unwrap();
    assert_eq!(e["prompt"], "The kiln fires the clay pots");
    let ids =
        |key: &str| -> Vec<u32> { e[key].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect() };
    let all = [ids("prompt_ids"), ids("generated_ids")].concat();
    assert_eq!(all.len(), 9 + 12);
    let tokenizer = kiln_llm::Tokenizer::from_file(std::path::Path::new(&tok)).unwrap();
    let text = tokenizer.decode(&all, true).unwrap();
    assert!(text.starts_with("The kiln fires the clay pots"), "{text:?}");
    // The CLI streams text: an incomplete UTF-8 sequence left at the end is not printed (decoding
    // the ids at once shows it as U+FFFD).
    assert_eq!(want, format!("{}\n", text.trim_end_matches('\u{fffd}')), "transformers' ids {all:?}");
    assert_eq!(run(&["--model", &gguf]), want);
    assert_eq!(run(&["--model", &gguf, "--tokenizer", &tok]), want);
    let o = kiln(&["generate", "--model", &format!("{fixtures}/tokenizer.json.gguf"), "--prompt", "x"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("tokenizer.json.gguf"));
}

// What a new user hits (issue 20): the device from KILN_DEVICE, messages as text, files and lengths
// checked before the weights load, a chat that outlives its context, defaults that fit the model.

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kiln-llm/tests/fixtures/llama");

/// `kiln args` with environment variables set (KILN_DEVICE unset unless given) and `stdin` fed in.
fn kiln_with(args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args).env_remove("KILN_DEVICE").envs(env.iter().copied());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run kiln");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    child.wait_with_output().expect("kiln runs to the end")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn gpu_required() -> bool {
    std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

#[test]
fn kiln_device_sets_the_default_device_of_every_command() {
    let bench = ["bench", "--quick", "--filter", "add", "--runs", "1", "--json"];
    let o = kiln_with(&bench, &[("KILN_DEVICE", "cpu")], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["device"], "cpu");
    // A bad value is an error that reads as text, not Rust's debug output.
    let o = kiln_with(&bench, &[("KILN_DEVICE", "tpu")], None);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("KILN_DEVICE=tpu") && e.contains("gpu:N") && !e.contains("BadEnv"), "{e}");
    let gen = ["generate", "--model", FIXTURE, "--prompt", "hi", "--max-tokens", "2"];
    let o = kiln_with(&gen, &[("KILN_DEVICE", "tpu")], None);
    assert!(!o.status.success() && stderr(&o).contains("KILN_DEVICE=tpu"), "{}", stderr(&o));
    // --device wins over the variable.
    let mut with_flag = bench.to_vec();
    with_flag.extend(["--device", "cpu"]);
    assert!(kiln_with(&with_flag, &[("KILN_DEVICE", "tpu")], None).status.success());
    // `kiln info` says what the variable holds, as the user wrote it.
    let o = kiln_with(&["info"], &[("KILN_DEVICE", "gpu:7")], None);
    let out = stdout(&o);
    assert!(out.contains("KILN_DEVICE=gpu:7") || out.contains("gpu:7"), "{out}");
    assert!(!out.to_lowercase().contains("gpunth"), "{out}");
    let o = kiln_with(&["info"], &[("KILN_DEVICE", "cpu")], None);
    assert!(stdout(&o).contains("default device: cpu (KILN_DEVICE=cpu)"), "{}", stdout(&o));
    if gpu_required() {
        let o = kiln_with(&bench, &[("KILN_DEVICE", "gpu")], None);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["device"].as_str().unwrap().starts_with("gpu:"), "{v}");
        let o = kiln_with(&gen, &[("KILN_DEVICE", "gpu")], None);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains(" on gpu:"), "{}", stderr(&o));
    }
}

#[test]
fn generate_rejects_what_cannot_work_with_a_message() {
    let run = |extra: &[&str]| {
        let mut args = vec!["generate", "--model", FIXTURE, "--device", "cpu"];
        args.extend_from_slice(extra);
        let o = kiln(&args);
        assert!(!o.status.success(), "{extra:?} succeeded");
        let e = stderr(&o);
        assert!(!e.contains("panicked") && !e.contains("loaded in"), "{extra:?}: {e}");
        e
    };
    let e = run(&["--prompt", "hi", "--max-tokens", "0"]);
    assert!(e.contains("--max-tokens") && e.contains("at least 1"), "{e}");
    let e = run(&["--prompt", "hi", "--max-context", "0"]);
    assert!(e.contains("--max-context") && e.contains("at least 1"), "{e}");
    let e = run(&["--prompt", ""]);
    assert!(e.contains("prompt is empty"), "{e}");
    // A prompt longer than the model allows: no flag helps, and the message does not name one.
    let long = "word ".repeat(200);
    let e = run(&["--prompt", &long]);
    assert!(e.contains("max_position_embeddings") && e.contains("shorten") && !e.contains("--max-context"), "{e}");
    // Longer than the context asked for: raising --max-context helps.
    let e = run(&["--prompt", &"word ".repeat(20), "--max-context", "16"]);
    assert!(e.contains("raise --max-context") && e.contains("128"), "{e}");
    // A weights file given for the model folder.
    let file = format!("{FIXTURE}/model.safetensors");
    let o = kiln(&["generate", "--model", &file, "--device", "cpu", "--prompt", "hi"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("is a file, not a model folder") && e.contains("config.json"), "{e}");
}

#[test]
fn generate_says_when_the_context_cuts_it_short() {
    let args = ["generate", "--model", FIXTURE, "--device", "cpu", "--prompt", "hi", "--ignore-eos"];
    let run = |extra: &[&str]| kiln(&[&args[..], extra].concat());
    let o = run(&["--max-tokens", "500"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("stopped after") && e.contains("--max-tokens 500") && e.contains("is full"), "{e}");
    // --max-context past the model's own limit is clamped with a note.
    let o = run(&["--max-context", "1000", "--max-tokens", "4"]);
    let e = stderr(&o);
    assert!(o.status.success() && e.contains("--max-context 1000") && e.contains("using 128"), "{e}");
    assert!(!e.contains("stopped after"), "{e}");
}

/// A copy of the fixture model without some files, in a fresh folder.
fn partial_fixture(name: &str, skip: &[&str], edit: impl Fn(&str, Vec<u8>) -> Vec<u8>) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        if !skip.contains(&f) {
            let bytes = std::fs::read(format!("{FIXTURE}/{f}")).unwrap();
            std::fs::write(dir.join(f), edit(f, bytes)).unwrap();
        }
    }
    dir
}

#[test]
fn missing_files_fail_before_the_weights_load() {
    let dir = partial_fixture("no-tokenizer", &["tokenizer.json"], |_, b| b);
    let o = kiln(&["generate", "--model", dir.to_str().unwrap(), "--device", "cpu", "--prompt", "hi"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("tokenizer.json"), "{e}");
    assert!(!e.contains("loaded in") && !e.contains("memory estimate"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // A base model without a chat template: `kiln chat` says so before loading.
    let dir = partial_fixture("no-template", &[], |f, b| {
        if f == "tokenizer_config.json" {
            br#"{"bos_token": "<s>", "eos_token": "</s>"}"#.to_vec()
        } else {
            b
        }
    });
    let o = kiln_with(&["chat", "--model", dir.to_str().unwrap(), "--device", "cpu"], &[], Some("hi\n"));
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("chat_template"), "{e}");
    assert!(!e.contains("loaded in"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn chat_keeps_the_session_when_the_context_fills() {
    let lines = "hello there\nhow are you today\nwhat is new with the kiln\ntell me more about pots\n";
    let args = [
        "chat",
        "--model",
        FIXTURE,
        "--device",
        "cpu",
        "--system",
        "be brief",
        "--max-context",
        "64",
        "--max-tokens",
        "8",
    ];
    let o = kiln_with(&args, &[], Some(lines));
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    // Every message was answered (one stats line each), and the oldest turns made room.
    assert_eq!(e.matches("prompt: ").count(), 4, "{e}");
    assert!(e.contains("dropped the") && e.contains("oldest messages"), "{e}");
    // A message that cannot fit even alone is refused, and the chat goes on.
    let long = format!("{}\nhi\n", "word ".repeat(60));
    let o = kiln_with(&args, &[], Some(&long));
    let e = stderr(&o);
    assert!(o.status.success(), "{e}");
    assert!(e.contains("does not fit"), "{e}");
    assert_eq!(e.matches("prompt: ").count(), 1, "{e}");
}

#[test]
fn llm_bench_defaults_fit_the_model() {
    let o = kiln(&["llm-bench", "--model", FIXTURE, "--device", "cpu", "--decode-tokens", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("llm-bench prints JSON");
    assert_eq!(v["prefill"]["tokens"], 128);
    let contexts: Vec<u64> = v["decode"].as_array().unwrap().iter().map(|d| d["context"].as_u64().unwrap()).collect();
    assert_eq!(contexts, [124]);
    // Flags that cannot fit: the message says which flags to change.
    let o = kiln(&["llm-bench", "--model", FIXTURE, "--device", "cpu", "--contexts", "4096"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("--contexts") && e.contains("128"), "{e}");
}

#[test]
fn piped_bench_prints_progress_lines() {
    let o = kiln(&["bench", "--quick", "--filter", "sum_all", "--runs", "1", "--device", "cpu"]);
    assert!(o.status.success());
    let e = stderr(&o);
    assert!(e.lines().any(|l| l == "running sum_all ..."), "{e:?}");
    assert!(!e.contains('\r') && !e.contains('\x1b'), "{e:?}");
}

#[test]
fn gpu_bench_title_names_the_gpu() {
    let o = kiln(&["bench", "--quick", "--device", "gpu", "--filter", "add", "--runs", "1"]);
    if !o.status.success() {
        assert!(!gpu_required(), "{}", stderr(&o));
        return;
    }
    let info: Value = serde_json::from_slice(&kiln(&["info", "--json"]).stdout).unwrap();
    let adapters: Vec<String> =
        info["devices"].as_array().unwrap().iter().filter_map(|d| d["adapter"].as_str().map(str::to_string)).collect();
    let out = stdout(&o);
    let title = out.lines().next().unwrap();
    assert!(adapters.iter().any(|a| title.contains(a.as_str())), "{title} names none of {adapters:?}");
}

#[test]
fn no_mesa_runtime_dir_noise() {
    let o = Command::new(env!("CARGO_BIN_EXE_kiln")).arg("info").env_remove("XDG_RUNTIME_DIR").output().unwrap();
    assert!(o.status.success());
    let e = stderr(&o);
    assert!(!e.contains("XDG_RUNTIME_DIR"), "{e}");
}

// What a new user and a script meet first (issue 38): a closed pipe, negative numbers, sampling
// defaults, model paths, files that belong to another model, `--prompt -`, a busy port.

/// `kiln args` with stdout a pipe whose reader is already gone, as after `| head -n 1`.
fn kiln_closed_stdout(args: &[&str]) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(args).env_remove("KILN_DEVICE").stdout(writer).stderr(std::process::Stdio::piped());
    cmd.output().unwrap()
}

#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let gen = ["generate", "--model", FIXTURE, "--device", "cpu", "--prompt", "hi", "--max-tokens", "4"];
    for args in [&["info"][..], &["info", "--json"], &gen, &["bench", "--quick", "--filter", "sum_all", "--runs", "1"]]
    {
        let o = kiln_closed_stdout(args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {e}");
        assert!(!e.contains("panicked") && !e.contains("Broken pipe"), "{args:?}: {e}");
    }
}

/// A closed stderr (`2>&-`, a reader gone): diagnostics are dropped, the command is not ended by
/// a panic (status 101). A missing model is still status 1; a generation still succeeds.
#[test]
fn a_closed_stderr_does_not_panic() {
    let gen = ["generate", "--model", FIXTURE, "--device", "cpu", "--prompt", "hi", "--max-tokens", "4"];
    let missing = ["generate", "--model", "/nonexistent/model", "--device", "cpu", "--prompt", "hi"];
    for (args, status) in [(&gen[..], 0), (&missing[..], 1)] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
        cmd.args(args).env_remove("KILN_DEVICE").stdout(std::process::Stdio::piped()).stderr(writer);
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(status), "{args:?}");
    }
}

#[test]
fn bad_values_get_one_exit_status_and_one_frame() {
    let gen = ["generate", "--model", FIXTURE, "--device", "cpu", "--prompt", "hi"];
    for (extra, flag, why) in [
        (&["--temperature", "-1"][..], "--temperature", "must be >= 0"),
        (&["--temperature", "hot"], "--temperature", "must be a number"),
        (&["--top-p", "-0.5"], "--top-p", "must be in (0, 1]"),
        (&["--min-p", "1.5"], "--min-p", "must be in [0, 1]"),
        (&["--top-k", "-3"], "--top-k", "whole number"),
        (&["--repeat-penalty", "-1.1"], "--repeat-penalty", "must be > 0"),
        (&["--repeat-penalty", "0"], "--repeat-penalty", "must be > 0"),
        (&["--seed", "-7"], "--seed", "whole number"),
        (&["--max-tokens", "-5"], "--max-tokens", "at least 1"),
        (&["--max-tokens", "0"], "--max-tokens", "at least 1"),
        (&["--max-context", "-1"], "--max-context", "at least 1"),
    ] {
        let o = kiln(&[&gen[..], extra].concat());
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {e}");
        assert!(e.starts_with(&format!("error: invalid value '{}' for '{flag}", extra[1])), "{extra:?}: {e}");
        assert!(e.contains(why) && !e.contains("unexpected argument"), "{extra:?}: {e}");
    }
    let o = kiln(&["bench", "--runs", "-2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: invalid value '-2' for '--runs <N>': must be a whole number"),
        "{}",
        stderr(&o)
    );
    let o = kiln(&["serve", "--model", FIXTURE, "--shutdown-grace", "-1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).starts_with("error: invalid value '-1' for '--shutdown-grace"), "{}", stderr(&o));
}

/// `kiln generate` of the fixture (or `model`) with `extra` flags: (stdout, stderr).
fn generate_with(model: &str, extra: &[&str]) -> (String, String) {
    let args =
        ["generate", "--model", model, "--device", "cpu", "--prompt", "The kiln", "--max-tokens", "24", "--ignore-eos"];
    let o = kiln(&[&args[..], extra].concat());
    assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    (stdout(&o), stderr(&o))
}

#[test]
fn sampling_defaults_come_from_generation_config_else_chat_defaults() {
    let greedy = generate_with(FIXTURE, &["--temperature", "0", "--repeat-penalty", "1"]).0;
    // Without generation_config.json: llama.cpp's and Ollama's chat defaults, not greedy.
    let (out, err) = generate_with(FIXTURE, &[]);
    assert!(
        err.contains(
            "sampling: temperature 0.8, top-k 40, top-p 0.95, min-p off, seed 0, repeat penalty 1.1 over the last 64"
        ),
        "{err}"
    );
    let flags = ["--temperature", "0.8", "--top-k", "40", "--top-p", "0.95", "--repeat-penalty", "1.1"];
    assert_eq!(out, generate_with(FIXTURE, &flags).0);
    assert_ne!(out, greedy, "the defaults sample");
    // min-p 1 keeps only the most likely token, whatever the temperature: greedy again.
    let (only_max, err) = generate_with(FIXTURE, &["--temperature", "1.5", "--min-p", "1", "--repeat-penalty", "1"]);
    assert!(err.contains("min-p 1,"), "{err}");
    assert_eq!(only_max, greedy);
    assert_ne!(
        generate_with(FIXTURE, &["--temperature", "1.5", "--repeat-penalty", "1"]).0,
        greedy,
        "negative control"
    );
    // generation_config.json's fields, as transformers reads them; flags win over them.
    let with_config = |name: &str, json: &str| {
        let dir = partial_fixture(name, &[], |_, b| b);
        std::fs::write(dir.join("generation_config.json"), json).unwrap();
        dir
    };
    let dir = with_config("gen-greedy", r#"{"do_sample": false, "repetition_penalty": 1.0}"#);
    let (out, err) = generate_with(dir.to_str().unwrap(), &[]);
    assert_eq!(out, greedy);
    assert!(err.contains("sampling: greedy, no repeat penalty (generation_config.json"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
    let dir = with_config(
        "gen-sample",
        r#"{"do_sample": true, "temperature": 0.5, "top_k": 5, "top_p": 0.9, "repetition_penalty": 1.3}"#,
    );
    let flags = ["--temperature", "0.5", "--top-k", "5", "--top-p", "0.9", "--repeat-penalty", "1.3"];
    assert_eq!(generate_with(dir.to_str().unwrap(), &[]).0, generate_with(FIXTURE, &flags).0);
    let greedy_penalised = generate_with(FIXTURE, &["--temperature", "0", "--repeat-penalty", "1.3"]).0;
    assert_eq!(generate_with(dir.to_str().unwrap(), &["--temperature", "0"]).0, greedy_penalised);
    std::fs::remove_dir_all(&dir).unwrap();
    // A value no sampler can use names the file and the field.
    let dir = with_config("gen-bad", r#"{"temperature": -2}"#);
    let o = kiln(&["generate", "--model", dir.to_str().unwrap(), "--device", "cpu", "--prompt", "hi"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("generation_config.json") && e.contains("temperature"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn model_paths_a_folder_of_one_gguf_and_hub_ids() {
    let dir = std::env::temp_dir().join(format!("kiln-cli-test-{}-gguf-dir", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(format!("{FIXTURE}/model-f32.gguf"), dir.join("model-f32.gguf")).unwrap();
    let greedy = ["--temperature", "0", "--repeat-penalty", "1"];
    let (out, err) = generate_with(dir.to_str().unwrap(), &greedy);
    assert!(err.contains("using its GGUF file") && err.contains("model-f32.gguf"), "{err}");
    assert_eq!(out, generate_with(&format!("{FIXTURE}/model-f32.gguf"), &greedy).0);
    std::fs::copy(format!("{FIXTURE}/model-q8_0.gguf"), dir.join("model-q8_0.gguf")).unwrap();
    let o = kiln(&["generate", "--model", dir.to_str().unwrap(), "--device", "cpu", "--prompt", "hi"]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("pass the .gguf file") && e.contains("model-q8_0.gguf"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // A Hugging Face id that is not on disk: the command that downloads it.
    let o = kiln(&["chat", "--model", "HuggingFaceTB/SmolLM2-135M-Instruct"]);
    let e = stderr(&o);
    assert!(!o.status.success(), "{e}");
    assert!(e.contains("huggingface-cli download HuggingFaceTB/SmolLM2-135M-Instruct --local-dir"), "{e}");
}

#[test]
fn a_foreign_tokenizer_and_corrupt_weights_are_errors() {
    // A word-level tokenizer of 1000 tokens, for a model whose embedding has 320 rows.
    let vocab: serde_json::Map<String, Value> = (0..1000).map(|i| (format!("w{i}"), Value::from(i))).collect();
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
    });
    let path = std::env::temp_dir().join(format!("kiln-cli-test-{}-tokenizer.json", std::process::id()));
    std::fs::write(&path, tok.to_string()).unwrap();
    let o = kiln(&[
        "generate",
        "--model",
        FIXTURE,
        "--device",
        "cpu",
        "--prompt",
        "w1 w2",
        "--tokenizer",
        path.to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("1000 tokens") && e.contains("320 rows"), "{e}");
    assert!(!e.contains("loaded in"), "checked before loading: {e}");
    std::fs::remove_file(&path).unwrap();
    // A GGUF whose weight data (the second half of the file) is overwritten with 0xFF.
    let mut bytes = std::fs::read(format!("{FIXTURE}/model-f32.gguf")).unwrap();
    let half = bytes.len() / 2;
    bytes[half..].fill(0xFF);
    let path = std::env::temp_dir().join(format!("kiln-cli-test-{}-corrupt.gguf", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let o = kiln(&[
        "generate",
        "--model",
        path.to_str().unwrap(),
        "--device",
        "cpu",
        "--prompt",
        "hi",
        "--max-tokens",
        "15",
    ]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("NaN or infinite") && e.contains("corrupt"), "{e}");
    assert_eq!(stdout(&o), "hi\n", "the echoed prompt ends its line before the error");
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn prompt_dash_reads_stdin() {
    let args = ["generate", "--model", FIXTURE, "--device", "cpu", "--max-tokens", "6", "--temperature", "0"];
    let o = kiln_with(&[&args[..], &["--prompt", "-"]].concat(), &[], Some("The kiln fires\n"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), generate_with_prompt(&args, "The kiln fires"));
    let o = kiln_with(&[&args[..], &["--prompt", "-"]].concat(), &[], Some(""));
    assert!(!o.status.success() && stderr(&o).contains("the prompt is empty"), "{}", stderr(&o));
}

fn generate_with_prompt(args: &[&str], prompt: &str) -> String {
    let o = kiln(&[args, &["--prompt", prompt]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

#[test]
fn serve_checks_the_port_before_loading_the_model() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let o = kiln(&["serve", "--model", FIXTURE, "--device", "cpu", "--port", &port]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains(&format!("cannot listen on 127.0.0.1:{port}")), "{e}");
    assert!(!e.contains("memory estimate") && !e.contains("loaded in"), "the model loaded first: {e}");
}

#[test]
fn a_software_gpu_gets_a_warning() {
    let info: Value = serde_json::from_slice(&kiln(&["info", "--json"]).stdout).unwrap();
    let devices = info["devices"].as_array().unwrap();
    let Some(gpu) = devices.iter().find(|d| d["name"] == "gpu:0") else {
        return; // no GPU here: nothing to warn about
    };
    let o = kiln(&["generate", "--model", FIXTURE, "--device", "gpu:0", "--prompt", "hi", "--max-tokens", "1"]);
    let e = stderr(&o);
    let warned = e.contains("is a software GPU") && e.contains("slower than --device cpu");
    assert_eq!(warned, gpu["software"] == true, "{gpu}: {e}");
}
