//! CPU attribution: where a traced process's CPU goes.
//!
//! The kernel sums each traced process's on-CPU time exactly (cpu_procs, at every context
//! switch) and a per-CPU perf event samples what it runs (cpu_sample). Once a second the
//! agent splits each process's new on-CPU time by the categories of that second's samples:
//!
//! 1. `probes`: in a uprobe trap or a BPF program (tlsprof's own cost);
//! 2. `handshake`: the thread was inside a TLS handshake call (user and kernel);
//! 3. `crypto`: kernel TLS (the tls module), or user code in the TLS library outside a
//!    handshake — `tls_library` instead for processes without handshake probes (a TLS
//!    stack other than OpenSSL), where handshakes cannot be told apart;
//! 4. `kernel_net`: kernel socket and TCP work (send/recv, accept, close, epoll, softirq);
//! 5. `other`: the rest of the kernel and the application.
//!
//! TLS-library samples are also split by crypto primitive where the library has names.
use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};

use crate::{
    metrics::{CategoryLabels, CommLabels, LibraryLabels, Metrics, PrimitiveLabels},
    probes::{cpu as pc, read_record},
    symbols::{self, FileCache, KClass, Kallsyms, Mapping, Prim},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    Handshake,
    Crypto,
    TlsLibrary,
    KernelNet,
    Probes,
    Other,
}

impl Category {
    pub const ALL: [Category; 6] = [
        Category::Handshake,
        Category::Crypto,
        Category::TlsLibrary,
        Category::KernelNet,
        Category::Probes,
        Category::Other,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Category::Handshake => "handshake",
            Category::Crypto => "crypto",
            Category::TlsLibrary => "tls_library",
            Category::KernelNet => "kernel_net",
            Category::Probes => "probes",
            Category::Other => "other",
        }
    }
}

/// What one sample was doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub category: Category,
    /// The crypto primitive, when the sample ran TLS code (`Prim::None` otherwise).
    pub prim: Prim,
}

struct ProcState {
    comm: String,
    /// Handshake probes are attached (OpenSSL): TLS code outside them is record crypto.
    probed: bool,
    maps: Vec<Mapping>,
    maps_read: Instant,
    /// cpu_procs value already exported.
    seen_ns: u64,
    /// On-CPU time not split yet (no sample since).
    unsplit_ns: u64,
    by_category: HashMap<Category, u64>,
    by_prim: HashMap<Prim, u64>,
    samples: u64,
    /// The handshake probes are attached now (the overhead budget detaches them for part
    /// of each cycle), since when, and for how long during this split's second.
    probes_on: bool,
    changed: Instant,
    on_in_tick: Duration,
    tick_start: Instant,
    /// This second's samples by the category they would have without the handshake flag:
    /// all of them, and those inside a handshake call.
    under_all: HashMap<Category, u64>,
    under_hs: HashMap<Category, u64>,
    /// The same over recent seconds with the probes attached throughout (decaying): the
    /// share of each category's samples that are handshake work, for the seconds without.
    learned_all: HashMap<Category, f64>,
    learned_hs: HashMap<Category, f64>,
}

impl ProcState {
    /// How long the handshake probes have been attached since this split's second began.
    fn probes_on_in_tick(&self, now: Instant) -> Duration {
        let current = if self.probes_on {
            now.saturating_duration_since(self.changed.max(self.tick_start))
        } else {
            Duration::ZERO
        };
        self.on_in_tick + current
    }
}

/// Categories whose samples may hide handshake work while the probes are away.
const HIDES_HANDSHAKE: [Category; 3] = [Category::Crypto, Category::KernelNet, Category::Other];
/// Weight kept from earlier seconds in the learned shares, per second with the probes on.
const LEARN_DECAY: f64 = 0.8;

/// Flame graph stacks being collected (`tlsprof flamegraph`).
#[derive(Default)]
pub struct Folded {
    pub stacks: HashMap<String, u64>,
    /// Frame names that are TLS code, to highlight.
    pub tls_frames: HashSet<String>,
}

pub struct Profiler {
    metrics: Arc<Metrics>,
    samples: RingBuf<MapData>,
    procs_map: BpfHashMap<MapData, u32, pc::cpu_proc>,
    kallsyms: Option<Kallsyms>,
    files: FileCache,
    procs: HashMap<u32, ProcState>,
    pub folded: Option<Folded>,
    /// Libraries already exported in tlsprof_tls_library_info.
    libs_exported: HashSet<(String, String, String)>,
    verbose: bool,
    /// --sample-hz 0 turns CPU attribution off: no sampling, no per-process accounting.
    enabled: bool,
}

/// Address -> (mapping, file virtual address).
fn locate(maps: &[Mapping], addr: u64) -> Option<(&Mapping, Option<u64>)> {
    let m = symbols::find(maps, addr)?;
    Some((m, m.vaddr(addr)))
}

impl Profiler {
    pub fn new(
        metrics: Arc<Metrics>,
        samples: RingBuf<MapData>,
        procs_map: BpfHashMap<MapData, u32, pc::cpu_proc>,
        debug_dirs: Vec<std::path::PathBuf>,
        flamegraph: bool,
        verbose: bool,
        enabled: bool,
    ) -> Self {
        let kallsyms = Kallsyms::load(flamegraph);
        if kallsyms.is_none() {
            eprintln!(
                "tlsprof: warning: /proc/kallsyms shows no addresses (kernel.kptr_restrict?): kernel time \
                 cannot be told apart (it goes to category other)"
            );
        }
        Self {
            metrics,
            samples,
            procs_map,
            kallsyms,
            files: FileCache::new(debug_dirs, flamegraph),
            procs: HashMap::new(),
            folded: flamegraph.then(Folded::default),
            libs_exported: HashSet::new(),
            verbose,
            enabled,
        }
    }

    /// Starts accounting a process.
    pub fn add(&mut self, pid: u32, comm: &str, probed: bool) {
        if self.procs.contains_key(&pid) {
            return;
        }
        if self.enabled {
            let _ = self.procs_map.insert(pid, pc::cpu_proc::default(), 0);
            // Every category is exported from the start, at zero until a sample lands in it
            // (the probes' share may take a while at a low sampling rate).
            for category in Category::ALL {
                let _ = self.metrics.cpu.get_or_create(&CategoryLabels {
                    comm: comm.to_string(),
                    category: category.label().to_string(),
                });
            }
        }
        let maps = self.files.mappings(pid).unwrap_or_default();
        for m in &maps {
            let Some(f) = &m.file else { continue };
            if !f.has_tls_code() {
                continue;
            }
            let key = (comm.to_string(), f.base.clone(), f.symbols.label().to_string());
            if self.libs_exported.insert(key.clone()) {
                self.metrics
                    .tls_library
                    .get_or_create(&LibraryLabels {
                        comm: key.0,
                        library: key.1,
                        symbols: key.2,
                    })
                    .set(1);
            }
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
                changed: Instant::now(),
                on_in_tick: Duration::ZERO,
                tick_start: Instant::now(),
                under_all: HashMap::new(),
                under_hs: HashMap::new(),
                learned_all: HashMap::new(),
                learned_hs: HashMap::new(),
            },
        );
    }

    /// The handshake probes of a process were attached (on) or detached.
    pub fn set_probes(&mut self, pid: u32, on: bool) {
        let Some(st) = self.procs.get_mut(&pid) else { return };
        if st.probes_on == on {
            return;
        }
        let now = Instant::now();
        st.on_in_tick = st.probes_on_in_tick(now);
        st.probes_on = on;
        st.changed = now;
    }

    /// Stops accounting a process (it exited or exec'd), after a last split.
    pub fn remove(&mut self, pid: u32) {
        self.drain();
        self.split(pid);
        if let Some(st) = self.procs.remove(&pid) {
            if st.unsplit_ns > 0 && self.verbose {
                eprintln!(
                    "tlsprof: {pid} ({}) ended with {:.3} ms of CPU time after its last sample",
                    st.comm,
                    st.unsplit_ns as f64 / 1e6
                );
            }
        }
        let _ = self.procs_map.remove(&pid);
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
    }

    fn on_sample(&mut self, s: &pc::cpu_sample) {
        let Some(st) = self.procs.get_mut(&s.tgid) else { return };
        self.metrics.cpu_samples.inc();
        // A leaf outside every known mapping: the process mapped new code (dlopen, JIT).
        if let Some(&ip) = s.user_frames().first() {
            if symbols::find(&st.maps, ip).is_none() && st.maps_read.elapsed() > Duration::from_secs(1) {
                if let Ok(m) = self.files.mappings(s.tgid) {
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
        *st.under_all.entry(under.unwrap_or(v.category)).or_default() += 1;
        if let Some(u) = under {
            *st.under_hs.entry(u).or_default() += 1;
        }
        if v.prim != Prim::None {
            *st.by_prim.entry(v.prim).or_default() += 1;
        }
        st.samples += 1;
    }

    /// Splits every process's new on-CPU time by its samples since the last split.
    pub fn tick(&mut self) {
        self.drain();
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            self.split(pid);
        }
    }

    fn split(&mut self, pid: u32) {
        let Some(st) = self.procs.get_mut(&pid) else { return };
        let Ok(v) = self.procs_map.get(&pid, 0) else { return };
        let delta = v.oncpu_ns.saturating_sub(st.seen_ns);
        st.seen_ns = v.oncpu_ns.max(st.seen_ns);
        let comm = CommLabels { comm: st.comm.clone() };
        if delta > 0 {
            self.metrics.process_cpu.get_or_create(&comm).inc_by(delta as f64 / 1e9);
        }
        st.unsplit_ns += delta;
        // the share of this second with the handshake probes attached
        let now = Instant::now();
        let span = now.saturating_duration_since(st.tick_start);
        let on = st.probes_on_in_tick(now);
        let on_share = if span.is_zero() {
            st.probes_on as u8 as f64
        } else {
            (on.as_secs_f64() / span.as_secs_f64()).min(1.0)
        };
        st.tick_start = now;
        st.on_in_tick = Duration::ZERO;
        if st.samples == 0 || st.unsplit_ns == 0 {
            return;
        }
        let weights = hidden_handshake(st, on_share);
        let per_sample = st.unsplit_ns as f64 / 1e9 / st.samples as f64;
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

/// A second's samples by category, with the handshake work hidden in the part of the
/// second the probes were away moved to `handshake`: each category gives up the share of
/// its samples that were handshake work in recent seconds with the probes attached. Seconds
/// with the probes attached throughout teach those shares.
fn hidden_handshake(st: &mut ProcState, on_share: f64) -> Vec<(Category, f64)> {
    let under_all = std::mem::take(&mut st.under_all);
    let under_hs = std::mem::take(&mut st.under_hs);
    let mut w: HashMap<Category, f64> = st.by_category.iter().map(|(c, n)| (*c, *n as f64)).collect();
    if !st.probed {
        return w.into_iter().collect();
    }
    if on_share >= 0.999 {
        for c in HIDES_HANDSHAKE {
            let all = st.learned_all.entry(c).or_default();
            *all = *all * LEARN_DECAY + *under_all.get(&c).unwrap_or(&0) as f64;
            let hs = st.learned_hs.entry(c).or_default();
            *hs = *hs * LEARN_DECAY + *under_hs.get(&c).unwrap_or(&0) as f64;
        }
        return w.into_iter().collect();
    }
    for c in HIDES_HANDSHAKE {
        let all = st.learned_all.get(&c).copied().unwrap_or(0.0);
        if all <= 0.0 {
            continue;
        }
        let share = st.learned_hs.get(&c).copied().unwrap_or(0.0) / all;
        let n = w.get(&c).copied().unwrap_or(0.0);
        let moved = n * share * (1.0 - on_share);
        if moved > 0.0 {
            *w.entry(c).or_default() -= moved;
            *w.entry(Category::Handshake).or_default() += moved;
        }
    }
    w.into_iter().collect()
}

/// The validated user frames of a sample: the leaf (the interrupted instruction) and then
/// return addresses that follow a call instruction in a mapped file, or lie in anonymous
/// executable memory (JIT code, which keeps frame pointers). The walk stops at the first
/// frame that is neither: past it, a frame-pointer walk through code without frame
/// pointers reads garbage. The bool says whether the stack was cut.
pub fn user_frames<'m>(s: &pc::cpu_sample, maps: &'m [Mapping]) -> (Vec<(u64, Option<&'m Mapping>)>, bool) {
    let frames = s.user_frames();
    let mut out = Vec::with_capacity(frames.len());
    for (i, &addr) in frames.iter().enumerate() {
        let m = symbols::find(maps, addr);
        if i == 0 {
            out.push((addr, m));
            continue;
        }
        let ok = match m {
            Some(m) if m.anon => true,
            Some(m) => match (&m.file, m.vaddr(addr)) {
                (Some(f), Some(va)) => f.follows_call(va),
                _ => false,
            },
            None => false,
        };
        if !ok {
            return (out, true);
        }
        out.push((addr, m));
    }
    (out, false)
}

/// The category and primitive of one sample.
pub fn classify(s: &pc::cpu_sample, probed: bool, maps: &[Mapping], ks: Option<&Kallsyms>) -> Verdict {
    let kframes = s.kernel_frames();
    let kclasses: Vec<KClass> = match ks {
        Some(k) => kframes.iter().map(|a| k.class(*a)).collect(),
        None => Vec::new(),
    };
    let in_hs = s.flags & pc::CPU_SAMPLE_HANDSHAKE != 0;
    let user = s.flags & pc::CPU_SAMPLE_USER != 0;
    let tls_cat = if probed { Category::Crypto } else { Category::TlsLibrary };

    if kclasses.contains(&KClass::Probe) {
        return Verdict {
            category: Category::Probes,
            prim: Prim::None,
        };
    }
    if !user {
        // Kernel TLS: its crypto is record crypto (the handshake is always in user space).
        if kclasses.contains(&KClass::Ktls) {
            let prim = ks
                .and_then(|k| {
                    kframes
                        .iter()
                        .map(|a| k.prim(*a))
                        .find(|p| !p.generic() && *p != Prim::None)
                })
                .unwrap_or(Prim::Other);
            let category = if in_hs { Category::Handshake } else { tls_cat };
            return Verdict { category, prim };
        }
        if in_hs {
            return Verdict {
                category: Category::Handshake,
                prim: Prim::None,
            };
        }
        if kclasses.contains(&KClass::Net) {
            return Verdict {
                category: Category::KernelNet,
                prim: Prim::None,
            };
        }
        // Other kernel work the TLS library caused (page faults on its buffers, getrandom).
        let category = if user_prim(s, maps) != Prim::None {
            tls_cat
        } else {
            Category::Other
        };
        return Verdict {
            category,
            prim: Prim::None,
        };
    }
    let prim = user_prim(s, maps);
    let category = if in_hs {
        Category::Handshake
    } else if prim != Prim::None {
        tls_cat
    } else {
        Category::Other
    };
    Verdict { category, prim }
}

/// A validated return address in TLS code just above a leaf that is not: the TLS library
/// called a helper (memcpy, memset from its buffer code). From the first frame-pointer
/// frame, or from the word at the stack pointer (a leaf that pushed nothing), each checked
/// to follow a call instruction.
fn tls_caller(s: &pc::cpu_sample, maps: &[Mapping]) -> Option<Prim> {
    let frames = s.user_frames();
    let candidates = [frames.get(1).copied(), (s.sp_word != 0).then_some(s.sp_word)];
    candidates.into_iter().flatten().find_map(|ra| {
        let m = symbols::find(maps, ra)?;
        let f = m.file.as_ref()?;
        let va = m.vaddr(ra)?;
        if !f.follows_call(va) {
            return None;
        }
        let p = f.prim(m.vaddr(ra - 1)?);
        (p != Prim::None).then_some(p)
    })
}

/// The primitive of a user-mode sample: its leaf's, or — for a generic leaf (bignum or
/// curve arithmetic, helpers) — that of the nearest validated caller in TLS code that names
/// one (ECDSA signing, ECDH, RSA). `Prim::None` when the leaf is not TLS code.
fn user_prim(s: &pc::cpu_sample, maps: &[Mapping]) -> Prim {
    let Some(&ip) = s.user_frames().first() else {
        return Prim::None;
    };
    let Some((m, Some(va))) = locate(maps, ip) else {
        return Prim::None;
    };
    let Some(f) = &m.file else { return Prim::None };
    let leaf = f.prim(va);
    if leaf == Prim::None {
        return tls_caller(s, maps).unwrap_or(Prim::None);
    }
    if !leaf.generic() {
        return leaf;
    }
    let (frames, _) = user_frames(s, maps);
    for (addr, m) in frames.iter().skip(1) {
        let Some(m) = m else { break };
        let (Some(f), Some(va)) = (&m.file, m.vaddr(addr.saturating_sub(1))) else {
            break;
        };
        let p = f.prim(va);
        if p == Prim::None {
            break; // back in the application
        }
        if !p.generic() {
            return p;
        }
    }
    leaf
}

fn frame_name(addr: u64, m: Option<&Mapping>, leaf: bool) -> (String, bool) {
    let Some(m) = m else { return ("[unknown]".into(), false) };
    let Some(f) = &m.file else {
        return (if m.anon { "[jit]".into() } else { "[unknown]".into() }, false);
    };
    // a return address may be the first byte after a call that ends its function
    let va = m.vaddr(if leaf { addr } else { addr.saturating_sub(1) });
    let tls = va.is_some_and(|v| f.is_tls(v));
    match va.and_then(|v| f.name(v)) {
        Some(n) => (n.to_string(), tls),
        None => (format!("{} (no symbols)", f.base), tls),
    }
}

/// Adds a sample to the flame graph: process name, `[handshake]` for samples inside a
/// handshake call, `[stack cut]` where the user stack could not be followed further, the
/// user frames outermost first, then kernel frames (suffixed `_[k]`).
pub fn fold(out: &mut Folded, s: &pc::cpu_sample, comm: &str, maps: &[Mapping], ks: Option<&Kallsyms>) {
    let mut parts: Vec<String> = vec![comm.to_string()];
    if s.flags & pc::CPU_SAMPLE_HANDSHAKE != 0 {
        parts.push("[handshake]".into());
    }
    let (frames, cut) = user_frames(s, maps);
    if cut {
        parts.push("[stack cut]".into());
    }
    for (i, (addr, m)) in frames.iter().enumerate().rev() {
        let (name, tls) = frame_name(*addr, *m, i == 0);
        if tls {
            out.tls_frames.insert(name.clone());
        }
        parts.push(name);
    }
    for addr in s.kernel_frames().iter().rev() {
        let name = ks
            .and_then(|k| k.name(*addr))
            .map_or_else(|| "[kernel]".to_string(), str::to_string);
        if ks.is_some_and(|k| k.class(*addr) == KClass::Ktls) {
            out.tls_frames.insert(format!("{name}_[k]"));
        }
        parts.push(format!("{name}_[k]"));
    }
    let line = parts.iter().map(|p| p.replace(';', ":")).collect::<Vec<_>>().join(";");
    *out.stacks.entry(line).or_default() += 1;
}

/// Writes the collected stacks as an SVG flame graph, TLS frames in red, the rest in blue.
pub fn render(folded: &Folded, title: &str, out: impl std::io::Write) -> std::io::Result<()> {
    use inferno::flamegraph::{
        color::{BasicPalette, Color, PaletteMap},
        FuncFrameAttrsMap, Options, Palette,
    };
    let mut palette = PaletteMap::default();
    let mut attrs = String::new();
    for f in &folded.tls_frames {
        palette.insert(f, Color { r: 220, g: 50, b: 40 });
        attrs.push_str(&format!("{f}\tclass=tls\n"));
    }
    let mut opt = Options::default();
    opt.colors = Palette::Basic(BasicPalette::Aqua);
    opt.palette_map = Some(&mut palette);
    opt.func_frameattrs = FuncFrameAttrsMap::from_reader(attrs.as_bytes())?;
    opt.title = title.to_string();
    opt.subtitle = Some("red: TLS library code and kernel TLS; [handshake]: inside a TLS handshake call".into());
    opt.count_name = "samples".into();
    let mut lines: Vec<String> = folded.stacks.iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.sort();
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), out)
}
