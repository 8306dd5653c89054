//! Connection churn: the kernel's per-connection close events turned into metrics
//! (churn.rs), with TIME_WAIT sockets and listening ports read through sock_diag
//! (sockdiag.rs), and the ends the kernel never reported found by reconciling each port's
//! accepted count with its ends and open connections (unseen.rs).
pub mod churn;
pub mod sockdiag;
pub mod unseen;

pub use churn::Churn;
