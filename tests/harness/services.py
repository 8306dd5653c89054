"""Real servers other than web servers, from Debian 12's packages, each run as root without
systemd, in the foreground (the test's own child, stopped by its pid), configured from
scratch in a directory of its own and listening on fresh loopback ports; and their real
clients, which count their own TLS handshakes. What they have in common: TLS does not start
with the connection (STARTTLS, PostgreSQL's SSLRequest), the process that makes the
handshake is started for the connection (Postfix's smtpd, Dovecot's imap-login, a
PostgreSQL backend, an inetd service), or no TLS library is mapped at all (Java's JSSE).

- Postfix: the master (foreground, `master -d`) starts an smtpd for a connection when none
  is idle, each reused for up to max_use (100) connections; SMTP with STARTTLS and
  submissions (implicit TLS).
- Dovecot: the master starts an imap-login process per connection (service_count = 1);
  IMAP with STARTTLS and IMAPS (implicit TLS).
- PostgreSQL 15: the postmaster forks a backend per connection, which reads the client's
  SSLRequest, answers 'S' and then makes the TLS handshake.
- JsseServer (tests/servers/JsseServer.java): HTTPS on the JDK's own TLS stack.
- Inetd (tests/servers/inetd.py): a parent that execs a separate TLS server program
  (tests/servers/inetd_tls_child.py, Python's ssl) per connection.

Every client loop is bounded in count and time; every connection goes to 127.0.0.1."""
from __future__ import annotations

import imaplib
import os
import pwd
import re
import shutil
import signal
import smtplib
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .certs import make_cert
from .clients import run_pool, tls_client_context
from .procs import ROOT, free_port, have, port_open, proc_children, stop_pid, wait_for
from .servers import SpawnedServer


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError as e:
        return f"({path}: {e})"


class _Foreground:
    """A server run in the foreground as this process's child: its pid is the server's."""

    def _start(self, argv, log: Path, what: str, ports: list[int], timeout: float = 20.0, **popen):
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, **popen)
        self.pid = self.proc.pid
        try:
            wait_for(lambda: self.proc.poll() is not None or all(port_open(p) for p in ports), timeout,
                     f"{what} to listen on {ports}")
            if self.proc.poll() is not None:
                raise AssertionError(f"{what} exited with {self.proc.returncode}")
        except AssertionError as e:
            logs = self.logs()
            self.stop()
            raise AssertionError(f"{e}; its log: {logs}") from None

    def logs(self) -> str:
        return _tail(self.log)

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:  # not once it has been reaped: its pid may be another's
            stop_pid(self.pid, sig)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def _undo(self):
        """After a failed start: the server stopped if it runs, its directory removed."""
        if getattr(self, "proc", None) is not None:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# --- Postfix -------------------------------------------------------------------------------

POSTFIX_MASTER = Path("/usr/lib/postfix/sbin/master")


class Postfix(_Foreground):
    """Postfix's master in the foreground (`master -c DIR -d`) with a copy of /etc/postfix
    and a queue of its own: `postfix start` runs it in the background and, without a syslog
    daemon, fails without a word. Two ports: `port` is SMTP with STARTTLS
    (smtpd_tls_security_level = may), `submissions_port` implicit TLS (smtpd_tls_wrappermode).
    The master starts an smtpd process when a connection comes and no idle one is there;
    each serves up to max_use (100) connections, then exits. The master links no TLS library."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256"):
        # Under /tmp, not pytest's directories (root's only): the master opens the data
        # directory's lock file by its absolute path as user postfix, and fails (EACCES) where
        # an ancestor is closed to that user. Removed by stop().
        self.dir = Path(tempfile.mkdtemp(prefix="tlsprof-postfix-"))
        try:
            self._setup(workdir, cert)
        except BaseException:
            self._undo()
            raise

    def _setup(self, workdir: Path, cert: str):
        d = self.dir
        d.chmod(0o755)
        key, crt = make_cert(workdir, cert)
        for src, name in ((key, "server.key"), (crt, "server.crt")):
            shutil.copy(src, d / name)
            os.chmod(d / name, 0o600)
        key, crt = d / "server.key", d / "server.crt"
        conf = d / "etc"
        if Path("/etc/postfix/master.cf").exists():
            shutil.copytree("/etc/postfix", conf, symlinks=True)
        else:  # the package installed with "No configuration": its templates
            conf.mkdir()
            shutil.copy("/usr/share/postfix/master.cf.dist", conf / "master.cf")
        (conf / "main.cf").touch()
        self.port, self.submissions_port = free_port(), free_port()
        # The SMTP port: master.cf's `smtp inet` line listens on 127.0.0.1:PORT (inet_interfaces
        # is 127.0.0.1 too); a second smtpd line on the submissions port, in wrapper mode.
        lines = (conf / "master.cf").read_text().splitlines()
        smtp = [i for i, line in enumerate(lines) if re.match(r"smtp\s+inet\s", line)]
        assert len(smtp) == 1, f"master.cf has {len(smtp)} `smtp inet` lines"
        lines[smtp[0]] = re.sub(r"^smtp\b", f"127.0.0.1:{self.port}", lines[smtp[0]])
        lines.insert(smtp[0] + 1, f"127.0.0.1:{self.submissions_port} inet n - n - - smtpd "
                                  "-o smtpd_tls_wrappermode=yes -o smtpd_tls_security_level=encrypt")
        (conf / "master.cf").write_text("\n".join(lines) + "\n")
        self.queue, self.data = d / "spool", d / "lib"
        settings = {
            "queue_directory": self.queue,
            "data_directory": self.data,
            "mail_owner": "postfix",
            "setgid_group": "postdrop",
            "myhostname": "localhost.localdomain",
            "mydestination": "",
            "relayhost": "",
            "alias_maps": "",
            "alias_database": "",
            "inet_interfaces": "127.0.0.1",
            "inet_protocols": "ipv4",
            # Without a syslog daemon, Postfix's log goes nowhere: to a file (through postlogd),
            # which must be under one of maillog_file_prefixes (else every postfix command
            # fails, saying so only to syslog). The master's own fatal errors before postlogd
            # runs still go to syslog only: `strace -f master -c DIR -d` shows them.
            "maillog_file_prefixes": d,
            "maillog_file": d / "maillog",
            "smtpd_tls_cert_file": crt,
            "smtpd_tls_key_file": key,
            "smtpd_tls_security_level": "may",
            "smtpd_tls_session_cache_database": "",
            "smtpd_relay_restrictions": "permit_mynetworks, reject_unauth_destination",
            "mynetworks": "127.0.0.0/8",
            # the tests' connections come quickly one after another: no delay, no limit
            "smtpd_client_connection_rate_limit": 0,
            "smtpd_client_connection_count_limit": 0,
        }
        self.postconf(*(f"{k}={v}" for k, v in settings.items()))
        # No chroot (Debian's master.cf chroots smtpd into the queue, which then needs copies
        # of /etc/services, resolv.conf...); no pickup/qmgr-side service needs one either.
        self.postconf("-F", "*/*/chroot = n")
        # The queue's directories, owned by mail_owner and setgid_group as Postfix wants them
        # (the queue directory itself must exist first; the data directory is made).
        self.queue.mkdir()
        r = subprocess.run(["postfix", "-c", conf, "post-install", "create-missing"], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, f"postfix post-install: {r.stdout}{r.stderr}{self.logs()}"
        self.conf = conf
        self._start([POSTFIX_MASTER, "-c", conf, "-d"], d / "master.out", "postfix master",
                    [self.port, self.submissions_port])

    def postconf(self, *args):
        r = subprocess.run(["postconf", "-c", self.dir / "etc", *(["-e"] if "-F" not in args else []), *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, f"postconf {args}: {r.stdout}{r.stderr}"

    def smtpds(self) -> list[int]:
        """The smtpd processes the master has started (children of the master)."""
        return [p for p in proc_children(self.pid) if _comm(p) == "smtpd"]

    def logs(self) -> str:
        return _tail(self.dir / "maillog") + _tail(self.dir / "master.out")

    def stop(self):
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _count_handshakes(n: int, concurrency: int, timeout: float, session) -> dict:
    """Runs session(ctx, done) n times; session calls done() once its TLS handshake is made.
    Returns the client's own counts: ok (handshakes made), failed (connections whose
    handshake was not made), after_errors (errors after a handshake that was made)."""
    ctx = tls_client_context()
    counts = {"ok": 0, "failed": 0, "after_errors": 0}
    lock = threading.Lock()

    def job():
        made = []

        def done():
            made.append(True)
            with lock:
                counts["ok"] += 1
        try:
            session(ctx, done)
        except (OSError, ssl.SSLError, smtplib.SMTPException, imaplib.IMAP4.error, EOFError, ValueError):
            with lock:
                counts["after_errors" if made else "failed"] += 1

    run_pool(n, concurrency, timeout, job)
    return counts


def smtp_starttls_connections(port: int, n: int, concurrency: int = 2, timeout: float = 60.0) -> dict:
    """n SMTP sessions (Python's smtplib), each: EHLO, STARTTLS, EHLO again over TLS, QUIT."""
    def session(ctx, done):
        with smtplib.SMTP("127.0.0.1", port, local_hostname="client.localdomain", timeout=10) as s:
            s.ehlo()
            code, _ = s.starttls(context=ctx)
            if code != 220:
                raise smtplib.SMTPException(f"STARTTLS answered {code}")
            done()
            s.ehlo()
            s.quit()
    return _count_handshakes(n, concurrency, timeout, session)


def smtps_connections(port: int, n: int, concurrency: int = 2, timeout: float = 60.0) -> dict:
    """n SMTP sessions over implicit TLS (smtplib.SMTP_SSL): EHLO, QUIT."""
    def session(ctx, done):
        with smtplib.SMTP_SSL("127.0.0.1", port, local_hostname="client.localdomain", timeout=10, context=ctx) as s:
            done()
            s.ehlo()
            s.quit()
    return _count_handshakes(n, concurrency, timeout, session)


# --- Dovecot -------------------------------------------------------------------------------

class Dovecot(_Foreground):
    """Dovecot in the foreground (`dovecot -F -c FILE`), configured from scratch: IMAP only,
    `port` with STARTTLS and `imaps_port` with implicit TLS, a static passdb and userdb, its
    runtime directory, state and logs in a directory of its own. The master maps no TLS
    library: the imap-login processes it starts make the handshakes, in Dovecot's OpenSSL
    module (modules/libssl_iostream_openssl.so, which links libssl), which each of them
    loads with dlopen."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256"):
        workdir.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="dovecot-", dir=workdir))
        d = self.dir
        key, crt = make_cert(workdir, cert)
        for sub in ("run", "state", "home"):
            (d / sub).mkdir()
        self.port, self.imaps_port = free_port(), free_port()
        self.conf = d / "dovecot.conf"
        self.conf.write_text(f"""
protocols = imap
listen = 127.0.0.1
base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
info_log_path = {d}/dovecot.log
instance_name = tlsprof-{d.name}
ssl = yes
ssl_cert = <{crt}
ssl_key = <{key}
disable_plaintext_auth = no
auth_mechanisms = plain
mail_location = maildir:~/Maildir
passdb {{
  driver = static
  args = password=tlsprof
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={d}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    address = 127.0.0.1
    port = {self.imaps_port}
    ssl = yes
  }}
  # One connection per login process ("high-security mode", Dovecot's default, said here):
  # the master starts a new imap-login process for each connection, and that process makes
  # its TLS handshake.
  service_count = 1
  process_min_avail = 0
}}
service pop3-login {{
  inet_listener pop3 {{
    port = 0
  }}
  inet_listener pop3s {{
    port = 0
  }}
}}
service lmtp {{
  unix_listener lmtp {{
    mode = 0
  }}
}}
""")
        self._start(["dovecot", "-F", "-c", self.conf], d / "dovecot.out", "dovecot", [self.port, self.imaps_port])

    def logins(self) -> list[int]:
        return [p for p in proc_children(self.pid) if _comm(p) == "imap-login"]

    def logs(self) -> str:
        return _tail(self.dir / "dovecot.log") + _tail(self.dir / "dovecot.out")


def imaps_connections(port: int, n: int, concurrency: int = 2, timeout: float = 60.0) -> dict:
    """n IMAP sessions over implicit TLS (imaplib.IMAP4_SSL): the greeting, LOGOUT."""
    def session(ctx, done):
        m = imaplib.IMAP4_SSL("127.0.0.1", port, ssl_context=ctx, timeout=10)
        done()
        m.logout()
    return _count_handshakes(n, concurrency, timeout, session)


def imap_starttls_connections(port: int, n: int, concurrency: int = 2, timeout: float = 60.0) -> dict:
    """n IMAP sessions (imaplib.IMAP4): the greeting, STARTTLS, LOGOUT over TLS."""
    def session(ctx, done):
        m = imaplib.IMAP4("127.0.0.1", port, timeout=10)
        try:
            typ, _ = m.starttls(ssl_context=ctx)
            if typ != "OK":
                raise imaplib.IMAP4.error(f"STARTTLS answered {typ}")
        except BaseException:
            m.shutdown()
            raise
        done()
        m.logout()  # closes the connection whatever the answer
    return _count_handshakes(n, concurrency, timeout, session)


# --- PostgreSQL ----------------------------------------------------------------------------

PG_BIN = Path("/usr/lib/postgresql/15/bin")  # Debian's postgresql-15 (not /usr/local/bin's)


class Postgres(_Foreground):
    """PostgreSQL 15's postmaster in the foreground (`postgres -D DIR` as user postgres,
    started with its uid: its pid is the server's), a cluster of its own (initdb, trust
    authentication on loopback) with ssl = on and the test's certificate. The postmaster
    forks a backend per connection; the backend reads the client's SSLRequest, answers 'S'
    and makes the TLS handshake. The cluster lives in a directory under /tmp owned by
    postgres (the user cannot reach pytest's root-only directories), removed by stop().
    `pgbench`: the pgbench tables (scale 1) made at start, over a connection without TLS."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256", pgbench: bool = True):
        key, crt = make_cert(workdir, cert)
        self.dir = Path(tempfile.mkdtemp(prefix="tlsprof-pg-"))
        try:
            self._setup(key, crt, pgbench)
        except BaseException:
            self._undo()
            raise

    def _setup(self, key: Path, crt: Path, pgbench: bool):
        pw = pwd.getpwnam("postgres")
        d = self.dir
        os.chown(d, pw.pw_uid, pw.pw_gid)
        for src, name in ((key, "server.key"), (crt, "server.crt")):
            shutil.copy(src, d / name)
            os.chown(d / name, pw.pw_uid, pw.pw_gid)
            os.chmod(d / name, 0o600)
        as_postgres = dict(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd=d,
                           env={"PATH": "/usr/bin:/bin", "LANG": "C", "HOME": str(d)})
        r = subprocess.run([PG_BIN / "initdb", "-D", d / "data", "-A", "trust", "-U", "postgres", "--no-sync",
                            "-E", "UTF8", "--locale=C", "--no-instructions"], capture_output=True, text=True,
                           timeout=120, **as_postgres)
        assert r.returncode == 0, f"initdb: {r.stdout}{r.stderr}"
        self.port = free_port()
        settings = {"listen_addresses": "127.0.0.1", "port": self.port, "ssl": "on",
                    "ssl_cert_file": d / "server.crt", "ssl_key_file": d / "server.key",
                    "unix_socket_directories": d, "fsync": "off", "max_connections": 50}
        self._start([PG_BIN / "postgres", "-D", d / "data", *(a for k, v in settings.items() for a in ("-c", f"{k}={v}"))],
                    d / "postgres.log", "postgres", [self.port], **as_postgres)
        wait_for(self.ready, 20, f"postgres to accept sessions (log: {_tail(d / 'postgres.log')})")
        if pgbench:
            r = subprocess.run([PG_BIN / "pgbench", "-i", "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                               capture_output=True, text=True, timeout=120, env=pg_env(sslmode="disable"))
            assert r.returncode == 0, f"pgbench -i: {r.stdout}{r.stderr}"

    def ready(self) -> bool:
        return subprocess.run([PG_BIN / "pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                              env=pg_env(sslmode="disable"), timeout=15).returncode == 0

    def backends(self) -> list[int]:
        return proc_children(self.pid)

    def stop(self):
        # SIGINT: the fast shutdown (SIGTERM waits for the sessions to end)
        super().stop(signal.SIGINT)
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_env(sslmode: str) -> dict:
    return {**os.environ, "PGUSER": "postgres", "PGDATABASE": "postgres", "PGSSLMODE": sslmode,
            "PGCONNECT_TIMEOUT": "10", "PGAPPNAME": "tlsprof-test"}


def pgbench_connections(port: int, n: int, timeout: float = 60.0) -> dict:
    """n TLS connections from pgbench (PGSSLMODE=require): its setup connection, where it
    reads the tables' scale, then n - 1 select-only transactions (-S), each on a new
    connection (-C), one client. Returns pgbench's own counts: ok = its setup connection and
    the transactions it processed ("number of transactions actually processed: X/Y"), each
    on a TLS connection of its own; failed = the rest; transactions = X."""
    assert n >= 2
    r = subprocess.run([PG_BIN / "pgbench", "-n", "-C", "-c", "1", "-t", str(n - 1), "-S",
                        "-h", "127.0.0.1", "-p", str(port)], capture_output=True, text=True, timeout=timeout,
                       env=pg_env(sslmode="require"))
    m = re.search(r"number of transactions actually processed: (\d+)/(\d+)", r.stdout)
    processed = int(m.group(1)) if m else 0
    f = re.search(r"number of failed transactions: (\d+)", r.stdout)
    ok = processed + 1 if m else 0  # the report comes only after the setup connection worked
    return {"ok": ok, "failed": n - ok, "transactions": processed,
            "failed_transactions": int(f.group(1)) if f else None, "rc": r.returncode,
            "output": (r.stdout + r.stderr)[-1500:] if r.returncode or ok != n else ""}


SSL_REQUEST = struct.pack("!ii", 8, 80877103)


def pg_ssl_session(port: int, ctx: ssl.SSLContext, done=None, pause: float = 0.0):
    """One PostgreSQL session over TLS from Python alone: the SSLRequest (int32 8, int32
    80877103), the server's 'S', `pause` seconds, the TLS handshake, then the protocol 3.0
    startup message (user postgres, trust), the server's messages up to ReadyForQuery, and
    Terminate."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(SSL_REQUEST)
        answer = raw.recv(1)
        if answer != b"S":
            raise ConnectionError(f"SSLRequest answered {answer!r}")
        time.sleep(pause)
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            if done:
                done()
            params = b"user\0postgres\0database\0postgres\0application_name\0tlsprof-test\0\0"
            s.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
            buf = b""
            while True:
                while len(buf) < 5 or len(buf) < 1 + struct.unpack("!i", buf[1:5])[0]:
                    chunk = s.recv(65536)
                    if not chunk:
                        raise ConnectionError("EOF before ReadyForQuery")
                    buf += chunk
                kind, length = buf[:1], struct.unpack("!i", buf[1:5])[0]
                if kind == b"E":
                    raise ConnectionError(f"postgres: {buf[5:1 + length]!r}")
                buf = buf[1 + length:]
                if kind == b"Z":
                    break
            s.sendall(b"X" + struct.pack("!i", 4))


def pg_ssl_connections(port: int, n: int, concurrency: int = 2, timeout: float = 60.0, pause: float = 0.0) -> dict:
    """n PostgreSQL sessions over TLS from Python alone (pg_ssl_session), when neither
    pgbench nor a driver is there: the client's own counts."""
    return _count_handshakes(n, concurrency, timeout, lambda ctx, done: pg_ssl_session(port, ctx, done, pause))


# --- Java (JSSE) ---------------------------------------------------------------------------

KEYSTORE_PASSWORD = "tlsprof"


class JsseServer(SpawnedServer):
    """tests/servers/JsseServer.java: com.sun.net.httpserver.HttpsServer on the JDK's own
    TLS stack, with the certificate in a PKCS12 keystore. Compiled once per session into the
    workdir by javac (0.85 s, then 0.45 s to listen), faster from the second start on than
    the source launcher (`java JsseServer.java`: 1.2 s to listen every time); the process is
    `java` either way. The JVM maps no TLS library, unless `preload` names one for the
    dynamic loader to map into it (LD_PRELOAD): then it maps OpenSSL, as an HCL Domino task
    does for its outbound calls, and its own stack still terminates its clients' TLS."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256", preload: str | None = None):
        key, crt = make_cert(workdir, cert)
        keystore = workdir / f"{cert}.p12"
        if not keystore.exists():
            subprocess.run(["openssl", "pkcs12", "-export", "-inkey", key, "-in", crt, "-name", "server",
                            "-out", keystore, "-passout", f"pass:{KEYSTORE_PASSWORD}"],
                           check=True, capture_output=True, timeout=30)
        classes = workdir / "jsse-classes"
        if not (classes / "JsseServer.class").exists():
            r = subprocess.run(["javac", "-d", classes, ROOT / "tests/servers/JsseServer.java"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, f"javac: {r.stdout}{r.stderr}"
        self._spawn(lambda port: ["java", "-cp", classes, "JsseServer", port, keystore, KEYSTORE_PASSWORD],
                    env={"LD_PRELOAD": preload} if preload else None)


# --- Redis and Caddy: TLS from the first byte, one process ------------------------------------

REDIS = Path("/usr/bin/redis-server")
CADDY = Path("/usr/bin/caddy")


class Redis(SpawnedServer):
    """Debian's redis-server (7.0, built with TLS: it links libssl) with TLS only
    (`--port 0 --tls-port P`), no client certificates, nothing saved to disk; one process,
    named `redis-server`."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256"):
        key, crt = make_cert(workdir, cert)
        data = Path(tempfile.mkdtemp(prefix="tlsprof-redis-", dir=workdir))
        self._spawn(lambda port: [REDIS, "--port", "0", "--tls-port", port, "--tls-cert-file", crt,
                                  "--tls-key-file", key, "--tls-auth-clients", "no", "--save", "",
                                  "--appendonly", "no", "--dir", data, "--bind", "127.0.0.1"])


def redis_connections(port: int, n: int, concurrency: int = 2, timeout: float = 60.0) -> dict:
    """n TLS connections to Redis, each: PING (answered +PONG), then QUIT."""
    def session(ctx, done):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                done()
                s.sendall(b"PING\r\n")
                if not s.recv(64).startswith(b"+PONG"):
                    raise ValueError("no +PONG")
                s.sendall(b"QUIT\r\n")
                s.recv(64)
    return _count_handshakes(n, concurrency, timeout, session)


class Caddy(SpawnedServer):
    """Debian's caddy (2.6, Go's crypto/tls in a static executable) serving HTTPS on a free
    port with the test certificate, from a Caddyfile of its own (no admin endpoint, no
    automatic certificates, no HTTP redirect port); one process, named `caddy`."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256"):
        key, crt = make_cert(workdir, cert)
        home = Path(tempfile.mkdtemp(prefix="tlsprof-caddy-", dir=workdir))

        def argv(port):
            conf = home / "Caddyfile"
            conf.write_text("{\n\tadmin off\n\tauto_https off\n}\n"
                            f"https://localhost:{port}, https://127.0.0.1:{port} {{\n"
                            f"\ttls {crt} {key}\n\trespond \"ok\" 200\n}}\n")
            return [CADDY, "run", "--config", conf, "--adapter", "caddyfile"]
        self._spawn(argv, env={"HOME": str(home), "XDG_DATA_HOME": str(home), "XDG_CONFIG_HOME": str(home)})


# --- a service started per connection (inetd) ----------------------------------------------

INETD_CHILD = ROOT / "tests/servers/inetd_tls_child.py"
INETD_CHILD_COMM = INETD_CHILD.name[:15]  # the kernel's comm: the executed file's name, cut at 15


class Inetd(SpawnedServer):
    """tests/servers/inetd.py on a fresh port, starting tests/servers/inetd_tls_child.py for
    each connection: a new process per connection, exec'd by a parent that handles no TLS
    (as inetd or a systemd Accept=yes socket does), named "inetd_tls_child" (its comm). The
    child answers one HTTP request: tests/harness/clients.py's https_connections is its client."""

    def __init__(self, workdir: Path, cert: str = "ecdsa_p256", limit: float = 600.0):
        key, crt = make_cert(workdir, cert)
        assert os.access(INETD_CHILD, os.X_OK), f"{INETD_CHILD} is not executable"
        self._spawn(lambda port: [sys.executable, ROOT / "tests/servers/inetd.py", port, limit, INETD_CHILD, crt, key],
                    timeout=10)


def libssl() -> str | None:
    """The system's OpenSSL libssl, as the dynamic loader finds it (None: not found)."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=30).stdout
    names = [line.split("=>")[-1].strip() for line in out.splitlines() if "libssl.so.3 " in line]
    return names[0] if names else None


def available() -> dict[str, str | None]:
    """Why each server cannot run here (None: it can): its package's program is missing."""
    return {
        "postfix": None if POSTFIX_MASTER.exists() and have("postconf") else "postfix not installed",
        "dovecot": None if have("dovecot") and Path("/usr/lib/dovecot/imap-login").exists()
        else "dovecot-imapd not installed",
        "postgres": None if (PG_BIN / "postgres").exists() and (PG_BIN / "pgbench").exists()
        else "postgresql-15 not installed",
        "java": None if have("java") and have("javac") else "default-jdk-headless not installed",
        "inetd": None if Path("/usr/bin/python3").exists() else "/usr/bin/python3 missing",
        "redis": None if REDIS.exists() else "redis-server not installed",
        "caddy": None if CADDY.exists() else "caddy not installed",
    }
