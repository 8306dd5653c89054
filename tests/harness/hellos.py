"""What each client offered, from the packets themselves: a packet socket on loopback reads
the client's first bytes of every connection to a server port (its ClientHello records,
nothing after them) and parses them here, independently of tlsprof's parser. The truth for
tlsprof_client_offers_total, tlsprof_client_hellos_total and the policy counts.

The label values follow docs/clients.md; cipher suites are classed from OpenSSL's own table
(Python's ssl module: key exchange, AEAD, cipher), not from tlsprof's."""
from __future__ import annotations

import socket
import ssl
import struct
from collections import Counter

from harness.capture import ACK, SYN, Loopback

VERSIONS = {0x0300: "SSLv3", 0x0301: "TLSv1", 0x0302: "TLSv1.1", 0x0303: "TLSv1.2", 0x0304: "TLSv1.3"}
GROUPS = {23: "secp256r1", 24: "secp384r1", 25: "secp521r1", 26: "brainpoolP256r1", 27: "brainpoolP384r1",
          28: "brainpoolP512r1", 29: "x25519", 30: "x448", 256: "ffdhe2048", 257: "ffdhe3072", 258: "ffdhe4096",
          259: "ffdhe6144", 260: "ffdhe8192", 0x11EB: "SecP256r1MLKEM768", 0x11EC: "X25519MLKEM768",
          0x11ED: "SecP384r1MLKEM1024"}
SCSV = {0x00FF, 0x5600}


def grease(v: int) -> bool:
    return (v & 0x0F0F) == 0x0A0A and (v >> 8) == (v & 0xFF)


def _openssl_suites() -> dict[int, dict]:
    """IANA id -> OpenSSL's description of every suite this OpenSSL knows."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.set_ciphers("ALL:COMPLEMENTOFALL:@SECLEVEL=0")
    except ssl.SSLError:
        ctx.set_ciphers("ALL")
    return {c["id"] & 0xFFFF: c for c in ctx.get_ciphers()}


SUITES = _openssl_suites()


def suite_classes(code: int) -> set[str]:
    """docs/clients.md's classes of one suite, from OpenSSL's table."""
    if 0x1301 <= code <= 0x1305:
        return {"tls13_aead"}
    c = SUITES.get(code)
    if c is None:
        return {"other"}
    sym, kea = c.get("symmetric") or "", c.get("kea") or ""
    out = set()
    if kea == "kx-rsa":
        out.add("rsa_kex")
    if "des-ede3" in sym or "rc4" in sym:
        out.add("3des_rc4")
    elif "cbc" in sym:
        out.add("cbc")
    elif c.get("aead"):
        if kea == "kx-ecdhe":
            out.add("ecdhe_aead")
        elif kea == "kx-dhe":
            out.add("dhe_aead")
    return out or {"other"}


def sigalg_family(v: int) -> str:
    """RFC 8446 4.2.3: 0x08xx are TLS 1.3's own; the rest are TLS 1.2's (hash, signature)
    pairs, whose second byte names the signature (1 RSA PKCS#1, 3 ECDSA)."""
    hi, lo = v >> 8, v & 0xFF
    if hi == 0x08:
        if lo in (0x04, 0x05, 0x06, 0x09, 0x0A, 0x0B):
            return "rsa_pss"
        if lo in (0x07, 0x08):
            return "eddsa"
        if lo in (0x1A, 0x1B, 0x1C):
            return "ecdsa"
        return "other"
    if 1 <= hi <= 6 and lo == 1:
        return "rsa_pkcs1"
    if 1 <= hi <= 6 and lo == 3:
        return "ecdsa"
    return "other"


class Hello:
    """One parsed ClientHello."""

    def __init__(self, body: bytes):
        p = 0
        legacy = struct.unpack_from("!H", body, p)[0]
        p += 2 + 32
        p += 1 + body[p]
        n = struct.unpack_from("!H", body, p)[0]
        self.suites = [s for s in struct.unpack_from(f"!{n // 2}H", body, p + 2) if not grease(s) and s not in SCSV]
        p += 2 + n
        p += 1 + body[p]
        self.versions = [legacy]
        self.groups, self.key_shares, self.sigalgs, self.alpn = [], [], [], []
        self.sni, self.resumption, self.early_data = None, "none", False
        if p + 2 > len(body):
            return
        end = p + 2 + struct.unpack_from("!H", body, p)[0]
        p += 2
        ticket = psk = False
        while p + 4 <= end:
            t, n = struct.unpack_from("!HH", body, p)
            d = body[p + 4:p + 4 + n]
            p += 4 + n
            if t == 43:
                self.versions = [v for v in struct.unpack_from(f"!{d[0] // 2}H", d, 1) if not grease(v)]
            elif t == 10:
                self.groups = [g for g in struct.unpack_from(f"!{len(d) // 2 - 1}H", d, 2) if not grease(g)]
            elif t == 51:
                q = 2
                while q + 4 <= len(d):
                    g, kl = struct.unpack_from("!HH", d, q)
                    if not grease(g):
                        self.key_shares.append(g)
                    q += 4 + kl
            elif t == 13:
                self.sigalgs = [a for a in struct.unpack_from(f"!{len(d) // 2 - 1}H", d, 2) if not grease(a)]
            elif t == 16:
                q = 2
                while q < len(d):
                    self.alpn.append(d[q + 1:q + 1 + d[q]].decode("ascii", "replace"))
                    q += 1 + d[q]
            elif t == 0 and len(d) > 5 and d[2] == 0:
                self.sni = d[5:5 + struct.unpack_from("!H", d, 3)[0]].decode("ascii", "replace").lower()
            elif t == 35 and n > 0:
                ticket = True
            elif t == 41:
                psk = True
            elif t == 42:
                self.early_data = True
        self.resumption = "psk" if psk else "ticket" if ticket else "none"

    def offers(self) -> Counter:
        """(offer, value) -> 1 for every value this ClientHello offers (docs/clients.md)."""
        out = Counter()
        out[("version", VERSIONS.get(max(self.versions), "other"))] += 1
        for g in dict.fromkeys(GROUPS.get(g, "other") for g in self.groups):
            out[("group", g)] += 1
        for g in dict.fromkeys(GROUPS.get(g, "other") for g in self.key_shares):
            out[("key_share", g)] += 1
        for c in sorted(set().union(*(suite_classes(s) for s in self.suites)) if self.suites else set()):
            out[("cipher", c)] += 1
        for f in dict.fromkeys(sigalg_family(a) for a in self.sigalgs):
            out[("sigalg", f)] += 1
        alpn = dict.fromkeys(a if a in ("h2", "http/1.1") else "other" for a in self.alpn) or {"none": None}
        for a in alpn:
            out[("alpn", a)] += 1
        out[("resumption", self.resumption)] += 1
        return out


def parse(stream: bytes) -> Hello | None:
    """The ClientHello at the start of a client's stream (possibly over several records)."""
    body, p = b"", 0
    while p + 5 <= len(stream) and stream[p] == 22:
        n = struct.unpack_from("!H", stream, p + 3)[0]
        body += stream[p + 5:p + 5 + n]
        p += 5 + n
        if len(body) >= 4 and len(body) >= 4 + int.from_bytes(body[1:4], "big"):
            return Hello(body[4:4 + int.from_bytes(body[1:4], "big")]) if body[0] == 1 else None
    return None


class Hellos(Loopback):
    """with Hellos(port) as cap: ...clients...; then cap.hellos() lists what each connection's
    client offered (connections whose SYN was seen), and cap.offers() sums them."""

    def __init__(self, port: int):
        super().__init__(port, snaplen=1 << 17, rcvbuf=16 << 20)
        self._conns: dict[tuple, dict] = {}
        self._order: list[dict] = []

    def _segment(self, frame: bytes):
        ethertype = struct.unpack_from("!H", frame, 12)[0]
        if ethertype == 0x0800 and frame[23] == socket.IPPROTO_TCP:
            src, ip_end = frame[26:30], 14 + struct.unpack_from("!H", frame, 16)[0]
            tcp = 14 + (frame[14] & 0x0F) * 4
        elif ethertype == 0x86DD and frame[20] == socket.IPPROTO_TCP:
            src, ip_end = frame[22:38], 54 + struct.unpack_from("!H", frame, 18)[0]
            tcp = 54
        else:
            return
        sport, dport, seq = struct.unpack_from("!HHI", frame, tcp)
        if dport != self.port:
            return
        flags = frame[tcp + 13]
        peer = (src, sport)
        if flags & SYN and not flags & ACK:
            c = {"isn": seq, "data": bytearray(), "hello": None}
            self._conns[peer] = c
            self._order.append(c)
            return
        c = self._conns.get(peer)
        if c is None or c["hello"] is not None:
            return
        payload = frame[tcp + (frame[tcp + 12] >> 4) * 4:ip_end]
        off = (seq - c["isn"] - 1) & 0xFFFFFFFF
        if payload and off <= len(c["data"]) < off + len(payload):
            c["data"] += payload[len(c["data"]) - off:]
            try:
                c["hello"] = parse(bytes(c["data"])) if c["data"][0] == 22 else False
            except (struct.error, IndexError):
                c["hello"] = None  # more to come
            if len(c["data"]) > 65536:
                c["hello"] = False

    def hellos(self) -> list[Hello]:
        return [c["hello"] for c in self._order if c["hello"]]

    def connections(self) -> int:
        return len(self._order)

    def offers(self) -> Counter:
        total = Counter()
        for h in self.hellos():
            total.update(h.offers())
        return total
