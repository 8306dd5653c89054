//! Port bookkeeping: the listening ports of the traced processes are the ports the kernel
//! watches (conn_ports); connections accepted there are counted and followed to their end
//! (conns/churn.rs), and a connection that closed without any TLS on a port that carries
//! TLS is a failed handshake.
use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::PathBuf,
    sync::Arc,
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
    pub churn: Churn,
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
            churn: Churn::new(metrics),
        }
    }

    /// Keeps the kernel's watched ports equal to the listening ports of the traced
    /// processes (`traced`: pid and name), exports the kernel's per-port counts, reads
    /// TIME_WAIT sockets, and returns the connections without a handshake on ports now
    /// known to carry TLS.
    pub fn refresh<'a>(&mut self, traced: impl Iterator<Item = (u32, &'a str)>, k: &mut Kernel) -> Failed {
        // Accepted connections of the ports watched until now, before any is removed.
        let counts: HashMap<conn_port, u64> = self
            .ports
            .keys()
            .filter_map(|key| Some((*key, k.port(key)?.accepted)))
            .collect();
        self.churn.sync_accepted(&self.ports, &counts);

        let mut now: BTreeMap<conn_port, String> = BTreeMap::new();
        // Each traced process's namespace and sockets; each namespace: a way into it (the
        // first process's), and the sockets of all its traced processes.
        let mut procs = Vec::new();
        let mut ns_socks: HashMap<u32, (PathBuf, u32, HashSet<u64>)> = HashMap::new();
        for (pid, name) in traced {
            let (Ok(netns), Ok(inodes)) = (procfs::netns(pid), procfs::socket_inodes(pid)) else {
                continue;
            };
            let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
            let ns = ns_socks.entry(netns).or_insert_with(|| (path, pid, HashSet::new()));
            ns.2.extend(inodes.iter().copied());
            procs.push((name, netns, inodes));
        }
        // Each namespace's listening sockets of those processes, read once (nginx's master
        // and workers share them).
        let mut listeners: HashMap<u32, Vec<(u16, u64)>> = HashMap::new();
        for (&netns, (path, pid, inodes)) in &ns_socks {
            let table = self.churn.listeners(netns, path, inodes).unwrap_or_else(|| {
                let all = procfs::proc_listeners(*pid);
                all.into_iter().filter(|(_, ino)| inodes.contains(ino)).collect()
            });
            listeners.insert(netns, table);
        }
        for (name, netns, inodes) in procs {
            for (port, _) in listeners[&netns].iter().filter(|(_, ino)| inodes.contains(ino)) {
                now.entry(conn_port::new(netns, *port))
                    .or_insert_with(|| name.to_string());
            }
        }
        let left_out = cap_ports(&mut now, &self.ports);
        bounds::count(&self.metrics, "watched_ports", left_out);
        let ns_paths = ns_socks.into_iter().map(|(ns, (path, _, _))| (ns, path));
        // Each namespace: a way into it, and its watched ports.
        let mut namespaces: HashMap<u32, (PathBuf, Vec<u16>)> =
            ns_paths.map(|(ns, path)| (ns, (path, Vec::new()))).collect();
        let gone: Vec<(conn_port, String)> = self
            .ports
            .iter()
            .filter(|(key, _)| !now.contains_key(key))
            .map(|(key, name)| (*key, name.clone()))
            .collect();
        for (key, name) in gone {
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
