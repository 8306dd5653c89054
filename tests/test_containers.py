"""A server in its own network and mount namespaces, as in a container: its libssl lives
at a path that exists only inside its mount namespace, its port only inside its network
namespace. tlsprof opens the library through /proc/PID/root and keys ports by namespace."""
import os
import subprocess
import sys
import uuid

import pytest

from harness.agent import Agent
from harness.certs import make_cert
from harness.procs import ROOT, free_port, have, proc_children, wait_for

LIBDIR = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture
def netns():
    if not have("ip"):
        pytest.skip("iproute2 not installed")
    name = f"tlsprof-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
    yield name
    subprocess.run(["ip", "netns", "delete", name], check=False)


def in_ns(ns, *cmd, **kw):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], capture_output=True, text=True, timeout=120, **kw)


def test_nginx_in_its_own_namespaces(workdir, netns, tmp_path):
    port = free_port()
    key, crt = make_cert(workdir)
    d = tmp_path
    conf = d / "nginx.conf"
    conf.write_text(f"""
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
  server {{
    listen 127.0.0.1:{port} ssl;
    ssl_certificate {crt}; ssl_certificate_key {key};
    location / {{ return 200 "hello from a namespace\\n"; }}
  }}
}}
""")
    os.chmod(d, 0o755)
    # A private /mnt holding its own copy of libssl/libcrypto: the host has no such files.
    private = "/mnt/tlsprof-private-lib"
    start = (f"mount -t tmpfs none /mnt && mkdir {private} && cp {LIBDIR}/libssl.so.3 {LIBDIR}/libcrypto.so.3 {private}/ "
             f"&& LD_LIBRARY_PATH={private} exec nginx -c {conf}")
    r = in_ns(netns, "unshare", "-m", "--propagation", "private", "sh", "-c", start)
    assert r.returncode == 0, r.stderr
    master = int(wait_for(lambda: (d / "nginx.pid").exists() and (d / "nginx.pid").read_text().strip(), 10, "nginx.pid"))
    try:
        (worker,) = wait_for(lambda: proc_children(master), 10, "the nginx worker")
        assert not os.path.exists(f"{private}/libssl.so.3"), "the private library must not be visible on the host"
        maps = open(f"/proc/{worker}/maps").read()
        assert f"{private}/libssl.so.3" in maps, "nginx should map the private copy of libssl"
        with Agent("--pid", str(master)) as agent:
            agent.wait_attached([worker])
            assert f"attached to {worker} (nginx): {private}/libssl.so.3" in agent.output(), agent.output()
            client = str(ROOT / "tests/servers/client.py")
            r = in_ns(netns, sys.executable, client, "tls", str(port), "20")
            assert r.stdout.strip() == "20", r.stdout + r.stderr
            r = in_ns(netns, sys.executable, client, "plain", str(port), "4")
            assert r.stdout.strip() == "4", r.stdout + r.stderr
            ok = agent.wait_value("tlsprof_handshakes_total", 20, comm="nginx", result="ok")
            http = agent.wait_value("tlsprof_connections_without_tls_total", 4, comm="nginx", kind="http")
            failed = agent.value("tlsprof_handshakes_total", comm="nginx", result="failed")
        assert ok == 20, f"expected 20 handshakes in the namespace, got {ok}"
        assert (http, failed) == (4, 0), f"expected 4 plain-HTTP connections apart from handshakes, got {http}, {failed} failed"
    finally:
        subprocess.run(["kill", "-QUIT", str(master)], check=False)
        wait_for(lambda: not os.path.exists(f"/proc/{master}"), 10, "nginx to stop")
