//! Port bookkeeping: the listening ports of the traced processes are the ports the kernel
//! watches (conn_ports); connections accepted there are counted and followed to their end
//! (conns/churn.rs), and a connection that closed before its server sent any TLS on a port
//! that carries TLS is a handshake that failed before the server answered (its ClientHello
//! came) or a connection that never offered TLS (a health check, plain HTTP): the kernel
//! counts those per port by kind (conn_port_stats.untls, bpf/hello.h HELLO_UNTLS_*), and
//! they are counted once the port is seen carrying TLS, then or later.
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use super::recent::Recent;
use crate::{
    bounds,
    bpf::{
        abi::{decode, hello_untls, HELLO_UNTLS_KINDS},
        conn::{conn_event, conn_port, conn_port_stats, CONN_PORTS_ENTRIES, CONN_PORT_TLS},
        loader::Kernel,
        wire::{wire_ev, WireEvent},
    },
    conns::Churn,
    discovery::procfs,
    metrics::Metrics,
};

/// Ports watched at most, all namespaces together: what the kernel's conn_ports holds.
/// Beyond, the ports not watched yet are left out at each scan, counted:
/// tlsprof_table_full_total{table="watched_ports"} (as is a port the kernel refused).
pub const MAX_WATCHED_PORTS: usize = CONN_PORTS_ENTRIES as usize;
/// Ports no longer listened on whose names are kept (one to two minutes: recent.rs), at most
/// per minute (as many as can be watched); beyond, counted:
/// tlsprof_table_full_total{table="port_names"} (a connection closing there later gets comm
/// `unknown`).
pub const MAX_PORT_NAMES: usize = MAX_WATCHED_PORTS;

pub struct Ports {
    metrics: Arc<Metrics>,
    /// Listening ports of traced processes, and the name of the process listening.
    ports: BTreeMap<conn_port, String>,
    /// Per watched port, the kernel's counts of connections closed without TLS by kind
    /// (conn_port_stats.untls) as last counted: they move once the port carries TLS
    /// (bounded by the watched ports).
    plain_seen: HashMap<conn_port, [u64; HELLO_UNTLS_KINDS as usize]>,
    /// A traced process listening on each watched port (the first found).
    owners: FxHashMap<conn_port, u32>,
    /// Ports no traced process listens on whose connections traced processes serve (a
    /// program executed per connection by a parent that is not traced, handed the accepted
    /// socket; the kernel took its connection on: bpf/conn.bpf.h conn_adopt), by the name of
    /// the last to serve one: watched while something listens there, so that the next
    /// connections are followed from their accept. Bounded by MAX_WATCHED_PORTS.
    learned: FxHashMap<conn_port, (String, u32)>,
    /// Names of ports no longer listened on, for connections that close afterwards.
    port_names: Recent<conn_port, String>,
    /// Each traced process's listening sockets (listening_of); bounded by the traced set.
    owned: HashMap<u32, Owned>,
    /// Each traced namespace's listening sockets (port, inode) and when they were read:
    /// read again when a socket of the machine started or stopped listening since
    /// (Kernel::listen_changes, as last seen), or after REREAD_FILES.
    listening: HashMap<u32, (Vec<(u16, u64)>, Instant)>,
    listen_seen: Option<u64>,
    /// Each traced namespace's bound UDP sockets (port, inode), the traced processes there
    /// when they were read, and when: read again when those processes change, or after
    /// REREAD_UDP (binding a socket moves nothing the kernel counts, and the table's
    /// reading locks each of the kernel's UDP hash buckets in turn).
    udp_read: HashMap<u32, UdpRead>,
    /// Each UDP port a traced process has bound (a QUIC server's): the first such process,
    /// its namespace and name. The kernel's QUIC events carry the port alone.
    quic: HashMap<u16, (u32, u32, String)>,
    /// UDP ports said to be bound in two namespaces (once each; bounded by the port numbers).
    quic_shared: HashSet<u16>,
    /// The cgroup ids of the traced processes' listening sockets and of the listeners of
    /// learned ports (sorted), where sock_diag says: the ClientHello capture's packet
    /// program goes there (hello_cgroups.rs).
    listener_cgroups: Vec<u64>,
    pub churn: Churn,
}

/// How long a process's listening sockets are taken from its files' last reading while its
/// namespace's listening sockets stay the same (a socket handed over between processes
/// without a change there, e.g. by SCM_RIGHTS, shows within this).
const REREAD_FILES: Duration = Duration::from_secs(60);

/// A namespace's bound UDP sockets (port, inode), the traced processes there when they
/// were read (sorted), and when.
type UdpRead = (Vec<(u16, u64)>, Vec<u32>, Instant);

/// How long a namespace's bound UDP sockets are taken from their last reading while the
/// traced processes there stay the same: a UDP port a traced process binds (a QUIC
/// listener added without a new process) is found within this; a new process's at once.
const REREAD_UDP: Duration = Duration::from_secs(10);

/// A traced process's listening sockets, as its open files showed them.
struct Owned {
    netns: u32,
    /// fingerprint() of its namespace's listening sockets then.
    print: u64,
    inodes: HashSet<u64>,
    read: Instant,
}

/// A namespace's listening sockets, in one number: a socket opened or closed changes it.
fn fingerprint(table: &[(u16, u64)]) -> u64 {
    use std::hash::{Hash as _, Hasher as _};
    let mut sorted: Vec<&(u16, u64)> = table.iter().collect();
    sorted.sort_unstable();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    sorted.hash(&mut h);
    h.finish()
}

/// Connections to count as failed handshakes: (process name, how many).
pub type Failed = Vec<(String, u16, hello_untls, u64)>;

impl Ports {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics: metrics.clone(),
            ports: BTreeMap::new(),
            plain_seen: HashMap::new(),
            port_names: Recent::new(MAX_PORT_NAMES),
            owners: FxHashMap::default(),
            learned: FxHashMap::default(),
            owned: HashMap::new(),
            listening: HashMap::new(),
            listen_seen: None,
            udp_read: HashMap::new(),
            quic: HashMap::new(),
            quic_shared: HashSet::new(),
            listener_cgroups: Vec::new(),
            churn: Churn::new(metrics),
        }
    }

    /// The cgroup ids of the traced processes' listening sockets and of learned ports'
    /// listeners, as the last refresh found.
    pub fn listener_cgroups(&self) -> &[u64] {
        &self.listener_cgroups
    }

    /// Keeps the kernel's watched ports equal to the listening ports of the traced
    /// processes (`traced`: pid and name), exports the kernel's per-port counts, reads
    /// TIME_WAIT sockets, and returns the connections closed without a handshake, since the
    /// last refresh, on ports known to carry TLS (since they were watched, on a port just
    /// seen carrying TLS).
    pub fn refresh<'a>(&mut self, traced: impl Iterator<Item = (u32, &'a str)>, k: &mut Kernel) -> Failed {
        let mut now: BTreeMap<conn_port, String> = BTreeMap::new();
        let mut owners: FxHashMap<conn_port, u32> = FxHashMap::default();
        // Read before the listening sockets: a socket that starts listening meanwhile moves
        // it past what the next scan compares.
        let changes = k.listen_changes();
        let unchanged = changes.is_some() && changes == self.listen_seen;
        let t = Instant::now();
        // Each traced process's namespace; each namespace: a way into it (the first
        // process's), and its listening sockets, read once (nginx's master and workers
        // share them), or kept from the last scan while nothing started or stopped listening.
        let mut procs = Vec::new();
        let mut ns_paths: HashMap<u32, PathBuf> = HashMap::new();
        let mut listeners: HashMap<u32, Vec<(u16, u64)>> = HashMap::new();
        // each namespace's traced processes, for its bound UDP sockets (udp_read)
        let mut ns_pids: HashMap<u32, Vec<u32>> = HashMap::new();
        for (pid, name) in traced {
            let Ok(netns) = procfs::netns(pid) else { continue };
            ns_pids.entry(netns).or_default().push(pid);
            if let std::collections::hash_map::Entry::Vacant(e) = listeners.entry(netns) {
                let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
                let table = match self.listening.get(&netns) {
                    Some((table, read)) if unchanged && t.duration_since(*read) < REREAD_FILES => table.clone(),
                    _ => {
                        let table = self
                            .churn
                            .listeners(netns, &path)
                            .unwrap_or_else(|| procfs::proc_listeners(pid));
                        self.listening.insert(netns, (table.clone(), t));
                        table
                    }
                };
                e.insert(table);
                ns_paths.insert(netns, path);
            }
            procs.push((pid, name, netns));
        }
        // the agent's own namespace too (the host's, usually): a process executed per
        // connection by a parent not traced is handed a socket accepted there
        if let Ok(own) = procfs::netns(std::process::id()) {
            if let std::collections::hash_map::Entry::Vacant(e) = listeners.entry(own) {
                let table = match self.listening.get(&own) {
                    Some((table, read)) if unchanged && t.duration_since(*read) < REREAD_FILES => table.clone(),
                    _ => {
                        let path = PathBuf::from("/proc/self/ns/net");
                        let table = self
                            .churn
                            .listeners(own, &path)
                            .unwrap_or_else(|| procfs::proc_listeners(std::process::id()));
                        self.listening.insert(own, (table.clone(), t));
                        table
                    }
                };
                e.insert(table);
            }
        }
        let udp = self.bound_udp(ns_pids, t);
        k.ports
            .set_listening(listeners.values().flatten().map(|(port, _)| *port).collect());
        self.listen_seen = changes;
        self.listening.retain(|ns, _| listeners.contains_key(ns));
        let live: HashSet<u32> = procs.iter().map(|p| p.0).collect();
        self.owned.retain(|pid, _| live.contains(pid));
        let mut quic: HashMap<u16, (u32, u32, String)> = HashMap::new();
        let mut shared: Vec<(u16, String)> = Vec::new();
        let mut cgroups = Vec::new();
        for (pid, name, netns) in procs {
            let table = &listeners[&netns];
            let bound = udp.get(&netns).map_or(&[][..], |v| v.as_slice());
            let both: Vec<(u16, u64)> = table.iter().chain(bound).copied().collect();
            let Some(mine) = self.listening_of(pid, netns, &both, t) else {
                continue;
            };
            for (port, ino) in table.iter().filter(|(_, ino)| mine.contains(ino)) {
                let key = conn_port::new(netns, *port);
                now.entry(key).or_insert_with(|| name.to_string());
                owners.entry(key).or_insert(pid);
                cgroups.push((netns, *ino));
            }
            for (port, _) in bound.iter().filter(|(_, ino)| mine.contains(ino)) {
                let first = quic.entry(*port).or_insert_with(|| (pid, netns, name.to_string()));
                if first.1 != netns {
                    shared.push((*port, format!("{} in {}, {name} in {netns}", first.2, first.1)));
                }
            }
        }
        for (port, who) in shared {
            if self.quic_shared.insert(port) {
                // the kernel tells datagrams by port number alone (bpf/quic.bpf.h)
                log::warn!(
                    "quic: UDP port {port} is bound by traced processes in two network namespaces ({who}): its \
                     QUIC handshakes are all counted under the first one's name"
                );
            }
        }
        let mut quic_pids: Vec<u32> = quic.values().map(|(pid, _, _)| *pid).collect();
        quic_pids.sort_unstable();
        quic_pids.dedup();
        if !k.set_quic_ports(quic.keys().copied().collect(), quic_pids) && !quic.is_empty() && self.quic.is_empty() {
            log::warn!(
                "quic: UDP ports {:?} of traced processes are not read: QUIC handshakes need the packet \
                 programs on their cgroups (cgroup v2; not with --avoid-hook cgroup_skb)",
                quic.keys().collect::<Vec<_>>()
            );
        }
        for (port, (pid, _, name)) in &quic {
            if !self.quic.contains_key(port) {
                log::debug!("quic: UDP port {port} of {name} ({pid}): its QUIC handshakes are read");
            }
        }
        self.quic = quic;
        // a port whose traced owners are gone while something still listens there (a login
        // process per connection holds its master's listener only while it lives): learned,
        // the next connections are theirs too
        for (key, name) in &self.ports {
            let listened = listeners
                .get(&key.netns)
                .is_some_and(|table| table.iter().any(|(port, _)| *port == key.port));
            if !now.contains_key(key) && listened && self.learned.len() < MAX_WATCHED_PORTS {
                let owner = self.owners.get(key).copied().unwrap_or(0);
                self.learned.entry(*key).or_insert_with(|| (name.clone(), owner));
            }
        }
        // the ports learned from connections, while something still listens there
        self.learned.retain(|key, _| {
            listeners
                .get(&key.netns)
                .is_some_and(|table| table.iter().any(|(port, _)| *port == key.port))
        });
        for (key, (name, pid)) in &self.learned {
            now.entry(*key).or_insert_with(|| name.clone());
            owners.entry(*key).or_insert(*pid);
            // its listener's cgroup: the processes started per connection there come and go
            // between two scans, and their next connections are in it
            let table = listeners.get(&key.netns).map_or(&[][..], |t| t.as_slice());
            cgroups.extend(
                table
                    .iter()
                    .filter(|(port, _)| *port == key.port)
                    .map(|(_, ino)| (key.netns, *ino)),
            );
        }
        let mut cgroups: Vec<u64> = cgroups
            .into_iter()
            .filter_map(|(netns, ino)| self.churn.listener_cgroup(netns, ino))
            .collect();
        cgroups.sort_unstable();
        cgroups.dedup();
        self.listener_cgroups = cgroups;
        let left_out = cap_ports(&mut now, &self.ports);
        bounds::count(&self.metrics, "watched_ports", left_out);
        // Each namespace: a way into it, and its watched ports.
        let mut namespaces: HashMap<u32, (PathBuf, Vec<u16>)> = ns_paths
            .into_iter()
            .map(|(ns, path)| (ns, (path, Vec::new())))
            .collect();
        // Accepted connections and exchanges of the ports watched until now, read right
        // before any is removed: a port's count is lost with its kernel entry, and what was
        // accepted between an earlier read and the removal would be too.
        // (between the kernel's monotonic times `before` and `after`: conns/unseen.rs)
        let before = crate::clock::ktime_ns();
        let stats: HashMap<conn_port, conn_port_stats> = self
            .ports
            .keys()
            .filter_map(|key| Some((*key, k.ports.get(key)?)))
            .collect();
        let after = crate::clock::ktime_ns();
        let counts: HashMap<conn_port, (u64, u64)> = stats
            .iter()
            .map(|(key, p)| (*key, (p.accepted, k.ports.exchanges(p))))
            .collect();
        if !self.churn.reconciles() {
            self.churn.reconcile_with(k.conn_store_fd());
        }
        self.churn.sync_counts(&self.ports, &counts, (before, after));
        let failed = self.closed_without_tls(&stats);
        let gone: Vec<(conn_port, String)> = self
            .ports
            .iter()
            .filter(|(key, _)| !now.contains_key(key))
            .map(|(key, name)| (*key, name.clone()))
            .collect();
        for (key, name) in gone {
            log::debug!(
                "port {} (netns {}) of {name}: no longer listening, not watched",
                key.port,
                key.netns
            );
            k.ports.unwatch(&key);
            // connections accepted there may still close
            self.remember_name(key, name);
        }
        // a port the kernel has no room for is left out (Kernel counts it), and tried again
        // at the next scan
        now.retain(|key, _| k.ports.watch(key, &mut k.full));
        for key in now.keys() {
            if let Some((_, ports)) = namespaces.get_mut(&key.netns) {
                ports.push(key.port);
            }
        }
        owners.retain(|key, _| now.contains_key(key));
        self.owners = owners;
        self.ports = now;
        // a port watched again starts from zero in the kernel
        self.plain_seen.retain(|key, _| self.ports.contains_key(key));
        self.churn.refresh(&namespaces);
        self.churn.retain_namespaces(&namespaces.keys().copied().collect());
        failed
    }

    /// ClientHello bytes read from the client's packets (bpf/hello_skb.bpf.h) carry no
    /// process (tgid 0: they arrive in no process's time): they are the port's owner's.
    /// The ports of the wire's connections that are not watched (taken on by the kernel at
    /// their process's first read or send), served by a traced process (`name`: its name,
    /// None if not traced): learned, to be watched from the next refresh. Whether any is new.
    pub fn learn(&mut self, wire: &[WireEvent], name: impl Fn(u32) -> Option<String>) -> bool {
        let mut new = false;
        for e in wire.iter().filter(|e| e.tgid != 0) {
            let key = conn_port::new(e.netns, e.port);
            if let Some(l) = self.learned.get_mut(&key) {
                // the latest to serve one owns it: its ClientHellos read from packets are its
                if l.1 != e.tgid {
                    if let Some(name) = name(e.tgid) {
                        *l = (name, e.tgid);
                        self.owners.insert(key, e.tgid);
                    }
                }
                continue;
            }
            if self.ports.contains_key(&key) {
                continue;
            }
            if self.learned.len() >= MAX_WATCHED_PORTS {
                bounds::count(&self.metrics, "watched_ports", 1);
                continue;
            }
            if let Some(name) = name(e.tgid) {
                log::info!(
                    "port {} (netns {}): connections served by {} ({name}), a process its listener's owner started                      for them: watched from the next one",
                    e.port,
                    e.netns,
                    e.tgid
                );
                self.learned.insert(key, (name, e.tgid));
                new = true;
            }
        }
        new
    }

    /// QUIC datagrams (bpf/quic.bpf.h) carry neither process nor namespace: they are the
    /// process's that bound their UDP port.
    pub fn own_client_hellos(&self, mut wire: Vec<WireEvent>) -> Vec<WireEvent> {
        for e in wire.iter_mut().filter(|e| e.tgid == 0) {
            if e.kind == wire_ev::Hello {
                e.tgid = self.owners.get(&conn_port::new(e.netns, e.port)).copied().unwrap_or(0);
            } else if e.kind == wire_ev::Quic {
                if let Some((pid, netns, _)) = self.quic.get(&e.port) {
                    (e.tgid, e.netns) = (*pid, *netns);
                }
            }
        }
        wire
    }

    /// The connections closed without TLS on each watched port that carries TLS, since last
    /// counted, by kind (all since the port was watched, on one just seen carrying TLS).
    fn closed_without_tls(&mut self, stats: &HashMap<conn_port, conn_port_stats>) -> Failed {
        let mut failed = Vec::new();
        for (key, name) in &self.ports {
            let Some(p) = stats.get(key).filter(|p| p.flags & CONN_PORT_TLS != 0) else {
                continue; // not (yet) known to carry TLS: its count waits in the kernel
            };
            let seen = self.plain_seen.entry(*key).or_default();
            for (i, (now, before)) in p.untls.iter().zip(seen.iter_mut()).enumerate() {
                let n = now.saturating_sub(*before);
                *before = *now;
                // a kind bpf/hello.h does not name is counted by `decode`
                if let (true, Some(kind)) = (n > 0, decode::<hello_untls, _>(i as u8)) {
                    failed.push((name.clone(), key.port, kind, n));
                }
            }
        }
        failed
    }

    /// Each namespace's bound UDP sockets, read through one of its traced processes (`pids`)
    /// when they changed since the last reading or REREAD_UDP passed, else as last read.
    fn bound_udp(&mut self, pids: HashMap<u32, Vec<u32>>, now: Instant) -> HashMap<u32, Vec<(u16, u64)>> {
        self.udp_read.retain(|ns, _| pids.contains_key(ns));
        let mut out = HashMap::new();
        for (netns, mut pids) in pids {
            pids.sort_unstable();
            let fresh = self
                .udp_read
                .get(&netns)
                .is_some_and(|(_, seen, read)| *seen == pids && now.duration_since(*read) < REREAD_UDP);
            if !fresh {
                // through the first of its processes still there: one per connection may be
                // gone already, and its empty reading would take the namespace's QUIC ports
                // away until the next (bench/soak_faults.py lost HTTP/3 handshakes so)
                match pids.iter().find_map(|pid| procfs::proc_udp_bound(*pid)) {
                    Some(table) => {
                        self.udp_read.insert(netns, (table, pids, now));
                    }
                    None => {
                        if let Some(last) = self.udp_read.get_mut(&netns) {
                            last.1 = pids; // as last read, until one can be read
                        }
                    }
                }
            }
            let Some((table, _, _)) = self.udp_read.get(&netns) else {
                continue;
            };
            out.insert(netns, table.clone());
        }
        out
    }

    /// The listening sockets (inodes) among a process's open files. Read from /proc/PID/fd
    /// only when the process is new here, its namespace's listening sockets changed since,
    /// or REREAD_FILES has passed: a server holding 10,000 connections has 10,000 files to
    /// read, which every scan would pay (~120 ms for two such nginx workers here).
    fn listening_of(&mut self, pid: u32, netns: u32, table: &[(u16, u64)], now: Instant) -> Option<&HashSet<u64>> {
        let print = fingerprint(table);
        let fresh = self
            .owned
            .get(&pid)
            .is_some_and(|o| o.netns == netns && o.print == print && now.duration_since(o.read) < REREAD_FILES);
        if !fresh {
            let files = procfs::socket_inodes(pid).ok()?;
            let inodes = table.iter().map(|(_, i)| *i).filter(|i| files.contains(i)).collect();
            self.owned.insert(
                pid,
                Owned {
                    netns,
                    print,
                    inodes,
                    read: now,
                },
            );
        }
        self.owned.get(&pid).map(|o| &o.inodes)
    }

    /// A connection accepted on a watched port ended: its churn metrics, under the name of
    /// the process listening there. (One without TLS on a port that carries TLS is a failed
    /// handshake: counted from the kernel's per-port count at the next refresh.)
    pub fn on_conn(&mut self, e: &conn_event) {
        let key = conn_port::new(e.netns, e.port);
        let comm = self
            .ports
            .get(&key)
            .or_else(|| self.port_names.get(&key))
            .map_or("unknown", String::as_str);
        self.churn.on_event(e, comm);
    }

    /// Names of ports gone are kept a while, for the connections that close after.
    pub fn age_names(&mut self) {
        self.port_names.age();
    }

    /// Keeps the name of a port gone, within MAX_PORT_NAMES.
    fn remember_name(&mut self, key: conn_port, name: String) {
        if !self.port_names.insert(key, name) {
            bounds::count(&self.metrics, "port_names", 1);
        }
    }
}

/// Keeps the ports to watch within MAX_WATCHED_PORTS: those watched already stay, the
/// newest go. Returns how many were left out.
fn cap_ports(now: &mut BTreeMap<conn_port, String>, watched: &BTreeMap<conn_port, String>) -> u64 {
    let over = now.len().saturating_sub(MAX_WATCHED_PORTS);
    let out: Vec<conn_port> = now
        .keys()
        .rev()
        .filter(|k| !watched.contains_key(k))
        .take(over)
        .copied()
        .collect();
    for k in &out {
        now.remove(k);
    }
    out.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::TableLabels;

    fn full(m: &Metrics, table: &str) -> u64 {
        m.table_full.get_or_create(&TableLabels { table: table.into() }).get()
    }

    #[test]
    fn ports_to_watch_are_capped_keeping_those_watched() {
        let key = |i: usize| conn_port::new(1 + (i / 60_000) as u32, (i % 60_000) as u16);
        let watched: BTreeMap<conn_port, String> = (MAX_WATCHED_PORTS..MAX_WATCHED_PORTS + 5)
            .map(|i| (key(i), "nginx".to_string()))
            .collect();
        let mut now: BTreeMap<conn_port, String> = (0..MAX_WATCHED_PORTS + 5)
            .map(|i| (key(i), "nginx".to_string()))
            .collect();
        assert_eq!(cap_ports(&mut now, &watched), 5);
        assert_eq!(now.len(), MAX_WATCHED_PORTS);
        assert!(watched.keys().all(|k| now.contains_key(k)), "watched ports stay");
        // 5,000 ports of one process are far from it
        let mut few: BTreeMap<conn_port, String> = (0..5000).map(|i| (key(i), "nginx".to_string())).collect();
        assert_eq!(cap_ports(&mut few, &BTreeMap::new()), 0);
    }

    #[test]
    fn names_are_bounded() {
        let m = Arc::new(Metrics::new());
        let mut p = Ports::new(m.clone());
        let key = |i: usize| conn_port::new(1 + (i / 60_000) as u32, (i % 60_000) as u16);
        for i in 0..MAX_PORT_NAMES + 2 {
            p.remember_name(key(i), "nginx".into());
        }
        assert_eq!(p.port_names.len(), MAX_PORT_NAMES);
        assert_eq!(full(&m, "port_names"), 2);
    }

    /// Connections closed without TLS (the kernel's per-port counts by kind) are counted
    /// once their port is seen carrying TLS: those before it then, the later ones as they
    /// come; on a plain port never.
    #[test]
    fn closes_without_tls_count_once_their_port_carries_tls() {
        let mut p = Ports::new(Arc::new(Metrics::new()));
        let (tls, plain) = (conn_port::new(1, 443), conn_port::new(1, 80));
        p.ports.insert(tls, "nginx".into());
        p.ports.insert(plain, "nginx".into());
        let stats = |tls_flag: u32, silent: u64, hello: u64, on_plain: u64| {
            let mut untls = [0; HELLO_UNTLS_KINDS as usize];
            untls[hello_untls::Silent as usize] = silent;
            untls[hello_untls::HelloClient as usize] = hello;
            HashMap::from([
                (
                    tls,
                    conn_port_stats {
                        flags: tls_flag,
                        untls,
                        ..Default::default()
                    },
                ),
                (
                    plain,
                    conn_port_stats {
                        untls: [on_plain; HELLO_UNTLS_KINDS as usize],
                        ..Default::default()
                    },
                ),
            ])
        };
        assert!(
            p.closed_without_tls(&stats(0, 3, 1, 6)).is_empty(),
            "not known to carry TLS yet"
        );
        let nginx = |kind, n| ("nginx".to_string(), 443, kind, n);
        assert_eq!(
            p.closed_without_tls(&stats(CONN_PORT_TLS, 3, 1, 6)),
            vec![nginx(hello_untls::Silent, 3), nginx(hello_untls::HelloClient, 1)]
        );
        assert!(
            p.closed_without_tls(&stats(CONN_PORT_TLS, 3, 1, 9)).is_empty(),
            "counted once"
        );
        assert_eq!(
            p.closed_without_tls(&stats(CONN_PORT_TLS, 7, 1, 9)),
            vec![nginx(hello_untls::Silent, 4)]
        );
    }
}
