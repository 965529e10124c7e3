"""A multi-node group's SSH keys: what the leader's mpirun logs in to the workers with, and the workers' host key
the leader checks them by. One set per deployment, generated once by the operator (the NIM operator does the same)
and kept in a Secret only the group's pods mount; no key leaves the cluster."""

from __future__ import annotations

import dataclasses

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from specdec.api.runtime_config import SSH_AUTHORIZED_KEYS, SSH_CLIENT_KEY, SSH_HOST_KEY, SSH_KNOWN_HOSTS


@dataclasses.dataclass(frozen=True)
class SshKeys:
    client_private: str  # OpenSSH private key format
    client_public: str  # one authorized_keys line
    host_private: str
    host_public: str

    def secret_data(self) -> dict[str, str]:
        """The Secret's stringData. known_hosts names every host (`*`): the group's pods share one host key, and
        the leader still refuses an sshd that does not hold it."""
        return {
            SSH_CLIENT_KEY: self.client_private,
            SSH_AUTHORIZED_KEYS: self.client_public + "\n",
            SSH_HOST_KEY: self.host_private,
            SSH_KNOWN_HOSTS: f"* {self.host_public}\n",
        }


def _pair(comment: str) -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private, f"{public} {comment}"


def generate(deployment: str) -> SshKeys:
    client_private, client_public = _pair(f"specdec-{deployment}-leader")
    host_private, host_public = _pair(f"specdec-{deployment}-host")
    return SshKeys(client_private, client_public, host_private, host_public)
