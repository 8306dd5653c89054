"""Who ended each connection, from the packets themselves: a packet socket on loopback
reads the TCP headers (never the payload) of every segment to or from a server port, and
says per connection which side sent the first FIN and whether a reset went either way.
The truth for tlsprof's closed_by, outside tlsprof and outside the server."""
from __future__ import annotations

import socket
import struct
import threading
import time

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4  # loopback shows each segment twice: once leaving, once arriving
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10


class Closes:
    """with Closes(port) as cap: ...load...; then cap.by() gives
    {"server": n, "client": n, "reset": n, "open": n}, under tlsprof's rule: the client's
    FIN first makes "client" whatever follows; otherwise any reset makes "reset"; otherwise
    the server's FIN first makes "server". "open" counts connections with no FIN or reset
    yet. Only connections whose SYN was seen count."""

    def __init__(self, port: int):
        self.port = port
        self.conns: list[dict] = []
        self._by_peer: dict[tuple, dict] = {}
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
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
                frame, addr = self._sock.recvfrom(128)  # headers only: the rest is discarded
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] != PACKET_OUTGOING:
                self._segment(frame)

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
        sport, dport = struct.unpack_from("!HH", frame, tcp)
        flags = frame[tcp + 13]
        if dport == self.port:
            peer, from_client = (src, sport), True
        elif sport == self.port:
            peer, from_client = (dst, dport), False
        else:
            return
        if from_client and flags & SYN and not flags & ACK:
            self._by_peer[peer] = {"first_fin": None, "reset": False}
            self.conns.append(self._by_peer[peer])
        c = self._by_peer.get(peer)
        if c is None:
            return
        if flags & FIN and c["first_fin"] is None:
            c["first_fin"] = "client" if from_client else "server"
        if flags & RST:
            c["reset"] = True

    def by(self) -> dict:
        counts = {"server": 0, "client": 0, "reset": 0, "open": 0}
        for c in self.conns:
            if c["first_fin"] == "client":
                counts["client"] += 1
            elif c["reset"]:
                counts["reset"] += 1
            elif c["first_fin"] == "server":
                counts["server"] += 1
            else:
                counts["open"] += 1
        return counts
