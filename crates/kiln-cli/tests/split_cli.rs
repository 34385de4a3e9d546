//! `--devices` and `--split` on the tiny Llama fixture (2 layers): every bad option is refused before
//! a weight loads, and (with a GPU) a greedy `kiln generate` split over the CPU and the GPU prints
//! the text of the one-device run and `kiln llm-bench` runs (`kiln serve` with a split:
//! crates/kiln-serve/tests/split.rs).

use kiln::Device;
use std::process::{Command, Output};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kiln-llm/tests/fixtures/llama");

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).env_remove("KILN_DEVICE").output().expect("run kiln")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `kiln generate` on the fixture, greedy, with `extra` flags.
fn generate(extra: &[&str]) -> Output {
    let mut args = vec!["generate", "--model", FIXTURE, "--prompt", "Once upon", "--max-tokens", "8"];
    args.extend(["--temperature", "0", "--repeat-penalty", "1"]);
    args.extend(extra);
    kiln(&args)
}

/// `gpu:N` of the GPU the tests use, if any (`KILN_REQUIRE_GPU=1`: there must be one).
fn gpu() -> Option<String> {
    match Device::gpu() {
        Ok(d) => Some(format!("gpu:{}", d.gpu_info().unwrap().index)),
        Err(e) if std::env::var("KILN_REQUIRE_GPU").is_ok_and(|v| v == "1") => panic!("KILN_REQUIRE_GPU=1: {e}"),
        Err(_) => None,
    }
}

/// Fails with `want` in its error, before loading anything.
fn refused(o: &Output, want: &str) {
    let err = text(&o.stderr);
    assert!(!o.status.success(), "should fail: {err}");
    assert!(err.contains(want), "expected '{want}' in: {err}");
    assert!(!err.contains("loaded in"), "refused after loading: {err}");
}

#[test]
fn bad_device_lists_and_splits_are_refused_before_loading() {
    refused(&generate(&["--device", "cpu", "--devices", "cpu"]), "cannot be used with");
    refused(&generate(&["--split", "1,1"]), "--devices");
    refused(&generate(&["--devices", "cpu,cpu"]), "lists one device twice");
    refused(&generate(&["--devices", "cpu,gpu:7"]), "cannot open device gpu:7");
    refused(&generate(&["--devices", "cpu,auto"]), "name each one");
    refused(&generate(&["--devices", "cpu", "--split", "0"]), "not a layer count");
    refused(&generate(&["--devices", "cpu", "--split", "3"]), "add up to 3, but the model has 2 layers");
    if let Some(g) = gpu() {
        let devs = format!("cpu,{g}");
        refused(&generate(&["--devices", &devs, "--split", "2"]), "1 layer counts for 2 devices");
        refused(&generate(&["--devices", &devs, "--split", "2,1"]), "add up to 3");
        refused(&generate(&["--devices", &format!("gpu,{g}")]), "lists one device twice");
    }
}

#[test]
fn split_generate_prints_the_one_device_text() {
    let one = generate(&["--device", "cpu"]);
    assert!(one.status.success(), "stderr: {}", text(&one.stderr));
    // One device named through --devices takes the one-device path.
    let listed = generate(&["--devices", "cpu", "--split", "2"]);
    assert!(listed.status.success(), "stderr: {}", text(&listed.stderr));
    assert_eq!(text(&listed.stdout), text(&one.stdout));
    let Some(g) = gpu() else { return };
    for devs in [format!("cpu,{g}"), format!("{g},cpu")] {
        let split = generate(&["--devices", &devs, "--dtype", "f32"]);
        let err = text(&split.stderr);
        assert!(split.status.success(), "stderr: {err}");
        assert!(err.contains("with 1 + 1 layers"), "{err}");
        assert_eq!(text(&split.stdout), text(&one.stdout), "{devs}");
    }
    // llm-bench names both devices.
    let devs = format!("cpu,{g}");
    let bench = ["llm-bench", "--model", FIXTURE, "--devices", &devs, "--prefill", "8", "--contexts", "8"];
    let o = kiln(&[&bench[..], &["--decode-tokens", "2"]].concat());
    assert!(o.status.success(), "stderr: {}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("llm-bench prints JSON");
    let named = v["device"].as_str().unwrap();
    assert!(named.starts_with("cpu,") && named.contains(&g), "{named}");
}
