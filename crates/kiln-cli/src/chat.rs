//! `kiln chat`: a conversation with an instruction-tuned model through its chat template.
//!
//! On a terminal the line editor is rustyline: arrow keys edit, up/down walk the history (kept in
//! `$XDG_STATE_HOME/kiln/chat_history`), a line ending in `\` or Alt-Enter continues the message on
//! a new line, Ctrl-C clears the line, Ctrl-D quits; Ctrl-C during an answer stops that answer and
//! keeps the conversation. Piped input is read a line at a time (one message per line). Lines that
//! start with `/` are commands ([`COMMANDS`]); `//` sends a message that starts with `/`.

use crate::generate::{load, open_source, print_stats, tokenizer_of, ModelArgs, SamplingArgs};
use crate::limits;
use clap::Args;
use kiln_llm::{GenerateOptions, LlmError, Message, TokenStream};
use rustyline::error::ReadlineError;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    #[arg(long, default_value_t = 1024, allow_hyphen_values = true, value_parser = crate::generate::parse_positive)]
    max_tokens: usize,
}

/// The chat's commands and what they do (`/help` prints this).
const COMMANDS: [(&str, &str); 4] = [
    ("/help", "list these commands"),
    ("/reset", "start a new conversation (the --system message stays)"),
    ("/quit", "quit (also /exit, or Ctrl-D)"),
    ("//text", "send a message that starts with '/'"),
];

/// What a line of input asks for.
#[derive(Debug, PartialEq, Eq)]
enum Line<'a> {
    Empty,
    Message(&'a str),
    Help,
    Reset,
    Quit,
    Unknown(&'a str),
}

fn parse_line(line: &str) -> Line<'_> {
    let line = line.trim();
    if line.starts_with("//") {
        return Line::Message(&line[1..]);
    }
    match line {
        "" => Line::Empty,
        "/help" | "/?" => Line::Help,
        "/reset" | "/clear" => Line::Reset,
        "/quit" | "/exit" => Line::Quit,
        _ if line.starts_with('/') => Line::Unknown(line.split_whitespace().next().unwrap_or(line)),
        _ => Line::Message(line),
    }
}

/// One read from the user.
enum Input {
    Line(String),
    /// Ctrl-C at the prompt: the line is dropped.
    Interrupted,
    Eof,
}

/// Where messages come from: the line editor on a terminal, plain lines otherwise.
enum Reader {
    Editor(Box<rustyline::Editor<ChatHelper, rustyline::history::DefaultHistory>>, Option<PathBuf>),
    Lines(std::io::StdinLock<'static>),
}

impl Reader {
    fn new() -> Result<Reader, String> {
        if !std::io::stdin().is_terminal() {
            return Ok(Reader::Lines(std::io::stdin().lock()));
        }
        let config = rustyline::Config::builder()
            .auto_add_history(true)
            .history_ignore_dups(true)
            .map_err(|e| e.to_string())?
            .max_history_size(1000)
            .map_err(|e| e.to_string())?
            // The prompt and the editing go to the terminal even when stdout is redirected.
            .behavior(rustyline::Behavior::PreferTerm)
            .build();
        let mut editor = rustyline::Editor::with_config(config).map_err(|e| e.to_string())?;
        editor.set_helper(Some(ChatHelper));
        editor.bind_sequence(
            rustyline::KeyEvent(rustyline::KeyCode::Enter, rustyline::Modifiers::ALT),
            rustyline::Cmd::Newline,
        );
        let history = history_file();
        if let Some(h) = &history {
            let _ = editor.load_history(h);
        }
        Ok(Reader::Editor(Box::new(editor), history))
    }

    fn read(&mut self) -> Result<Input, String> {
        match self {
            Reader::Lines(stdin) => {
                errs!("> ");
                let mut line = String::new();
                match stdin.read_line(&mut line).map_err(|e| e.to_string())? {
                    0 => Ok(Input::Eof),
                    _ => Ok(Input::Line(line)),
                }
            }
            Reader::Editor(editor, history) => match editor.readline("> ") {
                // A line continued with `\` keeps its line break, not the backslash.
                Ok(line) => {
                    if let Some(h) = history {
                        if let Some(dir) = h.parent() {
                            let _ = std::fs::create_dir_all(dir);
                        }
                        let _ = editor.save_history(h);
                    }
                    Ok(Input::Line(line.replace("\\\n", "\n")))
                }
                Err(ReadlineError::Interrupted) => Ok(Input::Interrupted),
                Err(ReadlineError::Eof) => Ok(Input::Eof),
                Err(e) => Err(e.to_string()),
            },
        }
    }
}

/// `$XDG_STATE_HOME/kiln/chat_history`, else `~/.local/state/kiln/chat_history`.
fn history_file() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()).map(PathBuf::from).or_else(|| {
        std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| PathBuf::from(h).join(".local/state"))
    })?;
    Some(state.join("kiln/chat_history"))
}

/// The editor's helper: a line that ends in `\` goes on to the next line.
struct ChatHelper;

impl rustyline::completion::Completer for ChatHelper {
    type Candidate = String;
}
impl rustyline::hint::Hinter for ChatHelper {
    type Hint = String;
}
impl rustyline::highlight::Highlighter for ChatHelper {}
impl rustyline::Helper for ChatHelper {}

impl Validator for ChatHelper {
    fn validate(&self, ctx: &mut ValidationContext) -> rustyline::Result<ValidationResult> {
        Ok(if ctx.input().ends_with('\\') { ValidationResult::Incomplete } else { ValidationResult::Valid(None) })
    }
}

pub fn chat(args: ChatArgs) -> ExitCode {
    match run_chat(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("kiln chat: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Set by Ctrl-C (SIGINT) while an answer is generated; the answer stops at the next token.
fn stop_flag(interactive: bool) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    // Piped input keeps the default: Ctrl-C ends the program. At the prompt the line editor reads
    // Ctrl-C as a key, so the handler only sees those that come during an answer.
    if interactive {
        let flag = stop.clone();
        if let Err(e) = ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst)) {
            errln!("warning: Ctrl-C will end the chat rather than stop an answer ({e})");
        }
    }
    stop
}

fn run_chat(args: ChatArgs) -> Result<(), String> {
    let (placement, dir) = open_source(&args.model)?;
    let sampling = args.sampling.params(&dir)?;
    // Every file the chat needs is checked before the weights load.
    let tok = tokenizer_of(&dir, args.model.tokenizer.as_ref())?;
    let template = dir.chat_template().map_err(|e| e.to_string())?;
    let stop_tokens = dir.stop_tokens(&tok).map_err(|e| e.to_string())?;
    let (ctx, note) = limits::context(dir.config(), args.model.max_context);
    if let Some(note) = note {
        errln!("{note}");
    }
    let model = load(&args.model, &placement, &dir, ctx)?;
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
    let mut reader = Reader::new()?;
    let interactive = matches!(reader, Reader::Editor(..));
    let stop = stop_flag(interactive);
    let keys = if interactive { ", Ctrl-C stops an answer, Ctrl-D quits" } else { "" };
    errln!("chat: type a message and press enter; /help lists the commands{keys}");
    loop {
        let line = match reader.read()? {
            Input::Line(l) => l,
            Input::Interrupted => {
                errln!("(line cleared; /quit or Ctrl-D quits)");
                continue;
            }
            Input::Eof => break,
        };
        let text = match parse_line(&line) {
            Line::Empty => continue,
            Line::Quit => break,
            Line::Help => {
                for (cmd, what) in COMMANDS {
                    errln!("  {cmd:<8} {what}");
                }
                continue;
            }
            Line::Reset => {
                messages.retain(|m| m.role == "system");
                cache.reset();
                cached.clear();
                let kept = if messages.is_empty() { "" } else { " (the system message stays)" };
                errln!("(conversation cleared{kept})");
                continue;
            }
            Line::Unknown(cmd) => {
                errln!("unknown command {cmd}: /help lists the commands (start with // to send a message that begins with /)");
                continue;
            }
            Line::Message(m) => m,
        };
        messages.push(Message::new("user", text));
        // A full context drops the oldest turns (the system prompt stays), as chat programs do.
        match limits::fit_history(&mut messages, ctx - reserve, count) {
            Ok(0) => {}
            Ok(n) => errln!(
                "(the conversation filled the context of {ctx} positions: dropped the {n} oldest messages; \
                 /reset starts over)"
            ),
            Err(e) => {
                messages.pop();
                errln!(
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
            sampling: sampling.clone(),
            seed: args.sampling.seed.wrapping_add(messages.len() as u64),
            stop_tokens: stop_tokens.clone(),
        };
        let mut stream = TokenStream::new(&tok);
        // The tokens shown so far: each went through the model before the next was sampled.
        let mut shown: Vec<u32> = Vec::new();
        stop.store(false, Ordering::SeqCst);
        let result = kiln_llm::generate(&model, &mut cache, new, &opts, |id| {
            if stop.load(Ordering::SeqCst) {
                return Err(LlmError::Arg("stopped by Ctrl-C".into()));
            }
            if !stop_tokens.contains(&id) {
                out!("{}", stream.push(id)?);
            }
            shown.push(id);
            Ok(())
        });
        outln!();
        let answer = match result {
            Ok((answer, stats)) => {
                print_stats(&stats);
                let last_is_stop = answer.last().is_some_and(|t| stop_tokens.contains(t));
                if answer.len() < args.max_tokens && !last_is_stop {
                    errln!(
                        "(the answer was cut at {} tokens: the context of {ctx} positions is full; the oldest \
                         turns make room for the next message)",
                        answer.len()
                    );
                }
                // Every answer token but the last went through the model.
                cached = ids;
                cached.extend_from_slice(&answer[..answer.len().saturating_sub(1)]);
                answer
            }
            Err(_) if stop.load(Ordering::SeqCst) => {
                errln!("(answer stopped; the conversation goes on)");
                cached = ids;
                cached.extend_from_slice(&shown);
                shown
            }
            Err(e) => return Err(e.to_string()),
        };
        let reply: Vec<u32> = answer.into_iter().filter(|t| !stop_tokens.contains(t)).collect();
        messages.push(Message::new("assistant", &tok.decode(&reply, true).map_err(|e| e.to_string())?));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{parse_line, Line};

    #[test]
    fn lines_are_messages_or_commands() {
        assert_eq!(parse_line("  hello \n"), Line::Message("hello"));
        assert_eq!(parse_line("\n"), Line::Empty);
        assert_eq!(parse_line("/help\n"), Line::Help);
        assert_eq!(parse_line("/reset"), Line::Reset);
        assert_eq!(parse_line("/quit"), Line::Quit);
        assert_eq!(parse_line("/exit"), Line::Quit);
        assert_eq!(parse_line("/frobnicate now"), Line::Unknown("/frobnicate"));
        assert_eq!(parse_line("//etc/hosts is a file"), Line::Message("/etc/hosts is a file"));
    }
}
