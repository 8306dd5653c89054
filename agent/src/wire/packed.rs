//! A handshake's negotiated labels in 12 bytes, for the ended captures the tracker keeps 30 s
//! (tens of thousands at a time): each label an index into the strings seen so far for it,
//! where a `Negotiated` holds five string references (81 bytes).
//!
//! The labels are the static strings of the TLS tables (tls/: versions, cipher suites,
//! groups, certificate kinds, transports), so each list holds a few hundred at most and
//! never needs emptying.
use super::tls::{Negotiated, OTHER};

/// A `Negotiated`, as indexes into a `Labels`' lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    idx: [u16; 5],
    resumed: bool,
}

/// The label strings seen so far, per label.
#[derive(Default)]
pub struct Labels {
    seen: [Vec<&'static str>; 5],
}

impl Labels {
    pub fn pack(&mut self, n: &Negotiated) -> Packed {
        let mut idx = [0; 5];
        for (i, value) in [n.version, n.cipher, n.group, n.cert, n.transport]
            .into_iter()
            .enumerate()
        {
            idx[i] = self.index(i, value);
        }
        Packed {
            idx,
            resumed: n.resumed,
        }
    }

    pub fn unpack(&self, p: Packed) -> Negotiated {
        let at = |i: usize| self.seen[i].get(usize::from(p.idx[i])).copied().unwrap_or(OTHER);
        Negotiated {
            version: at(0),
            cipher: at(1),
            group: at(2),
            cert: at(3),
            resumed: p.resumed,
            transport: at(4),
        }
    }

    fn index(&mut self, field: usize, value: &'static str) -> u16 {
        let list = &mut self.seen[field];
        if let Some(i) = list.iter().position(|v| *v == value) {
            return i as u16;
        }
        // (static strings: a list cannot reach this; were it to, the value reads `other`)
        if list.len() >= usize::from(u16::MAX) {
            return u16::MAX;
        }
        list.push(value);
        (list.len() - 1) as u16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut l = Labels::default();
        let a = Negotiated {
            version: "TLSv1.3",
            cipher: "TLS_AES_128_GCM_SHA256",
            group: "x25519",
            cert: "ecdsa_p256",
            resumed: false,
            transport: "tcp",
        };
        let b = Negotiated {
            resumed: true,
            cert: "none",
            ..a
        };
        let (pa, pb) = (l.pack(&a), l.pack(&b));
        assert_eq!((l.unpack(pa), l.unpack(pb)), (a, b));
        assert_eq!(l.pack(&a), pa);
        let unknown = l.pack(&Negotiated::UNKNOWN);
        assert_eq!(l.unpack(unknown), Negotiated::UNKNOWN);
        assert_eq!(std::mem::size_of::<Packed>(), 12);
    }
}
