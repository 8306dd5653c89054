#!/usr/bin/env python3
"""Hostile UDP datagrams to a QUIC server on loopback, each from a socket of its own (a
connection of its own to the server and to tlsprof), bounded in count: what a scanner or an
attacker sends a public HTTP/3 port. Kinds (N of each):

  garbage     random bytes, random length (1-1400)
  long        a QUIC v1 long header (Initial type) over random bytes: a connection ID of
              random length, then nothing that decrypts
  lengths     long headers whose lengths lie: a connection ID of 255 bytes, a token or
              Length field running past the datagram's end, a 7-byte datagram
  versions    long headers of versions no one speaks (0: version negotiation, 0x0a0a0a0a)
  truncated   a real client Initial (aioquic's) cut at a random length within its packet
  flipped     a real client Initial with one byte of its protected payload flipped
  abandoned   a real client Initial, sent whole, whose client never answers the server: a
              handshake that begins and never ends (the server answers it; it fails)

Prints one JSON line: {"sent": {kind: N, ...}, "abandoned_acknowledged": k}, where k counts
the abandoned Initials the server answered (a datagram came back within 1 s): the truth for
the failed handshakes they make. Runs with the Python of the aioquic venv (real Initials are
aioquic's); loopback only."""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import random
import socket
import ssl
import time

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection


def initial(host: str, port: int) -> bytes:
    """A real client's first datagram (its Initial with the ClientHello), from aioquic."""
    config = QuicConfiguration(is_client=True, alpn_protocols=["h3"], server_name="localhost",
                               verify_mode=ssl.CERT_NONE)
    conn = QuicConnection(configuration=config)
    conn.connect((host, port), now=time.time())
    return conn.datagrams_to_send(now=time.time())[0][0]


def long_header(dcid_len: int, rest: bytes, version: int = 1) -> bytes:
    return bytes([0xC0 | random.randrange(4)]) + version.to_bytes(4, "big") + bytes([dcid_len]) + rest


def kinds(host: str, port: int):
    """Each kind: a function that makes one datagram."""
    return {
        "garbage": lambda: os.urandom(random.randint(1, 1400)),
        "long": lambda: long_header(8, os.urandom(8) + b"\x00" + b"\x00" + b"\x44\xd0" + os.urandom(1180)),
        "lengths": lambda: random.choice([
            long_header(255, os.urandom(100)),
            long_header(8, os.urandom(8) + b"\x00" + b"\x7f\xff" + os.urandom(20)),   # token past the end
            long_header(8, os.urandom(8) + b"\x00" + b"\x00" + b"\x7f\xff" + os.urandom(40)),  # Length past it
            long_header(0, b"\x00"),
        ]),
        "versions": lambda: long_header(8, os.urandom(1191), version=random.choice([0, 0x0A0A0A0A])),
        # within its Initial packet (aioquic's is ~520 bytes, zeros pad the datagram after it:
        # a cut past the packet leaves a whole Initial, a real handshake's beginning)
        "truncated": lambda: initial(host, port)[: random.randint(1, 500)],
        "flipped": lambda: flip(initial(host, port)),
    }


def flip(d: bytes) -> bytes:
    b = bytearray(d)
    i = random.randint(60, min(len(b), 400) - 1)  # inside the protected payload
    b[i] ^= 0x5A
    return bytes(b)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--each", type=int, default=50)
    ap.add_argument("--abandoned", type=int, default=5)
    a = ap.parse_args()
    if not ipaddress.ip_address(a.host).is_loopback:
        ap.error("loopback addresses only")
    family = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    sent = {}
    for kind, make in kinds(a.host, a.port).items():
        for _ in range(min(a.each, 1000)):
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.sendto(make(), (a.host, a.port))
        sent[kind] = min(a.each, 1000)
    acknowledged = 0
    for _ in range(min(a.abandoned, 100)):
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0)
            s.sendto(initial(a.host, a.port), (a.host, a.port))
            try:
                s.recvfrom(65535)
                acknowledged += 1
            except TimeoutError:
                pass
    sent["abandoned"] = min(a.abandoned, 100)
    print(json.dumps({"sent": sent, "abandoned_acknowledged": acknowledged}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
