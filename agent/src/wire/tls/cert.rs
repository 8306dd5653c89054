//! The server certificate's key, as a label: from the leaf certificate (TLS 1.2) or from
//! the length of the signature it made (TLS 1.3, where the certificate is encrypted).
use super::{Cert, Rd};

/// The key behind a signature of this length (DER for ECDSA).
pub fn cert_from_signature(len: u16) -> Cert {
    match len {
        64 => Cert::Ed25519,
        114 => Cert::Ed448,
        66..=72 => Cert::EcdsaP256,
        98..=104 => Cert::EcdsaP384,
        132..=139 => Cert::EcdsaP521,
        128 => Cert::Rsa1024,
        256 => Cert::Rsa2048,
        384 => Cert::Rsa3072,
        512 => Cert::Rsa4096,
        2420 => Cert::Mldsa44,
        3309 => Cert::Mldsa65,
        4627 => Cert::Mldsa87,
        _ => Cert::Other,
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
pub(super) fn cert_from_chain(b: &[u8]) -> Cert {
    let mut r = Rd(b);
    let leaf = (|| {
        r.u24()?;
        let n = r.u24()?;
        r.take(n)
    })();
    leaf.and_then(spki_label).unwrap_or(Cert::Other)
}

/// The key of an X.509 certificate's subjectPublicKeyInfo.
pub fn spki_label(cert: &[u8]) -> Option<Cert> {
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
            1024 => Cert::Rsa1024,
            2048 => Cert::Rsa2048,
            3072 => Cert::Rsa3072,
            4096 => Cert::Rsa4096,
            _ => Cert::Other,
        }
    } else if oid == OID_EC {
        match params {
            Some(OID_P256) => Cert::EcdsaP256,
            Some(OID_P384) => Cert::EcdsaP384,
            Some(OID_P521) => Cert::EcdsaP521,
            _ => Cert::Other,
        }
    } else if oid == OID_ED25519 {
        Cert::Ed25519
    } else if oid == OID_ED448 {
        Cert::Ed448
    } else {
        Cert::Other
    })
}
