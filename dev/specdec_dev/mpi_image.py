"""The MPI test image: Debian's Open MPI, mpi4py and OpenSSH on the base's packages, for running a CPU MPI
program across the pods of a multi-node group on the real node (everything a multi-node launch needs but
NCCL and the GPUs).

Its user `mpi` (uid MPI_UID) has no password but is not locked ('*', not '!'): sshd, running as that user
without PAM, refuses locked accounts. Running as that user, sshd needs no privilege separation directory; it
serves a host key each pod makes, since the ones made at install are readable by root only (removed).
"""

from __future__ import annotations

from pathlib import Path

from specdec_dev.base_image import BASE_PACKAGES, DebianImage, build_debian_image
from specdec_dev.podman import images_dir, locked

MPI_UID = 1000
MPI_PACKAGES = ("openmpi-bin", "openssh-client", "openssh-server", "python3-mpi4py")
MPI = DebianImage(
    "specdec-mpi",
    (*BASE_PACKAGES, *MPI_PACKAGES),
    customize=(
        f"useradd --uid {MPI_UID} --create-home --shell /bin/bash --password '*' mpi",
        "rm -f /etc/ssh/ssh_host_*",
    ),
)
MPI_IMAGE = MPI.reference


def build_mpi_image() -> dict[str, Path]:
    """{MPI_IMAGE: its OCI archive}, built once per recipe. Raises podman.ImageBuildError."""
    with locked():
        return {MPI_IMAGE: build_debian_image(MPI, images_dir() / "build-mpi.log")}
