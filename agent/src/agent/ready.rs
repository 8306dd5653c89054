//! Readiness: a process's "attached to" lines are logged, and the --ready-file rewritten,
//! once everything is in place for it (its listening ports watched too): operators and
//! scripts read them as "ready".
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use anyhow::{Context as _, Result};

pub struct Ready {
    /// "attached to" lines waiting for the processes' ports to be watched.
    lines: Vec<String>,
    file: Option<PathBuf>,
    /// What the ready file says now.
    written: Option<BTreeMap<u32, String>>,
}

impl Ready {
    pub fn new(file: Option<PathBuf>) -> Self {
        Self {
            lines: Vec::new(),
            file,
            written: None,
        }
    }

    /// A line to log at the next `say`.
    pub fn add(&mut self, line: String) {
        self.lines.push(line);
    }

    pub fn extend(&mut self, lines: Vec<String>) {
        self.lines.extend(lines);
    }

    /// Logs the lines waiting, and writes "PID NAME" of each traced process (`now`) to the
    /// ready file when that changed.
    pub fn say(&mut self, now: BTreeMap<u32, String>) {
        for msg in std::mem::take(&mut self.lines) {
            log::debug!("{msg}");
        }
        let Some(path) = &self.file else { return };
        if self.written.as_ref() == Some(&now) {
            return;
        }
        let text: String = now.iter().map(|(p, n)| format!("{p} {n}\n")).collect();
        match write_atomically(path, &text) {
            Ok(()) => self.written = Some(now),
            Err(e) => log::warn!("cannot write {}: {e:#}", path.display()),
        }
    }

    /// Removes the ready file.
    pub fn remove(&self) {
        if let Some(path) = &self.file {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).context("renaming it")?;
    Ok(())
}
