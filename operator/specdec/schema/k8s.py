"""Kubernetes' own rules for the Pod fields a spec passes through (labels, images, tolerations,
resources, affinity), in one place.

The CRD (OpenAPI patterns, CEL) and the pydantic models (the same regexes, in Python) both read
them, so the API server refuses at the door what a Pod or Job would refuse later, and
`specdec render` refuses the same. Sources: k8s.io/apimachinery/pkg/util/validation (names, labels),
k8s.io/apimachinery/pkg/api/resource/quantity.go (quantities), pkg/apis/core/validation
(tolerations, container resources), the kubernetes client's models (Affinity).
"""

from __future__ import annotations

import copy
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import core_schema

from specdec.schema.openapi import matches, schema_errors

# Regexes that CEL also runs avoid backslashes (`[.]`, not `\.`): CEL string literals would eat them.
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"  # IsQualifiedName's name part: at most 63
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
PREFIX_MAX = 253  # IsDNS1123Subdomain's length, not expressible in the regex: checked apart
KEY_MAX = PREFIX_MAX + 1 + 63
# Object names of most kinds (claims, storage classes): IsDNS1123Subdomain.
DNS_SUBDOMAIN = rf"^{_DNS_LABEL}([.]{_DNS_LABEL})*$"
LABEL_KEY = rf"^({_DNS_LABEL}([.]{_DNS_LABEL})*/)?{_NAME}$"
# A path inside a volume, relative: no '..', no leading '/'.
RELATIVE_PATH = r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$"


def optional_object_name(description: str) -> Any:
    """An optional field naming an object (a claim, a storage class): IsDNS1123Subdomain."""
    return Field(None, min_length=1, max_length=PREFIX_MAX, pattern=DNS_SUBDOMAIN, description=description)


def optional_relative_path(description: str) -> Any:
    """An optional field giving a directory inside a volume (RELATIVE_PATH)."""
    return Field(None, min_length=1, max_length=512, pattern=RELATIVE_PATH, description=description)


# ValidateAnnotations checks keys lowercased: capitals are fine in an annotation key's prefix.
_DNS_LABEL_ANY_CASE = r"[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?"
ANNOTATION_KEY = rf"^({_DNS_LABEL_ANY_CASE}([.]{_DNS_LABEL_ANY_CASE})*/)?{_NAME}$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
LABEL_VALUE_MAX = 63
# Container resource names (validateContainerResourceName): the standard unprefixed ones, else a
# qualified name with a domain prefix (extended resources such as nvidia.com/gpu).
RESOURCE_NAME = (
    rf"^(cpu|memory|ephemeral-storage|hugepages-[A-Za-z0-9]([-A-Za-z0-9_.]{{0,51}}[A-Za-z0-9])?"
    rf"|{_DNS_LABEL}([.]{_DNS_LABEL})*/{_NAME})$"
)

# Total size of a pod's annotations is capped at 256 KiB (TotalAnnotationSizeLimitB):
# MAX_ANNOTATIONS * (KEY_MAX + ANNOTATION_VALUE_MAX) stays below it.
MAX_ANNOTATIONS = 64
ANNOTATION_VALUE_MAX = 3072
MAX_MAP_ENTRIES = 64  # labels, node selectors: a bound that also keeps the CEL cost estimate small

# resource.Quantity's grammar (quantity.go: <signedNumber><suffix>, the exponent an int64 here
# bounded to 18 digits), without '-': a Pod refuses negative quantities.
QUANTITY = r"^[+]?([0-9]+([.][0-9]*)?|[.][0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][-+]?[0-9]{1,18})?$"
QUANTITY_MAX = 64

# An image reference, registry/repo[:tag][@digest] (distribution's reference grammar, loosely: any
# host[:port] as registry); above all no whitespace, which the kubelet would refuse.
_PATH_COMPONENT = r"[a-z0-9]+(([_.]|__|-+)[a-z0-9]+)*"
IMAGE = (
    rf"^([A-Za-z0-9][-A-Za-z0-9.]*(:[0-9]+)?/)?{_PATH_COMPONENT}(/{_PATH_COMPONENT})*"
    r"(:[A-Za-z0-9_][-A-Za-z0-9_.]{0,127})?(@[a-z0-9]+([-+._][a-z0-9]+)*:[0-9a-fA-F]{32,})?$"
)
IMAGE_MAX = 512


_SUFFIXES = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Exact for every QUANTITY (at most 64 digits); absurd exponents become 0 or Infinity, never an error.
_WIDE = Context(prec=QUANTITY_MAX, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(value: int | str) -> Decimal:
    """The value of a quantity matching QUANTITY (for comparisons, as CEL's quantity() does)."""
    text = str(value)
    match = re.fullmatch(r"\+?([0-9]*\.?[0-9]*)(.*)", text)
    assert match and matches(QUANTITY, text), text
    number, suffix = Decimal(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return _WIDE.multiply(number, Decimal(2 ** _BINARY[suffix]))
    exponent = _SUFFIXES[suffix] if suffix in _SUFFIXES else int(suffix[1:])
    return number.scaleb(exponent, _WIDE)


@dataclass(frozen=True)
class KeyRule:
    """Map keys must match `regex` (with a domain prefix of at most PREFIX_MAX characters).

    Used as `Annotated[dict[...], KeyRule(...)]`: a CEL rule in the CRD (structural schemas have no
    propertyNames) and the same check in pydantic, with one message."""

    regex: str
    message: str

    def ok(self, key: str) -> bool:
        return matches(self.regex, key) and key.find("/") <= PREFIX_MAX

    def cel_expr(self, var: str) -> str:
        """The CEL twin of `ok`."""
        assert "\\" not in self.regex and "'" not in self.regex, "the regex goes into a CEL string literal"
        return f"{var}.matches('{self.regex}') && {var}.indexOf('/') <= {PREFIX_MAX}"

    def check(self, value: dict[str, Any]) -> dict[str, Any]:
        bad = [k for k in value if not self.ok(k)]
        if bad:
            raise ValueError(f"{self.message} (not {bad[0]!r})")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        out = handler(schema)
        out.setdefault("x-kubernetes-validations", []).append(
            {"rule": f"self.all(k, {self.cel_expr('k')})", "message": self.message}
        )
        return out


@dataclass(frozen=True)
class FitsSchema:
    """A free-form dict that must fit an OpenAPI schema: the CRD carries the schema, pydantic checks
    the value against that same schema (`openapi.schema_errors`), so the two cannot drift."""

    schema: Callable[[], dict[str, Any]]
    name: str

    def check(self, value: dict[str, Any]) -> dict[str, Any]:
        errors = schema_errors(self.schema(), value)
        if errors:
            raise ValueError(f"not a valid {self.name}: {'; '.join(errors)}")
        return value

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return self.schema()


LABEL_KEYS = KeyRule(
    LABEL_KEY,
    "keys must be label keys: an optional DNS subdomain prefix and '/', then a name "
    "of at most 63 alphanumerics, '-', '_' or '.' that starts and ends with an alphanumeric",
)
ANNOTATION_KEYS = KeyRule(
    ANNOTATION_KEY,
    "keys must be annotation keys: an optional DNS subdomain prefix and '/', "
    "then a name of at most 63 alphanumerics, '-', '_' or '.' that starts and "
    "ends with an alphanumeric",
)
RESOURCE_NAMES = KeyRule(
    RESOURCE_NAME,
    "keys must be container resource names: cpu, memory, ephemeral-storage, "
    "hugepages-<size>, or an extended resource with a domain (example.com/foo)",
)


# --- Affinity: the typed core/v1 schema, from the kubernetes client's models ------------------------

_SCALARS = {str: {"type": "string"}, int: {"type": "integer"}, bool: {"type": "boolean"}}


def _type_schema(annotation: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_schema(args[0])
    if origin is typing.Union:
        (inner,) = [a for a in args if a is not type(None)]
        return _type_schema(inner)
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        assert _type_schema(args[0]) == {"type": "string"}, annotation
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return object_schema(annotation)
    if annotation in _SCALARS:
        return dict(_SCALARS[annotation])
    raise ValueError(f"no OpenAPI type for {annotation!r}")


def object_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A client model (e.g. V1Affinity) as a structural schema, inlined: wire names, types, required
    fields and descriptions as the client (generated from Kubernetes' OpenAPI) has them. Objects
    have no x-kubernetes-preserve-unknown-fields, so the API server prunes unknown fields."""
    properties, required = {}, []
    wire_names: dict[str, str] = model.attribute_map  # type: ignore[attr-defined]  # the client's models have it
    for name, field in model.model_fields.items():
        if name not in wire_names:
            continue
        wire = wire_names[name]
        properties[wire] = {
            **({"description": field.description} if field.description else {}),
            **_type_schema(field.annotation),
        }
        if field.is_required():
            required.append(wire)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


@lru_cache(maxsize=1)
def _affinity_schema() -> dict[str, Any]:
    from kubernetes.client import V1Affinity

    return object_schema(V1Affinity)


def affinity_schema() -> dict[str, Any]:
    return copy.deepcopy(_affinity_schema())
