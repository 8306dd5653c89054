//! mbedTLS (libmbedtls.so): `mbedtls_ssl_handshake` drives a handshake for either role
//! (mbedtls_ssl_read calls it too while the handshake is not over). It returns 0 when done,
//! MBEDTLS_ERR_SSL_WANT_READ/WANT_WRITE (or ASYNC/CRYPTO_IN_PROGRESS) to be called again,
//! another negative value on an error: the connection's `mbedtls_ssl_free` (or
//! `mbedtls_ssl_session_reset`, which readies it for a new connection) tells a failure.
//!
//! `mbedtls_ssl_handshake_step` is not hooked: inside mbedtls_ssl_handshake it would cost
//! ~20 more probe hits per handshake and add nothing, and an application that loops over
//! the steps itself ends its handshake when a private field (`state`) says so, which the
//! probes do not read. Such an application has the kernel-only estimate.
use super::{by_symbols, HandshakeHooks, HookMode, Image, Library, Outcome, Probe, Role};

pub const LIBRARY: Library = Library {
    name: "mbedtls",
    files: &["libmbedtls.so"],
    symbols: &["mbedtls_ssl_handshake", "mbedtls_ssl_session_reset", "mbedtls_ssl_free"],
    find,
};

fn find(image: &Image, _: HookMode) -> Option<HandshakeHooks> {
    by_symbols(
        image,
        LIBRARY.name,
        &[
            ("mbedtls_ssl_handshake", Probe::Call(Role::Unknown, Outcome::ZeroDone)),
            ("mbedtls_ssl_session_reset", Probe::Reset),
        ],
        "mbedtls_ssl_free",
    )
}

#[cfg(test)]
mod tests {
    use super::super::installed_plan;

    #[test]
    fn debian_libmbedtls() {
        let Some((library, source, programs)) = installed_plan("/usr/lib/x86_64-linux-gnu/libmbedtls.so.14") else {
            return;
        };
        assert_eq!((library, source), ("mbedtls", "symbols"));
        assert_eq!(programs, ["hs_enter_any", "hs_exit_zero_ok", "ssl_reset", "ssl_free"]);
    }
}
