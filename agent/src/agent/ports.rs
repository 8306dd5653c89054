//! Port bookkeeping: the listening ports of the traced processes are the ports the kernel
//! watches (conn_ports); connections accepted there are counted and followed to their end
//! (conns/churn.rs), and a connection that closed without any TLS on a port that carries
//! TLS is a failed handshake.
use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
    sync::Arc,
};

use crate::{
    bpf::{
        conn::{conn_event, conn_port, CONN_PORT_TLS},
        loader::Kernel,
    },
    conns::Churn,
    discovery::procfs,
    metrics::Metrics,
};

pub struct Ports {
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
        // Each namespace's listening sockets, read once (nginx's master and workers share one).
        let mut listeners: HashMap<u32, Vec<(u16, u64)>> = HashMap::new();
        let mut ns_paths: HashMap<u32, PathBuf> = HashMap::new();
        for (pid, name) in traced {
            let (Ok(netns), Ok(inodes)) = (procfs::netns(pid), procfs::socket_inodes(pid)) else {
                continue;
            };
            let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
            let table = listeners.entry(netns).or_insert_with(|| {
                self.churn
                    .listeners(netns, &path)
                    .unwrap_or_else(|| procfs::proc_listeners(pid))
            });
            ns_paths.entry(netns).or_insert(path);
            for (port, _) in table.iter().filter(|(_, ino)| inodes.contains(ino)) {
                now.entry(conn_port::new(netns, *port))
                    .or_insert_with(|| name.to_string());
            }
        }
        // Each namespace: a way into it, and its watched ports.
        let mut namespaces: HashMap<u32, (PathBuf, Vec<u16>)> = ns_paths
            .into_iter()
            .map(|(ns, path)| (ns, (path, Vec::new())))
            .collect();
        for key in now.keys() {
            if let Some((_, ports)) = namespaces.get_mut(&key.netns) {
                ports.push(key.port);
            }
        }
        for (key, name) in self.ports.iter().filter(|(key, _)| !now.contains_key(key)) {
            k.unwatch_port(key);
            // connections accepted there may still close
            self.port_names.insert(*key, name.clone());
        }
        for key in now.keys() {
            k.watch_port(key);
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
            *self.unhandshaken.entry(key).or_default() += 1;
            return Vec::new();
        }
        self.ports.get(&key).map(|name| (name.clone(), 1)).into_iter().collect()
    }

    /// Names of ports gone are kept a while, for the connections that close after.
    pub fn clear_names(&mut self) {
        self.port_names.clear();
    }
}

/// A connection accepted on this port carried TLS.
fn is_tls(k: &Kernel, key: &conn_port) -> bool {
    k.port(key).is_some_and(|f| f.flags & CONN_PORT_TLS != 0)
}
