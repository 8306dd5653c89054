//! tlsprof's logger, behind the `log` facade: one line per record on stderr, as
//! `tlsprof: warning: …` (warn), `tlsprof: error: …` (error) or `tlsprof: …` (info, and
//! debug with `-v`). While `tlsprof top` draws the terminal, records go to a buffer whose
//! last line is its status line (`capture`), and to stderr after.
//!
//! Levels: error and warn are always shown; info is what every run says (where metrics are
//! served, what a view measures); debug is `-v` (what was attached, where and how, and why
//! not). Other crates' records (aya's) are shown with `-v` only, and their debug never.
use std::{
    collections::VecDeque,
    io::Write as _,
    sync::{Arc, Mutex, OnceLock},
};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Lines kept while captured.
const KEEP: usize = 100;

struct Logger {
    verbose: bool,
    /// Some while `top` holds the terminal.
    captured: Mutex<Option<Arc<Mutex<VecDeque<String>>>>>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

fn line(record: &Record) -> String {
    let ours = record.target().starts_with("tlsprof");
    let prefix = match record.level() {
        Level::Error => "tlsprof: error: ",
        Level::Warn => "tlsprof: warning: ",
        _ => "tlsprof: ",
    };
    if ours {
        format!("{prefix}{}", record.args())
    } else {
        format!("{prefix}{}: {}", record.target(), record.args())
    }
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        m.target().starts_with("tlsprof") || (self.verbose && m.level() <= Level::Info)
    }

    fn log(&self, record: &Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let text = line(record);
        let captured = self.captured.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match captured {
            Some(buf) => {
                let mut b = buf.lock().unwrap_or_else(|e| e.into_inner());
                b.push_back(text);
                if b.len() > KEEP {
                    b.pop_front();
                }
            }
            None => {
                // one write per line, so that lines from several threads do not interleave
                let _ = std::io::stderr().lock().write_all(format!("{text}\n").as_bytes());
            }
        }
    }

    fn flush(&self) {}
}

/// Installs the logger; the first call decides the level.
pub fn init(verbose: bool) {
    let logger = LOGGER.get_or_init(|| Logger {
        verbose,
        captured: Mutex::new(None),
    });
    let _ = log::set_logger(logger);
    log::set_max_level(if logger.verbose {
        LevelFilter::Debug
    } else {
        LevelFilter::Info
    });
}

/// Records go to a buffer until this is dropped; then they are written to stderr.
pub struct Capture(Arc<Mutex<VecDeque<String>>>);

pub fn capture() -> Capture {
    let buf = Arc::new(Mutex::new(VecDeque::new()));
    if let Some(l) = LOGGER.get() {
        *l.captured.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf.clone());
    }
    Capture(buf)
}

impl Capture {
    /// The last line logged, for a status line.
    pub fn last(&self) -> String {
        let b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        b.back().cloned().unwrap_or_default()
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(l) = LOGGER.get() {
            *l.captured.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        let b = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut err = std::io::stderr().lock();
        for line in b.iter() {
            let _ = writeln!(err, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_records_reach_the_status_line() {
        init(false);
        let c = capture();
        log::warn!("a warning");
        log::debug!("not shown without -v");
        log::info!("the last line");
        assert_eq!(c.last(), "tlsprof: the last line");
        assert_eq!(
            c.0.lock().unwrap().front().map(String::as_str),
            Some("tlsprof: warning: a warning")
        );
        assert_eq!(c.0.lock().unwrap().len(), 2);
    }
}
