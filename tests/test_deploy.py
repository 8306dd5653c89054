"""deploy/: the systemd unit, the Kubernetes manifests and the compose file are valid, and
the capabilities they grant are enough for everything tlsprof measures, each one needed."""
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from harness.agent import TLSPROF, UNIT, Agent, as_user_with, unit_caps
from harness.clients import https_connections, keepalive_connections
from harness.metrics import value
from harness.procs import ROOT
from harness.servers import TESTDEPS, Nginx

DEPLOY = ROOT / "deploy"
PYTOOLS = TESTDEPS / "pytools" / "bin"


def test_systemd_unit_verifies():
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze not installed")
    # systemd-analyze checks that ExecStart's binary exists: point it at the one just built.
    with tempfile.TemporaryDirectory() as d:
        unit = Path(d) / "tlsprof.service"
        unit.write_text(UNIT.read_text().replace("/usr/local/bin/tlsprof", str(TLSPROF)))
        r = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
        assert r.returncode == 0 and not r.stderr.strip(), r.stderr


def test_every_deployment_grants_the_same_capabilities():
    caps = sorted(c.upper() for c in unit_caps())
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "tlsprof.yaml").read_text()))
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    sc = spec["containers"][0]["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sorted(sc["capabilities"]["add"]) == caps
    assert sc.get("privileged") is False
    res = spec["containers"][0]["resources"]
    assert res["requests"] and res["limits"]
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    svc = compose["services"]["tlsprof"]
    assert svc["pid"] == "host" and svc["cap_drop"] == ["ALL"] and sorted(svc["cap_add"]) == caps
    # Every file the compose file mounts or builds from is in the repository.
    base = DEPLOY / "compose"
    for name, s in compose["services"].items():
        for v in s.get("volumes", []):
            src = v.split(":")[0]
            if src.startswith("."):
                assert (base / src).exists(), f"{name} mounts {src}, which is missing"
    assert (base / compose["services"]["tlsprof"]["build"]["context"] / "Dockerfile").exists()
    # Grafana's provisioning points at the dashboards' mount, Prometheus' at the rules.
    prov = yaml.safe_load((base / "grafana/provisioning/dashboards/tlsprof.yaml").read_text())
    mount = next(v for v in compose["services"]["grafana"]["volumes"] if v.startswith("../../dashboards"))
    assert prov["providers"][0]["options"]["path"] == mount.split(":")[1]
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    mounted = [v.split(":")[1] for v in compose["services"]["prometheus"]["volumes"]]
    assert all(f"/etc/prometheus/{f}" in mounted for f in prom["rule_files"])


def _tool(name: str) -> Path:
    tool = PYTOOLS / name
    if not tool.exists():
        pytest.skip(f"{tool} missing (scripts/deps.sh installs it from PyPI)")
    return tool


def test_kubernetes_manifests_match_the_api_schema():
    tool = _tool("kubernetes-validate")
    r = subprocess.run([str(tool), "--strict", str(DEPLOY / "kubernetes" / "tlsprof.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("passed") == 3, r.stdout
    # The check can fail: a misspelt field is refused.
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as bad:
        bad.write((DEPLOY / "kubernetes" / "tlsprof.yaml").read_text().replace("hostPID:", "hostPid:"))
        bad.flush()
        r = subprocess.run([str(tool), "--strict", bad.name], capture_output=True, text=True)
        assert r.returncode != 0 and "hostPid" in r.stdout + r.stderr


def test_compose_file_matches_the_compose_spec():
    tool = _tool("check-jsonschema")
    compose = DEPLOY / "compose" / "compose.yaml"
    r = subprocess.run([str(tool), "--builtin-schema", "vendor.compose-spec", str(compose)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as bad:
        bad.write(compose.read_text().replace("network_mode:", "network_mod:"))
        bad.flush()
        r = subprocess.run([str(tool), "--builtin-schema", "vendor.compose-spec", bad.name],
                           capture_output=True, text=True)
        assert r.returncode != 0


# ------------------------------------------------------------- the unit's capabilities

@pytest.fixture
def www_nginx():
    """nginx whose workers run as www-data, as Debian's does: another user than tlsprof's."""
    d = Path(tempfile.mkdtemp(prefix="tlsprof-deploy-"))
    d.chmod(0o755)
    server = Nginx(d, workers=1, extra_main="user www-data;")
    yield server
    server.stop()
    shutil.rmtree(d, ignore_errors=True)


# Run in a mount namespace of its own, where tracefs is mounted at /sys/kernel/tracing
# (most systemd hosts) or where no tracefs is mounted at all (this machine), whatever the
# host has: the host's mounts are not touched.
TRACEFS = {
    True: "mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing",
    False: "for m in /sys/kernel/debug/tracing /sys/kernel/tracing; do ! mountpoint -q $m || umount -l $m; done",
}


def run_with_caps(server: Nginx, caps: list[str], until_kernel_net: bool = False,
                  tracefs: bool = False) -> tuple[list, str, dict]:
    """tlsprof as user nobody with exactly `caps` (ambient, as systemd's AmbientCapabilities
    gives them), against `server` under a little load, on a host with tracefs mounted or
    not (TRACEFS). Returns its metrics, its log and the client's counts. With
    `until_kernel_net`, keep-alive load goes on after that scrape (at most 10 rounds) until a
    sample of kernel network work has been classified: the counted load alone makes a few
    dozen samples, and a CI run once saw none land in kernel code; the final scrape is then
    in counts["after_more_load"]."""
    prefix = ("unshare", "--mount", "--propagation", "private", "sh", "-ec", f'{TRACEFS[tracefs]}; exec "$@"',
              "tracefs", *as_user_with(caps))
    with Agent("--pid", str(server.pid), "--sample-hz", "499", prefix=prefix) as agent:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(agent.attached(p) for p in server.workers()):
            time.sleep(0.2)
        time.sleep(1.0)  # a scan: the listening port
        counts = https_connections(server.port, 20)
        ka = keepalive_connections(server.port, 3, 100, end="close")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = agent.scrape()
            # the server's own port: connections counted elsewhere (another label) do not end the wait
            ended = value(m, "tlsprof_tcp_connections_total", port=str(server.port))
            if ended >= 23 and value(m, "tlsprof_handshakes_total") >= 23:
                break
            time.sleep(0.3)
        time.sleep(0.5)
        m = agent.scrape()
        if until_kernel_net:
            later = m
            for _ in range(10):
                if value(later, "tlsprof_cpu_seconds_total", category="kernel_net") > 0:
                    break
                keepalive_connections(server.port, 2, 500, end="close")
                time.sleep(1.2)  # the split is made once a second
                later = agent.scrape()
            counts["after_more_load"] = later
        out = agent.stop()
    counts["keepalive"] = ka
    return m, out, counts


def test_the_units_capabilities_are_enough(www_nginx):
    caps = unit_caps()
    m, out, counts = run_with_caps(www_nginx, caps, until_kernel_net=True)
    assert counts["ok"] == 20 and counts["keepalive"]["connections"] == 3
    warnings = [l for l in out.splitlines() if "warning" in l or "error" in l]
    assert warnings == [], warnings
    assert "uprobes: shared per file" in out, out[-2000:]  # tracefs written (CAP_DAC_OVERRIDE)
    assert value(m, "tlsprof_probe_attach_failures_total") == 0
    # Every handshake seen by the probes (CPU histogram) and labelled from the wire.
    assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx", version="TLSv1.3",
                 group="x25519", cert="ecdsa_p256") == 23
    assert value(m, "tlsprof_tcp_connections_total", comm="nginx", port=str(www_nginx.port)) == 23
    assert value(m, "tlsprof_requests_per_connection_sum", port=str(www_nginx.port)) == 20 + 3 * 100
    # Kernel stacks are classified (CAP_SYSLOG: /proc/kallsyms has addresses).
    assert value(counts["after_more_load"], "tlsprof_cpu_seconds_total", category="kernel_net") > 0


@pytest.mark.parametrize("dropped,symptom", [
    ("sys_admin", "without CAP_SYS_ADMIN the kernel refuses uprobes"),
    ("sys_ptrace", "without CAP_SYS_PTRACE"),
    ("syslog", "/proc/kallsyms shows no addresses"),
    ("dac_override", "without CAP_DAC_OVERRIDE"),
])
def test_each_of_the_units_capabilities_is_needed(www_nginx, dropped, symptom):
    """On a host without tracefs mounted: what each of the unit's capabilities gives."""
    caps = [c for c in unit_caps() if c != dropped]
    assert len(caps) == len(unit_caps()) - 1
    m, out, counts = run_with_caps(www_nginx, caps, until_kernel_net=dropped == "syslog")
    assert symptom in out, out[-2000:]
    # And what is lost with it:
    if dropped == "sys_admin":
        # no probes: the handshakes' CPU is the kernel estimate's (every one of them)
        assert value(m, "tlsprof_probe_attach_failures_total") > 0
        assert value(m, "tlsprof_handshake_cpu_method_info", method="probes") == 0
        assert value(m, "tlsprof_handshake_cpu_method_info", method="kernel_estimate") == \
            value(m, "tlsprof_handshake_cpu_method_info", reason="attach_refused") > 0
        # a warning once for the name, not once per process (the others at debug level)
        assert out.count("warning: no handshake probes for") == 1 and "attach_refused" in out, out[-2000:]
        assert value(m, "tlsprof_handshake_cpu_seconds_count") == value(m, "tlsprof_handshakes_total") == 23
    elif dropped == "sys_ptrace":
        # the workers' memory cannot be read: no probes, but asked for by --pid they are
        # traced, their handshakes counted from what their connections carry
        assert value(m, "tlsprof_attached_probes") == 0
        assert value(m, "tlsprof_handshakes_total", cert="ecdsa_p256") == 23
    elif dropped == "dac_override":
        # their sockets cannot be listed: their connections are taken on at their first read
        # or send (the port is listened on), so they are counted all the same
        assert value(m, "tlsprof_tcp_connections_total") == 23
        assert value(m, "tlsprof_handshakes_total", cert="ecdsa_p256") == 23
        # tracefs cannot be written: uprobes of each process's own, every handshake still timed
        assert "uprobes: one of its own per process and probe" in out and "uprobes: shared per file" not in out, out[-2000:]
        assert value(m, "tlsprof_handshake_cpu_seconds_count") == 23
    else:
        # The same extra load as with every capability, and its CPU is measured, but no
        # kernel sample can be told from another.
        later = counts["after_more_load"]
        assert value(later, "tlsprof_cpu_seconds_total") > 0
        assert value(later, "tlsprof_cpu_seconds_total", category="kernel_net") == 0


def test_with_tracefs_mounted_uprobes_need_no_sys_admin(www_nginx):
    """On a host that mounts tracefs (most systemd hosts mount /sys/kernel/tracing), the
    shared uprobes are written there (CAP_DAC_OVERRIDE) and opened as tracepoints
    (CAP_PERFMON): without CAP_SYS_ADMIN every handshake is still timed by the probes. What
    is lost is the packet capture of ClientHellos (a cgroup_skb program needs CAP_SYS_ADMIN
    or CAP_NET_ADMIN): they are read from the server's reads instead, and still labelled."""
    caps = [c for c in unit_caps() if c != "sys_admin"]
    m, out, counts = run_with_caps(www_nginx, caps, tracefs=True)
    assert counts["ok"] == 20 and counts["keepalive"]["connections"] == 3
    assert "uprobes: shared per file" in out and "the kernel refuses uprobes" not in out, out[-2000:]
    assert value(m, "tlsprof_probe_attach_failures_total") == 0
    assert value(m, "tlsprof_handshake_cpu_method_info", method="kernel_estimate") == 0
    assert value(m, "tlsprof_handshake_cpu_seconds_count", comm="nginx", version="TLSv1.3",
                 group="x25519", cert="ecdsa_p256") == 23
    assert value(m, "tlsprof_tcp_connections_total", comm="nginx", port=str(www_nginx.port)) == 23


def test_unit_and_prometheus_config_listen_where_they_scrape():
    listen = re.search(r"--listen (\S+)", UNIT.read_text()).group(1)
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "tlsprof")
    assert job["static_configs"][0]["targets"] == [listen]
