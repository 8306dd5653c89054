//! The split of each traced process's exact on-CPU time by its samples, once a second;
//! the handshake share the probes could not see while the overhead budget kept them away.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};

use super::{
    classify::{classify, in_trap},
    flame::{fold, Folded},
    symbols::{self, Kallsyms, Mapping, Prim},
    Category,
};
use crate::discovery::files::ElfFiles;
use crate::metrics::LabelValue;
use crate::{
    bounds,
    bpf::{cpu as pc, read_record},
    metrics::{CategoryLabels, CommLabels, LibraryLabels, Metrics, PrimitiveLabels},
};

struct ProcState {
    comm: String,
    /// Handshake probes are attached (OpenSSL): TLS code outside them is record crypto.
    probed: bool,
    maps: Vec<Mapping>,
    maps_read: Instant,
    /// On-CPU time already exported.
    seen_ns: u64,
    /// On-CPU time not split yet (no sample since).
    unsplit_ns: u64,
    by_category: HashMap<Category, u64>,
    by_prim: HashMap<Prim, u64>,
    samples: u64,
    /// The handshake probes are attached now (the overhead budget detaches them for part
    /// of each cycle).
    probes_on: bool,
    /// This second's samples taken while the probes were attached, by the category they
    /// would have without the handshake flag: all of them, and those inside a handshake call.
    under_all: HashMap<Category, u64>,
    under_hs: HashMap<Category, u64>,
    /// This second's samples taken while the probes were away, by category.
    off: HashMap<Category, u64>,
    /// The same over recent seconds (decaying): the share of each category's samples that
    /// are handshake work while the probes are attached, for the samples taken without.
    learned_all: HashMap<Category, f64>,
    learned_hs: HashMap<Category, f64>,
    /// This second's samples taken in a uprobe trap.
    trap_samples: u64,
    /// The time in uprobe traps so far, as the samples split it.
    traps: TrapTime,
}

/// A process's time in uprobe traps, by its samples (agent/trap_cost.rs): how many, and
/// the on-CPU time they stand for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TrapTime {
    pub samples: u64,
    pub seconds: f64,
}

/// Categories whose samples may hide handshake work while the probes are away.
const HIDES_HANDSHAKE: [Category; 3] = [Category::Crypto, Category::KernelNet, Category::Other];
/// Weight kept from earlier seconds in the learned shares, per second with samples taken
/// while the probes were attached.
const LEARN_DECAY: f64 = 0.8;
/// (process name, library, symbols) triples remembered as exported in
/// tlsprof_tls_library_info, at most; beyond, one is exported again at each attach,
/// counted: tlsprof_table_full_total{table="tls_libraries"}.
pub const MAX_TLS_LIBRARIES: usize = 4096;

pub struct Profiler {
    metrics: Arc<Metrics>,
    samples: RingBuf<MapData>,
    kallsyms: Option<Kallsyms>,
    /// What is known of the files processes map (shared with the agent's targets).
    files: ElfFiles,
    procs: HashMap<u32, ProcState>,
    pub folded: Option<Folded>,
    /// Libraries already exported in tlsprof_tls_library_info.
    libs_exported: HashSet<LibKey>,
    /// --sample-hz 0 turns CPU attribution off: no sampling, no per-process accounting.
    enabled: bool,
}

impl Profiler {
    pub fn new(
        metrics: Arc<Metrics>,
        samples: RingBuf<MapData>,
        files: ElfFiles,
        flamegraph: bool,
        enabled: bool,
    ) -> Self {
        let kallsyms = Kallsyms::load(flamegraph);
        if kallsyms.is_none() {
            log::warn!(
                "/proc/kallsyms shows no addresses (kernel.kptr_restrict?): kernel time cannot be told apart \
                 (it goes to category other)"
            );
        }
        Self {
            metrics,
            samples,
            kallsyms,
            files,
            procs: HashMap::new(),
            folded: flamegraph.then(Folded::default),
            libs_exported: HashSet::new(),
            enabled,
        }
    }

    /// Starts accounting a process (the kernel sums its on-CPU time from when the agent
    /// added it to the traced set).
    /// `maps`: its memory map, as the caller read it.
    pub fn add(&mut self, pid: u32, comm: &str, probed: bool, maps: &str) {
        if self.procs.contains_key(&pid) {
            return;
        }
        if self.enabled {
            // Every category is exported from the start, at zero until a sample lands in it
            // (the probes' share may take a while at a low sampling rate).
            for category in Category::ALL.iter().copied() {
                let _ = self.metrics.cpu.get_or_create(&CategoryLabels {
                    comm: comm.to_string(),
                    category: category.label().to_string(),
                });
            }
        }
        let maps = symbols::mappings_in(&self.files, pid, maps);
        for m in &maps {
            let Some(f) = &m.file else { continue };
            if !f.has_tls_code() {
                continue;
            }
            let key = (comm.to_string(), f.base.clone(), f.symbols.label().to_string());
            match first_export(&mut self.libs_exported, &key) {
                None => continue,
                Some(remembered) => bounds::count(&self.metrics, "tls_libraries", u64::from(!remembered)),
            }
            self.metrics
                .tls_library
                .get_or_create(&LibraryLabels {
                    comm: key.0,
                    library: key.1,
                    symbols: key.2,
                })
                .set(1);
        }
        self.procs.insert(
            pid,
            ProcState {
                comm: comm.to_string(),
                probed,
                maps,
                maps_read: Instant::now(),
                seen_ns: 0,
                unsplit_ns: 0,
                by_category: HashMap::new(),
                by_prim: HashMap::new(),
                samples: 0,
                probes_on: false,
                under_all: HashMap::new(),
                under_hs: HashMap::new(),
                off: HashMap::new(),
                learned_all: HashMap::new(),
                learned_hs: HashMap::new(),
                trap_samples: 0,
                traps: TrapTime::default(),
            },
        );
        self.export_dropped();
    }

    /// Mappings left without their file at the symbol cache's bound.
    fn export_dropped(&mut self) {
        if let Some(f) = &mut self.folded {
            bounds::count(&self.metrics, "flame_stacks", std::mem::take(&mut f.dropped));
        }
    }

    /// The handshake probes of a process were attached (on) or detached.
    pub fn set_probes(&mut self, pid: u32, on: bool) {
        if self.procs.get(&pid).is_none_or(|st| st.probes_on == on) {
            return;
        }
        // the samples so far were taken in the state that ends now
        self.drain();
        if let Some(st) = self.procs.get_mut(&pid) {
            st.probes_on = on;
        }
    }

    /// Stops accounting a process (it exited or exec'd), after a last split with its
    /// final on-CPU time (`oncpu_ns`, from the kernel).
    pub fn remove(&mut self, pid: u32, oncpu_ns: Option<u64>) {
        self.drain();
        self.split(pid, oncpu_ns);
        if let Some(st) = self.procs.remove(&pid) {
            if st.unsplit_ns > 0 {
                log::debug!(
                    "{pid} ({}) ended with {:.3} ms of CPU time after its last sample",
                    st.comm,
                    st.unsplit_ns as f64 / 1e6
                );
            }
        }
        self.files.trim();
    }

    /// Reads the samples the kernel has for us.
    pub fn drain(&mut self) {
        let mut batch = Vec::new();
        while let Some(item) = self.samples.next() {
            if let Some(s) = read_record::<pc::cpu_sample>(&item) {
                batch.push(s);
            }
        }
        for s in batch {
            self.on_sample(&s);
        }
        self.export_dropped();
    }

    fn on_sample(&mut self, s: &pc::cpu_sample) {
        let Some(st) = self.procs.get_mut(&s.tgid) else { return };
        self.metrics.cpu_samples.inc();
        // A leaf outside every known mapping: the process mapped new code (dlopen, JIT).
        if let Some(&ip) = s.user_frames().first() {
            if symbols::find(&st.maps, ip).is_none() && st.maps_read.elapsed() > Duration::from_secs(1) {
                if let Ok(m) = symbols::mappings(&self.files, s.tgid) {
                    st.maps = m;
                }
                st.maps_read = Instant::now();
            }
        }
        let st = &self.procs[&s.tgid];
        let v = classify(s, st.probed, &st.maps, self.kallsyms.as_ref());
        let under = if st.probed && v.category == Category::Handshake {
            let mut plain = *s;
            plain.flags &= !pc::CPU_SAMPLE_HANDSHAKE;
            Some(classify(&plain, st.probed, &st.maps, self.kallsyms.as_ref()).category)
        } else {
            None
        };
        if let Some(folded) = &mut self.folded {
            fold(folded, s, &st.comm, &st.maps, self.kallsyms.as_ref());
        }
        let st = self.procs.get_mut(&s.tgid).expect("looked up above");
        *st.by_category.entry(v.category).or_default() += 1;
        if st.probes_on {
            *st.under_all.entry(under.unwrap_or(v.category)).or_default() += 1;
            if let Some(u) = under {
                *st.under_hs.entry(u).or_default() += 1;
            }
        } else {
            *st.off.entry(v.category).or_default() += 1;
        }
        if v.prim != Prim::None {
            *st.by_prim.entry(v.prim).or_default() += 1;
        }
        if v.category == Category::Probes && in_trap(s, self.kallsyms.as_ref()) {
            st.trap_samples += 1;
        }
        st.samples += 1;
    }

    /// A process's time in uprobe traps so far, by its samples (None: not accounted, or CPU
    /// attribution is off).
    pub fn trap_time(&self, pid: u32) -> Option<TrapTime> {
        self.procs.get(&pid).filter(|_| self.enabled).map(|st| st.traps)
    }

    /// Whether CPU attribution is on (the kernel then sums each traced process's on-CPU time).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Splits every process's new on-CPU time by its samples since the last split;
    /// `oncpu_ns` gives a process's on-CPU time so far, as the kernel summed it.
    pub fn tick(&mut self, oncpu_ns: impl Fn(u32) -> Option<u64>) {
        self.drain();
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.split(pid, oncpu_ns(pid));
        }
    }

    fn split(&mut self, pid: u32, oncpu_ns: Option<u64>) {
        let (true, Some(st), Some(oncpu_ns)) = (self.enabled, self.procs.get_mut(&pid), oncpu_ns) else {
            return;
        };
        let delta = oncpu_ns.saturating_sub(st.seen_ns);
        st.seen_ns = oncpu_ns.max(st.seen_ns);
        let comm = CommLabels { comm: st.comm.clone() };
        if delta > 0 {
            self.metrics.process_cpu.get_or_create(&comm).inc_by(delta as f64 / 1e9);
        }
        st.unsplit_ns += delta;
        if st.samples == 0 || st.unsplit_ns == 0 {
            return;
        }
        let weights = hidden_handshake(st);
        let per_sample = st.unsplit_ns as f64 / 1e9 / st.samples as f64;
        st.traps.samples += st.trap_samples;
        st.traps.seconds += std::mem::take(&mut st.trap_samples) as f64 * per_sample;
        st.by_category.clear();
        for (cat, n) in weights {
            self.metrics
                .cpu
                .get_or_create(&CategoryLabels {
                    comm: st.comm.clone(),
                    category: cat.label().into(),
                })
                .inc_by(n * per_sample);
        }
        for (prim, n) in st.by_prim.drain() {
            self.metrics
                .crypto_cpu
                .get_or_create(&PrimitiveLabels {
                    comm: st.comm.clone(),
                    primitive: prim.label().into(),
                })
                .inc_by(n as f64 * per_sample);
        }
        st.samples = 0;
        st.unsplit_ns = 0;
    }
}

/// (process name, library, symbols): a tlsprof_tls_library_info series.
type LibKey = (String, String, String);

/// None when the series was exported already; else Some(whether it is now remembered as
/// exported: not past MAX_TLS_LIBRARIES).
fn first_export(exported: &mut HashSet<LibKey>, key: &LibKey) -> Option<bool> {
    if exported.contains(key) {
        return None;
    }
    if exported.len() >= MAX_TLS_LIBRARIES {
        return Some(false);
    }
    exported.insert(key.clone());
    Some(true)
}

/// A second's samples by category, with the handshake work hidden in the samples taken
/// while the probes were away moved to `handshake`: each category gives up the share of
/// those samples that was handshake work in the samples taken with the probes attached, in
/// this and recent seconds (any part of a second with the probes attached teaches it: with
/// the overhead budget's short windows a whole second attached is rare).
fn hidden_handshake(st: &mut ProcState) -> Vec<(Category, f64)> {
    let under_all = std::mem::take(&mut st.under_all);
    let under_hs = std::mem::take(&mut st.under_hs);
    let off = std::mem::take(&mut st.off);
    let mut w: HashMap<Category, f64> = st.by_category.iter().map(|(c, n)| (*c, *n as f64)).collect();
    if !st.probed {
        return w.into_iter().collect();
    }
    for c in HIDES_HANDSHAKE {
        let (new_all, new_hs) = (
            under_all.get(&c).copied().unwrap_or(0),
            under_hs.get(&c).copied().unwrap_or(0),
        );
        if new_all > 0 {
            let all = st.learned_all.entry(c).or_default();
            *all = *all * LEARN_DECAY + new_all as f64;
            let hs = st.learned_hs.entry(c).or_default();
            *hs = *hs * LEARN_DECAY + new_hs as f64;
        }
    }
    for c in HIDES_HANDSHAKE {
        let all = st.learned_all.get(&c).copied().unwrap_or(0.0);
        if all <= 0.0 {
            continue;
        }
        let share = st.learned_hs.get(&c).copied().unwrap_or(0.0) / all;
        let moved = off.get(&c).copied().unwrap_or(0) as f64 * share;
        if moved > 0.0 {
            *w.entry(c).or_default() -= moved;
            *w.entry(Category::Handshake).or_default() += moved;
        }
    }
    w.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exported_libraries_are_bounded() {
        let mut set = HashSet::new();
        let key = |i: usize| (format!("p{i}"), "libssl.so.3".to_string(), "full".to_string());
        for i in 0..MAX_TLS_LIBRARIES {
            assert_eq!(first_export(&mut set, &key(i)), Some(true));
        }
        assert_eq!(first_export(&mut set, &key(0)), None);
        assert_eq!(first_export(&mut set, &key(MAX_TLS_LIBRARIES)), Some(false));
        assert_eq!(set.len(), MAX_TLS_LIBRARIES);
    }
}
