//! What an operator reads besides /metrics: `tlsprof top` (top.rs) and `tlsprof report`
//! (report/), both over windows (snapshot.rs) of the agent's figures (model.rs), from an
//! agent started in this process or a running one's endpoint (live.rs, remote.rs).
pub mod compare;
pub mod live;
pub mod model;
pub mod remote;
pub mod report;
pub mod snapshot;
pub mod top;
