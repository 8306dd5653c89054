"""Bad input gets one clear line on stderr and a non-zero exit: never a panic or a hang."""
import socket
import subprocess


from harness.agent import TLSPROF, Agent, run_tlsprof
from harness.clients import https_connections
from harness.servers import Nginx


def one_error_line(r: subprocess.CompletedProcess, *needles: str):
    assert r.returncode != 0, f"expected a failure, got exit 0: {r.stdout}{r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {r.stderr!r}"
    assert lines[0].startswith("tlsprof: error: "), lines[0]
    assert "panicked" not in r.stderr
    for n in needles:
        assert n in lines[0], f"{n!r} not in {lines[0]!r}"


def test_unknown_pid():
    r = run_tlsprof("run", "--pid", "999999999", "--listen", "127.0.0.1:0")
    one_error_line(r, "no process with pid 999999999")


def test_listen_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run_tlsprof("run", "--listen", f"127.0.0.1:{port}")
    one_error_line(r, f"cannot listen on 127.0.0.1:{port}", "in use")


def test_unprivileged_user():
    r = run_tlsprof("run", "--listen", "127.0.0.1:0",
                    prefix=("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"))
    one_error_line(r, "insufficient privileges", "CAP_BPF", "CAP_PERFMON")


def test_root_without_bpf_capabilities():
    r = run_tlsprof("run", "--listen", "127.0.0.1:0",
                    prefix=("setpriv", "--inh-caps=-all", "--bounding-set=-bpf,-perfmon,-sys_admin"))
    one_error_line(r, "insufficient privileges")


def test_kernel_without_btf():
    # A private mount namespace where /sys/kernel/btf is empty: the kernel's BTF is out of sight.
    r = run_tlsprof("run", "--listen", "127.0.0.1:0",
                    prefix=("unshare", "-m", "--propagation", "private", "sh", "-c",
                            'mount -t tmpfs none /sys/kernel/btf && exec "$0" "$@"'))
    one_error_line(r, "no BTF", "CONFIG_DEBUG_INFO_BTF")


def test_works_without_tracefs(workdir):
    """uprobes go through the perf PMU and tracepoints are BTF-typed: no tracefs needed."""
    hide = ("unshare", "-m", "--propagation", "private", "sh", "-c",
            "for d in /sys/kernel/tracing /sys/kernel/debug; do "
            "mountpoint -q $d && umount -l $d; mount -t tmpfs none $d; done; "
            'test -z "$(ls /sys/kernel/tracing)" && exec "$0" "$@"')
    nginx = Nginx(workdir, workers=1)
    try:
        with Agent("--pid", str(nginx.pid), prefix=hide) as agent:
            agent.wait_attached(nginx.workers())
            assert https_connections(nginx.port, 10)["ok"] == 10
            assert agent.wait_value("tlsprof_handshakes_total", 10, comm="nginx", result="ok") == 10
    finally:
        nginx.stop()


def test_bad_arguments_are_one_usage_error():
    r = subprocess.run([str(TLSPROF), "run", "--pid", "notapid"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "invalid value 'notapid'" in r.stderr and "panicked" not in r.stderr
