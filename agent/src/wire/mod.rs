//! What servers negotiated, from what they send during their handshakes: the TLS parser
//! (tls/) and the tracker that joins a connection's captured bytes with the handshake the
//! probes saw on it (tracker.rs).
pub mod failure;
#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod fuzz;
pub mod protocol;
pub mod quic;
pub mod tls;
pub mod tracker;

pub use protocol::AppProtocol;
pub use tls::{Negotiated, Transport};
pub use tracker::{ConnId, Lookup, Tracker, WireHandshake};
