"""Certificates and per-server directories."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from .procs import free_port


def make_cert(directory: Path, kind: str = "ecdsa_p256") -> tuple[Path, Path]:
    key, cert = directory / f"{kind}.key", directory / f"{kind}.crt"
    if not cert.exists():
        algo = {
            "ecdsa_p256": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            "ecdsa_p384": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384"],
            "rsa2048": ["-newkey", "rsa:2048"],
            "rsa3072": ["-newkey", "rsa:3072"],
            "rsa4096": ["-newkey", "rsa:4096"],
        }[kind]
        subprocess.run(
            ["openssl", "req", "-x509", *algo, "-nodes", "-keyout", key, "-out", cert,
             "-days", "30", "-subj", "/CN=localhost"],
            check=True, capture_output=True,
        )
    return key, cert


def server_setup(workdir: Path, kind: str, cert: str = "ecdsa_p256", port: int | None = None):
    """A fresh directory for one server, its port, and its certificate: (dir, port, key, cert)."""
    # named by mkdtemp, not by a free port: a port is free again once its server is gone,
    # and a later server of the same session would find the directory taken
    workdir.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=workdir))
    key, crt = make_cert(workdir, cert)
    return d, port or free_port(), key, crt


def make_dhparam(directory: Path, bits: int) -> Path:
    """A PEM file of DH parameters (PKCS#3) with a prime of `bits` bits, as a server's
    dhparam file: RFC 3526's MODP prime of that size (1536 bits and up: a new safe prime of
    2048 bits can take minutes to find), else a new one (`openssl dhparam`)."""
    path = directory / f"dhparam{bits}.pem"
    if not path.exists():
        cmd = (["openssl", "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt", f"group:modp_{bits}", "-out", path]
               if bits >= 1536 else ["openssl", "dhparam", "-out", path, str(bits)])
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return path
