//! The handshake probes' events (bpf/handshake.h): its types (generated: abi.rs) and
//! their labels (the enums the `role` and `result` labels are written from and read into).

pub use super::abi::{hs_event, hs_hits, hs_key, hs_result, hs_role, hs_state, HS_DETACHING};
use crate::metrics::LabelValue;

/// How a handshake ended (the `result` label).
pub use super::abi::hs_result as HandshakeResult;
/// A handshake's side (the `role` label).
pub use super::abi::hs_role as Role;

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

impl LabelValue for HandshakeResult {
    const ALL: &'static [HandshakeResult] = &[HandshakeResult::Ok, HandshakeResult::Failed];
    fn label(self) -> &'static str {
        match self {
            HandshakeResult::Ok => "ok",
            HandshakeResult::Failed => "failed",
        }
    }
}

/// An event's role and result, read from its raw bytes here and nowhere else.
impl hs_event {
    /// Its role and result; None (counted by `decode`) for a value this build does not
    /// write.
    pub fn decoded(&self) -> Option<(Role, HandshakeResult)> {
        Some((super::abi::decode(self.role)?, super::abi::decode(self.result)?))
    }
    pub fn client(&self) -> bool {
        self.role == Role::Client as u8
    }
    pub fn server(&self) -> bool {
        self.role == Role::Server as u8
    }
    pub fn ok(&self) -> bool {
        self.result == HandshakeResult::Ok as u8
    }
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
        raw.extend_from_slice(&[hs_role::Server as u8, hs_result::Failed as u8, 1, 0, 0, 0, 0, 0]);
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
        assert_eq!(
            (
                hs_role::try_from(e.role).map(hs_role::label),
                hs_result::try_from(e.result).map(hs_result::label)
            ),
            (Ok("server"), Ok("failed"))
        );
        assert!(read_record::<hs_event>(&raw[..55]).is_none());
    }

    #[test]
    fn labels() {
        assert_eq!(hs_role::try_from(2u8).map(hs_role::label), Ok("client"));
        assert_eq!(hs_role::try_from(0u8).map(hs_role::label), Ok("unknown"));
        assert_eq!(hs_result::try_from(0u8).map(hs_result::label), Ok("ok"));
        // A value the header does not name is refused, never read as a default.
        let unknown = hs_role::try_from(3u8).unwrap_err();
        assert_eq!((unknown.what, unknown.value), ("hs_role", 3));
        assert!(hs_result::try_from(2u8).is_err());
    }
}
