//! Autotuning: where one kernel configuration cannot serve every shape, the candidates are timed
//! once per (device, kernel, shape bucket) and the winner kept, in memory and in a JSON file
//! (`$KILN_CACHE_DIR/autotune-v1.json`, else `~/.cache/kiln/autotune-v1.json`) keyed by adapter
//! name, driver and the kernel's bucket key. Off by default, so tests and normal use take each op's
//! fixed heuristic; on with `KILN_AUTOTUNE=1` or `Device::set_autotune(true)` (`kiln bench`).
//!
//! Timing: on a hardware GPU the first candidate is first run back to back for a second (an idle GPU
//! needs about half a second of load to reach its clocks; timed cold, the first candidates lose to
//! later ones for no reason of their own). Then each candidate: a warm-up run (which also compiles)
//! and the best of a few measurements between `synchronize`s (host wall time, several runs per
//! measurement for short kernels), in two rounds over all candidates, the best of both kept. A
//! candidate that fails (compile error, limits) is skipped.

use super::context::GpuContext;
use crate::Result;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

const FILE: &str = "autotune-v1.json";

/// Winners by key, stored as one flat JSON object of strings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct TuneCache {
    entries: BTreeMap<String, String>,
}

impl TuneCache {
    /// The cache in `path`; empty when the file is missing or not a JSON object of strings.
    pub(crate) fn load(path: &Path) -> TuneCache {
        let entries = std::fs::read_to_string(path).ok().and_then(|s| parse(&s)).unwrap_or_default();
        TuneCache { entries }
    }

    /// Writes the cache to `path` (merged over what the file holds now, through a temporary file
    /// and a rename so that readers never see half a file).
    pub(crate) fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut merged = TuneCache::load(path);
        merged.entries.extend(self.entries.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, to_json(&merged.entries))?;
        std::fs::rename(&tmp, path)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&String> {
        self.entries.get(key)
    }

    pub(crate) fn insert(&mut self, key: String, value: String) {
        self.entries.insert(key, value);
    }
}

/// The default cache file: under `$KILN_CACHE_DIR`, else `~/.cache/kiln`; `None` without either.
pub(crate) fn default_path() -> Option<PathBuf> {
    if let Some(dir) = crate::settings::CACHE_DIR.get_os().filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir).join(FILE));
    }
    let home = std::env::var_os("HOME").filter(|d| !d.is_empty())?;
    Some(PathBuf::from(home).join(".cache").join("kiln").join(FILE))
}

/// Per-device switches set through `Device::set_autotune` (by context index).
fn switches() -> MutexGuard<'static, HashMap<usize, bool>> {
    static S: OnceLock<Mutex<HashMap<usize, bool>>> = OnceLock::new();
    S.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Turns autotuning on or off for one device (overriding `KILN_AUTOTUNE`).
pub(crate) fn set_enabled(ctx: &GpuContext, on: bool) {
    switches().insert(ctx.index, on);
}

/// Whether ops on this device autotune.
pub(crate) fn enabled(ctx: &GpuContext) -> bool {
    static ENV: OnceLock<bool> = OnceLock::new();
    switches().get(&ctx.index).copied().unwrap_or_else(|| *ENV.get_or_init(|| crate::settings::AUTOTUNE.is_one()))
}

/// The part of a cache key that names the device.
pub(crate) fn device_key(ctx: &GpuContext) -> String {
    format!("{}|{}", ctx.summary.name, ctx.summary.driver)
}

/// Caches in memory, by file (`None`: memory only), each loaded from its file on first use.
fn caches() -> MutexGuard<'static, HashMap<Option<PathBuf>, TuneCache>> {
    static C: OnceLock<Mutex<HashMap<Option<PathBuf>, TuneCache>>> = OnceLock::new();
    C.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// The cached winner for `key`.
pub(crate) fn lookup(path: Option<&Path>, key: &str) -> Option<String> {
    let mut caches = caches();
    let cache =
        caches.entry(path.map(Path::to_path_buf)).or_insert_with(|| path.map(TuneCache::load).unwrap_or_default());
    cache.get(key).cloned()
}

/// Remembers the winner for `key` and writes the cache file (a file that cannot be written leaves
/// the winner in memory only).
pub(crate) fn record(path: Option<&Path>, key: &str, value: &str) {
    let mut caches = caches();
    let cache = caches.entry(path.map(Path::to_path_buf)).or_default();
    cache.insert(key.to_string(), value.to_string());
    if let Some(path) = path {
        let _ = cache.save(path);
    }
}

/// Held while a tuning session runs, so that two threads do not time candidates against each other.
pub(crate) fn session() -> MutexGuard<'static, ()> {
    static S: Mutex<()> = Mutex::new(());
    S.lock().unwrap_or_else(|e| e.into_inner())
}

/// Keeps a hardware GPU busy with `record` for a second ([`super::keep_busy`]), so that candidates
/// are timed at its working clocks; nothing on a software adapter.
pub(crate) fn warm_up(ctx: &GpuContext, record: impl FnMut() -> Result<()>) -> Result<()> {
    if ctx.summary.software {
        return Ok(());
    }
    super::context::keep_busy(ctx, 1.0, record)
}

/// The best time in seconds of one run of `record` (which records GPU work): after a warm-up run
/// (which also compiles), `runs` measurements, each of enough runs back to back (up to 64) to take
/// about 2 ms between `synchronize`s, so that submitting and waiting do not swamp short kernels.
/// Stops early once a measurement exceeds `cutoff` seconds per run.
pub(crate) fn time(ctx: &GpuContext, runs: usize, cutoff: f64, mut record: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut measure = |reps: usize| -> Result<f64> {
        let start = Instant::now();
        for _ in 0..reps {
            record()?;
        }
        ctx.exec.lock().unwrap_or_else(|e| e.into_inner()).synchronize(ctx)?;
        Ok(start.elapsed().as_secs_f64() / reps as f64)
    };
    measure(1)?;
    let mut best = measure(1)?;
    let reps = ((2e-3 / best).ceil() as usize).clamp(1, 64);
    for _ in 0..runs {
        if best > cutoff {
            break;
        }
        best = best.min(measure(reps)?);
    }
    Ok(best)
}

fn to_json(entries: &BTreeMap<String, String>) -> String {
    let quote = |s: &str| {
        let mut o = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => o += "\\\"",
                '\\' => o += "\\\\",
                c if (c as u32) < 0x20 => o += &format!("\\u{:04x}", c as u32),
                c => o.push(c),
            }
        }
        o + "\""
    };
    let body: Vec<String> = entries.iter().map(|(k, v)| format!("  {}: {}", quote(k), quote(v))).collect();
    format!("{{\n{}\n}}\n", body.join(",\n"))
}

/// Parses a flat JSON object whose values are all strings; `None` for anything else.
fn parse(s: &str) -> Option<BTreeMap<String, String>> {
    let mut c = s.trim().chars().peekable();
    let mut out = BTreeMap::new();
    let skip_ws = |c: &mut std::iter::Peekable<std::str::Chars>| {
        while c.peek().is_some_and(|x| x.is_whitespace()) {
            c.next();
        }
    };
    let string = |c: &mut std::iter::Peekable<std::str::Chars>| -> Option<String> {
        if c.next()? != '"' {
            return None;
        }
        let mut o = String::new();
        loop {
            match c.next()? {
                '"' => return Some(o),
                '\\' => match c.next()? {
                    '"' => o.push('"'),
                    '\\' => o.push('\\'),
                    '/' => o.push('/'),
                    'n' => o.push('\n'),
                    't' => o.push('\t'),
                    'r' => o.push('\r'),
                    'b' => o.push('\u{8}'),
                    'f' => o.push('\u{c}'),
                    'u' => {
                        let hex: String = (0..4).map(|_| c.next()).collect::<Option<_>>()?;
                        o.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    _ => return None,
                },
                x => o.push(x),
            }
        }
    };
    if c.next()? != '{' {
        return None;
    }
    skip_ws(&mut c);
    if c.peek() == Some(&'}') {
        c.next();
        return c.next().is_none().then_some(out);
    }
    loop {
        skip_ws(&mut c);
        let k = string(&mut c)?;
        skip_ws(&mut c);
        if c.next()? != ':' {
            return None;
        }
        skip_ws(&mut c);
        let v = string(&mut c)?;
        out.insert(k, v);
        skip_ws(&mut c);
        match c.next()? {
            ',' => continue,
            '}' => return c.next().is_none().then_some(out),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kiln-autotune-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn cache_round_trips_through_its_file() {
        let dir = temp_dir("roundtrip");
        let path = dir.join("sub").join(FILE);
        let mut c = TuneCache::default();
        c.insert("NVIDIA H200|nvidia 580|matmul:f32:ak4:bo4:m4096".into(), "tiled:128x128:s1".into());
        c.insert("odd \"name\" \\ with\ttab|é|k".into(), "skinny:s0:t".into());
        c.save(&path).unwrap();
        assert_eq!(TuneCache::load(&path), c);
        // Saving merges over entries another process wrote meanwhile.
        let mut other = TuneCache::default();
        other.insert("x".into(), "naive:s1".into());
        other.save(&path).unwrap();
        let both = TuneCache::load(&path);
        assert_eq!(both.get("x").map(String::as_str), Some("naive:s1"));
        assert_eq!(both.get("odd \"name\" \\ with\ttab|é|k").map(String::as_str), Some("skinny:s0:t"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn corrupt_or_missing_files_are_ignored() {
        let dir = temp_dir("corrupt");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(FILE);
        assert_eq!(TuneCache::load(&path), TuneCache::default(), "missing file");
        for bad in ["", "{", "[]", "{\"a\": 1}", "{\"a\": \"b\",}", "{\"a\" \"b\"}", "{\"a\": \"b\"} x", "\u{0}\u{1}"] {
            std::fs::write(&path, bad).unwrap();
            assert_eq!(TuneCache::load(&path), TuneCache::default(), "{bad:?}");
        }
        std::fs::write(&path, " { } ").unwrap();
        assert_eq!(TuneCache::load(&path), TuneCache::default());
        // A corrupt file is replaced by the next save.
        std::fs::write(&path, "{ not json").unwrap();
        let mut c = TuneCache::default();
        c.insert("k".into(), "v".into());
        c.save(&path).unwrap();
        assert_eq!(TuneCache::load(&path), c);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lookup_and_record_use_the_given_file() {
        let dir = temp_dir("record");
        let path = dir.join(FILE);
        assert_eq!(lookup(Some(&path), "key"), None);
        record(Some(&path), "key", "naive:s1");
        assert_eq!(lookup(Some(&path), "key").as_deref(), Some("naive:s1"));
        assert_eq!(TuneCache::load(&path).get("key").map(String::as_str), Some("naive:s1"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
