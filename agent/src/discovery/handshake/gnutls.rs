//! GnuTLS (libgnutls.so.30): `gnutls_handshake` drives a handshake for either role (the
//! role is the one `gnutls_init` was given, which the probes do not read: a call on an
//! accepted connection is the server's). It returns 0 when done, GNUTLS_E_AGAIN or
//! GNUTLS_E_INTERRUPTED to be called again, another negative value on an error (fatal or a
//! warning the caller may go on after): the connection's `gnutls_deinit` tells a failure.
use super::{by_symbols, HandshakeHooks, HookMode, Image, Library, Outcome, Probe, Role};

pub const LIBRARY: Library = Library {
    name: "gnutls",
    files: &["libgnutls.so"],
    symbols: &["gnutls_handshake", "gnutls_deinit"],
    find,
};

fn find(image: &Image, _: HookMode) -> Option<HandshakeHooks> {
    by_symbols(
        image,
        LIBRARY.name,
        &[("gnutls_handshake", Probe::Call(Role::Unknown, Outcome::ZeroDone))],
        "gnutls_deinit",
    )
}

#[cfg(test)]
mod tests {
    use super::super::installed_plan;

    /// Debian's libgnutls exports them with symbol versions (gnutls_handshake@@GNUTLS_3_4).
    #[test]
    fn debian_libgnutls() {
        let Some((library, source, programs)) = installed_plan("/usr/lib/x86_64-linux-gnu/libgnutls.so.30") else {
            return;
        };
        assert_eq!((library, source), ("gnutls", "symbols"));
        assert_eq!(programs, ["hs_enter_any", "hs_exit_zero_ok", "ssl_free"]);
    }
}
