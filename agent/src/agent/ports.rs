//! Port bookkeeping: the listening ports of the traced processes are the ports the kernel
//! watches (conn_ports); connections accepted there are counted and followed to their end
//! (conns/churn.rs), and a connection that closed without any TLS on a port that carries
//! TLS is a failed handshake.
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    bounds,
    bpf::{
        conn::{conn_event, conn_port, CONN_PORTS_ENTRIES, CONN_PORT_TLS},
        loader::Kernel,
    },
    conns::Churn,
    discovery::procfs,
    metrics::Metrics,
};

/// Ports watched at most, all namespaces together: what the kernel's conn_ports holds.
/// Beyond, the ports not watched yet are left out at each scan, counted:
/// tlsprof_table_full_total{table="watched_ports"} (as is a port the kernel refused).
pub const MAX_WATCHED_PORTS: usize = CONN_PORTS_ENTRIES as usize;
/// Ports no longer listened on whose names are kept (cleared every minute), and ports
/// with connections held until they are known to carry TLS, at most each (as many as can
/// be watched); beyond, counted: tlsprof_table_full_total{table="port_names"} (a
/// connection closing there later gets comm `unknown`) and {table="unhandshaken_ports"}
/// (the connection is not counted as a failed handshake).
pub const MAX_PORT_NAMES: usize = MAX_WATCHED_PORTS;
pub const MAX_UNHANDSHAKEN_PORTS: usize = MAX_WATCHED_PORTS;

pub struct Ports {
    metrics: Arc<Metrics>,
    /// Listening ports of traced processes, and the name of the process listening.
    ports: BTreeMap<conn_port, String>,
    /// Connections closed without TLS on ports not (yet) known to carry TLS.
    unhandshaken: BTreeMap<conn_port, u64>,
    /// Names of ports no longer listened on, for connections that close afterwards.
    port_names: HashMap<conn_port, String>,
    /// Each traced process's listening sockets (listening_of); bounded by the traced set.
    owned: HashMap<u32, Owned>,
    /// Each traced namespace's listening sockets (port, inode) and when they were read:
    /// read again when a socket of the machine started or stopped listening since
    /// (Kernel::listen_changes, as last seen), or after REREAD_FILES.
    listening: HashMap<u32, (Vec<(u16, u64)>, Instant)>,
    listen_seen: Option<u64>,
    pub churn: Churn,
}

/// How long a process's listening sockets are taken from its files' last reading while its
/// namespace's listening sockets stay the same (a socket handed over between processes
/// without a change there, e.g. by SCM_RIGHTS, shows within this).
const REREAD_FILES: Duration = Duration::from_secs(60);

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
pub type Failed = Vec<(String, u64)>;

impl Ports {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics: metrics.clone(),
            ports: BTreeMap::new(),
            unhandshaken: BTreeMap::new(),
            port_names: HashMap::new(),
            owned: HashMap::new(),
            listening: HashMap::new(),
            listen_seen: None,
            churn: Churn::new(metrics),
        }
    }

    /// Keeps the kernel's watched ports equal to the listening ports of the traced
    /// processes (`traced`: pid and name), exports the kernel's per-port counts, reads
    /// TIME_WAIT sockets, and returns the connections without a handshake on ports now
    /// known to carry TLS.
    pub fn refresh<'a>(&mut self, traced: impl Iterator<Item = (u32, &'a str)>, k: &mut Kernel) -> Failed {
        let mut now: BTreeMap<conn_port, String> = BTreeMap::new();
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
        for (pid, name) in traced {
            let Ok(netns) = procfs::netns(pid) else { continue };
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
        self.listen_seen = changes;
        self.listening.retain(|ns, _| listeners.contains_key(ns));
        let live: HashSet<u32> = procs.iter().map(|p| p.0).collect();
        self.owned.retain(|pid, _| live.contains(pid));
        for (pid, name, netns) in procs {
            let table = &listeners[&netns];
            let Some(mine) = self.listening_of(pid, netns, table, t) else {
                continue;
            };
            for (port, _) in table.iter().filter(|(_, ino)| mine.contains(ino)) {
                now.entry(conn_port::new(netns, *port))
                    .or_insert_with(|| name.to_string());
            }
        }
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
        let counts: HashMap<conn_port, (u64, u64)> = self
            .ports
            .keys()
            .filter_map(|key| {
                let p = k.port(key)?;
                Some((*key, (p.accepted, k.exchanges(&p))))
            })
            .collect();
        self.churn.sync_counts(&self.ports, &counts);
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
            k.unwatch_port(&key);
            // connections accepted there may still close
            self.remember_name(key, name);
        }
        // a port the kernel has no room for is left out (Kernel counts it), and tried again
        // at the next scan
        now.retain(|key, _| k.watch_port(key));
        for key in now.keys() {
            if let Some((_, ports)) = namespaces.get_mut(&key.netns) {
                ports.push(key.port);
            }
        }
        self.ports = now;
        self.churn.refresh(&namespaces);
        self.churn.retain_namespaces(&namespaces.keys().copied().collect());

        let mut failed = Vec::new();
        let pending: Vec<conn_port> = self.unhandshaken.keys().copied().collect();
        for key in pending {
            if is_tls(k, &key) {
                let n = self.unhandshaken.remove(&key).unwrap_or(0);
                failed.extend(self.ports.get(&key).map(|name| (name.clone(), n)));
            } else if !self.ports.contains_key(&key) {
                self.unhandshaken.remove(&key);
            }
        }
        failed
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

    /// A connection accepted on a watched port ended. Returns it as a failed handshake
    /// when it carried no TLS on a port that does.
    pub fn on_conn(&mut self, e: &conn_event, k: &Kernel) -> Failed {
        let key = conn_port::new(e.netns, e.port);
        let comm = self
            .ports
            .get(&key)
            .or_else(|| self.port_names.get(&key))
            .map_or("unknown", String::as_str)
            .to_string();
        self.churn.on_event(e, &comm);
        if e.tls != 0 {
            return Vec::new();
        }
        if !is_tls(k, &key) {
            self.hold_unhandshaken(key);
            return Vec::new();
        }
        self.ports.get(&key).map(|name| (name.clone(), 1)).into_iter().collect()
    }

    /// Names of ports gone are kept a while, for the connections that close after.
    pub fn clear_names(&mut self) {
        self.port_names.clear();
    }

    /// Keeps the name of a port gone, within MAX_PORT_NAMES.
    fn remember_name(&mut self, key: conn_port, name: String) {
        if self.port_names.len() >= MAX_PORT_NAMES && !self.port_names.contains_key(&key) {
            bounds::count(&self.metrics, "port_names", 1);
            return;
        }
        self.port_names.insert(key, name);
    }

    /// Holds a connection without TLS on a port not known to carry TLS, within
    /// MAX_UNHANDSHAKEN_PORTS.
    fn hold_unhandshaken(&mut self, key: conn_port) {
        if self.unhandshaken.len() >= MAX_UNHANDSHAKEN_PORTS && !self.unhandshaken.contains_key(&key) {
            bounds::count(&self.metrics, "unhandshaken_ports", 1);
            return;
        }
        *self.unhandshaken.entry(key).or_default() += 1;
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

/// A connection accepted on this port carried TLS.
fn is_tls(k: &Kernel, key: &conn_port) -> bool {
    k.port(key).is_some_and(|f| f.flags & CONN_PORT_TLS != 0)
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
    fn names_and_held_connections_are_bounded() {
        let m = Arc::new(Metrics::new());
        let mut p = Ports::new(m.clone());
        let key = |i: usize| conn_port::new(1 + (i / 60_000) as u32, (i % 60_000) as u16);
        for i in 0..MAX_PORT_NAMES + 2 {
            p.remember_name(key(i), "nginx".into());
        }
        for i in 0..MAX_UNHANDSHAKEN_PORTS + 3 {
            p.hold_unhandshaken(key(i));
        }
        p.hold_unhandshaken(key(0));
        assert_eq!(
            (p.port_names.len(), p.unhandshaken.len(), p.unhandshaken[&key(0)]),
            (MAX_PORT_NAMES, MAX_UNHANDSHAKEN_PORTS, 2)
        );
        assert_eq!((full(&m, "port_names"), full(&m, "unhandshaken_ports")), (2, 3));
    }
}
