//! Server flights the wire tests share.

/// A TLS 1.2 resumed flight: ServerHello (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256),
/// change_cipher_spec, encrypted Finished.
pub fn resumed12() -> Vec<u8> {
    let mut sh = vec![2, 0, 0, 70, 3, 3];
    sh.extend_from_slice(&[1; 32]);
    sh.push(32);
    sh.extend_from_slice(&[5; 32]);
    sh.extend_from_slice(&[0xC0, 0x2F, 0]);
    let mut v = vec![22, 3, 3, 0, sh.len() as u8];
    v.extend_from_slice(&sh);
    v.extend_from_slice(&[20, 3, 3, 0, 1, 1, 22, 3, 3, 0, 40]);
    v.extend_from_slice(&[0; 40]);
    v
}
