"""The ClientHello capture (bpf/hello_skb.bpf.h from the client's packets, bpf/hello.bpf.h
from the server's reads): every connection's ClientHello read once, from real clients
(openssl s_client, curl, Python's ssl, and a client that sends its ClientHello in three
pieces with pauses, so it arrives in several packets and the server reads it in several
reads), from the packets, from them with nginx's `deferred` listening socket, from the
reads, and over IPv6; and nothing the
client sends after it is ever read: a unique marker sent in request bodies over keep-alive
and as TLS 1.3 0-RTT early data appears in no map of the loaded object and nowhere in the
agent's memory, which holds the ring buffer's pages as they are mapped (a positive control
checks that the scan sees them: the host names the clients sent are there).

The truth: the clients' own connection counts, and the host names they sent. (What each
ClientHello offered, against the packets: test_clients.py.)"""
import json
import os
import re
import secrets
import socket
import ssl
import subprocess
import time

import pytest

from harness.agent import Agent
from harness.clients import tls_client_context
from harness.metrics import since, value
from harness.servers import Nginx

UNREAD = ("unreadable", "cut", "lost", "malformed")


def counts(agent: Agent, port: int, base) -> dict:
    m = since(agent.scrape(), base)
    hellos = sum(v for n, l, v in m if n == "tlsprof_client_hellos_total" and l.get("port") == str(port))
    out = {r: value(m, "tlsprof_client_hellos_unread_total", comm="nginx", reason=r) for r in UNREAD}
    out["hellos"] = hellos
    out["read"] = hellos
    return out


def read_all(agent: Agent, port: int, base, n: int) -> dict:
    """counts() once n ClientHellos of the port are read (15 s at most) and the agent has
    settled (so that one more would show)."""
    deadline = time.time() + 15
    while counts(agent, port, base)["read"] < n and time.time() < deadline:
        time.sleep(0.3)
    agent.settle()
    return counts(agent, port, base)


def assert_each_host_once(agent: Agent, port: int, base, tag: str, clients: tuple[str, ...]):
    """Each client's 3 host names (`{client}-{i}-{tag}.example`) were read once each."""
    m = since(agent.scrape(), base)
    for i in range(3):
        for who in clients:
            assert value(m, "tlsprof_client_hellos_total", comm="nginx", port=str(port),
                         sni=f"{who}-{i}-{tag}.example") == 1, (who, i)


def openssl_client(port: int, host: str, *args: str, data: bytes = b"") -> str:
    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-servername", host, *args],
                         input=data, capture_output=True, timeout=20)
    assert out.returncode == 0, out.stderr.decode()
    return out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")


def curl(port: int, host: str, *args: str):
    out = subprocess.run(["curl", "-sk", "--resolve", f"{host}:{port}:127.0.0.1", *args, f"https://{host}:{port}/"],
                         capture_output=True, timeout=20)
    assert out.returncode == 0 and b"hello from nginx" in out.stdout, out


def python_client(port: int, host: str):
    ctx = tls_client_context()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=host) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert b"hello from nginx" in s.recv(4096)


def pieces_client(port: int, host: str, cuts=(3, 60)):
    """A client whose ClientHello goes out in three writes, 0.2 s apart: the record header
    split, then the body, so the server reads it in several reads; then the handshake ends."""
    ctx = tls_client_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname=host)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = out.read()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        at = 0
        for cut in (*cuts, len(hello)):
            s.sendall(hello[at:cut])
            at = cut
            time.sleep(0.2)
        while True:
            try:
                obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                if (pending := out.read()):
                    s.sendall(pending)
                data = s.recv(16384)
                assert data, "the server closed during the handshake"
                inc.write(data)
        if (pending := out.read()):
            s.sendall(pending)
    return len(hello)


# How the capture reads: the client's packets (the cgroup_skb program, the first hook);
# the same with nginx listening with TCP_DEFER_ACCEPT (`deferred`: each connection's first
# data completes its TCP handshake and reaches the listening socket, before the
# connection's socket exists); the server's reads (the per-read fallback, forced).
HOW = {"packets": ("", (), "cgroup_skb/ingress"),
       "deferred": ("deferred", (), "cgroup_skb/ingress"),
       "reads": ("", ("--avoid-hook", "cgroup_skb"), "tp_btf/sock_recv_length")}


@pytest.mark.parametrize("how", HOW)
def test_every_connection_read_once(workdir, how):
    """3 connections from each client: as many ClientHellos read, none unreadable, cut or lost."""
    listen, flags, hook = HOW[how]
    srv = Nginx(workdir, listen=listen)
    tag = secrets.token_hex(4)
    try:
        with Agent("--pid", str(srv.pid), *flags) as agent:
            agent.wait_attached([srv.pid, *srv.workers()])
            assert value(agent.scrape(), "tlsprof_kernel_hook_info", capability="hello_capture", hook=hook) == 1
            base = agent.mark()
            for i in range(3):
                openssl_client(srv.port, f"s-client-{i}-{tag}.example")
                curl(srv.port, f"curl-{i}-{tag}.example")
                python_client(srv.port, f"python-{i}-{tag}.example")
                assert pieces_client(srv.port, f"pieces-{i}-{tag}.example") > 200
            n = 12
            c = read_all(agent, srv.port, base, n)
            assert c["read"] == n, c
            assert (c["unreadable"], c["cut"], c["lost"], c["malformed"]) == (0, 0, 0, 0), c
            assert_each_host_once(agent, srv.port, base, tag, ("s-client", "curl", "python", "pieces"))
    finally:
        srv.stop()


def cgroup2_root():
    for line in open("/proc/self/mountinfo"):
        left, right = line.split(" - ", 1)
        if right.startswith("cgroup2 "):
            return left.split()[4]
    return None


def test_listener_made_in_another_cgroup(workdir):
    """A server whose listening socket belongs to another cgroup than the server's
    processes (systemd's socket activation creates it in the manager's cgroup; here nginx
    is moved into a cgroup of its own after it listened): its connections belong to the
    listener's cgroup, where the packet program must be. 6 connections, 6 ClientHellos
    read, each with its host name (the cgroup of the server alone: none)."""
    root = cgroup2_root()
    if root is None:
        pytest.skip("no cgroup v2 hierarchy is mounted")
    srv = Nginx(workdir)
    from pathlib import Path
    cg = Path(root) / f"tlsprof-test-{os.getpid()}-{srv.port}"
    cg.mkdir()
    tag = secrets.token_hex(4)
    try:
        for pid in (srv.pid, *srv.workers()):
            (cg / "cgroup.procs").write_text(str(pid))
        with Agent("--pid", str(srv.pid)) as agent:
            agent.wait_attached([srv.pid, *srv.workers()])
            assert value(agent.scrape(), "tlsprof_kernel_hook_info", capability="hello_capture",
                         hook="cgroup_skb/ingress") == 1
            base = agent.mark()
            for i in range(3):
                openssl_client(srv.port, f"s-client-{i}-{tag}.example")
                python_client(srv.port, f"python-{i}-{tag}.example")
            c = read_all(agent, srv.port, base, 6)
            assert c["read"] == 6, (c, agent.output()[-3000:])
            assert_each_host_once(agent, srv.port, base, tag, ("s-client", "python"))
    finally:
        srv.stop()
        time.sleep(0.3)
        cg.rmdir()


def test_ipv6_connections_read_once(workdir):
    """Over IPv6 (nginx on ::1 too, the packets' IPv6 headers): 3 openssl and 3 curl
    connections, 6 ClientHellos read, each with its host name."""
    srv = Nginx(workdir, extra_server="")
    srv.conf.write_text(srv.conf.read_text().replace(f"listen 127.0.0.1:{srv.port} ssl",
                                                     f"listen [::1]:{srv.port} ssl; listen 127.0.0.1:{srv.port} ssl"))
    srv.reload()
    tag = secrets.token_hex(4)
    try:
        with Agent("--pid", str(srv.pid)) as agent:
            agent.wait_attached([srv.pid, *srv.workers()])
            base = agent.mark()
            for i in range(3):
                out = subprocess.run(["openssl", "s_client", "-connect", f"[::1]:{srv.port}", "-servername",
                                      f"s-client-{i}-{tag}.example"], input=b"", capture_output=True, timeout=20)
                assert out.returncode == 0, out.stderr.decode()
                host = f"curl-{i}-{tag}.example"
                out = subprocess.run(["curl", "-sk", "--resolve", f"{host}:{srv.port}:[::1]", f"https://{host}:{srv.port}/"],
                                     capture_output=True, timeout=20)
                assert out.returncode == 0 and b"hello from nginx" in out.stdout, out
            c = read_all(agent, srv.port, base, 6)
            assert c["read"] == 6 and (c["unreadable"], c["cut"], c["lost"], c["malformed"]) == (0, 0, 0, 0), c
            assert_each_host_once(agent, srv.port, base, tag, ("s-client", "curl"))
    finally:
        srv.stop()


def agent_memory_has(pid: int, needles: list[bytes]) -> dict[bytes, bool]:
    """Whether each byte string is anywhere in the process's readable memory."""
    found = {n: False for n in needles}
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for line in maps:
            f = line.split()
            if "r" not in f[1]:
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            if hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            for n in needles:
                found[n] = found[n] or n in chunk
    return found


def maps_of(pid: int) -> list[dict]:
    """The BPF maps the process holds (its descriptors' fdinfo: map_id), as bpftool shows them."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        if m := re.search(r"^map_id:\s+(\d+)", text, re.M):
            ids.add(int(m.group(1)))
    maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                                     check=True).stdout)
    return [m for m in maps if m["id"] in ids]


def maps_without(pid: int, marker: str) -> int:
    """Asserts the marker (as text, or its bytes in hex) is in no map of the process that
    bpftool can dump; returns how many were dumped."""
    dumped = 0
    for m in maps_of(pid):
        if m["type"] in ("ringbuf", "perf_event_array", "sk_storage", "prog_array"):
            continue
        d = subprocess.run(["bpftool", "map", "dump", "id", str(m["id"])], capture_output=True, text=True)
        if d.returncode != 0:
            continue
        dumped += 1
        hexed = re.sub(r"[^0-9a-f]", "", d.stdout.replace("0x", ""))
        assert marker.encode().hex() not in hexed and marker not in d.stdout, m
    return dumped


def ktls_ready() -> bool:
    """The kernel offers TLS offload (the tls module: /proc/net/tls_stat)."""
    subprocess.run(["modprobe", "tls"], capture_output=True)
    return os.path.exists("/proc/net/tls_stat")


def tls_stat() -> dict:
    return {k: int(v) for k, v in (l.split() for l in open("/proc/net/tls_stat"))}


@pytest.mark.parametrize("ktls", [False, True], ids=["userspace-tls", "ktls"])
def test_nothing_after_the_client_hello_is_read(workdir, ktls):
    """A 64-hex-digit marker in request bodies over keep-alive (curl, two requests on one
    connection) and as TLS 1.3 early data (openssl s_client resuming with -early_data): in no
    map of the object and nowhere in the agent's memory; the host names the same clients sent
    in their ClientHellos are in it (the ring buffer's pages)."""
    if ktls and not ktls_ready():
        pytest.skip("this kernel has no TLS offload (tls module): nginx with kTLS cannot be tried here")
    srv = Nginx(workdir, resumption=True,
                extra_server="ssl_early_data on;" + (" ssl_conf_command Options KTLS;" if ktls else ""))
    ktls_before = tls_stat() if ktls else {}
    marker = secrets.token_hex(32)
    body = workdir / "body"
    body.write_text(marker * 4)
    early = workdir / "early"
    early.write_text(f"GET /{marker} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    sess = workdir / "sess"
    tag = secrets.token_hex(6)
    names = [f"keepalive-{tag}.example", f"early-{tag}.example"]
    try:
        with Agent("--pid", str(srv.pid)) as agent:
            agent.wait_attached([srv.pid, *srv.workers()])
            base = agent.mark()
            url = f"https://{names[0]}:{srv.port}/"
            out = subprocess.run(["curl", "-sk", "--resolve", f"{names[0]}:{srv.port}:127.0.0.1",
                                  "--data-binary", f"@{body}", url, "--data-binary", f"@{body}", url],
                                 capture_output=True, timeout=20)
            assert out.returncode == 0 and out.stdout.count(b"hello from nginx") == 2, out
            request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
            openssl_client(srv.port, names[1], "-tls1_3", "-ign_eof", "-sess_out", str(sess), data=request)
            out = openssl_client(srv.port, names[1], "-tls1_3", "-ign_eof", "-sess_in", str(sess),
                                 "-early_data", str(early))
            assert re.search(r"Early data was accepted", out), out[-2000:]
            time.sleep(1.5)
            agent.settle()
            c = counts(agent, srv.port, base)
            assert c["read"] == 3 and (c["unreadable"], c["cut"], c["lost"], c["malformed"]) == (0, 0, 0, 0), c
            if ktls:  # the kernel did the records' crypto
                assert tls_stat()["TlsTxSw"] > ktls_before["TlsTxSw"], tls_stat()
            # the metrics and the log
            assert marker not in agent.scrape_text() and marker not in agent.output()
            # every map of the object that can be dumped
            assert maps_without(agent.proc.pid, marker) >= 5
            found = agent_memory_has(agent.proc.pid, [marker.encode(), *(n.encode() for n in names)])
            assert not found[marker.encode()], "the marker is in the agent's memory"
            assert all(found[n.encode()] for n in names), found
    finally:
        srv.stop()
