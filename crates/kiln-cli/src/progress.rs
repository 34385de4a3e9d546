//! Progress on stderr. Loading a model's weights: a bar on a terminal, plain lines (every 10%) when
//! stderr is piped (CI logs, `| tee`), nothing for small models. The phases of a long run
//! (`kiln llm-bench`): a bar over the phases that names the current one and its time on a
//! terminal, one line per phase when piped.

use crate::sysinfo::human_bytes;
use std::io::IsTerminal;

/// Models smaller than this load in a moment: no progress is shown.
const SHOW_ABOVE: u64 = 256 << 20;

/// The progress callback of `LoadOptions` and what to call when loading ends.
pub struct LoadProgress {
    pub callback: Option<Box<dyn FnMut(u64, u64)>>,
    bar: Option<indicatif::ProgressBar>,
}

impl LoadProgress {
    /// Progress for `total` bytes of weights.
    pub fn new(total: u64) -> LoadProgress {
        if total <= SHOW_ABOVE {
            return LoadProgress { callback: None, bar: None };
        }
        if std::io::stderr().is_terminal() {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("loading {bar:40} {bytes}/{total_bytes} {bytes_per_sec} {eta}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let bar = b.clone();
            return LoadProgress { callback: Some(Box::new(move |done, _| bar.set_position(done))), bar: Some(b) };
        }
        let mut lines = PlainLines::default();
        let callback = Box::new(move |done, total| {
            if let Some(line) = lines.update(done, total) {
                errln!("{line}");
            }
        });
        LoadProgress { callback: Some(callback), bar: None }
    }

    /// Clears the bar (the caller prints the load time).
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// The phases of a run, each announced as it starts.
pub struct Phases {
    bar: Option<indicatif::ProgressBar>,
    started: u64,
}

impl Phases {
    /// Progress over `total` phases.
    pub fn new(total: u64) -> Phases {
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template("[{pos}/{len}] {msg} ({elapsed})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(std::time::Duration::from_millis(200));
            b
        });
        Phases { bar, started: 0 }
    }

    /// The previous phase is done and `what` begins.
    pub fn start(&mut self, what: &str) {
        self.started += 1;
        match &self.bar {
            Some(b) => {
                b.set_position(self.started - 1);
                b.set_message(what.to_string());
                b.reset_elapsed();
            }
            None => errln!("{what} ..."),
        }
    }

    /// Prints a result line above the bar (or as a plain line).
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => errln!("{line}"),
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}

/// One line each time loading passes another tenth of the bytes.
#[derive(Default)]
struct PlainLines {
    tenths: u64,
}

impl PlainLines {
    fn update(&mut self, done: u64, total: u64) -> Option<String> {
        let now = (done.min(total) * 10).checked_div(total)?;
        (now > self.tenths).then(|| {
            self.tenths = now;
            format!("loading weights: {}% ({} of {})", now * 10, human_bytes(done), human_bytes(total))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PlainLines;

    #[test]
    fn plain_lines_every_tenth() {
        let mut p = PlainLines::default();
        let total = 1000;
        let lines: Vec<String> = (1..=100).filter_map(|i| p.update(i * 10, total)).collect();
        assert_eq!(lines.len(), 10);
        assert!(lines[0].starts_with("loading weights: 10%"), "{}", lines[0]);
        assert!(lines[9].starts_with("loading weights: 100%"), "{}", lines[9]);
        assert_eq!(PlainLines::default().update(5, 0), None);
        // A jump past several tenths gives one line.
        assert_eq!(PlainLines::default().update(999, 1000).unwrap(), "loading weights: 90% (999 B of 1000 B)");
    }
}
