#!/usr/bin/env python3
"""An HTTP/3 client on aioquic: N new QUIC connections ONE AFTER ANOTHER, each one GET whose
whole response is read before the connection is closed, bounded in count and in time.
Prints one JSON line at the end, the client's own counts:

  {"connections": N, "ok": k, "failed": f, "bodies_with_marker": m, "resumed": r,
   "zero_rtt_accepted": z, "zero_rtt_sent": s, "statuses": {"200": k},
   "ciphers": {"TLS_AES_128_GCM_SHA256": k}, "seconds": t, "errors": [the first few error strings]}

ok: a connection whose GET got a 2xx answer, read whole; failed: every other of the N,
those the overall timeout left unmade included (ok + failed == N). resumed: handshakes
made with the previous connection's session ticket (--resume: each connection keeps the
newest ticket the server sent); zero_rtt_sent: connections whose request went out as 0-RTT
early data (--zero-rtt, with a ticket that allows it); zero_rtt_accepted: of those, the
ones the server accepted; ciphers: the suite each ok connection's handshake negotiated, as
aioquic's TLS says. Exits 0 whatever failed (the JSON says it); 2 on bad arguments.

Runs with the Python of scripts/deps.sh's aioquic venv ($TLSPROF_TESTDEPS/quic/aioquic):
  h3_get.py --host 127.0.0.1 --port P --connections 20 --marker M --insecure --resume
Only loopback addresses are accepted (127.0.0.0/8, ::1)."""
from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import ssl
import sys
import time

from aioquic import tls
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent

GROUPS = {"secp256r1": tls.Group.SECP256R1, "p-256": tls.Group.SECP256R1,
          "secp384r1": tls.Group.SECP384R1, "p-384": tls.Group.SECP384R1,
          "secp521r1": tls.Group.SECP521R1, "p-521": tls.Group.SECP521R1,
          "x25519": tls.Group.X25519, "x448": tls.Group.X448}
MAX_ERRORS = 5

# --groups: aioquic has no setting for the groups it offers (it offers a key share for each
# of P-256, P-384, X25519 and X448): its TLS context's list, replaced once it is made.
_offered: list | None = None
_context_init = tls.Context.__init__


def _init_context(self, *args, **kwargs):
    _context_init(self, *args, **kwargs)
    if _offered:
        self._supported_groups = list(_offered)


tls.Context.__init__ = _init_context


class H3Client(QuicConnectionProtocol):
    """One HTTP/3 connection: GETs, each answered with its status and whole body."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.waiters: dict[int, asyncio.Future] = {}
        self.responses: dict[int, dict] = {}
        self.terminated: str | None = None

    def quic_event_received(self, event: QuicEvent):
        if isinstance(event, ConnectionTerminated):
            self.terminated = f"connection closed: error {event.error_code:#x} {event.reason_phrase!r}"
            for waiter in self.waiters.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionError(self.terminated))
        for h3 in self.http.handle_event(event):
            response = self.responses.get(h3.stream_id)
            if response is None:
                continue
            if isinstance(h3, HeadersReceived):
                for name, value in h3.headers:
                    if name == b":status":
                        response["status"] = int(value)
            elif isinstance(h3, DataReceived):
                response["body"] += h3.data
            if getattr(h3, "stream_ended", False) and not self.waiters[h3.stream_id].done():
                self.waiters[h3.stream_id].set_result(response)

    async def get(self, authority: str, path: str) -> dict:
        stream_id = self._quic.get_next_available_stream_id()
        self.responses[stream_id] = {"status": None, "body": b""}
        self.waiters[stream_id] = self._loop.create_future()
        self.http.send_headers(stream_id, [
            (b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
            (b":path", path.encode()), (b"user-agent", b"tlsprof-h3-get aioquic"),
        ], end_stream=True)
        self.transmit()
        return await self.waiters[stream_id]


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def main() -> int:
    global _offered
    logging.getLogger("quic").addHandler(logging.NullHandler())  # its errors go into the JSON
    logging.getLogger("quic").propagate = False
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--connections", type=int, default=1)
    ap.add_argument("--path", default="/")
    ap.add_argument("--marker", help="a string the body should contain (counted in bodies_with_marker)")
    verify = ap.add_mutually_exclusive_group()
    verify.add_argument("--cafile", help="verify the server's certificate against this CA (and its name: --sni)")
    verify.add_argument("--insecure", action="store_true", help="no certificate verification (the default)")
    ap.add_argument("--sni", default="localhost", help="the server name: SNI and verification (default: localhost)")
    ap.add_argument("--resume", action="store_true", help="offer the previous connection's session ticket")
    ap.add_argument("--zero-rtt", action="store_true", help="with --resume: send the GET as 0-RTT early data")
    ap.add_argument("--timeout", type=float, default=60.0, help="for all the connections together (s)")
    ap.add_argument("--connect-timeout", type=float, default=10.0, help="for each connection (s)")
    ap.add_argument("--alpn", default=H3_ALPN[0])
    ap.add_argument("--groups", help="key-exchange groups offered, comma-separated: x25519,secp256r1,secp384r1,...")
    args = ap.parse_args()
    if not loopback(args.host):
        ap.error(f"{args.host} is not a loopback address")
    if args.zero_rtt:
        args.resume = True
    if args.groups:
        try:
            _offered = [GROUPS[g.strip().lower()] for g in args.groups.split(",") if g.strip()]
        except KeyError as e:
            ap.error(f"unknown group {e}: one of {', '.join(GROUPS)}")
    print(json.dumps(asyncio.run(run(args))), flush=True)
    return 0


async def run(args) -> dict:
    counts = {"connections": args.connections, "ok": 0, "failed": 0, "bodies_with_marker": 0, "resumed": 0,
              "zero_rtt_accepted": 0, "zero_rtt_sent": 0, "statuses": {}, "ciphers": {}, "seconds": 0.0, "errors": []}
    start = time.monotonic()
    deadline = start + args.timeout
    loop = asyncio.get_running_loop()
    # a handshake that failed leaves aioquic's own waiter with its ConnectionError unread
    loop.set_exception_handler(lambda lp, ctx: None if isinstance(ctx.get("exception"), ConnectionError)
                               else lp.default_exception_handler(ctx))
    ticket: list = [None]
    authority = f"[{args.host}]:{args.port}" if ":" in args.host else f"{args.host}:{args.port}"

    def error(text: str):
        counts["failed"] += 1
        if len(counts["errors"]) < MAX_ERRORS:
            counts["errors"].append(text)

    for i in range(args.connections):
        left = deadline - time.monotonic()
        if left <= 0:
            error(f"overall timeout ({args.timeout} s) before connection {i + 1}: "
                  f"{args.connections - i} not made")
            counts["failed"] += args.connections - i - 1
            break
        config = QuicConfiguration(is_client=True, alpn_protocols=[args.alpn], server_name=args.sni,
                                   verify_mode=ssl.CERT_REQUIRED if args.cafile else ssl.CERT_NONE,
                                   idle_timeout=args.connect_timeout)
        if args.cafile:
            config.load_verify_locations(args.cafile)
        if args.resume and ticket[0] is not None:
            config.session_ticket = ticket[0]
        try:
            await asyncio.wait_for(one(args, config, authority, ticket, counts), min(left, args.connect_timeout))
        except asyncio.TimeoutError:
            error(f"connection {i + 1}: no whole answer within {min(left, args.connect_timeout):.1f} s")
        except Exception as e:  # noqa: BLE001 - every failure is counted and said, none stops the run
            error(f"connection {i + 1}: {type(e).__name__}: {e}")
    counts["seconds"] = round(time.monotonic() - start, 3)
    return counts


async def one(args, config: QuicConfiguration, authority: str, ticket: list, counts: dict):
    zero_rtt = args.zero_rtt and config.session_ticket is not None
    made: list[H3Client] = []

    def protocol(*a, **kw):
        made.append(H3Client(*a, **kw))
        return made[-1]
    try:
        await _exchange(args, config, authority, ticket, counts, zero_rtt, protocol)
    except ConnectionError as e:
        # a handshake that failed: aioquic's exception says nothing, the close frame says why
        why = made[0].terminated if made and made[0].terminated else ""
        raise ConnectionError(str(e) or why or "handshake failed") from None


async def _exchange(args, config, authority, ticket, counts, zero_rtt, protocol):
    async with connect(args.host, args.port, configuration=config, create_protocol=protocol,
                       session_ticket_handler=lambda t: ticket.__setitem__(0, t),
                       wait_connected=not zero_rtt) as client:
        client: H3Client
        # 0-RTT: the GET is written before the handshake ends, in early data if the ticket allows
        sent_early = zero_rtt and client._quic._cryptos[tls.Epoch.ZERO_RTT].send.is_valid()
        response = await client.get(authority, args.path)
        ctx = client._quic.tls
        if ctx.session_resumed:
            counts["resumed"] += 1
        # the suite the handshake negotiated, as the client's own TLS says (IANA name)
        suite = f"TLS_{ctx.key_schedule.cipher_suite.name}" if ctx.key_schedule else "unknown"
        counts["ciphers"][suite] = counts["ciphers"].get(suite, 0) + 1
        if sent_early:
            counts["zero_rtt_sent"] += 1
            if ctx.early_data_accepted:
                counts["zero_rtt_accepted"] += 1
        status = response["status"]
        counts["statuses"][str(status)] = counts["statuses"].get(str(status), 0) + 1
        if status is None or not 200 <= status < 300:
            raise ConnectionError(f"HTTP status {status}")
        counts["ok"] += 1
        if args.marker and args.marker.encode() in response["body"]:
            counts["bodies_with_marker"] += 1
        # the server's tickets come after the handshake, mostly with the answer: one more
        # round trip gives a late one time to arrive before the close
        if args.resume and ticket[0] is None:
            try:
                await asyncio.wait_for(client.ping(), 2)
            except (asyncio.TimeoutError, ConnectionError):
                pass
        client.close()


if __name__ == "__main__":
    sys.exit(main())
