"""The `specdec` command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from specdec.settings import Settings

# The CRDs live in crds/ and, for `helm install`, in the chart (a copy: charts must not link out).
CRD_DIRS = ("crds", "charts/specdec-operator/files/crds")


def _render(args: argparse.Namespace) -> int:
    from specdec.render import render_stream

    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    except OSError as error:
        print(f"specdec render: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return 2
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as error:
        print(f"specdec render: {args.file} is not valid YAML: {error}", file=sys.stderr)
        return 2
    stream, errors = render_stream(documents, Settings.from_env())
    sys.stdout.write(stream)
    for problem in errors:
        print(f"specdec render: {problem}", file=sys.stderr)
    return 1 if errors else 0


def _crds(args: argparse.Namespace) -> int:
    from specdec.api.crd import render_crds

    stale = []
    for directory in map(Path, args.output or CRD_DIRS):
        for name, text in render_crds().items():
            path = directory / name
            if args.check:
                if not path.is_file() or path.read_text() != text:
                    stale.append(str(path))
            else:
                directory.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                print(path)
    if stale:
        print(f"out of date (run `specdec crds`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def _operator(args: argparse.Namespace) -> int:
    import logging

    import kopf

    import specdec.handlers  # noqa: F401  (registers the handlers)

    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level != "DEBUG":  # kopf logs every handled watch event at INFO: noise at any scale
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    namespaces = args.namespace or []
    try:
        kopf.run(
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=args.liveness,
            memo=kopf.Memo(namespaces=namespaces, metrics_port=args.metrics_port),
        )
    except Exception as error:
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, kopf.PermanentError):
            cause = cause.__cause__
        if cause is None:
            raise
        print(f"specdec operator: {cause}", file=sys.stderr)  # a start-up check: it says what to do
        return 1
    return 0


DEV_MISSING = (
    "the development tools are not installed: they are the specdec-dev distribution, dev/ in the repository "
    "(pip install -e ./dev; make install does)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    # `specdec dev ...` has its own parser (specdec_dev.cli, the specdec-dev distribution), which main() hands the
    # rest of the line to: the operator's start-up path must not load development code. Listed here for
    # `specdec --help`.
    commands.add_parser("dev", help="a local cluster with simulated GPU nodes (specdec dev --help)", add_help=False)

    render = commands.add_parser("render", help="print every object the operator would create (offline)")
    render.add_argument("-f", "--file", required=True, help="a SpeculativeDeployment manifest, or - for stdin")
    render.set_defaults(func=_render)

    crds = commands.add_parser("crds", help="generate crds/ from the API models")
    crds.add_argument(
        "-o", "--output", action="append", help=f"directory to write (repeatable; default: {' and '.join(CRD_DIRS)})"
    )
    crds.add_argument("--check", action="store_true", help="fail if the files differ from the models")
    crds.set_defaults(func=_crds)

    operator = commands.add_parser("operator", help="run the operator (uses KUBECONFIG or in-cluster config)")
    operator.add_argument(
        "-n", "--namespace", action="append", help="watch only this namespace (repeatable); default: all namespaces"
    )
    operator.add_argument(
        "--liveness", default="http://0.0.0.0:8080/healthz", help="liveness endpoint URL (default: %(default)s)"
    )
    operator.add_argument(
        "--metrics-port", type=int, default=0, help="serve Prometheus /metrics on this port (default: 0, off)"
    )
    operator.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    operator.set_defaults(func=_operator)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["dev"]:
        try:
            from specdec_dev.cli import main as dev_main
        except ModuleNotFoundError as error:
            if error.name not in ("specdec_dev", "specdec_dev.cli"):
                raise
            print(f"specdec dev: {DEV_MISSING}", file=sys.stderr)
            return 2
        return dev_main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
