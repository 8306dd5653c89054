//! Mirror of bpf/conn.h: connections accepted on the listening ports of traced processes.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const CONN_PORT_LISTEN: u32 = 1;
pub const CONN_PORT_TLS: u32 = 2;
/// Room in conn_ports: the agent watches no more ports (agent/ports.rs).
pub const CONN_PORTS_ENTRIES: u32 = 65536;
/// Live exchange counters (conn_exchanges): watched ports beyond them have none.
pub const CONN_EXCHANGE_SLOTS: u32 = 4096;
pub const CONN_BY_SERVER: u8 = 1;
pub const CONN_BY_CLIENT: u8 = 2;
pub const CONN_BY_RESET: u8 = 3;
#[cfg(test)]
pub const CONN_TW_NO: u8 = 0;
pub const CONN_TW_YES: u8 = 1;
pub const CONN_TW_MAYBE: u8 = 2;
pub const AF_INET: u16 = libc::AF_INET as u16;

/// Value of req_ctl[0] (bpf/requests.h): the switches the agent sets after load, which
/// cannot be read-only globals: whether the send capture attached is known once the object
/// is loaded, and `reads` changes at run time. (--exact is the global req_read_links.)
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct req_ctl {
    pub sends_captured: u32,
    pub reads: u32,
}

/// conn_port_nums values (bits): a TCP port watched, a UDP port watched (QUIC).
pub const CONN_NUM_TCP: u8 = 1;
pub const CONN_NUM_UDP: u8 = 2;

/// A listening port of a traced process (key of conn_ports).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct conn_port {
    pub netns: u32,
    pub port: u16,
    pub pad: u16,
}

impl conn_port {
    pub fn new(netns: u32, port: u16) -> Self {
        Self { netns, port, pad: 0 }
    }
}

/// Value of conn_ports.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct conn_port_stats {
    pub flags: u32,
    /// 1 + the port's slot in conn_exchanges; 0: none.
    pub slot: u32,
    pub accepted: u64,
    /// Connections accepted here that closed without TLS: failed handshakes once the port
    /// is known to carry TLS (agent/ports.rs).
    pub plain: u64,
}

// SAFETY: plain #[repr(C)] integers with explicit padding, valid for any bit pattern.
unsafe impl aya::Pod for req_ctl {}
unsafe impl aya::Pod for conn_port {}
unsafe impl aya::Pod for conn_port_stats {}

/// A connection's state in the kernel, one part per feature (bpf/conn.h, requests.h,
/// wire.h): mirrors checked by the layout test; only the kernel uses them.
#[cfg(test)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct conn_life {
    pub id: u64,
    pub start_ns: u64,
    pub netns: u32,
    pub port: u16,
    pub first_fin: u8,
    pub reset: u8,
    pub tls: u8,
    pub late: u8,
    pub pad: [u8; 6],
}

#[cfg(test)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct req_conn {
    pub requests: u32,
    pub slot: u16,
    pub dir: u8,
    pub pad: u8,
    pub rx_mark: u32,
    pub rx_tail: u32,
}

#[cfg(test)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct wire_conn {
    pub seq: u32,
    pub left: u32,
    pub tgid: u32,
    pub copied: u16,
    pub state: u8,
    pub flags: u8,
    pub hdr: [u8; 8],
    pub hdr_have: u8,
    pub sealed: u8,
    pub end: u8,
    pub why: u8,
    pub fin_len: u16,
    pub pre: u8,
    pub proto: u8,
    pub rx_first: u32,
    pub rx_flight: u32,
}

#[cfg(test)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct conn_state {
    pub life: conn_life,
    pub req: req_conn,
    pub wire: wire_conn,
    pub hello: hello_conn,
}

#[cfg(test)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hello_conn {
    pub start: u32,
    pub seen: u32,
    pub rec_left: u32,
    pub msg_len: u32,
    pub body: u32,
    pub state: u8,
    pub hdr_have: u8,
    pub msg_have: u8,
    pub records: u8,
    pub hdr: [u8; 8],
    pub msg: [u8; 4],
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct conn_event {
    /// The connection's identity (bpf/conn.h conn_life.id), as its other events carry it.
    pub conn_id: u64,
    pub duration_ns: u64,
    pub saddr: [u8; 16],
    pub daddr: [u8; 16],
    pub netns: u32,
    pub requests: u32,
    pub port: u16,
    pub dport: u16,
    pub family: u16,
    pub closed_by: u8,
    pub time_wait: u8,
    pub tls: u8,
    pub pad: [u8; 7],
}

fn addr(family: u16, raw: &[u8; 16]) -> IpAddr {
    if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*raw))
    }
}

impl conn_event {
    pub fn local(&self) -> IpAddr {
        addr(self.family, &self.saddr)
    }

    pub fn remote(&self) -> IpAddr {
        addr(self.family, &self.daddr)
    }
}

/// Who closed a connection first (the `closed_by` label): the kernel's CONN_BY_*, `unknown`
/// for any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClosedBy {
    Server,
    Client,
    Reset,
    Unknown,
}

impl ClosedBy {
    pub fn of(by: u8) -> ClosedBy {
        match by {
            CONN_BY_SERVER => ClosedBy::Server,
            CONN_BY_CLIENT => ClosedBy::Client,
            CONN_BY_RESET => ClosedBy::Reset,
            _ => ClosedBy::Unknown,
        }
    }
}

impl crate::metrics::LabelValue for ClosedBy {
    const ALL: &'static [ClosedBy] = &[ClosedBy::Server, ClosedBy::Client, ClosedBy::Reset, ClosedBy::Unknown];
    fn label(self) -> &'static str {
        match self {
            ClosedBy::Server => "server",
            ClosedBy::Client => "client",
            ClosedBy::Reset => "reset",
            ClosedBy::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::read_record;

    #[test]
    fn decode_event() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&0x0001_0000_0000_0007u64.to_le_bytes());
        raw.extend_from_slice(&2_000_000u64.to_le_bytes());
        let mut saddr = [0u8; 16];
        saddr[..4].copy_from_slice(&[127, 0, 0, 1]);
        raw.extend_from_slice(&saddr);
        let mut daddr = [0u8; 16];
        daddr[..4].copy_from_slice(&[127, 0, 0, 2]);
        raw.extend_from_slice(&daddr);
        raw.extend_from_slice(&4026531840u32.to_le_bytes());
        raw.extend_from_slice(&5u32.to_le_bytes());
        raw.extend_from_slice(&8443u16.to_le_bytes());
        raw.extend_from_slice(&50000u16.to_le_bytes());
        raw.extend_from_slice(&AF_INET.to_le_bytes());
        raw.extend_from_slice(&[CONN_BY_SERVER, CONN_TW_MAYBE, 1, 0, 0, 0, 0, 0, 0, 0]);
        let e: conn_event = read_record(&raw).unwrap();
        assert_eq!((e.conn_id, e.duration_ns), (0x0001_0000_0000_0007, 2_000_000));
        assert_eq!((e.netns, e.requests, e.port, e.dport), (4026531840, 5, 8443, 50000));
        assert_eq!(e.local(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(e.remote(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(
            (
                crate::metrics::LabelValue::label(ClosedBy::of(e.closed_by)),
                e.time_wait,
                e.tls
            ),
            ("server", CONN_TW_MAYBE, 1)
        );
        let mut v6 = e;
        v6.family = libc::AF_INET6 as u16;
        v6.daddr = Ipv6Addr::LOCALHOST.octets();
        assert_eq!(v6.remote(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(read_record::<conn_event>(&raw[..71]).is_none());
    }
}
