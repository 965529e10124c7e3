"""Build the local control plane's binaries from pinned Go modules, cached by version.

No container registry or release download is reachable from our machines, only the Go module
proxy, so every binary (etcd, the Kubernetes components, kwok, helm, LeaderWorkerSet's manager) is compiled
here. Each tool group is built from a throw-away wrapper module whose go.mod pins the upstream module: that
is the only way to build modules that carry `replace` directives (Kubernetes, etcd), which `go install`
refuses. Results land in `~/.cache/specdec/tools/<group>-<version>/` and are linked into one bin dir.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"
# A real node (specdec_dev.real_node): containerd 2.x (the kubelet of 1.36 refuses 1.x), the CNI plugins and
# crictl, each a Go module the proxy serves. runc is Debian's (building it needs cgo and libseccomp).
CONTAINERD_VERSION = "v2.4.2"
CNI_PLUGINS_VERSION = "v1.10.0"
CRICTL_VERSION = "v1.36.0"
# LeaderWorkerSet's controller manager and webhooks (specdec_dev.lws), for targets spanning several nodes. v0.9.0 is
# the newest release the Go module proxy we build from serves.
LWS_VERSION = "v0.9.0"

HEARTBEAT_SECONDS = 30


class ToolchainError(RuntimeError):
    """A binary could not be built; the message says what to do about it."""


@dataclasses.dataclass(frozen=True)
class ToolGroup:
    """Binaries built together from one upstream Go module at one version."""

    name: str
    module: str
    version: str
    binaries: dict[str, str]  # binary name -> Go package path
    ldflags: tuple[str, ...] = ()
    replace_staging: bool = False  # replace k8s.io/* staging modules (k8s.io/kubernetes only)
    linked: bool = True  # linked into bin_dir(); the CNI plugins are not (containerd finds them in their dir)


def _k8s_version_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return tuple(flags)


def _kubernetes(name: str, commands: tuple[str, ...]) -> ToolGroup:
    return ToolGroup(
        name=name,
        module="k8s.io/kubernetes",
        version=KUBERNETES_VERSION,
        binaries={c: f"k8s.io/kubernetes/cmd/{c}" for c in commands},
        ldflags=_k8s_version_ldflags(KUBERNETES_VERSION),
        replace_staging=True,
    )


LWS_MODULE = "sigs.k8s.io/lws"
LWS_MANAGER = "lws-manager"

GROUPS: tuple[ToolGroup, ...] = (
    ToolGroup(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=ETCD_VERSION,
        binaries={"etcd": "go.etcd.io/etcd/server/v3"},
    ),
    _kubernetes("kubernetes", ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")),
    ToolGroup(
        name="kwok",
        module="sigs.k8s.io/kwok",
        version=KWOK_VERSION,
        binaries={"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl"},
        ldflags=(
            f"-X sigs.k8s.io/kwok/pkg/consts.Version={KWOK_VERSION.lstrip('v')}",
            f"-X sigs.k8s.io/kwok/pkg/consts.KubeVersion={KUBERNETES_VERSION.lstrip('v')}",
        ),
    ),
    ToolGroup(
        name="helm",
        module="helm.sh/helm/v3",
        version=HELM_VERSION,
        binaries={"helm": "helm.sh/helm/v3/cmd/helm"},
        ldflags=(
            f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
            "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        ),
    ),
    ToolGroup(
        name="lws",
        module=LWS_MODULE,
        version=LWS_VERSION,
        binaries={LWS_MANAGER: f"{LWS_MODULE}/cmd"},
        ldflags=(f"-X {LWS_MODULE}/pkg/version.GitVersion={LWS_VERSION}",),
    ),
)

# Built only for a real node (`specdec dev up --real-node`, `specdec dev tools --real-node`).
CONTAINERD = "github.com/containerd/containerd/v2"
CNI_PLUGINS = "github.com/containernetworking/plugins"
CNI_GROUP = ToolGroup(
    name="cni-plugins",
    module=CNI_PLUGINS,
    version=CNI_PLUGINS_VERSION,
    binaries={
        "bridge": f"{CNI_PLUGINS}/plugins/main/bridge",
        "loopback": f"{CNI_PLUGINS}/plugins/main/loopback",
        "host-local": f"{CNI_PLUGINS}/plugins/ipam/host-local",
    },
    linked=False,
)
NODE_GROUPS: tuple[ToolGroup, ...] = (
    _kubernetes("kubelet", ("kubelet",)),
    ToolGroup(
        name="containerd",
        module=CONTAINERD,
        version=CONTAINERD_VERSION,
        binaries={name: f"{CONTAINERD}/cmd/{name}" for name in ("containerd", "ctr", "containerd-shim-runc-v2")},
        ldflags=(f"-X {CONTAINERD}/version.Version={CONTAINERD_VERSION}",),
    ),
    CNI_GROUP,
    ToolGroup(
        name="crictl",
        module="sigs.k8s.io/cri-tools",
        version=CRICTL_VERSION,
        binaries={"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
        ldflags=(f"-X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION}",),
    ),
)


# Where Debian puts runc, iptables, ip and what mmdebstrap's dpkg runs; a minimal PATH (CI's) lacks them.
SYSTEM_DIRS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def with_system_dirs(path: str) -> str:
    """`path` (a PATH value) with SYSTEM_DIRS appended where missing."""
    dirs = [d for d in path.split(os.pathsep) if d]
    return os.pathsep.join(dirs + [d for d in SYSTEM_DIRS if d not in dirs])


def which(command: str) -> str | None:
    """`command` on this process's PATH or in SYSTEM_DIRS."""
    return shutil.which(command, path=with_system_dirs(os.environ.get("PATH", "")))


def missing_packages(packages: dict[str, str]) -> list[str]:
    """Of {command: Debian package}, the packages whose command is not installed."""
    return sorted({package for command, package in packages.items() if not which(command)})


def install_packages(packages: dict[str, str], why: str) -> list[str]:
    """Install the missing ones of {command: Debian package} with apt-get, as root; returns those still missing
    (not root, or no apt-get: the caller says what they are for)."""
    missing = missing_packages(packages)
    if not missing or os.geteuid() != 0 or not shutil.which("apt-get"):
        return missing
    _log(f"installing Debian packages for {why}: {' '.join(missing)}")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        result = subprocess.run(argv, env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise ToolchainError(f"`{' '.join(argv)}` failed (exit {result.returncode}):\n{result.stderr[-2000:]}")
    return missing_packages(packages)


def cache_root() -> Path:
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


def bin_dir() -> Path:
    return cache_root() / "bin"


def group_dir(group: ToolGroup) -> Path:
    return cache_root() / "tools" / f"{group.name}-{group.version}"


def _log(message: str) -> None:
    print(f"[toolchain] {message}", file=sys.stderr, flush=True)


def _go() -> str:
    go = shutil.which("go")
    if not go:
        raise ToolchainError(
            "the Go toolchain is not on PATH; install Go >= 1.26 (Debian: golang, or go.dev) "
            "so the control plane can be built from the Go module proxy"
        )
    return go


def run_logged(
    args: list[str],
    label: str,
    log: Path,
    env: dict[str, str],
    say: Callable[[str], None],
    cwd: Path | None = None,
    tail_lines: int = 25,
) -> tuple[int, list[str]]:
    """Run a command with its output appended to `log` and a heartbeat through `say` while it runs (a cold
    build is minutes of silence otherwise): its exit status, and the log's last lines when it failed. OSError
    when the command cannot be run."""
    start = time.monotonic()
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_SECONDS):
            say(f"  still {label}: {time.monotonic() - start:.0f}s elapsed")

    threading.Thread(target=heartbeat, daemon=True).start()
    try:
        with log.open("ab") as out:
            out.write(f"\n$ {' '.join(args)}\n".encode())
            out.flush()
            result = subprocess.run(
                args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
    finally:
        done.set()
    tail = log.read_text(errors="replace").splitlines()[-tail_lines:] if result.returncode else []
    return result.returncode, tail


def _run_go(args: list[str], cwd: Path, env: dict[str, str], label: str, log: Path) -> None:
    """Run a go command with its output in `log`; fail with the log's tail."""
    status, tail = run_logged(args, label, log, env, _log, cwd)
    if status:
        hint = ""
        if any(s in line for line in tail for s in ("dial tcp", "proxy.golang.org", "no such host", "GOPROXY")):
            proxy = subprocess.run([args[0], "env", "GOPROXY"], env=env, capture_output=True, text=True).stdout.strip()
            hint = (
                f"\nThe Go module proxy (GOPROXY={proxy}) is not reachable or disabled; the control plane "
                "is built from modules it serves."
            )
        raise ToolchainError(f"{label} failed (exit {status}); full log: {log}\n" + "\n".join(tail) + hint)


def _staging_replaces(go: str, env: dict[str, str], workdir: Path, group: ToolGroup, log: Path) -> list[str]:
    """k8s.io/kubernetes points its staging modules at ./staging; we point them at v0.Y.Z."""
    _run_go(
        [go, "mod", "download", "-json", f"{group.module}@{group.version}"],
        workdir,
        env,
        f"downloading {group.module}@{group.version}",
        log,
    )
    gomod = Path(_module_download(group.module, group.version)["GoMod"]).read_text()
    staging_version = "v0." + group.version.split(".", 1)[1]
    replaces = []
    for line in gomod.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            replaces.append(f"replace {parts[0]} => {parts[0]} {staging_version}")
    if not replaces:
        raise ToolchainError(f"found no staging replace directives in {group.module}'s go.mod")
    return replaces


def _module_download(module: str, version: str) -> dict:
    """`go mod download -json`: where `module`@`version` is in Go's module cache (Dir, GoMod), downloaded from
    the proxy when missing."""
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    result = subprocess.run(
        [_go(), "mod", "download", "-json", f"{module}@{version}"],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if result.returncode != 0:
        raise ToolchainError(f"`go mod download {module}@{version}` failed: {result.stdout.strip() or result.stderr}")
    return json.loads(result.stdout)


def module_dir(module: str, version: str) -> Path:
    """The source of `module`@`version` in Go's module cache."""
    return Path(_module_download(module, version)["Dir"])


def build_group(group: ToolGroup) -> Path:
    """Build one tool group into its cache dir (atomically) unless it is already there."""
    target = group_dir(group)
    if all((target / name).is_file() for name in group.binaries):
        return target
    go = _go()
    cache_root().joinpath("tools").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    names = ", ".join(group.binaries)
    _log(f"building {names} ({group.module} {group.version}); a cold build takes minutes")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"build-{group.name}-", dir=cache_root() / "tools") as tmp:
        workdir = Path(tmp)
        log = workdir / "build.log"
        gomod = [
            f"module specdec.local/build/{group.name}",
            "",
            "go 1.26",
            "",
            f"require {group.module} {group.version}",
        ]
        (workdir / "go.mod").write_text("\n".join(gomod) + "\n")
        if group.replace_staging:
            replaces = _staging_replaces(go, env, workdir, group, log)
            (workdir / "go.mod").write_text("\n".join(gomod + replaces) + "\n")
        out = workdir / "out"
        ldflags = " ".join(("-s", "-w", *group.ldflags))
        for name, package in group.binaries.items():
            _run_go(
                [go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(out / name), package],
                workdir,
                env,
                f"building {name}",
                log,
            )
            _log(f"  built {name} ({time.monotonic() - start:.0f}s elapsed)")
        if target.exists():
            shutil.rmtree(target)
        out.rename(target)
    _log(f"built {names} in {time.monotonic() - start:.0f}s")
    return target


def ensure_tools(real_node: bool = False) -> Path:
    """Make sure every binary exists (with `real_node`, a real node's too); return the bin dir that links them."""
    bins = bin_dir()
    bins.mkdir(parents=True, exist_ok=True)
    for group in GROUPS + (NODE_GROUPS if real_node else ()):
        directory = build_group(group)
        if not group.linked:
            continue
        for name in group.binaries:
            link = bins / name
            if link.is_symlink() or link.exists():
                if link.resolve() == (directory / name).resolve():
                    continue
                link.unlink()
            link.symlink_to(directory / name)
    return bins


def main() -> int:
    try:
        bins = ensure_tools()
    except ToolchainError as error:
        _log(f"error: {error}")
        return 1
    print(bins)
    return 0


if __name__ == "__main__":
    sys.exit(main())
