//! The label sets of tlsprof's metrics. Each is declared once, with `label_set!`: the
//! struct the code fills and the label names the metric declarations (defs.rs) and the
//! docs test read.
use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};

use crate::{
    bpf::handshake::{HandshakeResult, Role},
    wire::Negotiated,
};

/// The label names of a label set, in the order they are exported.
pub trait LabelNames {
    const NAMES: &'static [&'static str];
}

/// A label set made again from an exposition's labels (views/model.rs decodes with it);
/// a label missing is empty. None where a typed label's value is not one this build
/// writes.
pub trait FromLabels: Sized {
    fn from_labels(label: impl Fn(&str) -> String) -> Option<Self>;
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

/// Declares an enum whose variants are a closed set of label values, each with its label:
/// the enum, ordered as declared, and its `LabelValue`.
macro_rules! label_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $label:expr),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $variant),*
        }

        impl $crate::metrics::LabelValue for $name {
            const ALL: &'static [Self] = &[$($name::$variant),*];
            fn label(self) -> &'static str {
                match self {
                    $($name::$variant => $label),*
                }
            }
        }
    };
}
pub(crate) use label_enum;

/// What a `LabelValue` type has from its label: `label()` without the trait in scope,
/// comparison with a label string, Display, and JSON as its label (a label this build does
/// not know reads as `$other`, so that a document of a newer tlsprof still loads); tests
/// write a value by its label.
macro_rules! label_text {
    ($($t:ty => $other:expr),* $(,)?) => {$(
        impl $t {
            pub fn label(self) -> &'static str {
                $crate::metrics::LabelValue::label(self)
            }
        }

        #[cfg(test)]
        impl From<&str> for $t {
            fn from(label: &str) -> Self {
                <$t as $crate::metrics::LabelValue>::parse(label)
                    .unwrap_or_else(|| panic!("no {} labelled {label}", stringify!($t)))
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                self.label() == *other
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.label())
            }
        }

        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.label())
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let label = String::deserialize(d)?;
                Ok(<$t as $crate::metrics::LabelValue>::parse(&label).unwrap_or($other))
            }
        }
    )*};
}
pub(crate) use label_text;

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
            fn from_labels(label: impl Fn(&str) -> String) -> Option<Self> {
                Some(Self { $($field: label(stringify!($field))),* })
            }
        }

        impl super::capped::Fold for $name {
            fn folded(&self) -> Self {
                Self { $($field: super::capped::fold_value(stringify!($field), &self.$field)),* }
            }
        }
    };
    // A label set ending with what a handshake negotiated: its labels (Negotiated::LABELS)
    // follow the named ones, written from the typed value here and nowhere else.
    ($(#[$m:meta])* $name:ident { $($field:ident),* $(,)? } + negotiated) => {
        $(#[$m])*
        #[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
        pub struct $name {
            $(pub $field: String,)*
            #[prometheus(flatten)]
            pub negotiated: Negotiated,
        }

        impl LabelNames for $name {
            const NAMES: &'static [&'static str] = &concat::<{ [$(stringify!($field)),*].len() + Negotiated::LABELS.len() }>(
                &[$(stringify!($field)),*],
                &Negotiated::LABELS,
            );
        }

        impl FromLabels for $name {
            fn from_labels(label: impl Fn(&str) -> String) -> Option<Self> {
                Some(Self { $($field: label(stringify!($field)),)* negotiated: Negotiated::from_labels(&label)? })
            }
        }

        impl super::capped::Fold for $name {
            fn folded(&self) -> Self {
                Self {
                    $($field: super::capped::fold_value(stringify!($field), &self.$field),)*
                    negotiated: self.negotiated,
                }
            }
        }
    };
}

/// Two lists of label names as one (`N` their lengths summed), for `label_set!`.
const fn concat<const N: usize>(a: &[&'static str], b: &[&'static str]) -> [&'static str; N] {
    let mut out = [""; N];
    let mut i = 0;
    while i < a.len() {
        out[i] = a[i];
        i += 1;
    }
    let mut j = 0;
    while j < b.len() {
        out[i + j] = b[j];
        j += 1;
    }
    out
}

impl EncodeLabelSet for Negotiated {
    fn encode(&self, mut encoder: LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        for (name, value) in Negotiated::LABELS.into_iter().zip(self.label_values()) {
            (name, value).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

/// Metrics without labels.
pub struct NoLabels;

impl LabelNames for NoLabels {
    const NAMES: &'static [&'static str] = &[];
}

label_set!(
    /// A handshake: process, role, result and what was negotiated.
    HandshakeLabels { comm, role, result } + negotiated
);
label_set!(
    /// What a handshake negotiated, with the process and role.
    ParamLabels { comm, role } + negotiated
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
    pub fn new(comm: &str, role: Role, negotiated: Negotiated) -> Self {
        Self {
            comm: comm.into(),
            role: role.label().into(),
            negotiated,
        }
    }
}

impl ParamLabels {
    /// The same handshake's labels, with its result.
    #[cfg(test)]
    pub fn with_result(&self, result: HandshakeResult) -> HandshakeLabels {
        HandshakeLabels {
            comm: self.comm.clone(),
            role: self.role.clone(),
            result: result.label().into(),
            negotiated: self.negotiated,
        }
    }
}

impl HandshakeLabels {
    pub fn new(comm: &str, role: Role, result: HandshakeResult, negotiated: Negotiated) -> Self {
        Self {
            comm: comm.into(),
            role: role.label().into(),
            result: result.label().into(),
            negotiated,
        }
    }
}
