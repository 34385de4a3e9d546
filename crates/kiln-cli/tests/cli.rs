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
    let common = ["--device", "cpu", "--prompt", "The kiln fires the clay pots", "--max-tokens", "12", "--ignore-eos"];
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
    assert_eq!(want, format!("{text}\n"), "transformers' ids {all:?}");
    assert_eq!(run(&["--model", &gguf]), want);
    assert_eq!(run(&["--model", &gguf, "--tokenizer", &tok]), want);
    let o = kiln(&["generate", "--model", &format!("{fixtures}/tokenizer.json.gguf"), "--prompt", "x"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("tokenizer.json.gguf"));
}
