//! API keys: gathered from `--api-key`, `--api-key-file` (one key a line) and `KILN_API_KEY` (one
//! key, or several separated by commas), kept only as SHA-256 digests, and checked against
//! `Authorization: Bearer KEY` (the scheme in any case) or `x-api-key: KEY`.
//!
//! A given key is hashed and its 32-byte digest compared with every stored digest, each comparison
//! in full whatever the first difference: the time taken says nothing about a key's length or how
//! much of it matched.

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The environment variable that may hold the API key(s) (so they stay out of `ps`).
pub const API_KEY_VAR: &str = kiln::settings::SERVE_API_KEY.name;

/// The accepted keys, as digests. Empty: no key is required.
#[derive(Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ApiKeys({} keys)", self.digests.len())
    }
}

fn digest(key: &[u8]) -> [u8; 32] {
    Sha256::digest(key).into()
}

impl ApiKeys {
    /// Keys from the command line, a key file and the environment variable's value. An empty key
    /// (`--api-key ""`, an empty variable, a key file without keys) is an error, never "no key".
    pub fn gather(given: &[String], file: Option<&Path>, env: Option<&str>) -> Result<ApiKeys, String> {
        let mut keys: Vec<String> = Vec::new();
        for k in given {
            if k.trim().is_empty() {
                return Err("--api-key must not be empty".into());
            }
            keys.push(k.clone());
        }
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read --api-key-file {}: {e}", path.display()))?;
            let before = keys.len();
            keys.extend(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from));
            if keys.len() == before {
                return Err(format!("--api-key-file {} holds no key (one key a line)", path.display()));
            }
        }
        if let Some(v) = env {
            let from_env: Vec<&str> = v.split(',').map(str::trim).collect();
            if from_env.iter().any(|k| k.is_empty()) {
                return Err(format!("{API_KEY_VAR} is set but holds an empty key (unset it to serve without a key)"));
            }
            keys.extend(from_env.into_iter().map(String::from));
        }
        Ok(ApiKeys { digests: keys.iter().map(|k| digest(k.as_bytes())).collect() })
    }

    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// Whether the request carries one of the keys (always true when there are none).
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        if self.digests.is_empty() {
            return true;
        }
        let bearer = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| {
            let (scheme, key) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
        });
        let x_api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim);
        [bearer, x_api_key].into_iter().flatten().any(|k| self.matches(k.as_bytes()))
    }

    fn matches(&self, key: &[u8]) -> bool {
        let given = digest(key);
        // Every stored digest is compared in full (no early exit on a match or a difference).
        let mut found = false;
        for d in &self.digests {
            let diff = d.iter().zip(&given).fold(0u8, |a, (x, y)| a | (x ^ y));
            found |= std::hint::black_box(diff) == 0;
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn keys_from_every_source_and_both_headers() {
        let dir = std::env::temp_dir().join(format!("kiln-serve-keys-{}", std::process::id()));
        std::fs::write(&dir, "# the team's keys\nfile-key-1\n\n  file-key-2  \n").unwrap();
        let keys = ApiKeys::gather(&["cli-key".into()], Some(&dir), Some("env-a, env-b")).unwrap();
        std::fs::remove_file(&dir).unwrap();
        for k in ["cli-key", "file-key-1", "file-key-2", "env-a", "env-b"] {
            assert!(keys.allows(&headers(&[("authorization", &format!("Bearer {k}"))])), "{k}");
        }
        assert!(keys.allows(&headers(&[("authorization", "bearer env-a")])), "the scheme in any case");
        assert!(keys.allows(&headers(&[("authorization", "BEARER env-a")])));
        assert!(keys.allows(&headers(&[("x-api-key", "file-key-2")])));
        for wrong in ["cli-ke", "cli-key2", "", "# the team's keys", "Basic cli-key"] {
            assert!(!keys.allows(&headers(&[("authorization", &format!("Bearer {wrong}"))])), "{wrong:?}");
            assert!(!keys.allows(&headers(&[("x-api-key", wrong)])), "{wrong:?}");
        }
        assert!(!keys.allows(&headers(&[("authorization", "Basic cli-key")])));
        assert!(!keys.allows(&HeaderMap::new()));
        assert!(ApiKeys::gather(&[], None, None).unwrap().allows(&HeaderMap::new()), "no key: open");
    }

    #[test]
    fn empty_keys_are_refused() {
        assert!(ApiKeys::gather(&[String::new()], None, None).unwrap_err().contains("--api-key"));
        assert!(ApiKeys::gather(&[], None, Some("")).unwrap_err().contains(API_KEY_VAR));
        assert!(ApiKeys::gather(&[], None, Some("a,,b")).is_err());
        let empty = std::env::temp_dir().join(format!("kiln-serve-nokeys-{}", std::process::id()));
        std::fs::write(&empty, "\n# nothing\n").unwrap();
        let e = ApiKeys::gather(&[], Some(&empty), None).map(|_| ()).unwrap_err();
        std::fs::remove_file(&empty).unwrap();
        assert!(e.contains("holds no key"), "{e}");
    }
}
