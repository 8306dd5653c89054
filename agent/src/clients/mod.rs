//! The client's side: what each client offered in its ClientHello (wire::tls::hello), as
//! bounded label values (facts.rs), evaluated against candidate server policies
//! (policy.rs), and joined with what the server did (resumed or not).
// Nothing outside the tests calls this module until the capture tracker counts ClientHellos
// (issue 36, another change): remove this then.
pub mod facts;
pub mod join;
pub mod lacks;
pub mod policy;
#[cfg(test)]
mod policy_tests;
