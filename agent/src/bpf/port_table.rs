//! The watched ports as the kernel holds them (bpf/conn.bpf.h): each listening port's
//! state and live exchange counter, the port numbers watched for TCP and for UDP (QUIC),
//! and those listened on. The agent's side of them is agent/ports.rs.
use std::collections::{HashMap, HashSet};

use anyhow::Result;
use aya::{
    maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, PerCpuValues},
    Ebpf,
};

use super::{
    conn::{self as cn, conn_port, conn_port_stats},
    loader::take,
};
use crate::bounds::Dropped;

pub struct PortTable {
    ports: BpfHashMap<MapData, conn_port, conn_port_stats>,
    /// The port numbers watched in any namespace, and in how many.
    port_nums: Array<MapData, u8>,
    tcp_nums: HashMap<u16, u32>,
    /// UDP ports bound by traced processes (port_nums' CONN_NUM_UDP: bpf/quic.bpf.h), as
    /// last set, and those processes (the QUIC egress program's cgroups).
    quic_nums: HashSet<u16>,
    quic_pids: Vec<u32>,
    /// quic_pids changed since the cgroups were last synced.
    quic_changed: bool,
    /// Port numbers listened on (conn_listen_nums), as last set.
    listen_map: Array<MapData, u8>,
    listen_nums: HashSet<u16>,
    /// Sockets that started or stopped listening so far.
    listen_changes: Array<MapData, u64>,
    /// Live exchange counters, a slot per watched port (bpf/conn.h), and the free slots
    /// (1-based, as conn_port_stats.slot holds them).
    exchanges: PerCpuArray<MapData, u64>,
    free_slots: Vec<u32>,
}

impl PortTable {
    pub(super) fn open(ebpf: &mut Ebpf) -> Result<Self> {
        Ok(Self {
            ports: take(ebpf, "conn_ports")?,
            port_nums: take(ebpf, "conn_port_nums")?,
            tcp_nums: HashMap::new(),
            quic_nums: HashSet::new(),
            quic_pids: Vec::new(),
            quic_changed: false,
            listen_map: take(ebpf, "conn_listen_nums")?,
            listen_nums: HashSet::new(),
            listen_changes: take(ebpf, "listen_changes")?,
            exchanges: take(ebpf, "conn_exchanges")?,
            free_slots: (1..=cn::CONN_EXCHANGE_SLOTS).rev().collect(),
        })
    }

    /// A watched port's kernel-side state (flags, exchange slot, accepted count).
    pub fn get(&self, key: &conn_port) -> Option<conn_port_stats> {
        self.ports.get(key, 0).ok()
    }

    /// Exchanges on a watched port's connections so far, summed over the CPUs (0 for a
    /// port without a slot).
    pub fn exchanges(&self, port: &conn_port_stats) -> u64 {
        let Some(idx) = port.slot.checked_sub(1) else { return 0 };
        self.exchanges.get(&idx, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }

    /// Starts watching a listening port (a no-op for one already watched), with a live
    /// exchange counter while there are free ones (else counted in `full`: exchange_slots).
    /// False, and counted (watched_ports), when the map has no room.
    pub fn watch(&mut self, key: &conn_port, full: &mut Dropped) -> bool {
        if self.get(key).is_some() {
            return true;
        }
        let slot = self.free_slots.pop().unwrap_or(0);
        if slot == 0 {
            full.add("exchange_slots", 1);
        } else {
            // a slot freed by a port gone counts from zero for the next
            let zeros = aya::util::nr_cpus().ok().map(|n| vec![0u64; n]);
            if let Some(z) = zeros.and_then(|z| PerCpuValues::try_from(z).ok()) {
                let _ = self.exchanges.set(slot - 1, z, 0);
            }
        }
        let fresh = conn_port_stats {
            flags: cn::CONN_PORT_LISTEN,
            slot,
            ..Default::default()
        };
        let ok = self.ports.insert(key, fresh, 0);
        if ok.is_ok() {
            let n = self.tcp_nums.entry(key.port).or_default();
            *n += 1;
            if *n == 1 {
                self.write_num(key.port);
            }
        }
        if let Err(e) = &ok {
            log::debug!("cannot watch port {} (netns {}): {e}", key.port, key.netns);
            full.add("watched_ports", 1);
            if slot != 0 {
                self.free_slots.push(slot);
            }
        }
        ok.is_ok()
    }

    pub fn unwatch(&mut self, key: &conn_port) {
        if let Some(p) = self.get(key) {
            if p.slot != 0 {
                self.free_slots.push(p.slot);
            }
        }
        if self.ports.remove(key).is_ok() {
            if let std::collections::hash_map::Entry::Occupied(mut n) = self.tcp_nums.entry(key.port) {
                *n.get_mut() -= 1;
                if *n.get() == 0 {
                    n.remove();
                    self.write_num(key.port);
                }
            }
        }
    }

    /// The port numbers listened on in the namespaces the agent reads (conn_listen_nums):
    /// a traced process's connection accepted there is taken on at its first read or send
    /// even where no traced process listens (bpf/conn.bpf.h conn_adopt).
    pub fn set_listening(&mut self, ports: HashSet<u16>) {
        for gone in self.listen_nums.difference(&ports) {
            let _ = self.listen_map.set(u32::from(*gone), 0, 0);
        }
        for new in ports.difference(&self.listen_nums) {
            let _ = self.listen_map.set(u32::from(*new), 1, 0);
        }
        self.listen_nums = ports;
    }

    /// A traced process started listening on `port`: the kernel set it in conn_listen_nums
    /// at once (bpf/conn.bpf.h conn_state_changed), and the next set_listening keeps it or
    /// clears it (a listener closed before it was read).
    pub fn listened(&mut self, port: u16) {
        self.listen_nums.insert(port);
    }

    /// How many times a TCP socket started or stopped listening so far, machine-wide (as
    /// the kernel counts them where a hook follows socket states: Kernel::listen_changes).
    pub(super) fn listen_changes(&self) -> Option<u64> {
        self.listen_changes.get(&0, 0).ok()
    }

    /// The UDP ports bound by traced processes in any namespace (`ports`), and those
    /// processes (`pids`): their QUIC handshakes are read (bpf/quic.bpf.h).
    pub fn set_quic_ports(&mut self, ports: HashSet<u16>, pids: Vec<u32>) {
        let changed: Vec<u16> = self.quic_nums.symmetric_difference(&ports).copied().collect();
        self.quic_nums = ports;
        for port in changed {
            self.write_num(port);
        }
        self.quic_changed |= pids != self.quic_pids;
        self.quic_pids = pids;
    }

    /// Whether the traced processes with a watched UDP port changed since the cgroups were
    /// last synced (Kernel::watch_cgroups): the QUIC egress program goes to theirs at once.
    pub fn quic_changed(&self) -> bool {
        self.quic_changed
    }

    /// The processes with a watched UDP port, as the cgroups are synced to them.
    pub(super) fn quic_synced(&mut self) -> &[u32] {
        self.quic_changed = false;
        &self.quic_pids
    }

    /// A port number's conn_port_nums value: whether it is watched for TCP, for UDP.
    fn write_num(&mut self, port: u16) {
        let tcp = if self.tcp_nums.contains_key(&port) {
            cn::CONN_NUM_TCP as u8
        } else {
            0
        };
        let udp = if self.quic_nums.contains(&port) {
            cn::CONN_NUM_UDP as u8
        } else {
            0
        };
        let _ = self.port_nums.set(u32::from(port), tcp | udp, 0);
    }
}
