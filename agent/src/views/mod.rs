//! What an operator reads besides /metrics: `tlsprof top` (top/) and `tlsprof report`
//! (report/), both over windows (snapshot.rs) of the agent's figures (model.rs), from an
//! agent started in this process or a running one's endpoint (live.rs, remote.rs); a window
//! is what moved between two readings (reading.rs); the exit summary of `tlsprof run`
//! (summary.rs) reads the same figures. What a port's clients offered is in clients.rs, what
//! failed there (and which clients, lacking what), and what never offered TLS in failures.rs.
pub mod clients;
pub mod compare;
pub mod failures;
pub mod live;
pub mod model;
pub mod reading;
pub mod remote;
pub mod report;
pub mod snapshot;
pub mod summary;
pub mod top;
