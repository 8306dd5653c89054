"""tlsprof's integration-test harness: real servers, real clients, the real agent.

procs     processes and ports (waiting, stopping by pid, /proc accounting)
certs     certificates and per-server directories
metrics   the text exposition, parsed
agent     `tlsprof run` as a process (Agent), one-shot runs (run_tlsprof)
servers   nginx, Apache, HAProxy, node, Go, configured from scratch
clients   Python TLS clients, keep-alive and resumption, ab, ss

Everything runs on loopback; every server and agent started here is stopped by its
own pid; every load loop is bounded in count and time. Fixtures: tests/conftest.py.
"""
