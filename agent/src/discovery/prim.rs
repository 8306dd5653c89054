//! Crypto primitives: what a TLS-code function's name says it implements.

/// What a TLS-code address is doing. `None`: not TLS code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prim {
    None,
    /// TLS code, but no primitive below: record layer, state machine, ASN.1, buffers.
    Other,
    Rsa,
    Ecdsa,
    Ecdh,
    X25519,
    /// Elliptic-curve arithmetic not (yet) tied to ECDSA or ECDH.
    Ec,
    /// Big-number arithmetic not tied to RSA or EC.
    Bignum,
    AesGcm,
    /// AES in other modes (CBC, CTR) and key schedules.
    Aes,
    Chacha20Poly1305,
    ShaHmac,
    /// TLS code in a file without function names: the primitive is not known.
    NoSymbols,
}

impl Prim {
    pub fn label(self) -> &'static str {
        match self {
            Prim::None => "none",
            Prim::Other => "other",
            Prim::Rsa => "rsa",
            Prim::Ecdsa => "ecdsa",
            Prim::Ecdh => "ecdh",
            Prim::X25519 => "x25519",
            Prim::Ec => "ec_arith",
            Prim::Bignum => "bignum",
            Prim::AesGcm => "aes_gcm",
            Prim::Aes => "aes_other",
            Prim::Chacha20Poly1305 => "chacha20_poly1305",
            Prim::ShaHmac => "sha_hmac",
            Prim::NoSymbols => "no_symbols",
        }
    }

    /// A leaf this generic is attributed to the nearest specific caller, if any.
    pub fn generic(self) -> bool {
        matches!(self, Prim::Other | Prim::Ec | Prim::Bignum)
    }
}

/// The primitive a TLS-code function's name says it implements (OpenSSL, BoringSSL,
/// GnuTLS/nettle, mbed TLS, Go and Linux crypto names).
pub fn classify_name(name: &str) -> Prim {
    let n = name.to_ascii_lowercase();
    let has = |pats: &[&str]| pats.iter().any(|p| n.contains(p));
    if has(&["chacha", "poly1305"]) {
        Prim::Chacha20Poly1305
    } else if has(&["gcm", "ghash", "gmult"]) {
        Prim::AesGcm
    } else if has(&["x25519", "curve25519", "fe51_", "fe64_", "edwards25519"]) {
        Prim::X25519
    } else if has(&["ecdsa"]) {
        Prim::Ecdsa
    } else if has(&["ecdh", "x448", "ecx_"]) {
        Prim::Ecdh
    } else if n.starts_with("rsa") || has(&["_rsa", "/rsa", ".rsa", "rsa_", "rsaz"]) {
        Prim::Rsa
    } else if has(&[
        "sha1", "sha256", "sha512", "sha3", "keccak", "hmac", "sha2", "/sha", "md5", "hkdf",
    ]) {
        Prim::ShaHmac
    } else if n.starts_with("bn_")
        || n.starts_with("bn.")
        || has(&["_bn_", "bignum", "bigmod", "mpi_", "mpn_", "gmpn", "math/big"])
    {
        Prim::Bignum
    } else if n.starts_with("ec_")
        || n.starts_with("ecp_")
        || has(&[
            "_ec_",
            "ec_gfp",
            "ec_point",
            "ec_scalar",
            "nistz256",
            "nistec",
            "p256",
            "p384",
            "p521",
            "felem",
            "ecc_",
            "ec_wnaf",
            "/ecc",
            "ecp_",
        ])
    {
        Prim::Ec
    } else if has(&["aes", "rijndael"]) {
        Prim::Aes
    } else {
        Prim::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitive_names() {
        let cases = [
            ("aesni_gcm_encrypt", Prim::AesGcm),
            ("gcm_ghash_avx", Prim::AesGcm),
            ("ChaCha20_ctr32", Prim::Chacha20Poly1305),
            ("Poly1305_blocks", Prim::Chacha20Poly1305),
            ("x25519_fe51_mul", Prim::X25519),
            ("ossl_ecdsa_sign", Prim::Ecdsa),
            ("ossl_ecdh_compute_key", Prim::Ecdh),
            ("ecp_nistz256_mul_mont", Prim::Ec),
            ("rsa_ossl_private_encrypt", Prim::Rsa),
            ("RSA_sign", Prim::Rsa),
            ("rsaz_1024_mul_avx2", Prim::Rsa),
            ("bn_mul_mont", Prim::Bignum),
            ("BN_mod_exp_mont", Prim::Bignum),
            ("sha256_block_data_order_avx2", Prim::ShaHmac),
            ("HMAC_Update", Prim::ShaHmac),
            ("aesni_cbc_encrypt", Prim::Aes),
            ("tls_process_client_hello", Prim::Other),
            ("ssl3_read_bytes", Prim::Other),
            ("crypto/internal/fips140/aes/gcm.seal", Prim::AesGcm),
            ("crypto/internal/fips140/nistec.(*P256Point).ScalarMult", Prim::Ec),
            (
                "crypto/ecdsa.signFIPS[go.shape.*crypto/internal/fips140/nistec.P256Point]",
                Prim::Ecdsa,
            ),
            ("crypto/internal/fips140/sha256.blockAVX2", Prim::ShaHmac),
            (
                "vendor/golang.org/x/crypto/chacha20poly1305.(*chacha20poly1305).seal",
                Prim::Chacha20Poly1305,
            ),
            ("crypto/tls.(*Conn).readRecordOrCCS", Prim::Other),
            ("nettle_gcm_encrypt", Prim::AesGcm),
            ("_nettle_ecc_mul_a", Prim::Ec),
            ("mbedtls_mpi_exp_mod", Prim::Bignum),
            ("traverse_tree", Prim::Other),
        ];
        for (name, want) in cases {
            assert_eq!(classify_name(name), want, "{name}");
        }
    }
}
