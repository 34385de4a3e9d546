//! The HTTP options of `kiln serve` (keys, browsers, timeouts and limits) and their flags.

use crate::conn::Limits;
use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

/// What the HTTP layer enforces; see [`HttpArgs`] for each one's meaning and default.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// Keys besides `ServeOptions::api_key`.
    pub api_keys: Vec<String>,
    pub api_key_file: Option<PathBuf>,
    /// The value of `KILN_API_KEY` ([`HttpArgs::options`] and [`crate::serve_with`] read it).
    pub env_api_key: Option<String>,
    pub allowed_origins: Vec<String>,
    pub allowed_hosts: Vec<String>,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    pub max_body_bytes: usize,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            api_keys: Vec::new(),
            api_key_file: None,
            env_api_key: None,
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            max_connections: default_max_connections(),
            max_body_bytes: 2 << 20,
        }
    }
}

impl HttpOptions {
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            idle_timeout: self.idle_timeout,
        }
    }
}

/// 1024, or fewer where the open-file limit (`ulimit -n`) would run out first: the limit less 64
/// for the model's files, the listener and the runtime, at least 16.
fn default_max_connections() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits").ok().and_then(|t| {
        let line = t.lines().find(|l| l.starts_with("Max open files"))?;
        line["Max open files".len()..].split_whitespace().next()?.parse::<usize>().ok()
    });
    soft.map_or(1024, |n| n.saturating_sub(64).clamp(16, 1024))
}

/// `kiln serve`'s HTTP flags (flattened into its command line by kiln-cli).
#[derive(Args, Debug, Clone)]
pub struct HttpArgs {
    /// A file of API keys, one a line (`#` comments); /v1/* and /metrics then need one of them
    /// (`Authorization: Bearer KEY` or `x-api-key: KEY`). `KILN_API_KEY` may also hold keys
    /// (comma-separated); both keep keys out of `ps`, unlike --api-key.
    #[arg(long, value_name = "PATH")]
    pub api_key_file: Option<PathBuf>,
    /// Browser origins allowed to call the API (CORS), comma-separated, e.g.
    /// `https://chat.example.com`; `*` allows every origin. Default: none (requests carrying an
    /// `Origin` header get 403, and no CORS headers are sent).
    #[arg(long, value_name = "ORIGINS", value_delimiter = ',')]
    pub allowed_origins: Vec<String>,
    /// Extra `Host` header values accepted while listening on a loopback address (where only
    /// localhost, 127.0.0.1 and [::1] are, against DNS rebinding), e.g. a reverse proxy's public
    /// name; comma-separated.
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,
    /// Seconds a client has to send a request's headers, from its first byte.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub header_timeout: f64,
    /// Seconds a client has to send a request's whole body, from its headers (else 408).
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub body_timeout: f64,
    /// Seconds a keep-alive connection may stay idle between requests.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub idle_timeout: f64,
    /// Most open connections; at the bound a new one closes the longest-idle one, or gets 503
    /// when all are busy. Default 1024, less where `ulimit -n` is lower.
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Largest request body in bytes (else 413); this bounds the prompt before it is tokenized.
    #[arg(long, default_value_t = 2 << 20, value_name = "BYTES")]
    pub max_body_bytes: usize,
}

impl HttpArgs {
    /// The options these flags ask for, checked, with the keys of `KILN_API_KEY`.
    pub fn options(&self) -> Result<HttpOptions, String> {
        let secs = |name: &str, s: f64| {
            if s.is_finite() && s > 0.0 {
                Ok(Duration::from_secs_f64(s))
            } else {
                Err(format!("--{name} must be a positive number of seconds, got {s}"))
            }
        };
        if self.max_connections == Some(0) || self.max_body_bytes == 0 {
            return Err("--max-connections and --max-body-bytes must be positive".into());
        }
        let defaults = HttpOptions::default();
        Ok(HttpOptions {
            api_key_file: self.api_key_file.clone(),
            env_api_key: std::env::var(crate::auth::API_KEY_VAR).ok(),
            allowed_origins: self.allowed_origins.clone(),
            allowed_hosts: self.allowed_hosts.clone(),
            header_timeout: secs("header-timeout", self.header_timeout)?,
            body_timeout: secs("body-timeout", self.body_timeout)?,
            idle_timeout: secs("idle-timeout", self.idle_timeout)?,
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
            max_body_bytes: self.max_body_bytes,
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        http: HttpArgs,
    }

    fn options(args: &[&str]) -> Result<HttpOptions, String> {
        Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?
            .http
            .options()
    }

    #[test]
    fn flags_and_their_checks() {
        let o = options(&[]).unwrap();
        assert_eq!(
            (o.header_timeout, o.body_timeout, o.max_body_bytes),
            (Duration::from_secs(10), Duration::from_secs(30), 2 << 20)
        );
        assert!((16..=1024).contains(&o.max_connections));
        let o = options(&[
            "--allowed-origins",
            "https://a.example,https://b.example",
            "--idle-timeout",
            "0.5",
            "--max-connections",
            "8",
        ])
        .unwrap();
        assert_eq!(o.allowed_origins.len(), 2);
        assert_eq!((o.idle_timeout, o.max_connections), (Duration::from_millis(500), 8));
        assert!(options(&["--header-timeout", "0"]).unwrap_err().contains("--header-timeout"));
        assert!(options(&["--max-connections", "0"]).is_err());
    }
}
