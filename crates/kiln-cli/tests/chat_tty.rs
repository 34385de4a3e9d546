//! `kiln chat` on a terminal (a pseudo-terminal driven by rexpect): the commands answer, arrow keys
//! edit the line and walk the history (kept from one chat to the next), a line ending in `\` goes
//! on, Ctrl-C clears the line at the prompt and stops an answer without ending the chat, and Ctrl-D
//! and `/quit` quit with status 0.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kiln-llm/tests/fixtures/llama");

/// A fresh folder for this test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-chat-tty-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The fixture with a context of 32768 positions: its greedy answer to "Hello kiln" runs for
/// thousands of tokens (seconds), long enough to be stopped.
fn long_context_fixture(dir: &Path) {
    for f in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(Path::new(FIXTURE).join(f), dir.join(f)).unwrap();
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(FIXTURE).join("config.json")).unwrap()).unwrap();
    config["max_position_embeddings"] = 32768.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

/// `kiln chat` greedy on `model` in a pseudo-terminal, its history under `state`.
fn spawn_chat(model: &Path, state: &Path, extra: &[&str]) -> rexpect::session::PtySession {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(["chat", "--model", model.to_str().unwrap(), "--device", "cpu", "--temperature", "0"])
        .args(["--repeat-penalty", "1"])
        .args(extra)
        .env_remove("KILN_DEVICE")
        .env("TERM", "xterm")
        .env("XDG_STATE_HOME", state);
    rexpect::session::spawn_command(cmd, Some(30_000)).expect("spawn kiln chat in a pty")
}

/// The lines rustyline saved (its history file: a version line, then one entry a line).
fn history(state: &Path) -> String {
    std::fs::read_to_string(state.join("kiln/chat_history")).unwrap_or_default()
}

#[test]
fn chat_on_a_terminal_edits_lines_and_keeps_the_conversation() {
    let model = temp_dir("model");
    long_context_fixture(&model);
    let state = temp_dir("state");
    let mut p = spawn_chat(&model, &state, &["--max-context", "16384", "--max-tokens", "16000"]);
    p.exp_string("/help lists the commands").unwrap();
    p.exp_string("> ").unwrap();
    // Commands answer, and an unknown one is not sent to the model.
    p.send_line("/help").unwrap();
    p.exp_string("/reset").unwrap();
    p.exp_string("/quit").unwrap();
    p.send_line("/frobnicate").unwrap();
    p.exp_string("unknown command /frobnicate").unwrap();
    p.send_line("/reset").unwrap();
    p.exp_string("(conversation cleared").unwrap();
    // Ctrl-C at the prompt drops the line.
    p.send("discard me").unwrap();
    p.flush().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    p.send_control('c').unwrap();
    p.exp_string("(line cleared").unwrap();
    // Left and right arrows move in the line: "Hello kil", two left, two right, "n". The answer to
    // "Hello kiln" as the first message runs for thousands of tokens: Ctrl-C stops it, and the chat
    // goes on.
    p.send("Hello kil\x1b[D\x1b[D\x1b[C\x1b[Cn\r").unwrap();
    p.flush().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    p.send_control('c').unwrap();
    p.exp_string("(answer stopped; the conversation goes on)").unwrap();
    p.exp_string("> ").unwrap();
    // Ctrl-D quits.
    p.send_control('d').unwrap();
    p.exp_eof().unwrap();
    let status = p.process().wait().unwrap();
    assert!(matches!(status, rexpect::process::WaitStatus::Exited(_, 0)), "{status:?}");
    let h = history(&state);
    assert!(h.contains("Hello kiln\n") && !h.contains("discard me") && !h.contains('\x1b'), "{h:?}");

    // A new chat (short answers) finds the history: up brings "Hello kiln" back to edit, and a line
    // ending in `\` goes on to the next.
    let mut p = spawn_chat(Path::new(FIXTURE), &state, &["--max-tokens", "4"]);
    p.exp_string("> ").unwrap();
    p.send("\x1b[A again\r").unwrap();
    p.flush().unwrap();
    p.exp_string("tokens/s (decode)").unwrap();
    p.exp_string("> ").unwrap();
    p.send("first line\\\rsecond line\r").unwrap();
    p.flush().unwrap();
    p.exp_string("tokens/s (decode)").unwrap();
    p.exp_string("> ").unwrap();
    p.send_line("/quit").unwrap();
    p.exp_eof().unwrap();
    let status = p.process().wait().unwrap();
    assert!(matches!(status, rexpect::process::WaitStatus::Exited(_, 0)), "{status:?}");
    let h = history(&state);
    assert!(h.contains("Hello kiln again\n"), "{h:?}");
    assert!(h.contains("first line") && h.contains("second line"), "{h:?}");
    std::fs::remove_dir_all(&model).unwrap();
    std::fs::remove_dir_all(&state).unwrap();
}
