"""Throwaway certificates for the TLS tests, made at test time with ``cryptography`` (no key is
ever committed): a CA, a server certificate for localhost/127.0.0.1 signed by it, and client
certificates, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    """A certificate and its key as files."""

    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pem:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Pem(cert_path, key_path)


class CertificateAuthority:
    """A CA that signs server and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str = "evb test CA") -> None:
        self.directory = directory
        self._key = _key()
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.files = _write(directory, name.replace(" ", "-"), self._cert, self._key)

    @property
    def cert(self) -> Path:
        return self.files.cert

    def issue(self, stem: str, *, server: bool) -> Pem:
        """A leaf certificate: for localhost and 127.0.0.1 (server), or a client identity."""
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        else:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), False
            )
        return _write(self.directory, stem, builder.sign(self._key, hashes.SHA256()), key)


def make_pki(directory: Path, token: str) -> dict[str, Path]:
    """The files the TLS tests need: a CA with a server and a client certificate, a stranger
    certificate from another CA, that CA, a server certificate of that CA (a renewal that
    changed CA: clients trusting only the first CA refuse it), and a token file."""
    ca = CertificateAuthority(directory / "ca")
    other = CertificateAuthority(directory / "other", name="some other CA")
    server = ca.issue("server", server=True)
    client = ca.issue("client", server=False)
    stranger = other.issue("stranger", server=False)
    renewed = other.issue("renewed-server", server=True)
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    return {
        "ca": ca.cert,
        "server_cert": server.cert,
        "server_key": server.key,
        "client_cert": client.cert,
        "client_key": client.key,
        "stranger_cert": stranger.cert,
        "stranger_key": stranger.key,
        "other_ca": other.cert,
        "other_server_cert": renewed.cert,
        "other_server_key": renewed.key,
        "token_file": token_file,
    }


class MountedSecret:
    """A Secret volume as the kubelet writes it, to rotate files under a running server: each
    version of the files in a directory of its own, ``..data`` a symlink to the current one,
    and each key a symlink through ``..data``; an update writes a new directory and swaps
    ``..data`` atomically (a new symlink renamed over it), so a reader sees the old files or
    the new ones, never a mix."""

    def __init__(self, directory: Path, files: Mapping[str, bytes | Path]) -> None:
        self.directory = directory
        self._versions = 0
        directory.mkdir(parents=True, exist_ok=True)
        self.update(files)
        for name in files:
            (directory / name).symlink_to(Path("..data") / name)

    def path(self, name: str) -> Path:
        """The file as the server is told it (``/etc/evb/tls/tls.crt``)."""
        return self.directory / name

    def update(self, files: Mapping[str, bytes | Path]) -> None:
        """Write a new version of every file and swap it in at once."""
        self._versions += 1
        version = self.directory / f"..version_{self._versions}"
        version.mkdir()
        for name, content in files.items():
            data = content.read_bytes() if isinstance(content, Path) else content
            (version / name).write_bytes(data)
        swap = self.directory / "..data_tmp"
        swap.symlink_to(version.name)
        os.replace(swap, self.directory / "..data")
