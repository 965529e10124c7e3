"""Whose a multi-node deployment's SSH key Secret is, told without reading it.

The operator may create Secrets and nothing else of them: `get`, `list` and `watch` cannot be narrowed to one name
a deployment chooses at run time, nor to metadata (a metadata-only read is still `get`, and grants the data too).
So each pass creates the Secret afresh (specdec.builders.multinode.build_ssh_secret, new keys) and reads the answer:

- created: it was missing (the first pass, or deleted since) and is ours; its uid is recorded on the deployment's
  LeaderWorkerSet (specdec.builders.multinode.ANNOTATION_SSH_SECRET_UID), which the operator reads;
- name taken: ours where a uid is recorded (on the LeaderWorkerSet, or by this process when its LeaderWorkerSet
  write has not happened yet), else someone else's: refused (SshKeySecretNotOwned), never mounted, its keys never
  used.

What this cannot tell: a Secret of ours deleted and another created under its name between two passes.
"""

from __future__ import annotations

from specdec.reconcile.errors import NameConflict


class SshKeySecretNotOwned(NameConflict):
    """A Secret has the name of a deployment's SSH key Secret, and the operator did not create it."""

    reason = "SshKeySecretNotOwned"

    def __init__(self, name: str):
        super().__init__(
            "Secret",
            name,
            "this deployment did not create it (a group's pods mount only SSH keys the operator generated; no "
            "LeaderWorkerSet is written meanwhile)",
            "SpeculativeDeployment",
        )


def owned_uid(created: str | None, recorded: str | None, name: str) -> str:
    """The uid of the deployment's own Secret `name`: `created` (this pass's create succeeded), else `recorded`
    (the one the operator created before); neither is a Secret someone else made."""
    if created is not None:
        return created
    if recorded is not None:
        return recorded
    raise SshKeySecretNotOwned(name)
