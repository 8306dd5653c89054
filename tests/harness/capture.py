"""Who ended each connection, from the packets themselves: a packet socket on loopback
reads the TCP headers (never the payload) of every segment to or from a server port, and
says per connection which side closed first and whether a reset went either way.
The truth for tlsprof's closed_by, outside tlsprof and outside the server.

"Closed first" is the server's view, as its TCP state machine has it: the client closed
first when the server took in the client's FIN before it sent its own, which the server's
FIN tells by acknowledging the client's. When both close at once (ab without keep-alive
closes as nginx does), both FINs cross: the client's may reach the wire first while the
server, which had already closed, sends a FIN that does not acknowledge it; that is the
server closing first, whatever order the two segments were captured in."""
from __future__ import annotations

import socket
import struct
import threading
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # loopback shows each segment twice: once leaving, once arriving
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10


class Loopback:
    """A packet socket on loopback, read on a thread of its own until stop(): each segment
    once (loopback shows it leaving and arriving) goes to `_segment(frame)`, the first
    `snaplen` bytes of its frame."""

    def __init__(self, port: int, snaplen: int = 128, rcvbuf: int = 8 << 20):
        self.port = port
        self._snaplen = snaplen
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self._sock.bind(("lo", 0))
        self._sock.settimeout(0.2)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if not self._stop.is_set():
            time.sleep(0.3)  # the last segments still in the socket's queue
            self._stop.set()
            self._thread.join(5)
            self._sock.close()

    def _run(self):
        while not self._stop.is_set():
            try:
                frame, addr = self._sock.recvfrom(self._snaplen)
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] != PACKET_OUTGOING:
                self._segment(frame)

    def _segment(self, frame: bytes):
        raise NotImplementedError


class Closes(Loopback):
    """with Closes(port) as cap: ...load...; then cap.by() gives
    {"server": n, "client": n, "reset": n, "open": n}, under tlsprof's rule: the client's
    FIN first (taken in by the server before it sent its own) makes "client" whatever
    follows; otherwise any reset makes "reset"; otherwise
    the server's FIN first makes "server". "open" counts connections with no FIN or reset
    yet. Only connections whose SYN was seen count. Reads the headers only: the payload is
    cut off."""

    def __init__(self, port: int):
        super().__init__(port)
        self.conns: list[dict] = []
        self._by_peer: dict[tuple, dict] = {}

    def _segment(self, frame: bytes):
        ethertype = struct.unpack_from("!H", frame, 12)[0]
        if ethertype == 0x0800 and frame[23] == socket.IPPROTO_TCP:
            src, dst = frame[26:30], frame[30:34]
            tcp = 14 + (frame[14] & 0x0F) * 4
        elif ethertype == 0x86DD and frame[20] == socket.IPPROTO_TCP:
            src, dst = frame[22:38], frame[38:54]
            tcp = 54
        else:
            return
        sport, dport, seq, ack = struct.unpack_from("!HHII", frame, tcp)
        flags = frame[tcp + 13]
        if dport == self.port:
            peer, from_client = (src, sport), True
        elif sport == self.port:
            peer, from_client = (dst, dport), False
        else:
            return
        if from_client and flags & SYN and not flags & ACK:
            self._by_peer[peer] = {"client_fin": None, "server_fin": False, "server_close_ack": None,
                                 "reset": False}
            self.conns.append(self._by_peer[peer])
        c = self._by_peer.get(peer)
        if c is None:
            return
        # a client FIN after a reset reached a connection that was no more (nginx closed with
        # the client's close_notify unread: its kernel reset, and the client's FIN crossed
        # the reset): the server took nothing in, the connection ended by the reset
        if flags & FIN and from_client and c["client_fin"] is None and not c["reset"]:
            # the FIN's own sequence number: after the segment's payload
            if ethertype == 0x0800:
                end = 14 + struct.unpack_from("!H", frame, 16)[0]
            else:
                end = 54 + struct.unpack_from("!H", frame, 18)[0]
            c["client_fin"] = (seq + end - (tcp + (frame[tcp + 12] >> 4) * 4)) & 0xFFFFFFFF
        # the server's first FIN or reset acknowledges what it had taken in when it sent it: a
        # client FIN still in the server socket's backlog when nginx closed with the client's
        # close_notify unread (the FIN on the wire first, the server's reset after it, not
        # acknowledging it) was never taken in
        if (flags & FIN or flags & RST and flags & ACK) and not from_client and c["server_close_ack"] is None:
            c["server_close_ack"] = ack
        if flags & FIN and not from_client:
            c["server_fin"] = True
        if flags & RST:
            c["reset"] = True

    def by(self) -> dict:
        counts = {"server": 0, "client": 0, "reset": 0, "open": 0}
        for c in self.conns:
            first = _first_fin(c)
            if first == "client":
                counts["client"] += 1
            elif c["reset"]:
                counts["reset"] += 1
            elif first == "server":
                counts["server"] += 1
            else:
                counts["open"] += 1
        return counts


def _first_fin(c: dict) -> str | None:
    """Which side closed first in the server's view: the client's FIN counts first when the
    server sent no FIN or reset, or its first acknowledges that FIN (serial arithmetic on
    32-bit numbers). A server reset that does not is no FIN of the server's: None."""
    if c["client_fin"] is not None:
        if c["server_close_ack"] is None:
            return "client"
        if 0 < (c["server_close_ack"] - c["client_fin"]) & 0xFFFFFFFF < 1 << 31:
            return "client"
    if c["server_fin"]:
        return "server"
    return None
