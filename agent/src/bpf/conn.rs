//! Connections accepted on the listening ports of traced processes (bpf/conn.h): its types
//! (generated: abi.rs) and their decoding.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use super::abi::{
    conn_by, conn_event, conn_port, conn_port_stats, conn_state, conn_tw, req_ctl, CONN_EXCHANGE_SLOTS, CONN_NUM_TCP,
    CONN_NUM_UDP, CONN_PORTS_ENTRIES, CONN_PORT_LISTEN, CONN_PORT_TLS,
};

pub const AF_INET: u16 = libc::AF_INET as u16;

impl conn_port {
    pub fn new(netns: u32, port: u16) -> Self {
        Self { netns, port, pad: 0 }
    }
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

/// Who ended a connection (the `closed_by` label).
pub use super::abi::conn_by as ClosedBy;

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
    use crate::{bpf::read_record, metrics::LabelValue};

    #[test]
    fn decode_event() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&0x0001_0000_0000_0007u64.to_le_bytes());
        raw.extend_from_slice(&2_000_000u64.to_le_bytes());
        raw.extend_from_slice(&9_000_000u64.to_le_bytes());
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
        raw.extend_from_slice(&[conn_by::Server as u8, conn_tw::Maybe as u8, 1, 1, 0, 0, 0, 0, 0, 0]);
        let e: conn_event = read_record(&raw).unwrap();
        assert_eq!(
            (e.conn_id, e.duration_ns, e.start_ns),
            (0x0001_0000_0000_0007, 2_000_000, 9_000_000)
        );
        assert_eq!((e.netns, e.requests, e.port, e.dport), (4026531840, 5, 8443, 50000));
        assert_eq!(e.local(), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(e.remote(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(
            (
                ClosedBy::try_from(e.closed_by).map(ClosedBy::label),
                conn_tw::try_from(e.time_wait),
                e.tls,
                e.adopted
            ),
            (Ok("server"), Ok(conn_tw::Maybe), 1, 1)
        );
        let mut v6 = e;
        v6.family = libc::AF_INET6 as u16;
        v6.daddr = Ipv6Addr::LOCALHOST.octets();
        assert_eq!(v6.remote(), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert!(read_record::<conn_event>(&raw[..79]).is_none());
    }
}
