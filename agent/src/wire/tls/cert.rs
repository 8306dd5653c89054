//! The server certificate's key, as a label: from the leaf certificate (TLS 1.2) or from
//! the length of the signature it made (TLS 1.3, where the certificate is encrypted).
use super::{Rd, OTHER};

/// The key behind a signature of this length (DER for ECDSA).
pub fn cert_from_signature(len: u16) -> &'static str {
    match len {
        64 => "ed25519",
        114 => "ed448",
        66..=72 => "ecdsa_p256",
        98..=104 => "ecdsa_p384",
        132..=139 => "ecdsa_p521",
        128 => "rsa1024",
        256 => "rsa2048",
        384 => "rsa3072",
        512 => "rsa4096",
        2420 => "mldsa44",
        3309 => "mldsa65",
        4627 => "mldsa87",
        _ => OTHER,
    }
}

/// A DER element: (tag, contents), advancing the reader.
pub(super) fn der<'a>(r: &mut Rd<'a>) -> Option<(u8, &'a [u8])> {
    let tag = r.u8()?;
    let first = r.u8()?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 3 {
            return None;
        }
        let mut l = 0usize;
        for _ in 0..n {
            l = l << 8 | r.u8()? as usize;
        }
        l
    };
    Some((tag, r.take(len)?))
}

const OID_RSA: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x01];
const OID_RSA_PSS: &[u8] = &[0x2A, 0x86, 0x48, 0x86, 0xF7, 0x0D, 0x01, 0x01, 0x0A];
pub(super) const OID_EC: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2A, 0x86, 0x48, 0xCE, 0x3D, 0x03, 0x01, 0x07];
pub(super) const OID_P384: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x22];
const OID_P521: &[u8] = &[0x2B, 0x81, 0x04, 0x00, 0x23];
const OID_ED25519: &[u8] = &[0x2B, 0x65, 0x70];
const OID_ED448: &[u8] = &[0x2B, 0x65, 0x71];

/// TLS 1.2 Certificate message: the leaf certificate's key.
pub(super) fn cert_from_chain(b: &[u8]) -> &'static str {
    let mut r = Rd(b);
    let leaf = (|| {
        r.u24()?;
        let n = r.u24()?;
        r.take(n)
    })();
    leaf.and_then(spki_label).unwrap_or(OTHER)
}

/// The subjectPublicKeyInfo of an X.509 certificate, as a label.
pub fn spki_label(cert: &[u8]) -> Option<&'static str> {
    let (_, c) = der(&mut Rd(cert))?;
    let (_, tbs) = der(&mut Rd(c))?;
    let mut t = Rd(tbs);
    // [0] version (optional), then serialNumber
    if der(&mut t)?.0 == 0xA0 {
        der(&mut t)?;
    }
    for _ in 0..4 {
        der(&mut t)?; // signature, issuer, validity, subject
    }
    let (_, spki) = der(&mut t)?;
    let mut s = Rd(spki);
    let (_, alg) = der(&mut s)?;
    let (_, key) = der(&mut s)?;
    let mut a = Rd(alg);
    let (_, oid) = der(&mut a)?;
    let params = der(&mut a).map(|(_, p)| p);
    Some(if oid == OID_RSA || oid == OID_RSA_PSS {
        // BIT STRING: unused-bits byte, then SEQUENCE { INTEGER n, INTEGER e }
        let mut k = Rd(key.get(1..)?);
        let (_, seq) = der(&mut k)?;
        let (_, n) = der(&mut Rd(seq))?;
        let n = &n[n.iter().position(|&b| b != 0).unwrap_or(n.len())..];
        match n.len() * 8 {
            1024 => "rsa1024",
            2048 => "rsa2048",
            3072 => "rsa3072",
            4096 => "rsa4096",
            _ => OTHER,
        }
    } else if oid == OID_EC {
        match params {
            Some(OID_P256) => "ecdsa_p256",
            Some(OID_P384) => "ecdsa_p384",
            Some(OID_P521) => "ecdsa_p521",
            _ => OTHER,
        }
    } else if oid == OID_ED25519 {
        "ed25519"
    } else if oid == OID_ED448 {
        "ed448"
    } else {
        OTHER
    })
}
