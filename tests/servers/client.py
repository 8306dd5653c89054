"""A one-shot client for tests that must run it inside another network namespace.
usage: client.py tls|plain PORT N   -> prints how many connections completed"""
import sys

sys.path.insert(0, __import__("os").path.dirname(__file__) + "/..")
from harness.clients import https_connections  # noqa: E402
from harness.failing import plain_http  # noqa: E402

mode, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if mode == "tls":
    print(https_connections(port, n, concurrency=2)["ok"])
else:
    print(plain_http(port, n))
