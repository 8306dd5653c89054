//! Which processes the command line selects: `--comm` by name, `--pid` with its
//! descendants, or every process with a TLS stack when neither is given.
use super::procfs;
use crate::cli::TargetArgs;

pub struct Selector {
    pids: Vec<u32>,
    comms: Vec<String>,
}

impl Selector {
    pub fn new(t: &TargetArgs) -> Self {
        Self {
            pids: t.pids.clone(),
            comms: t.comms.clone(),
        }
    }

    fn all(&self) -> bool {
        self.pids.is_empty() && self.comms.is_empty()
    }

    /// `--pid` or `--comm` was given: what they select is traced whatever its TLS stack
    /// (without either, only processes that carry one).
    pub fn explicit(&self) -> bool {
        !self.all()
    }

    /// A process is selected by its comm, by its pid, or by descending from a selected pid.
    /// `parent_of` gives a process's parent (for the ancestry walk).
    pub fn selects(&self, pid: u32, comm: &str, parent_of: impl Fn(u32) -> Option<u32>) -> bool {
        self.selects_with(pid, comm, parent_of, procfs::exe_name)
    }

    /// `exe_name` gives a process's executable name (read from /proc, or made up in tests).
    fn selects_with(
        &self,
        pid: u32,
        comm: &str,
        parent_of: impl Fn(u32) -> Option<u32>,
        exe_name: impl Fn(u32) -> Option<String>,
    ) -> bool {
        if self.all() {
            return true;
        }
        if self.comms.iter().any(|c| c == comm) {
            return true;
        }
        // `--comm node` also finds a node whose main thread renamed itself.
        if !self.comms.is_empty()
            && exe_name(pid).is_some_and(|e| {
                self.comms
                    .iter()
                    .any(|c| *c == e || (c.len() == 15 && e.starts_with(c.as_str())))
            })
        {
            return true;
        }
        !self.pids.is_empty() && procfs::ancestry(pid, parent_of).any(|p| self.pids.contains(&p))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn selection() {
        // 100 nginx master -> 101, 102 workers; 200 bash -> 201 curl; 300 node;
        // 400 a node that renamed its main thread
        let procs: HashMap<u32, (&str, u32)> = [
            (100, ("nginx", 1)),
            (101, ("nginx", 100)),
            (102, ("nginx", 100)),
            (200, ("bash", 1)),
            (201, ("curl", 200)),
            (300, ("node", 1)),
            (400, ("MainThread", 1)),
        ]
        .into_iter()
        .collect();
        let exe = |pid: u32| matches!(pid, 300 | 400).then(|| "node".to_string());
        let parent = |pid: u32| procs.get(&pid).map(|p| p.1);
        let cases: &[(&[u32], &[&str], &[u32])] = &[
            (&[], &[], &[100, 101, 102, 200, 201, 300, 400]), // default: everything (TLS is checked later)
            (&[100], &[], &[100, 101, 102]),                  // --pid master: its workers too
            (&[101], &[], &[101]),                            // --pid worker: not its siblings
            (&[], &["nginx"], &[100, 101, 102]),              // --comm
            (&[], &["node"], &[300, 400]),                    // --comm also matches the executable
            (&[200], &["node"], &[200, 201, 300, 400]),       // both: union
            (&[999], &[], &[]),                               // a pid that is not there
        ];
        for (pids, comms, want) in cases {
            let sel = Selector {
                pids: pids.to_vec(),
                comms: comms.iter().map(|c| c.to_string()).collect(),
            };
            let mut got: Vec<u32> = procs
                .iter()
                .filter(|(p, (comm, _))| sel.selects_with(**p, comm, parent, exe))
                .map(|(p, _)| *p)
                .collect();
            got.sort_unstable();
            assert_eq!(&got, want, "--pid {pids:?} --comm {comms:?}");
        }
    }
}
