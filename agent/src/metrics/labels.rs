//! The label sets of tlsprof's metrics. Each is declared once, with `label_set!`: the
//! struct the code fills and the label names the metric declarations (defs.rs) and the
//! docs test read.
use prometheus_client::encoding::EncodeLabelSet;

/// The label names of a label set, in the order they are exported.
pub trait LabelNames {
    const NAMES: &'static [&'static str];
}

/// A label set made again from an exposition's labels (views/model.rs decodes with it);
/// a label missing is empty.
pub trait FromLabels {
    fn from_labels(label: impl Fn(&str) -> String) -> Self;
}

/// A label whose values are a closed set, each a variant of an enum owned where the agent
/// writes it: the agent takes the label value from `label`, and the views decode it with
/// `parse` (views/model.rs), so the two cannot drift apart.
pub trait LabelValue: Sized + Copy + 'static {
    /// Every value, in the order the views show them.
    const ALL: &'static [Self];
    fn label(self) -> &'static str;
    /// The variant a label value names; None for a value this build does not write.
    fn parse(value: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.label() == value)
    }
}

macro_rules! label_set {
    ($(#[$m:meta])* $name:ident { $($field:ident),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            $(pub $field: String),*
        }

        impl LabelNames for $name {
            const NAMES: &'static [&'static str] = &[$(stringify!($field)),*];
        }

        impl FromLabels for $name {
            fn from_labels(label: impl Fn(&str) -> String) -> Self {
                Self { $($field: label(stringify!($field))),* }
            }
        }

        impl super::capped::Fold for $name {
            fn folded(&self) -> Self {
                Self { $($field: super::capped::fold_value(stringify!($field), &self.$field)),* }
            }
        }
    };
}

/// Metrics without labels.
pub struct NoLabels;

impl LabelNames for NoLabels {
    const NAMES: &'static [&'static str] = &[];
}

label_set!(
    /// A handshake: process, role, result and what was negotiated.
    HandshakeLabels { comm, role, result, version, cipher, group, cert, resumed, transport }
);
label_set!(
    /// What a handshake negotiated (wire::Negotiated), with the process and role.
    ParamLabels { comm, role, version, cipher, group, cert, resumed, transport }
);
label_set!(ReasonLabels { comm, reason });
label_set!(RoleLabels { comm, role });
label_set!(CommLabels { comm });
label_set!(MethodLabels { comm, method, reason });
label_set!(ProbeLabels { probe });
label_set!(KindLabels { kind });
label_set!(PortLabels { comm, port });
label_set!(FailureLabels { comm, port, by, reason });
label_set!(KindPortLabels { comm, port, kind });
label_set!(ClosedByLabels { comm, port, closed_by });
label_set!(ProtocolLabels { comm, port, protocol });
label_set!(OnlyPortLabels { port });
label_set!(SniLabels { comm, port, sni });
label_set!(ClientFailureLabels {
    comm,
    port,
    sni,
    reason,
    lacks
});
label_set!(OfferLabels {
    comm,
    port,
    offer,
    value
});
label_set!(PolicyLabels {
    comm,
    port,
    policy,
    outcome
});
label_set!(ResumptionLabels {
    comm,
    port,
    offered,
    result
});
label_set!(CategoryLabels { comm, category });
label_set!(PrimitiveLabels { comm, primitive });
label_set!(LibraryLabels { comm, library, symbols });
label_set!(ModeLabels { mode, overhead_budget });
label_set!(FigureLabels { figure });
label_set!(HookLabels { capability, hook });
label_set!(TableLabels { table });
label_set!(ScanLabels { scan });
label_set!(MetricLabels { metric });
label_set!(RefusalLabels { reason });

impl ParamLabels {
    pub fn new(comm: &str, role: &str, n: &crate::wire::Negotiated) -> Self {
        Self {
            comm: comm.into(),
            role: role.into(),
            version: n.version.into(),
            cipher: n.cipher.into(),
            group: n.group.into(),
            cert: n.cert.into(),
            resumed: n.resumed.to_string(),
            transport: n.transport.into(),
        }
    }

    pub fn with_result(&self, result: &str) -> HandshakeLabels {
        HandshakeLabels {
            comm: self.comm.clone(),
            role: self.role.clone(),
            result: result.into(),
            version: self.version.clone(),
            cipher: self.cipher.clone(),
            group: self.group.clone(),
            cert: self.cert.clone(),
            resumed: self.resumed.clone(),
            transport: self.transport.clone(),
        }
    }
}
