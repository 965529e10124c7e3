"""The watch cache: what reconciles read instead of the API server."""

from __future__ import annotations

from specdec.kube.cache import Store, matches


def obj(kind: str, name: str, rv: str, labels: dict | None = None, ns: str = "a") -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "labels": labels or {}}}


def test_selectors_we_use():
    assert matches({"a": "1", "b": "2"}, "a=1,b")
    assert not matches({"a": "1"}, "a=2")
    assert not matches({}, "a")
    assert matches(None, None)


def test_a_late_watch_event_does_not_undo_our_write():
    store = Store(["Job"])
    store.put(obj("Job", "j", "10"))
    store.observe("Job", {"type": "MODIFIED", "object": obj("Job", "j", "9")})
    assert store.get("Job", "a", "j")["metadata"]["resourceVersion"] == "10"
    store.observe("Job", {"type": "MODIFIED", "object": obj("Job", "j", "11")})
    assert store.get("Job", "a", "j")["metadata"]["resourceVersion"] == "11"


def test_the_echo_of_our_own_write_tells_nothing_new():
    store = Store(["SpeculativeDeployment"])
    assert store.observe("SpeculativeDeployment", {"type": "ADDED", "object": obj("SpeculativeDeployment", "sd", "5")})
    store.put(obj("SpeculativeDeployment", "sd", "7"))  # what our status write returned
    echo = {"type": "MODIFIED", "object": obj("SpeculativeDeployment", "sd", "7")}
    assert not store.observe("SpeculativeDeployment", echo)
    assert not store.observe(
        "SpeculativeDeployment", {"type": "MODIFIED", "object": obj("SpeculativeDeployment", "sd", "6")}
    )  # late
    assert store.observe(
        "SpeculativeDeployment", {"type": "MODIFIED", "object": obj("SpeculativeDeployment", "sd", "8")}
    )
    assert store.observe(
        "SpeculativeDeployment", {"type": "DELETED", "object": obj("SpeculativeDeployment", "sd", "9")}
    )


def test_listed_objects_without_a_kind_are_cached_and_deletions_forget():
    store = Store(["Pod"])
    listed = obj("Pod", "p", "1")
    del listed["kind"]
    store.observe("Pod", {"type": None, "object": listed})
    assert store.list("Pod", "a") and store.get("Pod", "a", "p")["kind"] == "Pod"
    store.observe("Pod", {"type": "DELETED", "object": listed})
    assert store.get("Pod", "a", "p") is None


def test_uncached_kinds_are_ignored():
    store = Store(["Pod"])
    store.put(obj("Secret", "s", "1"))
    assert not store.caches("Secret") and store.list("Secret", None) == []


def test_replace_drops_what_a_list_no_longer_returns_in_its_scope_only():
    store = Store(["Job"])
    store.put(obj("Job", "gone", "1", {"x": "1"}))
    store.put(obj("Job", "other-ns", "1", {"x": "1"}, ns="b"))
    store.put(obj("Job", "unlabelled", "1"))
    store.replace("Job", "a", "x", [obj("Job", "new", "2", {"x": "1"})])
    assert {o["metadata"]["name"] for o in store.list("Job", None)} == {"other-ns", "unlabelled", "new"}


def test_indexed_labels_answer_selectors_and_follow_relabels_and_deletions():
    store = Store(["Pod"], indexed_labels=["app"])
    store.put(obj("Pod", "p1", "1", {"app": "x", "tier": "web"}))
    store.put(obj("Pod", "p2", "1", {"app": "x"}))
    store.put(obj("Pod", "p3", "1", {"app": "x"}, ns="b"))

    def names(sel: str, ns: str = "a") -> list[str]:
        return sorted(o["metadata"]["name"] for o in store.list("Pod", ns, sel))

    assert names("app=x") == ["p1", "p2"] and names("app=x,tier=web") == ["p1"] and names("app=x", "b") == ["p3"]
    store.put(obj("Pod", "p1", "2", {"app": "y"}))  # relabelled: leaves the old index entry
    assert names("app=x") == ["p2"] and names("app=y") == ["p1"]
    store.remove("Pod", "a", "p2")
    store.replace("Pod", "b", None, [])
    assert names("app=x") == [] and names("app=x", "b") == [] and names(None) == ["p1"]


def test_cached_objects_drop_managed_fields_and_the_callers_copy_keeps_them():
    store = Store(["Job"])
    written = obj("Job", "j", "1")
    written["metadata"]["managedFields"] = [{"manager": "specdec-operator"}]
    store.put(written)
    assert "managedFields" not in store.get("Job", "a", "j")["metadata"]
    assert written["metadata"]["managedFields"] == [{"manager": "specdec-operator"}]


def test_a_list_from_the_watch_cache_does_not_undo_writes_newer_than_itself():
    store = Store(["Job"])
    store.put(obj("Job", "deleted", "10"))
    store.put(obj("Job", "created-since", "20"))  # our own write, after the list's snapshot
    store.put(obj("Job", "updated-since", "18"))
    store.replace("Job", "a", None, [obj("Job", "updated-since", "12"), obj("Job", "listed", "14")], "15")
    assert store.get("Job", "a", "deleted") is None
    assert store.get("Job", "a", "created-since")["metadata"]["resourceVersion"] == "20"
    assert store.get("Job", "a", "updated-since")["metadata"]["resourceVersion"] == "18"
    assert store.get("Job", "a", "listed") is not None


def test_the_cache_holds_only_what_its_watch_shows():
    store = Store(["Job"], selectors={"Job": "managed=us"})
    store.put(obj("Job", "theirs", "1"))
    store.put(obj("Job", "ours", "1", {"managed": "us"}))
    assert [j["metadata"]["name"] for j in store.list("Job", "a")] == ["ours"]
