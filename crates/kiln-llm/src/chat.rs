//! Chat prompts: the Jinja `chat_template` of `tokenizer_config.json`, rendered with `minijinja`
//! (Python string methods such as `.strip()` through minijinja-contrib's pycompat).

use crate::tokenizer::{read_json, special_token};
use crate::{LlmError, Result};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// One turn of a conversation.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.to_string(), content: content.to_string() }
    }
}

pub struct ChatTemplate {
    template: String,
    bos_token: String,
    eos_token: String,
}

impl ChatTemplate {
    /// The `chat_template` (a string, or the entry named "default" of a list) and the BOS/EOS tokens of
    /// `DIR/tokenizer_config.json` (or a `DIR/chat_template.jinja` file, which newer models use).
    pub fn from_dir(dir: &Path) -> Result<ChatTemplate> {
        let cfg = read_json(dir, "tokenizer_config.json")?.ok_or_else(|| LlmError::MissingFile {
            path: dir.join("tokenizer_config.json"),
            why: "`kiln chat` needs the chat template of tokenizer_config.json".into(),
        })?;
        let from_file = std::fs::read_to_string(dir.join("chat_template.jinja")).ok();
        let template = match (cfg.get("chat_template"), from_file) {
            (Some(Value::String(s)), _) => s.clone(),
            (Some(Value::Array(list)), _) => list
                .iter()
                .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
                .and_then(|t| t.get("template").and_then(Value::as_str))
                .map(str::to_string)
                .ok_or_else(|| LlmError::Config {
                    file: "tokenizer_config.json",
                    field: "chat_template".into(),
                    msg: "a list without an entry named \"default\"".into(),
                })?,
            (_, Some(t)) => t,
            _ => {
                return Err(LlmError::Config {
                    file: "tokenizer_config.json",
                    field: "chat_template".into(),
                    msg: "missing (a base model without a chat template: use `kiln generate`)".into(),
                })
            }
        };
        Ok(ChatTemplate {
            template,
            bos_token: special_token(&cfg, "bos_token").unwrap_or_default(),
            eos_token: special_token(&cfg, "eos_token").unwrap_or_default(),
        })
    }

    pub fn new(template: &str, bos_token: &str, eos_token: &str) -> ChatTemplate {
        ChatTemplate { template: template.into(), bos_token: bos_token.into(), eos_token: eos_token.into() }
    }

    /// The prompt text of `messages`, ending with the assistant's header when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let mut env = minijinja::Environment::new();
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| strftime_now(&fmt));
        env.add_template("chat", &self.template).map_err(|e| LlmError::Template(e.to_string()))?;
        let tmpl = env.get_template("chat").map_err(|e| LlmError::Template(e.to_string()))?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| LlmError::Template(e.to_string()))
    }
}

/// Today's date (UTC) for templates that print it (Llama 3.1+): `%d %b %B %m %Y` are understood.
fn strftime_now(fmt: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let month = MONTHS[(m - 1) as usize];
    fmt.replace("%d", &format!("{d:02}"))
        .replace("%b", &month[..3])
        .replace("%B", month)
        .replace("%m", &format!("{m:02}"))
        .replace("%Y", &y.to_string())
}

/// (year, month 1-12, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn renders_python_methods_and_errors() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{% if m.role == 'bad' %}{{ raise_exception('no') }}{% endif %}[{{ m.role }}]{{ m.content.strip() }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}",
            "<s>",
            "</s>",
        );
        let s = t.render(&[Message::new("user", "  hi  ")], true).unwrap();
        assert_eq!(s, "<s>[user]hi[assistant]");
        let e = t.render(&[Message::new("bad", "x")], false).unwrap_err();
        assert!(e.to_string().contains("no"), "{e}");
    }
}
