//! Every traced process's probing, keyed by pid: whether it has handshake probes (and
//! their state), or why it has none. The one table of it: Targets adds a process here when
//! it starts tracing it and takes it out when it stops; the budget and the handshakes'
//! join ask here.
use rustc_hash::FxHashMap;

use super::{Probes, Probing};
use crate::bpf::loader::Kernel;

#[derive(Default)]
pub struct Probed(FxHashMap<u32, Probing>);

impl Probed {
    pub fn insert(&mut self, pid: u32, probing: Probing) {
        self.0.insert(pid, probing);
    }

    /// A process no longer traced: its probing, for its owner to release.
    pub fn remove(&mut self, pid: u32) -> Option<Probing> {
        self.0.remove(&pid)
    }

    pub fn get(&self, pid: u32) -> Option<&Probing> {
        self.0.get(&pid)
    }

    /// Its probes, if it has any.
    pub fn probes(&self, pid: u32) -> Option<&Probes> {
        self.0.get(&pid)?.probes()
    }

    pub fn probes_mut(&mut self, pid: u32) -> Option<&mut Probes> {
        self.0.get_mut(&pid)?.probes_mut()
    }

    /// Each process with probes.
    pub fn each(&self) -> impl Iterator<Item = (u32, &Probes)> {
        self.0.iter().filter_map(|(pid, p)| Some((*pid, p.probes()?)))
    }

    pub fn each_mut(&mut self) -> impl Iterator<Item = (u32, &mut Probes)> {
        self.0.iter_mut().filter_map(|(pid, p)| Some((*pid, p.probes_mut()?)))
    }

    /// Shutting down: every process's probes detached at once (Probing::release_all).
    pub fn release_all(&mut self, k: &mut Kernel) {
        Probing::release_all(self.0.iter_mut().map(|(pid, p)| (*pid, p)), k);
    }
}
