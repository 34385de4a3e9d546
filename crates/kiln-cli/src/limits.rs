//! What a run may ask of a model's context, worked out before the weights load, with messages that
//! name the flag that helps (or say that none can): the KV cache length, prompt lengths, a
//! generation cut short by the context, the turns of a chat that no longer fit, and the positions
//! `kiln llm-bench` needs.

use kiln_llm::model::effective_context;
use kiln_llm::{LlamaConfig, Message};

/// `--max-context` when not given.
pub const DEFAULT_CONTEXT: usize = 4096;

/// The most positions the model allows: `max_position_embeddings` (sliding windows mask inside it).
pub fn model_limit(c: &LlamaConfig) -> usize {
    effective_context(c, usize::MAX)
}

/// `the model's context of 128 positions (max_position_embeddings)`.
fn model_context(c: &LlamaConfig) -> String {
    format!("the model's context of {} positions (max_position_embeddings)", model_limit(c))
}

/// The KV cache length for `--max-context` (default [`DEFAULT_CONTEXT`]), and a note to show when
/// the flag asked for more than the model allows.
pub fn context(c: &LlamaConfig, requested: Option<usize>) -> (usize, Option<String>) {
    let ctx = effective_context(c, requested.unwrap_or(DEFAULT_CONTEXT));
    let note = requested
        .filter(|&r| r > ctx)
        .map(|r| format!("note: --max-context {r} is more than {}; using {ctx}", model_context(c)));
    (ctx, note)
}

/// Checks a prompt of `n` tokens against a KV cache of `ctx` positions (room is left for at least
/// one generated token).
pub fn check_prompt(c: &LlamaConfig, n: usize, ctx: usize) -> Result<(), String> {
    if n == 0 {
        return Err("the prompt gives no tokens: pass some text with --prompt".into());
    }
    let limit = model_limit(c);
    if n > limit {
        return Err(format!("the prompt has {n} tokens, more than {}: shorten the prompt", model_context(c)));
    }
    if n > ctx {
        return Err(format!(
            "the prompt has {n} tokens, more than the context of {ctx} positions: raise --max-context \
             (the model allows up to {limit})"
        ));
    }
    Ok(())
}

/// Why a generation of `generated` tokens (`max_tokens` asked for, the last one `last`) stopped, when
/// it was the end of the context rather than a stop token or `--max-tokens`.
pub fn cut_short(
    c: &LlamaConfig,
    ctx: usize,
    generated: usize,
    max_tokens: usize,
    last_is_stop: bool,
) -> Option<String> {
    if generated >= max_tokens || last_is_stop {
        return None;
    }
    let full = if ctx < model_limit(c) {
        format!(
            "the context of {ctx} positions is full; raise --max-context (the model allows up to {})",
            model_limit(c)
        )
    } else {
        format!("{} is full", model_context(c))
    };
    Some(format!("stopped after {generated} of --max-tokens {max_tokens} tokens: {full}"))
}

/// Drops the oldest turns of a chat (never a system message, never the last message) until
/// `tokens(messages)` is at most `budget`. Returns how many messages were dropped, or an error (and
/// the messages untouched) when the system messages and the last message alone are over the budget.
pub fn fit_history(
    messages: &mut Vec<Message>,
    budget: usize,
    mut tokens: impl FnMut(&[Message]) -> Result<usize, String>,
) -> Result<usize, String> {
    let last = messages.len().saturating_sub(1);
    let kept: Vec<Message> =
        messages.iter().enumerate().filter(|(i, m)| *i == last || m.role == "system").map(|(_, m)| m.clone()).collect();
    let n = tokens(&kept)?;
    if n > budget {
        return Err(format!("{n} tokens, more than the {budget} that fit"));
    }
    let mut dropped = 0;
    while tokens(messages)? > budget {
        // The oldest message that is neither a system message nor the newest one (there is one: the
        // kept messages alone fit).
        let Some(i) = messages[..messages.len() - 1].iter().position(|m| m.role != "system") else {
            break;
        };
        messages.remove(i);
        dropped += 1;
        // A turn is a user message and the answers after it: drop up to the next user message.
        while i + 1 < messages.len() && messages[i].role != "user" && messages[i].role != "system" {
            messages.remove(i);
            dropped += 1;
        }
    }
    Ok(dropped)
}

/// What `kiln llm-bench` times and the KV cache it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchPlan {
    pub prefill: usize,
    pub contexts: Vec<usize>,
    pub decode_tokens: usize,
    /// KV cache positions to load the model with.
    pub max_context: usize,
}

/// `--prefill` when not given (at most the context).
const DEFAULT_PREFILL: usize = 2048;
/// `--contexts` when not given (each at most the context less the decode steps).
const DEFAULT_CONTEXTS: [usize; 2] = [512, 4096];

/// The runs of `kiln llm-bench`: flags that were given are kept (an error says which flag to change
/// when they do not fit); defaults shrink to fit the context (`--max-context`, else the model's).
pub fn bench_plan(
    c: &LlamaConfig,
    prefill: Option<usize>,
    contexts: Option<Vec<usize>>,
    decode_tokens: usize,
    max_context: Option<usize>,
) -> Result<BenchPlan, String> {
    let limit = model_limit(c);
    let cap = max_context.map_or(limit, |m| effective_context(c, m));
    if decode_tokens == 0 {
        return Err("--decode-tokens must be at least 1".into());
    }
    if decode_tokens >= cap {
        return Err(format!("--decode-tokens {decode_tokens} leaves no room for a prompt in a context of {cap}"));
    }
    let given = contexts.is_some() || prefill.is_some();
    let prefill = prefill.unwrap_or(DEFAULT_PREFILL.min(cap));
    let mut contexts = contexts.unwrap_or_else(|| DEFAULT_CONTEXTS.map(|n| n.min(cap - decode_tokens)).to_vec());
    contexts.dedup();
    if prefill == 0 || contexts.contains(&0) {
        return Err("--prefill and --contexts must be at least 1".into());
    }
    let need = contexts.iter().map(|n| n + decode_tokens).chain([prefill]).max().unwrap_or(prefill);
    if need > cap {
        let what = if given { "--prefill, --contexts and --decode-tokens" } else { "--decode-tokens" };
        let fix = if cap < limit {
            format!("raise --max-context (the model allows up to {limit}) or lower {what}")
        } else {
            format!("{} caps them: lower {what}", model_context(c))
        };
        return Err(format!("the runs need {need} positions, the context is {cap}: {fix}"));
    }
    // Without --max-context the cache is as long as the runs need (a 128K-position model does not
    // get a 128K-position cache to time a 4K context).
    Ok(BenchPlan { prefill, contexts, decode_tokens, max_context: max_context.map_or(need, |_| cap) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The fixture model of kiln-llm's tests: `max_position_embeddings` 128.
    fn fixture() -> LlamaConfig {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kiln-llm/tests/fixtures/llama");
        LlamaConfig::from_dir(&dir).unwrap()
    }

    #[test]
    fn context_is_clamped_with_a_note() {
        let c = fixture();
        assert_eq!(context(&c, None), (128, None));
        assert_eq!(context(&c, Some(64)), (64, None));
        let (ctx, note) = context(&c, Some(1000));
        assert_eq!(ctx, 128);
        let note = note.unwrap();
        assert!(note.contains("--max-context 1000") && note.contains("max_position_embeddings"), "{note}");
    }

    #[test]
    fn prompt_messages_name_the_right_fix() {
        let c = fixture();
        assert!(check_prompt(&c, 10, 64).is_ok());
        assert!(check_prompt(&c, 64, 64).is_ok());
        assert!(check_prompt(&c, 0, 64).unwrap_err().contains("no tokens"));
        let e = check_prompt(&c, 100, 64).unwrap_err();
        assert!(e.contains("raise --max-context") && e.contains("128"), "{e}");
        let e = check_prompt(&c, 200, 128).unwrap_err();
        assert!(e.contains("shorten the prompt") && !e.contains("--max-context"), "{e}");
    }

    #[test]
    fn cut_short_only_at_the_end_of_the_context() {
        let c = fixture();
        assert_eq!(cut_short(&c, 64, 20, 20, false), None);
        assert_eq!(cut_short(&c, 64, 5, 20, true), None);
        let m = cut_short(&c, 64, 5, 20, false).unwrap();
        assert!(m.contains("stopped after 5") && m.contains("raise --max-context"), "{m}");
        let m = cut_short(&c, 128, 5, 20, false).unwrap();
        assert!(m.contains("max_position_embeddings") && !m.contains("raise"), "{m}");
    }

    #[test]
    fn fit_history_drops_oldest_turns_and_keeps_the_system_prompt() {
        let msg = |r: &str, t: &str| Message::new(r, t);
        let len = |m: &[Message]| -> Result<usize, String> { Ok(m.iter().map(|m| m.content.len()).sum()) };
        let mut m = vec![
            msg("system", "sys"),
            msg("user", "aaaa"),
            msg("assistant", "bbbb"),
            msg("user", "cccc"),
            msg("assistant", "dddd"),
            msg("user", "eeee"),
        ];
        assert_eq!(fit_history(&mut m, 100, len), Ok(0));
        assert_eq!(m.len(), 6);
        // 3 + 4 * 5 = 23 > 15: the first turn (2 messages) goes, 15 is left.
        assert_eq!(fit_history(&mut m, 15, len), Ok(2));
        let roles: Vec<&str> = m.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(roles, ["sys", "cccc", "dddd", "eeee"]);
        // The system prompt and the last message alone are over: an error, nothing dropped.
        let e = fit_history(&mut m, 5, len).unwrap_err();
        assert!(e.contains("7 tokens"), "{e}");
        assert_eq!(m.len(), 4);
        assert_eq!(fit_history(&mut m, 7, len), Ok(2));
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].role, "system");
    }

    #[test]
    fn bench_defaults_fit_the_model() {
        let c = fixture();
        let p = bench_plan(&c, None, None, 32, None).unwrap();
        assert_eq!(p, BenchPlan { prefill: 128, contexts: vec![96], decode_tokens: 32, max_context: 128 });
        let p = bench_plan(&c, None, None, 8, Some(64)).unwrap();
        assert_eq!(p, BenchPlan { prefill: 64, contexts: vec![56], decode_tokens: 8, max_context: 64 });
        // Given flags are kept, and an error names the flags when they do not fit.
        let p = bench_plan(&c, Some(16), Some(vec![8, 32]), 4, None).unwrap();
        assert_eq!(p, BenchPlan { prefill: 16, contexts: vec![8, 32], decode_tokens: 4, max_context: 36 });
        let e = bench_plan(&c, None, Some(vec![512]), 32, Some(64)).unwrap_err();
        assert!(e.contains("544") && e.contains("raise --max-context"), "{e}");
        let e = bench_plan(&c, Some(4096), None, 32, None).unwrap_err();
        assert!(e.contains("max_position_embeddings") && e.contains("--prefill"), "{e}");
        assert!(bench_plan(&c, None, None, 128, None).unwrap_err().contains("--decode-tokens"));
        assert!(bench_plan(&c, None, None, 0, None).is_err());
    }
}
