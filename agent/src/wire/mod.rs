//! What servers negotiated, from what they send during their handshakes: the TLS parser
//! (tls/) and the tracker that joins a connection's captured bytes with the handshake the
//! probes saw on it (tracker.rs).
pub mod failure;
#[cfg(test)]
pub mod fixtures;
#[cfg(test)]
mod fuzz;
mod packed;
pub mod quic;
pub mod tls;
pub mod tracker;

pub use tls::{Negotiated, TRANSPORT_QUIC};
pub use tracker::{ConnId, Lookup, Tracker, WireHandshake};
