"""The shared async API client against the real API server: discovery, owner GETs, watches."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from aibom_core.kinds import GroupKind, default_registry
from aibom_core.objects import OwnerRef
from aibom_core.walk import Reason
from aibom_edge.kube import METADATA_LIST, METADATA_WATCH, Kube
from annotator.slim import POD_SCHEMA, slimmer
from tests.controlplane import ControlPlane

pytestmark = pytest.mark.integration
REG = default_registry()


async def event_of_patch(
    control_plane: ControlPlane,
    kube: Kube,
    path: str,
    name: str,
    *,
    rv: str,
    annotations: dict[str, str],
    **watch_options: Any,
) -> dict[str, Any]:
    """The watch event (from `rv`) of merge-patching `annotations` onto `path`/`name`;
    other writers' events (a controller's) are passed over."""

    async def first() -> dict[str, Any]:
        params = {"resourceVersion": rv, "timeoutSeconds": "30"}
        async for event in kube.watch(path, params, **watch_options):
            meta = event["object"].get("metadata") or {}
            if (meta.get("annotations") or {}).items() >= annotations.items():
                return event
        raise AssertionError("watch ended without the event")

    task = asyncio.create_task(first())
    patch = {"metadata": {"annotations": annotations}}
    patched = control_plane.request(
        "PATCH", f"{path}/{name}", patch, content_type="application/merge-patch+json"
    )
    assert patched.status == 200, patched.body
    return await asyncio.wait_for(task, 30)


async def test_aggregated_discovery_is_two_requests_and_agrees_with_per_version(
    control_plane: ControlPlane,
) -> None:
    async with Kube.from_kubeconfig(str(control_plane.kubeconfig)) as kube:
        await kube.discovery.refresh()
        assert kube.requests["GET"] == 2
        dep = await kube.discovery.resource(GroupKind("apps", "Deployment"))
        assert dep is not None and (dep.plural, dep.version, dep.namespaced) == (
            "deployments",
            "v1",
            True,
        )
        assert dep.path("ns", "d") == "/apis/apps/v1/namespaces/ns/deployments/d"
        ns = await kube.discovery.resource(GroupKind("", "Namespace"))
        assert ns is not None and not ns.namespaced and ns.path(None, "x") == "/api/v1/namespaces/x"
        legacy = await kube.discovery._legacy()
        aggregated = await kube.discovery._aggregated()
        assert aggregated is not None
        reg = default_registry()
        for gk in sorted(reg.tracked | reg.walk_only):
            assert aggregated.get(gk) == legacy.get(gk), gk
            if gk.group == "serving.knative.dev":
                continue  # no Knative CRDs are vendored: both must say "not served"
            assert aggregated.get(gk) is not None, f"{gk} not served (CRDs installed?)"


async def test_get_owner_maps_answers_to_walk_reasons(
    control_plane: ControlPlane, namespace: str
) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "owner"},
    }
    created = control_plane.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body)
    assert created.status == 201, created.body
    uid = created.json()["metadata"]["uid"]
    restricted = control_plane.restricted_kubeconfig("nobody")
    async with Kube.from_kubeconfig(str(control_plane.kubeconfig)) as kube:
        got = await kube.get_owner(namespace, OwnerRef("v1", "ConfigMap", "owner", uid))
        assert got.obj is not None and got.obj["metadata"]["uid"] == uid
        missing = await kube.get_owner(namespace, OwnerRef("v1", "ConfigMap", "gone", "u"))
        assert missing.failure is Reason.NOT_FOUND
        unknown = await kube.get_owner(namespace, OwnerRef("example.com/v1", "Widget", "w", "u"))
        assert unknown.failure is Reason.NO_MATCH
    async with Kube.from_kubeconfig(str(restricted)) as kube:
        denied = await kube.get_owner(namespace, OwnerRef("v1", "ConfigMap", "owner", uid))
        assert denied.failure is Reason.FORBIDDEN


async def test_a_cluster_scoped_owner_is_notfound_from_discovery_without_a_get(
    control_plane: ControlPlane, namespace: str
) -> None:
    """docs/webhook.md, Cluster-scoped owners: owners are looked up in the child's
    namespace, where a cluster-scoped object never is; discovery says the kind is
    cluster-scoped, so the answer is NotFound and no GET is made, even for an
    owner the identity could read (the admin reads the Namespace itself)."""
    ns_obj = control_plane.request("GET", f"/api/v1/namespaces/{namespace}")
    assert ns_obj.status == 200, ns_obj.body
    uid = ns_obj.json()["metadata"]["uid"]
    async with Kube.from_kubeconfig(str(control_plane.kubeconfig)) as kube:
        await kube.discovery.refresh()
        assert await kube.discovery.resource(GroupKind("", "Namespace")) is not None
        gets = kube.requests["GET"]
        for metadata_only in (False, True):
            got = await kube.get_owner(
                namespace,
                OwnerRef("v1", "Namespace", namespace, uid),
                metadata_only=metadata_only,
            )
            assert got.failure is Reason.NOT_FOUND and got.obj is None
        assert kube.requests["GET"] == gets


async def test_metadata_only_owner_get_list_and_watch(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Owners' metadata only (PartialObjectMetadata), with the owner's
    own apiVersion and kind, no spec; lists and watches the same."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "owner", "annotations": {"a": "b"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "m", "image": "registry.example/app:1"}]},
            },
        },
    }
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments"
    created = control_plane.request("POST", path, body)
    assert created.status == 201, created.body
    uid = created.json()["metadata"]["uid"]
    async with Kube.from_kubeconfig(str(control_plane.kubeconfig)) as kube:
        ref = OwnerRef("apps/v1", "Deployment", "owner", uid)
        got = await kube.get_owner(namespace, ref, metadata_only=True)
        assert got.obj is not None
        assert (got.obj["apiVersion"], got.obj["kind"]) == ("apps/v1", "Deployment")
        assert got.obj["metadata"]["uid"] == uid
        assert got.obj["metadata"]["annotations"]["a"] == "b"
        assert "spec" not in got.obj and "status" not in got.obj
        listed = await kube.request("GET", path, accept=METADATA_LIST)
        assert listed.body["kind"] == "PartialObjectMetadataList"
        assert [i["metadata"]["uid"] for i in listed.body["items"]] == [uid]
        assert "spec" not in listed.body["items"][0]
        rv = listed.body["metadata"]["resourceVersion"]

        event = await event_of_patch(
            control_plane, kube, path, "owner", rv=rv, annotations={"a": "c"}, accept=METADATA_WATCH
        )
        obj = event["object"]
        assert isinstance(obj, dict) and obj["kind"] == "PartialObjectMetadata"
        assert "spec" not in obj and obj["metadata"]["uid"] == uid


async def test_watch_streams_events(control_plane: ControlPlane, namespace: str) -> None:
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    async with Kube.from_kubeconfig(str(control_plane.kubeconfig)) as kube:
        listed = await kube.request("GET", path)
        rv = listed.body["metadata"]["resourceVersion"]

        async def first_event() -> dict[str, object]:
            async for event in kube.watch(path, {"resourceVersion": rv, "timeoutSeconds": "30"}):
                return event
            raise AssertionError("watch ended without an event")

        # No wait for the watch to connect: it starts at `rv`, so the POST below
        # is delivered whenever it connects (a watch that dropped the
        # resourceVersion would miss it).
        task = asyncio.create_task(first_event())
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "watched"}}
        resp = await kube.request("POST", path, json=body)
        assert resp.status == 201
        event = await asyncio.wait_for(task, 30)
        assert event["type"] == "ADDED"
        obj = event["object"]
        assert isinstance(obj, dict) and obj["metadata"]["name"] == "watched"


async def test_pods_listed_and_watched_through_the_schema(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The annotator's Pod schema on the real API server: items and events trimmed to
    what the slimmer reads, slimming to the same bytes as whole Pods; error answers
    keep their Status whole."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "annotations": {"aibom.dev/rollup": "root"}},
        "spec": {"containers": [{"name": "m", "image": "registry.example/app:1"}]},
    }
    created = control_plane.request("POST", path, body)
    assert created.status == 201, created.body
    async with Kube.from_kubeconfig(str(control_plane.kubeconfig)) as kube:
        whole = await kube.request("GET", path)
        trimmed = await kube.request("GET", path, decode=POD_SCHEMA.page)
        assert trimmed.body["metadata"]["resourceVersion"]
        [item] = trimmed.body["items"]
        assert "managedFields" not in item["metadata"] and "dnsPolicy" not in item["spec"]
        [full] = whole.body["items"]
        assert "managedFields" in full["metadata"]  # what the decoder skipped was there
        as_pod = {"apiVersion": "v1", "kind": "Pod"}
        assert orjson.dumps(slimmer(REG)({**as_pod, **item})) == orjson.dumps(
            slimmer(REG)({**as_pod, **full})
        )
        missing = await kube.request("GET", f"{path}/nope", decode=POD_SCHEMA.page)
        assert missing.status == 404 and missing.body["reason"] == "NotFound"
        assert "nope" in missing.body["message"]

        rv = trimmed.body["metadata"]["resourceVersion"]
        stamp = {"aibom.dev/rollup": "rolled-up"}
        event = await event_of_patch(
            control_plane, kube, path, "p", rv=rv, annotations=stamp, decode=POD_SCHEMA.event
        )
        obj = event["object"]
        assert event["type"] == "MODIFIED" and isinstance(obj, dict)
        assert obj["kind"] == "Pod" and "managedFields" not in obj["metadata"]
        assert obj["metadata"]["annotations"] == {"aibom.dev/rollup": "rolled-up"}
    restricted = control_plane.restricted_kubeconfig("nobody-pods")
    async with Kube.from_kubeconfig(str(restricted)) as kube:
        refused = await kube.request("GET", path, decode=POD_SCHEMA.page)
        assert refused.status == 403 and refused.body["reason"] == "Forbidden"
        assert "cannot list resource" in refused.body["message"]
