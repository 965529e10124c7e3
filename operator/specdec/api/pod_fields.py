"""The Pod fields passed through to build, fetch and runtime pods (labels, annotations, images, tolerations,
resources, affinity), bounded as a Pod's validation bounds them (`specdec.schema.k8s` has the rules and their
sources); the map and list sizes also bound the CEL cost estimate. Both the SpeculativeDeployment
(`specdec.api.models`) and the shared objects (`specdec.api.shared_objects`) are made of them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from specdec.schema import k8s
from specdec.schema.base import ApiModel, cel
from specdec.schema.base import validations as _validations

LabelValue = Annotated[str, Field(max_length=k8s.LABEL_VALUE_MAX, pattern=k8s.LABEL_VALUE)]
Labels = Annotated[dict[str, LabelValue], Field(max_length=k8s.MAX_MAP_ENTRIES), k8s.LABEL_KEYS]
Annotations = Annotated[
    dict[str, Annotated[str, Field(max_length=k8s.ANNOTATION_VALUE_MAX)]],
    Field(max_length=k8s.MAX_ANNOTATIONS),
    k8s.ANNOTATION_KEYS,
]
Image = Annotated[str, Field(min_length=1, max_length=k8s.IMAGE_MAX, pattern=k8s.IMAGE)]
Quantity = (
    Annotated[int, Field(ge=0)] | Annotated[str, Field(min_length=1, max_length=k8s.QUANTITY_MAX, pattern=k8s.QUANTITY)]
)
ResourceList = Annotated[dict[str, Quantity], Field(max_length=16), k8s.RESOURCE_NAMES]
Affinity = Annotated[dict[str, Any], k8s.FitsSchema(k8s.affinity_schema, "core/v1 Affinity")]
MAX_TOLERATIONS = 32

TOLERATION_KEY_MESSAGE = "key must be empty or a label key (an optional DNS subdomain prefix and '/', then a name)"


class Toleration(ApiModel):
    """A toleration, refused here when a Pod would refuse it (ValidateTolerations)."""

    model_config = _validations(
        cel(
            f"!has(self.key) || self.key == '' || ({k8s.LABEL_KEYS.cel_expr('self.key')})",
            TOLERATION_KEY_MESSAGE,
            ".key",
        ),
        cel(
            "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
            "operator must be Exists when key is empty (which tolerates every taint)",
            ".operator",
        ),
        cel(
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "value must be empty when operator is Exists",
            ".value",
        ),
        cel(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "tolerationSeconds needs effect NoExecute",
            ".tolerationSeconds",
        ),
    )

    key: str | None = Field(
        None,
        max_length=k8s.KEY_MAX,
        description="Taint key to tolerate; empty (with operator Exists) tolerates every taint.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (the default).")
    value: LabelValue | None = Field(None, description="Taint value to match (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; unset matches all."
    )
    toleration_seconds: int | None = Field(None, description="How long a NoExecute taint is tolerated before eviction.")


Tolerations = Annotated[list[Toleration], Field(max_length=MAX_TOLERATIONS)]

REQUESTS_WITHIN_LIMITS = "requests must not exceed limits of the same resource"


class Resources(ApiModel):
    """Container resources, as in a Pod (limits and requests by resource name)."""

    model_config = _validations(
        cel(
            "!has(self.limits) || !has(self.requests) || self.requests.all(k, !(k in self.limits) || "
            "!quantity(string(self.requests[k])).isGreaterThan(quantity(string(self.limits[k]))))",
            REQUESTS_WITHIN_LIMITS,
            ".requests",
        ),
    )

    limits: ResourceList | None = None
    requests: ResourceList | None = None
