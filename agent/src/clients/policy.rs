//! Candidate server policies, and what each would do with a client's offer: negotiate,
//! need a HelloRetryRequest (the client offered a group the policy accepts but no key share
//! the policy would pick), or fail. The report's findings quote these counts ("clients that
//! would fail"), the metrics count them per policy (tlsprof_client_policy_outcomes_total).
use crate::wire::tls::hello::Offer;

/// What a policy would do with one ClientHello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Negotiate,
    HelloRetry,
    Fail,
}

impl Outcome {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Negotiate => "negotiate",
            Outcome::HelloRetry => "hello_retry",
            Outcome::Fail => "fail",
        }
    }
}

/// A candidate server policy. `name` is the label value (tlsprof_client_policy_outcomes_total{policy}).
#[derive(Debug)]
pub struct Policy {
    pub name: &'static str,
    /// What the report calls it.
    pub title: &'static str,
}
