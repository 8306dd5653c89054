//! wolfSSL (libwolfssl.so): `wolfSSL_accept`/`wolfSSL_connect` drive a server's/client's
//! handshake, and their TLS 1.3 halves `wolfSSL_accept_TLSv13`/`wolfSSL_connect_TLSv13`,
//! which `wolfSSL_negotiate` (wolfSSL_read and wolfSSL_SSL_do_handshake before the
//! handshake is over, as lighttpd's mod_wolfssl does) calls directly once it knows the
//! version: hooking these four sees every handshake with its role, nested calls once.
//! They return 1 (WOLFSSL_SUCCESS) when done, WOLFSSL_FATAL_ERROR (-1) both to be called
//! again and on a failure: the connection's `wolfSSL_free` (or `wolfSSL_clear`) tells which.
use super::{by_symbols, HandshakeHooks, HookMode, Image, Library, Outcome, Probe, Role};

pub const LIBRARY: Library = Library {
    name: "wolfssl",
    files: &["libwolfssl.so"],
    symbols: &[
        "wolfSSL_accept",
        "wolfSSL_accept_TLSv13",
        "wolfSSL_connect",
        "wolfSSL_connect_TLSv13",
        "wolfSSL_clear",
        "wolfSSL_free",
    ],
    find,
};

fn find(image: &Image, _: HookMode) -> Option<HandshakeHooks> {
    let server = Probe::Call(Role::Server, Outcome::OneDone);
    let client = Probe::Call(Role::Client, Outcome::OneDone);
    by_symbols(
        image,
        LIBRARY.name,
        &[
            ("wolfSSL_accept", server),
            ("wolfSSL_accept_TLSv13", server),
            ("wolfSSL_connect", client),
            ("wolfSSL_connect_TLSv13", client),
            ("wolfSSL_clear", Probe::Reset),
        ],
        "wolfSSL_free",
    )
}

#[cfg(test)]
mod tests {
    use super::super::installed_plan;

    #[test]
    fn debian_libwolfssl() {
        let Some((library, source, programs)) = installed_plan("/usr/lib/x86_64-linux-gnu/libwolfssl.so.35") else {
            return;
        };
        assert_eq!((library, source), ("wolfssl", "symbols"));
        assert_eq!(
            programs,
            [
                "hs_enter_server",
                "hs_exit_one_ok",
                "hs_enter_server",
                "hs_exit_one_ok",
                "hs_enter_client",
                "hs_exit_one_ok",
                "hs_enter_client",
                "hs_exit_one_ok",
                "ssl_reset",
                "ssl_free"
            ]
        );
    }
}
