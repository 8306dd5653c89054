//! What the alternatives would cost on this host: the report's estimates of what a change
//! saves need the cost of what the server does not use yet (X25519 when it negotiates
//! P-384, an ECDSA signature when its certificate is RSA, AES-GCM when clients get CBC).
//! They are measured here, once, after the observation window, with the host's own
//! OpenSSL 3 libcrypto (loaded with dlopen) on one thread, in thread CPU time.
use std::{
    collections::BTreeMap,
    ffi::{c_char, c_int, c_uint, c_void, CStr, CString},
    time::Duration,
};

use anyhow::{bail, Result};

use crate::clock::thread_cpu;

/// CPU seconds per operation, measured on this host.
#[derive(Debug, Clone, Default)]
pub struct HostCosts {
    /// The library measured, and its version string.
    pub library: String,
    /// Per key exchange on the server's side (key generation and derivation), by group
    /// label (x25519, secp256r1, …).
    pub group: BTreeMap<String, f64>,
    /// Per signature, by certificate label (rsa2048, ecdsa_p256, …).
    pub sign: BTreeMap<String, f64>,
    /// Per 16 KiB record (encryption and MAC), by record protection: aes_128_gcm,
    /// aes_128_cbc_hmac_sha1, aes_128_cbc_hmac_sha256, des_ede3_cbc_hmac_sha1.
    pub record: BTreeMap<String, f64>,
}

type Ptr = *mut c_void;
type QKeygen = unsafe extern "C" fn(Ptr, *const c_char, *const c_char, ...) -> Ptr;
type Free = unsafe extern "C" fn(Ptr);
type CtxNew = unsafe extern "C" fn(Ptr, Ptr) -> Ptr;
type Init = unsafe extern "C" fn(Ptr) -> c_int;
type SetPeer = unsafe extern "C" fn(Ptr, Ptr) -> c_int;
type Keygen = unsafe extern "C" fn(Ptr, *mut Ptr) -> c_int;
type Derive = unsafe extern "C" fn(Ptr, *mut u8, *mut usize) -> c_int;
type Sign = unsafe extern "C" fn(Ptr, *mut u8, *mut usize, *const u8, usize) -> c_int;
type CipherCtxNew = unsafe extern "C" fn() -> Ptr;
type EncryptInit = unsafe extern "C" fn(Ptr, *const c_void, Ptr, *const u8, *const u8) -> c_int;
type EncryptUpdate = unsafe extern "C" fn(Ptr, *mut u8, *mut c_int, *const u8, c_int) -> c_int;
type Getter = unsafe extern "C" fn() -> *const c_void;
type Hmac =
    unsafe extern "C" fn(*const c_void, *const c_void, c_int, *const u8, usize, *mut u8, *mut c_uint) -> *mut u8;
type Version = unsafe extern "C" fn(c_int) -> *const c_char;
type CtxNewFromName = unsafe extern "C" fn(Ptr, *const c_char, *const c_char) -> Ptr;
type SetParams = unsafe extern "C" fn(Ptr, *const OsslParam) -> c_int;
type FromData = unsafe extern "C" fn(Ptr, *mut Ptr, c_int, *const OsslParam) -> c_int;
type GetParams = unsafe extern "C" fn(Ptr, *mut OsslParam) -> c_int;
type GetBits = unsafe extern "C" fn(Ptr) -> c_int;

/// OpenSSL 3's `OSSL_PARAM`: one named argument of a provider call, an array of them ended
/// by a null key.
#[repr(C)]
struct OsslParam {
    key: *const c_char,
    data_type: c_uint,
    data: *const c_void,
    data_size: usize,
    return_size: usize,
}

impl OsslParam {
    const UNSIGNED_INTEGER: c_uint = 2;
    const UTF8_STRING: c_uint = 4;

    fn new(key: &'static CStr, data_type: c_uint, data: *const c_void, data_size: usize) -> OsslParam {
        OsslParam {
            key: key.as_ptr(),
            data_type,
            data,
            data_size,
            return_size: usize::MAX,
        }
    }

    fn end() -> OsslParam {
        OsslParam {
            key: std::ptr::null(),
            data_type: 0,
            data: std::ptr::null(),
            data_size: 0,
            return_size: 0,
        }
    }
}

struct Lib {
    q_keygen: QKeygen,
    pkey_free: Free,
    ctx_new: CtxNew,
    ctx_free: Free,
    keygen_init: Init,
    keygen_from: Keygen,
    derive_init: Init,
    derive_set_peer: SetPeer,
    derive: Derive,
    sign_init: Init,
    sign: Sign,
    cipher_ctx_new: CipherCtxNew,
    cipher_ctx_free: Free,
    encrypt_init: EncryptInit,
    encrypt_update: EncryptUpdate,
    hmac: Hmac,
    getters: BTreeMap<&'static str, Getter>,
    version: Version,
    ctx_new_from_name: CtxNewFromName,
    ctx_set_params: SetParams,
    fromdata_init: Init,
    fromdata: FromData,
    get_params: GetParams,
    get_bits: GetBits,
}

fn sym<T: Copy>(handle: Ptr, name: &str) -> Result<T> {
    let c = CString::new(name).expect("no NUL in symbol names");
    // SAFETY: dlsym on a handle from dlopen; the pointer is checked before use.
    let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        bail!("{name} not found (OpenSSL 3 is needed)");
    }
    assert_eq!(std::mem::size_of::<T>(), std::mem::size_of::<Ptr>());
    // SAFETY: T is the function pointer type of this OpenSSL 3 function.
    Ok(unsafe { std::mem::transmute_copy::<Ptr, T>(&p) })
}

impl Lib {
    fn open(name: &str) -> Result<Lib> {
        let c = CString::new(name)?;
        // SAFETY: loads a shared library by name; it is never unloaded.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            // SAFETY: dlerror returns a C string or null.
            let e = unsafe { libc::dlerror() };
            let msg = if e.is_null() {
                "dlopen failed".to_string()
            } else {
                unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
            };
            bail!("{msg}");
        }
        let mut getters = BTreeMap::new();
        for g in [
            "EVP_aes_128_gcm",
            "EVP_aes_128_cbc",
            "EVP_des_ede3_cbc",
            "EVP_sha1",
            "EVP_sha256",
        ] {
            getters.insert(g, sym::<Getter>(h, g)?);
        }
        Ok(Lib {
            q_keygen: sym(h, "EVP_PKEY_Q_keygen")?,
            pkey_free: sym(h, "EVP_PKEY_free")?,
            ctx_new: sym(h, "EVP_PKEY_CTX_new")?,
            ctx_free: sym(h, "EVP_PKEY_CTX_free")?,
            keygen_init: sym(h, "EVP_PKEY_keygen_init")?,
            keygen_from: sym(h, "EVP_PKEY_keygen")?,
            derive_init: sym(h, "EVP_PKEY_derive_init")?,
            derive_set_peer: sym(h, "EVP_PKEY_derive_set_peer")?,
            derive: sym(h, "EVP_PKEY_derive")?,
            sign_init: sym(h, "EVP_PKEY_sign_init")?,
            sign: sym(h, "EVP_PKEY_sign")?,
            cipher_ctx_new: sym(h, "EVP_CIPHER_CTX_new")?,
            cipher_ctx_free: sym(h, "EVP_CIPHER_CTX_free")?,
            encrypt_init: sym(h, "EVP_EncryptInit_ex")?,
            encrypt_update: sym(h, "EVP_EncryptUpdate")?,
            hmac: sym(h, "HMAC")?,
            getters,
            version: sym(h, "OpenSSL_version")?,
            ctx_new_from_name: sym(h, "EVP_PKEY_CTX_new_from_name")?,
            ctx_set_params: sym(h, "EVP_PKEY_CTX_set_params")?,
            fromdata_init: sym(h, "EVP_PKEY_fromdata_init")?,
            fromdata: sym(h, "EVP_PKEY_fromdata")?,
            get_params: sym(h, "EVP_PKEY_get_params")?,
            get_bits: sym(h, "EVP_PKEY_get_bits")?,
        })
    }

    /// A new key of a type: EC with a curve name, RSA with a size, or X25519/X448.
    fn keygen(&self, kind: &Kind) -> Ptr {
        // SAFETY: EVP_PKEY_Q_keygen's variadic arguments are as OpenSSL documents them
        // for each key type: a curve name for "EC", a size_t for "RSA", none otherwise.
        unsafe {
            match kind {
                Kind::Ec(curve) => {
                    (self.q_keygen)(std::ptr::null_mut(), std::ptr::null(), c"EC".as_ptr(), curve.as_ptr())
                }
                Kind::Rsa(bits) => (self.q_keygen)(std::ptr::null_mut(), std::ptr::null(), c"RSA".as_ptr(), *bits),
                Kind::Other(name) => (self.q_keygen)(std::ptr::null_mut(), std::ptr::null(), name.as_ptr()),
                Kind::Dh(params) => self.dh_keygen(params),
            }
        }
    }

    /// A DH key of OpenSSL's named group (`ffdhe2048`, `modp_2048`).
    fn named_dh(&self, group: &CStr) -> Ptr {
        let mut key: Ptr = std::ptr::null_mut();
        let p = [
            OsslParam::new(
                c"group",
                OsslParam::UTF8_STRING,
                group.as_ptr().cast(),
                group.to_bytes().len(),
            ),
            OsslParam::end(),
        ];
        // SAFETY: the context from this library, freed once; the OSSL_PARAM array is ended by
        // a null key and points at data that outlives the call.
        unsafe {
            let ctx = (self.ctx_new_from_name)(std::ptr::null_mut(), c"DH".as_ptr(), std::ptr::null());
            if !ctx.is_null()
                && ((self.keygen_init)(ctx) != 1
                    || (self.ctx_set_params)(ctx, p.as_ptr()) != 1
                    || (self.keygen_from)(ctx, &mut key) != 1)
            {
                key = std::ptr::null_mut();
            }
            (self.ctx_free)(ctx);
        }
        key
    }

    /// A DH key's prime, big-endian.
    fn dh_prime(&self, key: Ptr) -> Option<Vec<u8>> {
        // SAFETY: a key from this library.
        let bytes = usize::try_from(unsafe { (self.get_bits)(key) })
            .ok()
            .filter(|b| *b > 0)?
            / 8;
        let mut prime = vec![0u8; bytes];
        let mut p = [
            OsslParam::new(c"p", OsslParam::UNSIGNED_INTEGER, prime.as_mut_ptr().cast(), bytes),
            OsslParam::end(),
        ];
        // SAFETY: a key from this library; the buffer is as long as the array says.
        if unsafe { (self.get_params)(key, p.as_mut_ptr()) } != 1 || p[0].return_size != bytes {
            return None;
        }
        // OSSL_PARAM integers are native-endian
        if cfg!(target_endian = "little") {
            prime.reverse();
        }
        Some(prime)
    }

    /// A DH key of the prime `prime` (big-endian) and generator 2, given as p and g alone,
    /// as a server's own parameters are.
    fn dh_of_prime(&self, prime: &[u8]) -> Ptr {
        let mut native = prime.to_vec();
        if cfg!(target_endian = "little") {
            native.reverse();
        }
        let g: c_uint = 2;
        let p = [
            OsslParam::new(c"p", OsslParam::UNSIGNED_INTEGER, native.as_ptr().cast(), native.len()),
            OsslParam::new(c"g", OsslParam::UNSIGNED_INTEGER, (&g as *const c_uint).cast(), 4),
            OsslParam::end(),
        ];
        let mut key: Ptr = std::ptr::null_mut();
        let mut domain: Ptr = std::ptr::null_mut();
        // SAFETY: as in named_dh.
        unsafe {
            let ctx = (self.ctx_new_from_name)(std::ptr::null_mut(), c"DH".as_ptr(), std::ptr::null());
            // EVP_PKEY_KEY_PARAMETERS
            if !ctx.is_null()
                && (self.fromdata_init)(ctx) == 1
                && (self.fromdata)(ctx, &mut domain, 0x84, p.as_ptr()) == 1
            {
                let gen = (self.ctx_new)(domain, std::ptr::null_mut());
                if gen.is_null() || (self.keygen_init)(gen) != 1 || (self.keygen_from)(gen, &mut key) != 1 {
                    key = std::ptr::null_mut();
                }
                (self.ctx_free)(gen);
                (self.pkey_free)(domain);
            }
            (self.ctx_free)(ctx);
        }
        key
    }

    fn dh_keygen(&self, params: &DhParams) -> Ptr {
        match params {
            DhParams::Named(group) => self.named_dh(group),
            DhParams::Oakley1024 => self.dh_of_prime(&OAKLEY_1024),
            DhParams::Own(like) => {
                let named = self.named_dh(like);
                if named.is_null() {
                    return named;
                }
                let prime = self.dh_prime(named);
                // SAFETY: the key from named_dh, freed once.
                unsafe { (self.pkey_free)(named) };
                prime.map_or(std::ptr::null_mut(), |mut p| {
                    // its last bits changed (the primes end in 64 ones): a number OpenSSL
                    // knows no group of, odd as a modulus must be
                    *p.last_mut().expect("a prime of bytes") ^= 2;
                    self.dh_of_prime(&p)
                })
            }
        }
    }

    /// One server-side key exchange as libssl does it: a fresh key pair with the group of
    /// the peer's key (generated from it as a template), and the shared secret.
    fn key_exchange(&self, peer: Ptr) -> bool {
        let mut k: Ptr = std::ptr::null_mut();
        // SAFETY: keys and contexts from this library, freed once; buffers outlive the calls.
        unsafe {
            let gen = (self.ctx_new)(peer, std::ptr::null_mut());
            let ok = !gen.is_null() && (self.keygen_init)(gen) == 1 && (self.keygen_from)(gen, &mut k) == 1;
            (self.ctx_free)(gen);
            if !ok || k.is_null() {
                return false;
            }
        }
        let mut out = [0u8; 512];
        let mut len = out.len();
        // SAFETY: as above.
        unsafe {
            let ctx = (self.ctx_new)(k, std::ptr::null_mut());
            let ok = !ctx.is_null()
                && (self.derive_init)(ctx) == 1
                && (self.derive_set_peer)(ctx, peer) == 1
                && (self.derive)(ctx, out.as_mut_ptr(), &mut len) == 1;
            (self.ctx_free)(ctx);
            (self.pkey_free)(k);
            ok
        }
    }

    fn sign_once(&self, key: Ptr) -> bool {
        let digest = [7u8; 32];
        let mut sig = [0u8; 1024];
        let mut len = sig.len();
        // SAFETY: as in key_exchange.
        unsafe {
            let ctx = (self.ctx_new)(key, std::ptr::null_mut());
            let ok = !ctx.is_null()
                && (self.sign_init)(ctx) == 1
                && (self.sign)(ctx, sig.as_mut_ptr(), &mut len, digest.as_ptr(), digest.len()) == 1;
            (self.ctx_free)(ctx);
            ok
        }
    }
}

enum Kind {
    Ec(&'static CStr),
    Rsa(usize),
    Other(&'static CStr),
    /// Finite-field DH.
    Dh(DhParams),
}

enum DhParams {
    /// A group OpenSSL knows by name: RFC 7919's ffdhe*, RFC 3526's modp_*.
    Named(&'static CStr),
    /// RFC 2409's second Oakley group: a 1024-bit safe prime OpenSSL has no name for.
    Oakley1024,
    /// A prime of the size of the named group's, given as p and g alone.
    Own(&'static CStr),
}

/// RFC 2409 section 6.2, big-endian.
const OAKLEY_1024: [u8; 128] = hex_bytes(
    b"FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD129024E088A67CC74020BBEA63B139B22514A08798E3404DD\
      EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED\
      EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE65381FFFFFFFFFFFFFFFF",
);

const fn hex_bytes<const N: usize>(hex: &[u8]) -> [u8; N] {
    const fn nibble(c: u8) -> u8 {
        match c {
            b'0'..=b'9' => c - b'0',
            b'A'..=b'F' => c - b'A' + 10,
            _ => panic!("not a hex digit"),
        }
    }
    let mut out = [0u8; N];
    let (mut i, mut n) = (0, 0);
    while i < hex.len() {
        if hex[i] == b' ' || hex[i] == b'\n' {
            i += 1;
            continue;
        }
        out[n / 2] |= nibble(hex[i]) << if n % 2 == 0 { 4 } else { 0 };
        n += 1;
        i += 1;
    }
    assert!(n == 2 * N, "wrong length");
    out
}

/// How the host's library does each group's key exchange. The finite-field groups:
/// - `ffdheN`, RFC 7919's (TLS 1.3, and TLS 1.2 servers that pick them), and `modpN`, RFC
///   3526's (OpenSSL's automatic DH parameters): groups OpenSSL 3 knows, so a short private
///   key (224 bits for 2048), and the peer's key checked with an exponentiation as long as
///   the prime;
/// - `dheN`, a TLS 1.2 server's own N-bit prime (nginx's `ssl_dhparam`, made by `openssl
///   dhparam`): OpenSSL knows no group of it, so a private key as long as the prime, and no
///   check. An N-bit modulus OpenSSL has no name for stands in for the server's: RFC 2409's
///   1024-bit prime, or for larger sizes RFC 3526's with its last bits changed (no longer
///   a prime, which the exponentiations' cost does not depend on). 6144 and 8192 bits cost
///   half a second or more each: not measured.
fn group_kind(group: &str) -> Option<Kind> {
    Some(match group {
        "x25519" => Kind::Other(c"X25519"),
        "x448" => Kind::Other(c"X448"),
        "secp256r1" => Kind::Ec(c"P-256"),
        "secp384r1" => Kind::Ec(c"P-384"),
        "secp521r1" => Kind::Ec(c"P-521"),
        "ffdhe2048" => Kind::Dh(DhParams::Named(c"ffdhe2048")),
        "ffdhe3072" => Kind::Dh(DhParams::Named(c"ffdhe3072")),
        "ffdhe4096" => Kind::Dh(DhParams::Named(c"ffdhe4096")),
        "ffdhe6144" => Kind::Dh(DhParams::Named(c"ffdhe6144")),
        "ffdhe8192" => Kind::Dh(DhParams::Named(c"ffdhe8192")),
        "modp1536" => Kind::Dh(DhParams::Named(c"modp_1536")),
        "modp2048" => Kind::Dh(DhParams::Named(c"modp_2048")),
        "modp3072" => Kind::Dh(DhParams::Named(c"modp_3072")),
        "modp4096" => Kind::Dh(DhParams::Named(c"modp_4096")),
        "modp6144" => Kind::Dh(DhParams::Named(c"modp_6144")),
        "modp8192" => Kind::Dh(DhParams::Named(c"modp_8192")),
        "dhe1024" => Kind::Dh(DhParams::Oakley1024),
        "dhe1536" => Kind::Dh(DhParams::Own(c"modp_1536")),
        "dhe2048" => Kind::Dh(DhParams::Own(c"modp_2048")),
        "dhe3072" => Kind::Dh(DhParams::Own(c"modp_3072")),
        "dhe4096" => Kind::Dh(DhParams::Own(c"modp_4096")),
        _ => return None,
    })
}

fn cert_kind(cert: &str) -> Option<Kind> {
    Some(match cert {
        "ecdsa_p256" => Kind::Ec(c"P-256"),
        "ecdsa_p384" => Kind::Ec(c"P-384"),
        "ecdsa_p521" => Kind::Ec(c"P-521"),
        "rsa1024" => Kind::Rsa(1024),
        "rsa2048" => Kind::Rsa(2048),
        "rsa3072" => Kind::Rsa(3072),
        "rsa4096" => Kind::Rsa(4096),
        _ => return None,
    })
}

/// Thread CPU seconds of one `op`: the median of BATCHES batches' means, each batch run
/// until it has used its share of `budget` (at least once). A mean over the whole budget
/// took a slow stretch of the host with it (a CI run timed an RSA-3072 signature at 3x its
/// usual cost, above a whole handshake's); the median keeps the typical batch.
fn time_op(budget: Duration, mut op: impl FnMut() -> bool) -> Option<f64> {
    const BATCHES: usize = 5;
    if !op() {
        return None; // warm-up, and a check that it works at all
    }
    let share = budget / BATCHES as u32;
    let mut means = [0f64; BATCHES];
    for mean in &mut means {
        let start = thread_cpu();
        let mut n = 0u32;
        while n == 0 || (thread_cpu() - start < share && n < 20_000) {
            if !op() {
                return None;
            }
            n += 1;
        }
        *mean = (thread_cpu() - start).as_secs_f64() / n as f64;
    }
    means.sort_by(f64::total_cmp);
    Some(means[BATCHES / 2])
}

const BUDGET: Duration = Duration::from_millis(25);

/// Measures the groups and certificates asked for (and the ones they would be compared
/// with: x25519 and ecdsa_p256), and the record protections, with `library`.
pub fn measure(library: &str, groups: &[String], certs: &[String]) -> Result<HostCosts> {
    let lib = Lib::open(library)?;
    // SAFETY: OpenSSL_version(0) returns a static string.
    let version = unsafe { CStr::from_ptr((lib.version)(0)) }
        .to_string_lossy()
        .into_owned();
    let mut out = HostCosts {
        library: format!("{library} ({version})"),
        ..Default::default()
    };
    let mut gs: Vec<&str> = groups.iter().map(String::as_str).collect();
    gs.push("x25519");
    gs.sort();
    gs.dedup();
    for g in gs {
        let Some(kind) = group_kind(g) else { continue };
        let peer = lib.keygen(&kind);
        if peer.is_null() {
            continue;
        }
        if let Some(t) = time_op(BUDGET, || lib.key_exchange(peer)) {
            out.group.insert(g.to_string(), t);
        }
        // SAFETY: the peer key from keygen, freed once.
        unsafe { (lib.pkey_free)(peer) };
    }
    let mut cs: Vec<&str> = certs.iter().map(String::as_str).collect();
    cs.push("ecdsa_p256");
    cs.sort();
    cs.dedup();
    for c in cs {
        let Some(kind) = cert_kind(c) else { continue };
        let key = lib.keygen(&kind);
        if key.is_null() {
            continue;
        }
        if let Some(t) = time_op(BUDGET, || lib.sign_once(key)) {
            out.sign.insert(c.to_string(), t);
        }
        // SAFETY: as above.
        unsafe { (lib.pkey_free)(key) };
    }
    for (name, cipher, mac) in [
        ("aes_128_gcm", "EVP_aes_128_gcm", None),
        ("aes_128_cbc_hmac_sha1", "EVP_aes_128_cbc", Some("EVP_sha1")),
        ("aes_128_cbc_hmac_sha256", "EVP_aes_128_cbc", Some("EVP_sha256")),
        ("des_ede3_cbc_hmac_sha1", "EVP_des_ede3_cbc", Some("EVP_sha1")),
    ] {
        if let Some(t) = record_cost(&lib, cipher, mac) {
            out.record.insert(name.to_string(), t);
        }
    }
    Ok(out)
}

/// One 16 KiB record: encrypted, and MACed when the protection is CBC+HMAC.
fn record_cost(lib: &Lib, cipher: &str, mac: Option<&str>) -> Option<f64> {
    const RECORD: usize = 16384;
    let key = [0x42u8; 32];
    let iv = [0x24u8; 16];
    let input = vec![0x5au8; RECORD];
    let mut output = vec![0u8; RECORD + 64];
    let mut tag = [0u8; 64];
    // SAFETY: getters return static EVP objects; the context is freed once; buffers are
    // larger than what each call writes (a record plus a block; a digest up to 64 bytes).
    unsafe {
        let c = (lib.getters.get(cipher)?)();
        let md = match mac {
            Some(m) => Some((lib.getters.get(m)?)()),
            None => None,
        };
        let ctx = (lib.cipher_ctx_new)();
        if ctx.is_null() || (lib.encrypt_init)(ctx, c, std::ptr::null_mut(), key.as_ptr(), iv.as_ptr()) != 1 {
            (lib.cipher_ctx_free)(ctx);
            return None;
        }
        let t = time_op(BUDGET, || {
            let mut outl: c_int = 0;
            if (lib.encrypt_update)(ctx, output.as_mut_ptr(), &mut outl, input.as_ptr(), RECORD as c_int) != 1 {
                return false;
            }
            if let Some(md) = md {
                let mut l: c_uint = 0;
                if (lib.hmac)(
                    md,
                    key.as_ptr().cast(),
                    20,
                    input.as_ptr(),
                    RECORD,
                    tag.as_mut_ptr(),
                    &mut l,
                )
                .is_null()
                {
                    return false;
                }
            }
            true
        });
        (lib.cipher_ctx_free)(ctx);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_with_the_hosts_libcrypto() {
        if !std::path::Path::new("/usr/lib/x86_64-linux-gnu/libcrypto.so.3").exists() {
            crate::testing::skipped("no libcrypto.so.3");
            return;
        }
        let c = measure("libcrypto.so.3", &["secp384r1".into()], &["rsa2048".into()]).unwrap();
        assert!(c.library.contains("OpenSSL 3"), "{}", c.library);
        for (table, keys) in [
            (&c.group, &["x25519", "secp384r1"][..]),
            (&c.sign, &["rsa2048", "ecdsa_p256"][..]),
            (&c.record, &["aes_128_gcm", "aes_128_cbc_hmac_sha1"][..]),
        ] {
            for k in keys {
                let t = table[*k];
                assert!(t > 1e-8 && t < 0.1, "{k}: {t}");
            }
        }
        // Orders of magnitude that hold on any x86-64 with OpenSSL 3: P-384 costs more
        // than X25519, an RSA-2048 signature more than an ECDSA P-256 one.
        assert!(c.group["secp384r1"] > 2.0 * c.group["x25519"], "{c:?}");
        assert!(c.sign["rsa2048"] > 2.0 * c.sign["ecdsa_p256"], "{c:?}");
        assert!(measure("libnot-there.so.9", &[], &[]).is_err());

        // The finite-field groups: a server's own prime (dheN) with OpenSSL's key as long as
        // the prime, RFC 7919's with its short key.
        let dh: Vec<String> = ["dhe1024", "dhe2048", "ffdhe2048"].map(String::from).to_vec();
        let c = measure("libcrypto.so.3", &dh, &[]).unwrap();
        for g in &dh {
            assert!(c.group[g] > c.group["x25519"], "{c:?}");
        }
        // Two exponentiations with a 2047-bit exponent, against two with a 224-bit one and a
        // check of the peer's key with a 2047-bit one: 1.66 times here (3.9 ms, 2.35 ms).
        assert!(c.group["dhe2048"] > 1.3 * c.group["ffdhe2048"], "{c:?}");
        // twice the modulus and the exponent: 7 times here (0.56 ms)
        assert!(c.group["dhe2048"] > 4.0 * c.group["dhe1024"], "{c:?}");
    }
}
