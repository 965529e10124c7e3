"""What the operator's credentials must allow: exactly the API calls of operator/specdec/kube/client.py and the
watches of operator/specdec/handlers.py (kopf runs standalone, its event posting disabled)."""

# (apiGroup, resource) -> verbs
OPERATOR_RULES: dict[tuple[str, str], set[str]] = {
    ("specdec.io", "speculativedeployments"): {"get", "list", "watch"},
    ("specdec.io", "speculativedeployments/status"): {"patch"},
    ("specdec.io", "enginebuilds"): {"get", "list", "watch", "create", "patch", "delete"},
    ("specdec.io", "enginebuilds/status"): {"patch"},
    ("specdec.io", "modelcaches"): {"get", "list", "watch", "create", "patch", "delete"},
    ("specdec.io", "modelcaches/status"): {"patch"},
    ("batch", "jobs"): {"get", "list", "watch", "create"},
    ("", "pods"): {"get", "list", "watch"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "list", "watch", "create", "patch"},
    ("", "secrets"): {"create"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch"},
    ("", "persistentvolumeclaims"): {"get", "list", "watch", "create"},
    ("", "events"): {"create", "list"},
}

# A cluster-wide install also lists Nodes, for their GPU labels (admission; gpu.readNodeLabels).
CLUSTER_RULES: dict[tuple[str, str], set[str]] = {**OPERATOR_RULES, ("", "nodes"): {"list"}}

# The resources kopf watches (list + watch): what a cluster-wide install must allow at cluster scope.
WATCHED = [
    ("specdec.io", "speculativedeployments"),
    ("specdec.io", "enginebuilds"),
    ("specdec.io", "modelcaches"),
    ("batch", "jobs"),
    ("", "pods"),
    ("apps", "deployments"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("", "configmaps"),
    ("", "services"),
    ("", "persistentvolumeclaims"),
]

# Rights the operator must never have (the issue: no wildcard, no secret or pod/exec rights).
FORBIDDEN = [
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "pods", "create"),
    ("", "pods/exec", "create"),
    ("", "pods/log", "get"),
    ("", "pods/attach", "create"),
    ("", "pods/portforward", "create"),
    ("", "serviceaccounts/token", "create"),
    ("", "namespaces", "list"),
    ("", "nodes", "watch"),
    ("apps", "deployments", "delete"),
    ("batch", "jobs", "delete"),
    ("", "configmaps", "delete"),
    ("specdec.io", "speculativedeployments", "patch"),
    ("specdec.io", "speculativedeployments", "delete"),
    ("rbac.authorization.k8s.io", "roles", "create"),
    ("rbac.authorization.k8s.io", "rolebindings", "create"),
    ("apiextensions.k8s.io", "customresourcedefinitions", "list"),
]


def flatten(rules: list[dict]) -> dict[tuple[str, str], set[str]]:
    """RBAC rules -> {(group, resource): verbs}, refusing wildcards and resourceNames."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource) and "*" not in rule["verbs"], rule
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def lease_rules(lease: str) -> dict[tuple[str, str, tuple[str, ...]], set[str]]:
    """Leader election's Role (operator/specdec/kube/leader.py): create any Lease (a create cannot name one),
    read and replace only the release's own. {(group, resource, resourceNames): verbs}."""
    return {
        ("coordination.k8s.io", "leases", ()): {"create"},
        ("coordination.k8s.io", "leases", (lease,)): {"get", "update"},
    }


LEASE_RULES = lease_rules("rel-specdec-operator")


def flatten_named(rules: list[dict]) -> dict[tuple[str, str, tuple[str, ...]], set[str]]:
    """RBAC rules -> {(group, resource, resourceNames): verbs}, refusing wildcards."""
    out: dict[tuple[str, str, tuple[str, ...]], set[str]] = {}
    for rule in rules:
        assert "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert "*" not in (group, resource) and "*" not in rule["verbs"], rule
                key = (group, resource, tuple(rule.get("resourceNames") or ()))
                out.setdefault(key, set()).update(rule["verbs"])
    return out
