//! Connection churn: turns the kernel's per-connection close events into metrics, reads
//! TIME_WAIT sockets per port through sock_diag, and settles the connections whose
//! TIME_WAIT the kernel could not tell at close time (an orphaned socket handed to a
//! FIN_WAIT2 timewait socket: it reaches TIME_WAIT only if the client's FIN follows). The
//! same dumps hand over the open connections' state, from which the ends the kernel never
//! reported are found (unseen.rs).
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    net::IpAddr,
    os::fd::{AsFd as _, OwnedFd},
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use super::{
    sockdiag::{self, SockDiag},
    unseen::{Open, Unseen},
};
use crate::{
    bounds,
    bpf::{
        abi::decode,
        conn::{self as cn, ClosedBy},
    },
    metrics::{found::Found, histogram::Histogram, ClosedByLabels, LabelValue, Metrics, OnlyPortLabels, PortLabels},
};

/// A connection whose end is settled once its FIN_WAIT2 timewait socket is seen again.
struct Pending {
    comm: String,
    port: u16,
    closed: Instant,
}

/// (netns, local address, local port, remote address, remote port)
type Tuple = (u32, IpAddr, u16, IpAddr, u16);

/// The hash of the tables keyed by a connection's addresses and ports, which its client
/// chooses: seeded per process (SipHash was ~3% of the agent's samples at 1,300 closes/s,
/// the unsettled table growing again after each settling).
type ByTuple = foldhash::fast::RandomState;
type TupleSet = HashSet<Tuple, ByTuple>;

pub struct Churn {
    metrics: Arc<Metrics>,
    /// One sock_diag socket per network namespace; None where it could not be opened.
    /// (Bounded by the namespaces of the traced processes.)
    diag: HashMap<u32, Option<SockDiag>>,
    pending: HashMap<Tuple, Pending, ByTuple>,
    /// The kernel's per-port counts (accepted, exchanges) as last exported (it counts since
    /// the port was added; bounded by the watched ports).
    counts_seen: HashMap<cn::conn_port, (u64, u64)>,
    /// Ports whose TIME_WAIT gauge was set: a port that goes away is removed (at most the
    /// 65,536 port numbers).
    gauged: HashSet<u16>,
    /// A FIN_WAIT2 timewait socket lives this long without the client's FIN (tcp_fin_timeout).
    fin_timeout: Duration,
    /// Per namespace, the address families each listening port listens in (V4, V6).
    families: HashMap<u32, HashMap<u16, u8>>,
    /// Per namespace, each listening socket's cgroup id (by inode), where the kernel says.
    cgroups: HashMap<u32, HashMap<u64, u64>>,
    /// When the TIME_WAIT sockets may be read again (DUMP_SHARE), and the gap until then.
    next_dump: Instant,
    gap: Duration,
    /// The series a closed connection counts in, found once per label set.
    series: Series,
    /// The connections' socket-storage map, whose values the dumps ask for (None in hash
    /// mode), once the kernel was asked; and the ledgers that find the ends never reported.
    store: Option<Option<OwnedFd>>,
    unseen: Unseen,
}

/// tlsprof_connections_total's (comm, port, closed_by), tlsprof_time_wait_total's,
/// tlsprof_tcp_connection_duration_seconds' and tlsprof_requests_per_connection's (comm, port).
#[derive(Default)]
struct Series {
    closed: Found<(u16, &'static str)>,
    time_wait: Found<u16>,
    duration: Found<u16, Histogram>,
    requests: Found<u16, Histogram>,
}

fn port_labels(comm: &str, port: u16) -> PortLabels {
    PortLabels {
        comm: comm.into(),
        port: port.to_string(),
    }
}

/// The TIME_WAIT reading's share of one CPU at most: the kernel walks its TCP hash table
/// for it (every bucket and socket of the namespace: ~6 ms per address family on a 24 GiB
/// host, more with more sockets), so after a reading that took d of this thread's CPU time
/// (its wall time on a busy host also counts waiting for a CPU) the next waits
/// d / DUMP_SHARE, or the scan interval if longer, and at most MAX_DUMP_GAP (a TIME_WAIT
/// socket lives 60 s: each is still seen).
const DUMP_SHARE: f64 = 0.005;
const MAX_DUMP_GAP: Duration = Duration::from_secs(20);

/// A set of port numbers, one bit each (8 KiB).
struct PortSet(Box<[u64; 1024]>);

impl Default for PortSet {
    fn default() -> Self {
        Self(Box::new([0; 1024]))
    }
}

impl PortSet {
    fn insert(&mut self, port: u16) {
        self.0[usize::from(port >> 6)] |= 1 << (port & 63);
    }

    fn contains(&self, port: u16) -> bool {
        self.0[usize::from(port >> 6)] & 1 << (port & 63) != 0
    }
}

/// Address families, as bits.
const V4: u8 = 1;
const V6: u8 = 2;

fn family_bit(a: &std::net::IpAddr) -> u8 {
    if a.is_ipv4() {
        V4
    } else {
        V6
    }
}

/// More unsettled connections than this and the oldest sixteenth are settled as
/// server-closed without TIME_WAIT (a client that never sends its FIN leaves them for
/// tcp_fin_timeout: 60 s of closes at 4,000 a second), counted:
/// tlsprof_table_full_total{table="unsettled_connections"}.
pub const MAX_PENDING: usize = 1 << 18;

impl Churn {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        let fin_timeout = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fin_timeout")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(60);
        Self {
            metrics,
            diag: HashMap::new(),
            pending: HashMap::default(),
            counts_seen: HashMap::new(),
            gauged: HashSet::new(),
            fin_timeout: Duration::from_secs(fin_timeout),
            families: HashMap::new(),
            cgroups: HashMap::new(),
            next_dump: Instant::now(),
            gap: Duration::ZERO,
            series: Series::default(),
            store: None,
            unseen: Unseen::default(),
        }
    }

    /// The next refresh reads the TIME_WAIT sockets whatever the last one cost (at exit).
    pub fn dump_now(&mut self) {
        self.next_dump = Instant::now();
    }

    /// Whether the kernel was asked for the connections' socket-storage map.
    pub fn reconciles(&self) -> bool {
        self.store.is_some()
    }

    /// The connections' socket-storage map (None in hash mode: nothing reconciled).
    pub fn reconcile_with(&mut self, store: Option<OwnedFd>) {
        if store.is_none() {
            log::debug!("connection ends never reported are not looked for: no socket storage (hash mode)");
        }
        self.store = Some(store);
    }

    fn ended(&mut self, comm: &str, port: u16, closed_by: ClosedBy, time_wait: bool) {
        self.closed(comm, port, closed_by, 1);
        if time_wait {
            let m = &self.metrics;
            let find = |comm: &str, port| m.time_wait.get_or_create(&port_labels(comm, port)).clone();
            self.series.time_wait.get(comm, port, find).inc();
        }
    }

    /// `n` connections of `port` ended, closed by `closed_by`.
    fn closed(&mut self, comm: &str, port: u16, closed_by: ClosedBy, n: u64) {
        let m = &self.metrics;
        let find = |comm: &str, (port, by): (u16, &str)| {
            let labels = ClosedByLabels {
                comm: comm.into(),
                port: port.to_string(),
                closed_by: by.into(),
            };
            m.connections.get_or_create(&labels).clone()
        };
        self.series.closed.get(comm, (port, closed_by.label()), find).inc_by(n);
    }

    /// A connection's full socket closed.
    pub fn on_event(&mut self, e: &cn::conn_event, comm: &str) {
        let (Some(by), Some(tw)) = (
            decode::<cn::conn_by, _>(e.closed_by),
            decode::<cn::conn_tw, _>(e.time_wait),
        ) else {
            return;
        };
        self.unseen.ended(e);
        let m = &self.metrics;
        if e.adopted != 0 {
            // taken on at its first read or send, not at accept (bpf/conn.bpf.h conn_adopt):
            // in no kernel count of its port, counted here with its exchanges
            let labels = port_labels(comm, e.port);
            m.connections_accepted.get_or_create(&labels).inc();
            m.exchanges.get_or_create(&labels).inc_by(u64::from(e.requests));
        }
        self.series
            .duration
            .get(comm, e.port, |comm, port| {
                m.connection_duration.get_or_create(&port_labels(comm, port)).clone()
            })
            .observe(e.duration_ns as f64 / 1e9);
        self.series
            .requests
            .get(comm, e.port, |comm, port| {
                m.requests_per_connection
                    .get_or_create(&port_labels(comm, port))
                    .clone()
            })
            .observe(f64::from(e.requests));
        if tw == cn::conn_tw::Maybe && self.diag.get(&e.netns).is_some_and(Option::is_some) {
            let key = (e.netns, e.local(), e.port, e.remote(), e.dport);
            if !self.pending.contains_key(&key) {
                self.settle_oldest();
            }
            self.pending.insert(
                key,
                Pending {
                    comm: comm.into(),
                    port: e.port,
                    closed: Instant::now(),
                },
            );
            return;
        }
        // Without sock_diag in that namespace, a FIN_WAIT2 handover counts as TIME_WAIT:
        // what it becomes when the client closes cleanly.
        let tw = match tw {
            cn::conn_tw::Yes | cn::conn_tw::Maybe => true,
            cn::conn_tw::No => false,
        };
        self.ended(comm, e.port, by, tw);
    }

    /// At the bound: the oldest unsettled connections are settled as the kernel said at
    /// close time (server-closed), without TIME_WAIT.
    fn settle_oldest(&mut self) {
        let out = bounds::evict_oldest(&mut self.pending, MAX_PENDING, |p| p.closed);
        bounds::count(&self.metrics, "unsettled_connections", out.len() as u64);
        for (_, p) in out {
            self.ended(&p.comm, p.port, ClosedBy::Server, false);
        }
    }

    /// Connections accepted: the kernel's per-port counters, exported as deltas; read
    /// between the kernel's monotonic times `read` (conns/unseen.rs).
    pub fn sync_counts(
        &mut self,
        ports: &BTreeMap<cn::conn_port, String>,
        counts: &HashMap<cn::conn_port, (u64, u64)>,
        read: (u64, u64),
    ) {
        let reconciled = matches!(self.store, Some(Some(_)));
        for (key, comm) in ports {
            let Some(&(accepted, exchanges)) = counts.get(key) else {
                continue;
            };
            if reconciled {
                self.unseen.reading(*key, comm, read.0, read.1, accepted);
            }
            let seen = self.counts_seen.entry(*key).or_default();
            // a port removed and added again starts from zero in the kernel
            let delta = |now: u64, seen: u64| if now >= seen { now - seen } else { now };
            let labels = port_labels(comm, key.port);
            (self.metrics.connections_accepted.get_or_create(&labels)).inc_by(delta(accepted, seen.0));
            (self.metrics.exchanges.get_or_create(&labels)).inc_by(delta(exchanges, seen.1));
            *seen = (accepted, exchanges);
        }
        self.counts_seen.retain(|k, _| ports.contains_key(k));
        self.unseen.retain(|k| ports.contains_key(k) && counts.contains_key(k));
    }

    /// The sock_diag socket of a namespace, opened on first use through `ns_path`.
    fn diag_for(&mut self, netns: u32, ns_path: &Path) -> Option<&SockDiag> {
        self.diag
            .entry(netns)
            .or_insert_with(|| {
                let own = std::fs::metadata("/proc/self/ns/net")
                    .map(|m| std::os::unix::fs::MetadataExt::ino(&m) as u32 == netns)
                    .unwrap_or(false);
                let r = if own {
                    SockDiag::open()
                } else {
                    SockDiag::open_in(ns_path)
                };
                match r {
                    Ok(d) => Some(d),
                    Err(e) => {
                        log::warn!(
                            "cannot read the sockets of network namespace {netns} through sock_diag ({e}): no \
                             TIME_WAIT gauge there, and listening ports come from /proc"
                        );
                        None
                    }
                }
            })
            .as_ref()
    }

    /// The listening sockets (local port, inode) of a namespace, or None without sock_diag
    /// (kept for one scan: a namespace's listeners are bounded by its ports and addresses).
    pub fn listeners(&mut self, netns: u32, ns_path: &Path) -> Option<Vec<(u16, u64)>> {
        let d = self.diag_for(netns, ns_path)?;
        let (mut out, mut families, mut cgroups) = (Vec::new(), HashMap::new(), HashMap::new());
        d.for_each_all(1 << sockdiag::TCP_LISTEN, &[], &mut |s| {
            out.push((s.sport, u64::from(s.inode)));
            *families.entry(s.sport).or_default() |= family_bit(&s.local);
            if s.cgroup != 0 {
                cgroups.insert(u64::from(s.inode), s.cgroup);
            }
        })
        .ok()?;
        self.families.insert(netns, families);
        self.cgroups.insert(netns, cgroups);
        Some(out)
    }

    /// The cgroup id of a listening socket of a namespace (by inode) as its last dump said.
    pub fn listener_cgroup(&self, netns: u32, inode: u64) -> Option<u64> {
        self.cgroups.get(&netns)?.get(&inode).copied()
    }

    /// Reads the TIME_WAIT sockets of the watched ports (and the FIN_WAIT2 ones where
    /// connections are unsettled), sets the gauge and settles what can be settled.
    /// `namespaces`: each watched namespace, a /proc/PID/ns/net path into it, and its ports.
    pub fn refresh(&mut self, namespaces: &HashMap<u32, (PathBuf, Vec<u16>)>) {
        let started = Instant::now();
        if started < self.next_dump {
            return;
        }
        let cpu = crate::clock::thread_cpu();
        self.read_time_wait(namespaces);
        // the reading's CPU time, not its wall time: on a loaded host it also waits for a CPU,
        // which costs the host nothing, and a 100 ms wait put the next reading 20 s away
        self.gap = crate::clock::thread_cpu()
            .saturating_sub(cpu)
            .div_f64(DUMP_SHARE)
            .min(MAX_DUMP_GAP);
        self.next_dump = started + self.gap;
    }

    fn read_time_wait(&mut self, namespaces: &HashMap<u32, (PathBuf, Vec<u16>)>) {
        let mut per_port: BTreeMap<u16, i64> = BTreeMap::new();
        let mut found: HashMap<u32, (TupleSet, TupleSet)> = HashMap::new();
        // the ends never reported since the last dump's reading, before this dump reads the
        // open connections again (unseen.rs)
        for (key, comm, n) in self.unseen.found() {
            log::debug!(
                "{n} connection(s) on port {} (netns {}) ended without the kernel reporting their close",
                key.port,
                key.netns
            );
            self.closed(&comm, key.port, ClosedBy::Unknown, n);
        }
        bounds::count(&self.metrics, "reconciled_connections", self.unseen.overflowed());
        // taken out for the dumps (they borrow self), put back after them
        let mut store = match self.store.as_mut() {
            Some(slot) if self.unseen.any() => slot.take(),
            _ => None,
        };
        for (&netns, (path, ports)) in namespaces {
            let want_fw2 = self.pending.keys().any(|k| k.0 == netns);
            if self.diag_for(netns, path).is_none() {
                continue;
            }
            let Some(Some(d)) = self.diag.get(&netns) else { continue };
            let mut states = 1 << sockdiag::TCP_TIME_WAIT;
            if want_fw2 {
                states |= 1 << sockdiag::TCP_FIN_WAIT2;
            }
            if store.is_some() {
                // every state a connection with state in socket storage can be in
                states |= [
                    sockdiag::TCP_ESTABLISHED,
                    sockdiag::TCP_FIN_WAIT1,
                    sockdiag::TCP_FIN_WAIT2,
                    sockdiag::TCP_CLOSE_WAIT,
                    sockdiag::TCP_LAST_ACK,
                    sockdiag::TCP_CLOSING,
                ]
                .iter()
                .fold(0, |a, s| a | 1 << s);
            }
            let mut open: Vec<Open> = Vec::new();
            // Counted as they come; only the unsettled connections' sockets are kept. Every
            // TIME_WAIT socket of the watched ports passes here (60 s of closes: 120,000 at
            // 2,000 a second), so each costs one lookup of its port, and one of its
            // connection only where an unsettled connection has its client's port.
            let (mut tw, mut fw2) = (TupleSet::default(), TupleSet::default());
            let fams = self.families.get(&netns);
            // each watched port: the address families it listens in, and its TIME_WAIT count
            let mut watched: FxHashMap<u16, (u8, i64)> = ports
                .iter()
                .map(|p| (*p, (fams.and_then(|f| f.get(p)).copied().unwrap_or(V4 | V6), 0)))
                .collect();
            // only the address families the watched ports listen in: each dump walks every
            // TCP socket of the namespace, its open connections included
            let mask = watched.values().fold(0, |a, (m, _)| a | m);
            let pending = &self.pending;
            let mut clients = PortSet::default();
            for k in pending.keys().filter(|k| k.0 == netns) {
                clients.insert(k.4);
            }
            let mut each = |s: sockdiag::DiagSocket| {
                if let Some(o) = s.storage.as_deref().and_then(Open::of) {
                    open.push(o);
                }
                let Some((fam, count)) = watched.get_mut(&s.sport) else {
                    return;
                };
                // a socket of the other family on the same port number (a client's ephemeral
                // port, say, where only an IPv6 listener has it) is none of the port's
                if *fam & family_bit(&s.local) == 0 {
                    return;
                }
                if s.state == sockdiag::TCP_TIME_WAIT {
                    *count += 1;
                }
                if !clients.contains(s.dport) {
                    return;
                }
                let t = (netns, s.local, s.sport, s.remote, s.dport);
                if !pending.contains_key(&t) {
                    return;
                }
                if s.state == sockdiag::TCP_TIME_WAIT {
                    tw.insert(t);
                } else if s.state == sockdiag::TCP_FIN_WAIT2 {
                    fw2.insert(t);
                }
            };
            let dumped = [(V4, libc::AF_INET), (V6, libc::AF_INET6)]
                .into_iter()
                .filter(|(bit, _)| mask & bit != 0)
                .try_for_each(|(_, family)| {
                    d.for_each(
                        family as u8,
                        states,
                        ports,
                        store.as_ref().map(|f| f.as_fd()),
                        &mut each,
                    )
                });
            if let Err(e) = dumped {
                let refused = matches!(e.raw_os_error(), Some(libc::EPERM | libc::EINVAL | libc::EOPNOTSUPP));
                if store.is_some() && refused {
                    // a kernel that will not hand over socket storage: the TIME_WAIT readings
                    // go on without it, from the next
                    log::warn!(
                        "sock_diag refused the connections' state ({e}): connection ends the kernel \
                         never reports are not looked for"
                    );
                    self.store = Some(None);
                    store = None;
                } else {
                    log::debug!("sock_diag dump in namespace {netns} failed: {e}");
                }
                continue;
            }
            if store.is_some() {
                self.unseen.dumped(netns, &open);
            }
            found.insert(netns, (tw, fw2));
            for (p, (_, n)) in watched {
                *per_port.entry(p).or_default() += n;
            }
        }
        if let (Some(fd), Some(slot)) = (store, self.store.as_mut()) {
            *slot = Some(fd);
        }
        for (port, n) in &per_port {
            self.metrics
                .time_wait_sockets
                .get_or_create(&OnlyPortLabels { port: port.to_string() })
                .set(*n);
        }
        for gone in self.gauged.iter().filter(|p| !per_port.contains_key(p)) {
            self.metrics
                .time_wait_sockets
                .remove(&OnlyPortLabels { port: gone.to_string() });
        }
        self.gauged = per_port.keys().copied().collect();
        self.settle(&found);
    }

    fn settle(&mut self, found: &HashMap<u32, (TupleSet, TupleSet)>) {
        let mut done = Vec::new();
        for (key, p) in &self.pending {
            let Some((tw, fw2)) = found.get(&key.0) else {
                continue; // namespace not read this time
            };
            if tw.contains(key) {
                done.push((*key, ClosedBy::Server, true));
            } else if !fw2.contains(key) {
                // Gone without TIME_WAIT: killed by the client's reset, unless it lived out
                // tcp_fin_timeout waiting for a FIN that never came.
                // (within the time between two readings)
                let slack = self.gap.max(Duration::from_secs(2));
                let timed_out = p.closed.elapsed() + slack >= self.fin_timeout;
                done.push((*key, if timed_out { ClosedBy::Server } else { ClosedBy::Reset }, false));
            }
        }
        if !done.is_empty() {
            let tw = done.iter().filter(|d| d.2).count();
            log::debug!(
                "settled {} connection(s) through sock_diag, {tw} in TIME_WAIT",
                done.len()
            );
        }
        for (key, by, tw) in done {
            if let Some(p) = self.pending.remove(&key) {
                self.ended(&p.comm, p.port, by, tw);
            }
        }
        bounds::shrink(&mut self.pending);
    }

    /// (table, entries, bytes of its room) for the -v log of the agent's memory.
    pub fn footprint(&self) -> [(&'static str, usize, usize); 2] {
        [
            (
                "unsettled_connections",
                self.pending.len(),
                bounds::map_bytes(&self.pending),
            ),
            self.unseen.footprint(),
        ]
    }

    /// Namespaces no traced process lives in any more: close their sock_diag sockets, and
    /// settle their unsettled connections as the kernel said at close time (server-closed;
    /// whether they reached TIME_WAIT can no longer be seen).
    pub fn retain_namespaces(&mut self, live: &HashSet<u32>) {
        self.diag.retain(|ns, _| live.contains(ns));
        self.families.retain(|ns, _| live.contains(ns));
        self.cgroups.retain(|ns, _| live.contains(ns));
        let orphaned: Vec<Tuple> = self.pending.keys().filter(|k| !live.contains(&k.0)).copied().collect();
        for key in orphaned {
            if let Some(p) = self.pending.remove(&key) {
                self.ended(&p.comm, p.port, ClosedBy::Server, false);
            }
        }
    }

    /// Settles what is left at exit as the kernel said at close time.
    pub fn finish(&mut self) {
        for (_, p) in std::mem::take(&mut self.pending) {
            self.ended(&p.comm, p.port, ClosedBy::Server, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(dport: u16, time_wait: u8, by: u8) -> cn::conn_event {
        let mut saddr = [0u8; 16];
        saddr[..4].copy_from_slice(&[127, 0, 0, 1]);
        cn::conn_event {
            conn_id: 1,
            duration_ns: 1_000_000,
            start_ns: 5_000_000,
            saddr,
            daddr: saddr,
            netns: 7,
            requests: 5,
            port: 8443,
            dport,
            family: cn::AF_INET,
            closed_by: by,
            time_wait,
            tls: 1,
            adopted: 0,
            pad: [0; 6],
        }
    }

    fn value(m: &Metrics, by: &str) -> u64 {
        m.connections
            .get_or_create(&ClosedByLabels {
                comm: "nginx".into(),
                port: "8443".into(),
                closed_by: by.into(),
            })
            .get()
    }

    fn tw(m: &Metrics) -> u64 {
        m.time_wait
            .get_or_create(&PortLabels {
                comm: "nginx".into(),
                port: "8443".into(),
            })
            .get()
    }

    #[test]
    fn fin_wait2_handovers_are_settled_by_what_sock_diag_shows() {
        let m = Arc::new(Metrics::new());
        let mut c = Churn::new(m.clone());
        c.diag.insert(7, Some(SockDiag::open().unwrap()));
        c.on_event(
            &event(1001, cn::conn_tw::Maybe as u8, cn::conn_by::Server as u8),
            "nginx",
        );
        c.on_event(
            &event(1002, cn::conn_tw::Maybe as u8, cn::conn_by::Server as u8),
            "nginx",
        );
        c.on_event(
            &event(1003, cn::conn_tw::Maybe as u8, cn::conn_by::Server as u8),
            "nginx",
        );
        c.on_event(&event(1004, cn::conn_tw::Yes as u8, cn::conn_by::Server as u8), "nginx");
        c.on_event(&event(1005, cn::conn_tw::No as u8, cn::conn_by::Client as u8), "nginx");
        assert_eq!((value(&m, "server"), value(&m, "client"), tw(&m)), (1, 1, 1));
        assert_eq!(c.pending.len(), 3);

        let lo = IpAddr::from([127, 0, 0, 1]);
        let t = |dport| (7, lo, 8443, lo, dport);
        // 1001 reached TIME_WAIT, 1002 still waits in FIN_WAIT2, 1003 was reset away
        let found = HashMap::from([(7, (TupleSet::from_iter([t(1001)]), TupleSet::from_iter([t(1002)])))]);
        c.settle(&found);
        assert_eq!((value(&m, "server"), value(&m, "reset"), tw(&m)), (2, 1, 2));
        assert_eq!(c.pending.len(), 1);
        // a namespace not read this time settles nothing
        c.settle(&HashMap::new());
        assert_eq!(c.pending.len(), 1);
        // its namespace gone: settled as server-closed without TIME_WAIT
        c.retain_namespaces(&HashSet::new());
        assert!(c.pending.is_empty());
        assert_eq!((value(&m, "server"), tw(&m)), (3, 2));
    }

    #[test]
    fn unsettled_connections_are_bounded() {
        let m = Arc::new(Metrics::new());
        let mut c = Churn::new(m.clone());
        c.diag.insert(7, Some(SockDiag::open().unwrap()));
        // client ports and addresses enough for every one to be another connection
        for i in 0..=MAX_PENDING as u32 {
            let mut e = event((i % 60_000) as u16, cn::conn_tw::Maybe as u8, cn::conn_by::Server as u8);
            e.daddr[..4].copy_from_slice(&(i / 60_000).to_be_bytes());
            c.on_event(&e, "nginx");
            assert!(c.pending.len() <= MAX_PENDING);
        }
        // the oldest sixteenth settled as server-closed without TIME_WAIT, and counted
        let settled = (MAX_PENDING / 16) as u64;
        let full = m
            .table_full
            .get_or_create(&crate::metrics::TableLabels {
                table: "unsettled_connections".into(),
            })
            .get();
        assert_eq!((full, value(&m, "server"), tw(&m)), (settled, settled, 0));
        assert_eq!(c.pending.len(), MAX_PENDING + 1 - settled as usize);
    }

    #[test]
    fn without_sock_diag_a_handover_counts_as_time_wait() {
        let m = Arc::new(Metrics::new());
        let mut c = Churn::new(m.clone());
        c.diag.insert(7, None);
        c.on_event(
            &event(1001, cn::conn_tw::Maybe as u8, cn::conn_by::Server as u8),
            "nginx",
        );
        assert!(c.pending.is_empty());
        assert_eq!((value(&m, "server"), tw(&m)), (1, 1));
    }

    #[test]
    fn port_counts_are_exported_as_deltas() {
        let m = Arc::new(Metrics::new());
        let mut c = Churn::new(m.clone());
        let key = cn::conn_port::new(7, 8443);
        let ports = BTreeMap::from([(key, "nginx".to_string())]);
        let labels = PortLabels {
            comm: "nginx".into(),
            port: "8443".into(),
        };
        let now = || {
            (
                m.connections_accepted.get_or_create(&labels).get(),
                m.exchanges.get_or_create(&labels).get(),
            )
        };
        let kernel = |accepted, exchanges| HashMap::from([(key, (accepted, exchanges))]);
        c.sync_counts(&ports, &kernel(10, 40), (0, 0));
        c.sync_counts(&ports, &kernel(25, 100), (0, 0));
        assert_eq!(now(), (25, 100));
        // the port was removed and added again: the kernel counts from zero
        c.sync_counts(&ports, &kernel(3, 7), (0, 0));
        assert_eq!(now(), (28, 107));
    }
}
