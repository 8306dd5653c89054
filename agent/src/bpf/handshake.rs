//! Mirror of bpf/handshake.h and the decoding of handshake events.
use crate::metrics::LabelValue;

pub const HS_ROLE_SERVER: u8 = 1;
pub const HS_ROLE_CLIENT: u8 = 2;
pub const HS_RESULT_OK: u8 = 0;
pub const HS_RESULT_FAILED: u8 = 1;

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hs_event {
    pub duration_ns: u64,
    pub cpu_ns: u64,
    pub tgid: u32,
    pub calls: u32,
    pub role: u8,
    pub result: u8,
    pub estimate: u8,
    pub pad: [u8; 5],
    pub conn_id: u64,
    pub conn_start: u64,
    pub end_ns: u64,
}

/// Value of hs_hits: uprobe hits of one process.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct hs_hits {
    pub entries: u64,
    pub returns: u64,
    /// The probe programs' own run time, ns (the traps' cost is calibrated instead).
    pub prog_ns: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "mirror of bpf/handshake.h, checked by the layout test; only the kernel writes it"
    )
)]
pub struct hs_thread {
    pub ssl: u64,
    pub enter_ns: u64,
    pub oncpu_ns: u64,
    pub cpu_ns: u64,
    pub tgid: u32,
    pub depth: u32,
    pub role: u8,
    pub io: u8,
    pub est: u8,
    pub go: u8,
    pub pad: [u8; 4],
    pub conn_id: u64,
    pub conn_start: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hs_key {
    pub ssl: u64,
    pub tgid: u32,
    pub pad: u32,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct hs_state {
    pub first_ns: u64,
    pub last_ns: u64,
    pub cpu_ns: u64,
    pub calls: u32,
    pub role: u8,
    pub done: u8,
    pub pad: [u8; 2],
    pub conn_id: u64,
    pub conn_start: u64,
}

// SAFETY: plain #[repr(C)] integers with explicit padding, valid for any bit pattern.
unsafe impl aya::Pod for hs_thread {}
unsafe impl aya::Pod for hs_key {}
unsafe impl aya::Pod for hs_state {}
unsafe impl aya::Pod for hs_hits {}

/// A handshake's side (the `role` label): the kernel's HS_ROLE_*, `unknown` for any other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    Server,
    Client,
    Unknown,
}

impl Role {
    pub fn of(role: u8) -> Role {
        match role {
            HS_ROLE_SERVER => Role::Server,
            HS_ROLE_CLIENT => Role::Client,
            _ => Role::Unknown,
        }
    }
}

impl LabelValue for Role {
    const ALL: &'static [Role] = &[Role::Server, Role::Client, Role::Unknown];
    fn label(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Unknown => "unknown",
        }
    }
}

/// How a handshake ended (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HandshakeResult {
    Ok,
    Failed,
}

impl HandshakeResult {
    pub fn of(result: u8) -> HandshakeResult {
        if result == HS_RESULT_OK {
            HandshakeResult::Ok
        } else {
            HandshakeResult::Failed
        }
    }
}

impl LabelValue for HandshakeResult {
    const ALL: &'static [HandshakeResult] = &[HandshakeResult::Ok, HandshakeResult::Failed];
    fn label(self) -> &'static str {
        match self {
            HandshakeResult::Ok => "ok",
            HandshakeResult::Failed => "failed",
        }
    }
}

/// The role label of an event.
pub fn role_label(role: u8) -> &'static str {
    Role::of(role).label()
}

pub fn result_label(result: u8) -> &'static str {
    HandshakeResult::of(result).label()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::read_record;

    #[test]
    fn decode_event() {
        let mut raw = Vec::new();
        raw.extend_from_slice(&1_500_000u64.to_le_bytes());
        raw.extend_from_slice(&250_000u64.to_le_bytes());
        raw.extend_from_slice(&4242u32.to_le_bytes());
        raw.extend_from_slice(&3u32.to_le_bytes());
        raw.extend_from_slice(&[HS_ROLE_SERVER, HS_RESULT_FAILED, 1, 0, 0, 0, 0, 0]);
        raw.extend_from_slice(&0x0003_0000_0000_002au64.to_le_bytes());
        raw.extend_from_slice(&99u64.to_le_bytes());
        raw.extend_from_slice(&123_456u64.to_le_bytes());
        let e: hs_event = read_record(&raw).unwrap();
        assert_eq!(
            (e.conn_id, e.conn_start, e.end_ns, e.estimate),
            (0x0003_0000_0000_002a, 99, 123_456, 1)
        );
        assert_eq!(
            (e.duration_ns, e.cpu_ns, e.tgid, e.calls),
            (1_500_000, 250_000, 4242, 3)
        );
        assert_eq!((role_label(e.role), result_label(e.result)), ("server", "failed"));
        assert!(read_record::<hs_event>(&raw[..55]).is_none());
    }

    #[test]
    fn labels() {
        assert_eq!(role_label(HS_ROLE_CLIENT), "client");
        assert_eq!(role_label(0), "unknown");
        assert_eq!(result_label(HS_RESULT_OK), "ok");
    }
}
