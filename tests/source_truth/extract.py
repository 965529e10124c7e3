"""Extract the tables the source-truth tests check against, from TensorRT-LLM's own sources.

Regenerate (needs a copy of NVIDIA/TensorRT-LLM; not run in CI, which has no network):

    python tests/source_truth/extract.py --git-dir <TensorRT-LLM.git> --tag v1.2.1 \\
        -o tests/source_truth/trtllm-1.2.1.json
    python tests/source_truth/extract.py --git-dir <TensorRT-LLM.git> --tag v1.4.0rc1 \\
        -o tests/source_truth/trtllm-1.4.0rc1.json

v1.2.1 is commit 376f7e1bd8ed543f75014309e3fd4b237e9b0e73 (triton-inference-server/tensorrtllm_backend
f854143, "Update submodules" for release/1.2.1, moves its tensorrt_llm submodule there; public pins agree).
No public record read here names v1.4.0rc1's commit; the clone's tag does.

or, from a checked-out tree, `--src-dir <checkout> --tag <tag> --commit <sha>` (the commit is then
recorded as given, since a plain tree cannot prove it).

Everything is read by parsing, never by importing (TensorRT-LLM needs CUDA to import): `ast` for
argparse `add_argument` calls, click `@click.option` (and trtllm-serve's `@stability_option`)
decorators and pydantic fields, a regex for
the Triton `config.pbtxt` parameter keys. Stdlib only. A table whose anchor is not found gets an
entry in `errors` instead of silently coming out empty, so a renamed file or class shows up in the
tests rather than as a thinner table.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = "NVIDIA/TensorRT-LLM"

SERVE_PY = "tensorrt_llm/commands/serve.py"
LLM_ARGS_PY = "tensorrt_llm/llmapi/llm_args.py"
LLMAPI_DIR = "tensorrt_llm/llmapi"
TORCH_SPEC_DIR = "tensorrt_llm/_torch/speculative"
TORCH_SPEC_INTERFACE = "tensorrt_llm/_torch/speculative/interface.py"
BUILD_PY = "tensorrt_llm/commands/build.py"
PLUGIN_PY = "tensorrt_llm/plugin/plugin.py"
ENGINE_SCRIPTS = {
    "convert_checkpoint_llama": "examples/models/core/llama/convert_checkpoint.py",
    "convert_checkpoint_qwen": "examples/models/core/qwen/convert_checkpoint.py",
    "quantize": "examples/quantization/quantize.py",
    "convert_checkpoint_redrafter": "examples/redrafter/convert_checkpoint.py",
}
TRITON_MODELS_DIR = "triton_backend/all_models/inflight_batcher_llm"
SPEC_DOC_CANDIDATES = (
    "docs/source/features/speculative-decoding.md",
    "docs/source/advanced/speculative-decoding.md",
    "docs/source/torch/features/speculative_decoding.md",
)
LLM_ARGS_CLASSES = ("BaseLlmArgs", "TorchLlmArgs", "TrtLlmArgs")
SPEC_BASE = "DecodingBaseConfig"


# --- where the sources come from --------------------------------------------------------------


class GitTree:
    """Files of one tag of a (bare) git repository, read with `git show`."""

    def __init__(self, git_dir: str, ref: str):
        self.git_dir, self.ref = git_dir, ref
        self.commit = self._git("rev-parse", f"{ref}^{{commit}}").strip()

    def _git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", self.git_dir, *args], check=True, capture_output=True, text=True
        ).stdout

    def read(self, path: str) -> str | None:
        try:
            return self._git("show", f"{self.commit}:{path}")
        except subprocess.CalledProcessError:
            return None

    def listdir(self, path: str) -> list[str]:
        try:
            out = self._git("ls-tree", "--name-only", self.commit, path.rstrip("/") + "/")
        except subprocess.CalledProcessError:
            return []
        return sorted(p.rsplit("/", 1)[-1] for p in out.splitlines())


class DirTree:
    """Files of a checked-out tree; the commit is whatever the caller vouches for."""

    def __init__(self, root: str, commit: str | None):
        self.root, self.commit = Path(root), commit

    def read(self, path: str) -> str | None:
        p = self.root / path
        return p.read_text(encoding="utf-8") if p.is_file() else None

    def listdir(self, path: str) -> list[str]:
        p = self.root / path
        return sorted(c.name for c in p.iterdir()) if p.is_dir() else []


# --- ast helpers -------------------------------------------------------------------------------


def _value(node: ast.AST | None, consts: dict[str, Any]) -> Any:
    """A literal as its value; a module constant's name as its value; anything else as source
    text under {"expr": ...}, so a computed default is visible rather than guessed."""
    if node is None:
        return None
    try:
        return _jsonable(ast.literal_eval(node))
    except (ValueError, SyntaxError, TypeError):
        pass
    if isinstance(node, ast.Name) and node.id in consts:
        return _jsonable(consts[node.id])
    if isinstance(node, ast.Call) and _dotted(node.func).endswith("AliasChoices"):
        # pydantic's AliasChoices("a", "b"): the YAML may use any of the names.
        return [_value(a, consts) for a in node.args]
    return {"expr": ast.unparse(node)}


def _jsonable(v: Any) -> Any:
    if v is Ellipsis:
        return {"expr": "..."}
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=repr)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (bytes, complex)):
        return {"expr": repr(v)}
    return v


def _module_consts(tree: ast.Module) -> dict[str, Any]:
    """Module-level `NAME = <literal>` assignments (choices lists are often kept this way)."""
    out: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            try:
                out[stmt.targets[0].id] = ast.literal_eval(stmt.value)
            except (ValueError, SyntaxError, TypeError):
                pass
    return out


def _kw(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _dotted(node: ast.AST) -> str:
    return ast.unparse(node)


# --- argparse ----------------------------------------------------------------------------------


def argparse_options(src: str) -> list[dict[str, Any]]:
    """Every `<parser or group>.add_argument(...)` call in the file, in source order."""
    tree = ast.parse(src)
    consts = _module_consts(tree)
    out = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
        ):
            continue
        flags = [_value(a, consts) for a in node.args]
        entry: dict[str, Any] = {"flags": flags, "lineno": node.lineno}
        literal = [f for f in flags if isinstance(f, str)]
        longs = [f for f in literal if f.startswith("--")]
        dest = _value(_kw(node, "dest"), consts)
        if isinstance(dest, str):
            entry["dest"] = dest
        elif longs or literal:
            # argparse's own rule: first long option, else first option, dashes to underscores.
            entry["dest"] = (longs or literal)[0].lstrip("-").replace("-", "_")
        for key in ("type", "choices", "default", "action", "nargs", "required"):
            v = _kw(node, key)
            if v is None:
                continue
            entry[key] = _dotted(v) if key == "type" else _value(v, consts)
        out.append(entry)
    out.sort(key=lambda e: e["lineno"])
    return out


# --- click -------------------------------------------------------------------------------------


def _click_param(call: ast.Call, consts: dict[str, Any]) -> dict[str, Any]:
    decls = [_value(a, consts) for a in call.args]
    entry: dict[str, Any] = {"decls": decls}
    names = [d for d in decls if isinstance(d, str)]
    # click's boolean pair "--x/--no-x": two flags, on and off, and a flag whatever is_flag says.
    pairs = [n for n in names if n.startswith("-") and "/" in n]
    entry["flags"] = [f for n in names if n.startswith("-") for f in n.split("/") if f]
    if pairs:
        entry["is_flag"] = True
        entry["off_flags"] = [n.split("/", 1)[1] for n in pairs if n.split("/", 1)[1]]
    plain = [n for n in names if not n.startswith("-")]
    if plain:
        entry["name"] = plain[0]
    elif entry["flags"]:
        firsts = [n.split("/")[0] for n in names if n.startswith("-")]
        longs = [f for f in firsts if f.startswith("--")] or firsts
        entry["name"] = longs[0].lstrip("-").replace("-", "_")
    typ = _kw(call, "type")
    if typ is not None:
        if isinstance(typ, ast.Call) and _dotted(typ.func) in ("click.Choice", "Choice"):
            entry["type"] = "Choice"
            entry["choices"] = _value(typ.args[0] if typ.args else _kw(typ, "choices"), consts)
        else:
            entry["type"] = _dotted(typ)
    # status: the stability tag of trtllm-serve's `stability_option` (stable, beta, prototype, deprecated).
    for key in ("default", "is_flag", "multiple", "required", "envvar", "status"):
        v = _kw(call, key)
        if v is not None:
            entry[key] = _value(v, consts)
    return entry


# Decorators that declare one click option: click's own, and trtllm-serve's `stability_option` (a
# click.option that also takes `status=`; 2026's serve.py declares every option with it).
OPTION_DECORATORS = ("click.option", "option", "stability_option")


def click_commands(src: str) -> dict[str, Any]:
    """Every click command in the file: its options and arguments from its decorators.

    Decorators that are not an option (OPTION_DECORATORS), argument or command (shared option bundles) are listed
    under `other_decorators`: the test can then see that options may be missing here."""
    tree = ast.parse(src)
    consts = _module_consts(tree)
    commands: dict[str, Any] = {}
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        name, options, arguments, other = None, [], [], []
        for dec in fn.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            head = _dotted(call.func if call else dec)
            if head.endswith(".command") or head == "command":
                given = None
                if call is not None:
                    given = _value(call.args[0] if call.args else _kw(call, "name"), consts)
                # click's default name is the function's, underscores as dashes.
                name = given if isinstance(given, str) else fn.name.replace("_", "-")
            elif call and head.rsplit(".", 1)[-1] in {d.rsplit(".", 1)[-1] for d in OPTION_DECORATORS}:
                options.append(_click_param(call, consts))
            elif call and head in ("click.argument", "argument"):
                arguments.append(_click_param(call, consts))
            else:
                other.append(head)
        if name is None:
            continue
        # Decorators apply bottom-up, but click lists options in source order; keep source order.
        commands[name] = {"function": fn.name, "options": options, "arguments": arguments, "other_decorators": other}
    return commands


# --- pydantic ----------------------------------------------------------------------------------


def _field(stmt: ast.AnnAssign, consts: dict[str, Any]) -> dict[str, Any]:
    ann = ast.unparse(stmt.annotation)
    entry: dict[str, Any] = {"type": ann}
    if ann.startswith(("ClassVar", "typing.ClassVar")):
        entry["classvar"] = True
    literal = re.fullmatch(r"(?:typing\.)?Literal\[(.*)\]", ann)
    if literal:
        entry["literal"] = list(ast.literal_eval(f"[{literal.group(1)}]"))
    v = stmt.value
    if v is None:
        entry["required"] = True
    elif isinstance(v, ast.Call) and _dotted(v.func) in ("Field", "pydantic.Field"):
        default = v.args[0] if v.args else _kw(v, "default")
        if _kw(v, "default_factory") is not None:
            entry["default_factory"] = ast.unparse(_kw(v, "default_factory"))
        elif default is None or (isinstance(default, ast.Constant) and default.value is ...):
            entry["required"] = True  # Field() / Field(...) has no default
        else:
            entry["default"] = _value(default, consts)
        # init=False marks internal fields the YAML cannot set.
        for key in ("alias", "validation_alias", "serialization_alias", "status", "init"):
            if _kw(v, key) is not None:
                entry[key] = _value(_kw(v, key), consts)
    else:
        entry["default"] = _value(v, consts)
    return entry


def pydantic_classes(src: str, file: str) -> dict[str, Any]:
    """Every class: bases, own annotated fields, and `supports_backend`'s return expression."""
    tree = ast.parse(src)
    consts = _module_consts(tree)
    out: dict[str, Any] = {}
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef):
            continue
        fields: dict[str, Any] = {}
        info: dict[str, Any] = {"file": file, "bases": [_dotted(b) for b in cls.bases], "fields": fields}
        for stmt in cls.body:
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and not stmt.target.id.startswith("_")
            ):
                fields[stmt.target.id] = _field(stmt, consts)
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == "supports_backend":
                rets = [
                    ast.unparse(n.value) for n in ast.walk(stmt) if isinstance(n, ast.Return) and n.value is not None
                ]
                info["supports_backend"] = rets
            elif isinstance(stmt, ast.FunctionDef) and stmt.name == "from_dict":
                info["from_dict_map"] = _from_dict_map(stmt)
        out[cls.name] = info
    return out


def _from_dict_map(fn: ast.FunctionDef) -> dict[str, str]:
    """`DecodingBaseConfig.from_dict` dispatches on a dict literal {"<decoding_type>": Class}."""
    found: dict[str, str] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(k, ast.Constant)
                    and isinstance(k.value, str)
                    and isinstance(v, (ast.Name, ast.Attribute))
                ):
                    found[k.value] = _dotted(v)
    return found


def _mro(name: str, classes: dict[str, Any]) -> list[str]:
    """Depth-first base order, enough for these single-inheritance config hierarchies."""
    seen: list[str] = []

    def walk(n: str) -> None:
        if n in seen or n not in classes:
            return
        seen.append(n)
        for b in classes[n]["bases"]:
            walk(b.rsplit(".", 1)[-1])

    walk(name)
    return seen


def resolved_fields(name: str, classes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in reversed(_mro(name, classes)):
        for f, v in classes[n]["fields"].items():
            out[f] = dict(v, defined_in=n)
    return out


# --- tables ------------------------------------------------------------------------------------


def _table_serve(tree, errors: list[str]) -> dict[str, Any] | None:
    src = tree.read(SERVE_PY)
    if src is None:
        errors.append(f"trtllm_serve: {SERVE_PY} not found")
        return None
    cmds = click_commands(src)
    if "serve" not in cmds:
        errors.append(f"trtllm_serve: no click command 'serve' in {SERVE_PY}")
    return {"file": SERVE_PY, "commands": cmds}


def _collect_classes(tree, errors: list[str]) -> dict[str, Any]:
    classes: dict[str, Any] = {}
    files = [LLM_ARGS_PY] + [
        f"{LLMAPI_DIR}/{n}"
        for n in tree.listdir(LLMAPI_DIR)
        if n.endswith(".py") and f"{LLMAPI_DIR}/{n}" != LLM_ARGS_PY
    ]
    for path in files:
        src = tree.read(path)
        if src is None:
            if path == LLM_ARGS_PY:
                errors.append(f"llm_args: {LLM_ARGS_PY} not found")
            continue
        for name, info in pydantic_classes(src, path).items():
            # llm_args.py is read first: its definition wins over a same-named helper elsewhere.
            classes.setdefault(name, info)
    return classes


def _class_table(name: str, classes: dict[str, Any]) -> dict[str, Any]:
    c = classes[name]
    return {
        "file": c["file"],
        "bases": c["bases"],
        "mro": _mro(name, classes),
        "fields": resolved_fields(name, classes),
    }


def _tables_llm_api(tree, errors: list[str]) -> dict[str, Any]:
    classes = _collect_classes(tree, errors)
    if not classes:
        return {}
    llm_args = {n: _class_table(n, classes) for n in LLM_ARGS_CLASSES if n in classes}
    for n in ("BaseLlmArgs", "TorchLlmArgs"):
        if n not in classes:
            errors.append(f"llm_args: class {n} not found")
    kv = _class_table("KvCacheConfig", classes) if "KvCacheConfig" in classes else None
    if kv is None:
        errors.append("kv_cache_config: class KvCacheConfig not found")

    spec: dict[str, Any] = {}
    dispatch: dict[str, str] = {}
    dispatch_file = None
    if SPEC_BASE not in classes:
        errors.append(f"speculative_configs: class {SPEC_BASE} not found")
    else:
        dispatch = classes[SPEC_BASE].get("from_dict_map", {})
        dispatch_file = classes[SPEC_BASE]["file"]
        for name in classes:
            if name == SPEC_BASE or SPEC_BASE not in _mro(name, classes):
                continue
            t = _class_table(name, classes)
            dt = t["fields"].get("decoding_type", {})
            literals = dt.get("literal") or ([dt["default"]] if isinstance(dt.get("default"), str) else [])
            t["decoding_type"] = literals
            t["dispatch_keys"] = sorted(k for k, v in dispatch.items() if v.rsplit(".", 1)[-1] == name)
            sb = next(
                (classes[n]["supports_backend"] for n in _mro(name, classes) if "supports_backend" in classes[n]), None
            )
            if sb is not None:
                t["supports_backend"] = sb
            spec[name] = t
        if not spec:
            errors.append(f"speculative_configs: no subclass of {SPEC_BASE}")
    out: dict[str, Any] = {
        "llm_args": llm_args,
        "speculative_configs": spec,
        "speculative_dispatch": {"file": dispatch_file, "function": f"{SPEC_BASE}.from_dict", "map": dispatch},
    }
    if kv is not None:
        out["kv_cache_config"] = kv
    return out


def _table_torch_speculative(tree, errors: list[str]) -> dict[str, Any]:
    modules = [n for n in tree.listdir(TORCH_SPEC_DIR) if n.endswith(".py")]
    if not modules:
        errors.append(f"pytorch_speculative: {TORCH_SPEC_DIR} not found")
    table: dict[str, Any] = {"dir": TORCH_SPEC_DIR, "modules": modules}
    src = tree.read(TORCH_SPEC_INTERFACE)
    if src is not None:
        for cls in ast.parse(src).body:
            if isinstance(cls, ast.ClassDef) and cls.name == "SpeculativeDecodingMode":
                table["mode_enum"] = {
                    "file": TORCH_SPEC_INTERFACE,
                    "members": [
                        t.id
                        for s in cls.body
                        if isinstance(s, ast.Assign)
                        for t in s.targets
                        if isinstance(t, ast.Name)
                    ],
                }
    if "mode_enum" not in table:
        errors.append(f"pytorch_speculative: SpeculativeDecodingMode not in {TORCH_SPEC_INTERFACE}")
    for doc in SPEC_DOC_CANDIDATES:
        text = tree.read(doc)
        if text is not None:
            table["doc"] = {"file": doc, "headings": [h.strip() for h in re.findall(r"^#+ (.+)$", text, re.M)]}
            break
    return table


def _table_engine(tree, errors: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    src = tree.read(BUILD_PY)
    if src is None:
        errors.append(f"trtllm_build: {BUILD_PY} not found")
    else:
        build: dict[str, Any] = {"file": BUILD_PY, "options": argparse_options(src)}
        plugin = tree.read(PLUGIN_PY)
        if plugin is not None:
            # trtllm-build adds one flag per name in cli_plugin_args (plugin.add_plugin_argument).
            names = _module_consts(ast.parse(plugin)).get("cli_plugin_args")
            if isinstance(names, list):
                build["plugin_options"] = {
                    "file": PLUGIN_PY,
                    "source": "cli_plugin_args",
                    "flags": [f"--{n}" for n in names],
                }
        if "plugin_options" not in build:
            errors.append(f"trtllm_build: cli_plugin_args not found in {PLUGIN_PY}")
        out["trtllm_build"] = build
    for key, path in ENGINE_SCRIPTS.items():
        src = tree.read(path)
        if src is None:
            errors.append(f"{key}: {path} not found")
            continue
        out[key] = {"file": path, "options": argparse_options(src)}
    models = {}
    for model in tree.listdir(TRITON_MODELS_DIR):
        path = f"{TRITON_MODELS_DIR}/{model}/config.pbtxt"
        text = tree.read(path)
        if text is not None:
            models[model] = pbtxt_parameters(text, path)
    if not models:
        errors.append(f"triton_backend: no config.pbtxt under {TRITON_MODELS_DIR}")
    out["triton_backend"] = {"dir": TRITON_MODELS_DIR, "models": models}
    return out


def pbtxt_parameters(text: str, path: str) -> dict[str, Any]:
    """Keys of the `parameters` blocks and the ${...} placeholders fill_template.py fills."""
    keys = re.findall(r'parameters\s*[:{][^}]*?key\s*:\s*"([^"]+)"', text, re.S)
    return {
        "file": path,
        "parameter_keys": sorted(set(keys)),
        "placeholders": sorted(set(re.findall(r"\$\{(\w+)\}", text))),
    }


def extract(tree, tag: str, engine_path: bool) -> dict[str, Any]:
    errors: list[str] = []
    data: dict[str, Any] = {
        "source": {"repo": REPO, "tag": tag, "commit": tree.commit},
        "generator": "tests/source_truth/extract.py",
    }
    serve = _table_serve(tree, errors)
    if serve is not None:
        data["trtllm_serve"] = serve
    data.update(_tables_llm_api(tree, errors))
    data["pytorch_speculative"] = _table_torch_speculative(tree, errors)
    if engine_path:
        data.update(_table_engine(tree, errors))
    data["errors"] = errors
    return data


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--git-dir", help="a (bare) clone of NVIDIA/TensorRT-LLM")
    src.add_argument("--src-dir", help="a checked-out tree of NVIDIA/TensorRT-LLM")
    p.add_argument("--tag", required=True, help="release tag, e.g. v1.2.1")
    p.add_argument("--commit", help="with --src-dir: the commit the tree is at")
    p.add_argument(
        "--engine-path",
        choices=("auto", "yes", "no"),
        default="auto",
        help="also extract trtllm-build/examples/Triton tables (auto: 1.2.x only, "
        "the last line that has the engine path)",
    )
    p.add_argument("-o", "--output", required=True)
    a = p.parse_args(argv)
    tree = GitTree(a.git_dir, a.tag) if a.git_dir else DirTree(a.src_dir, a.commit)
    engine = a.engine_path == "yes" or (a.engine_path == "auto" and re.match(r"v?1\.2\.", a.tag) is not None)
    data = extract(tree, a.tag, engine)
    Path(a.output).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for e in data["errors"]:
        print(f"warning: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
