"""The offline scan's fact cache: the same facts as without it, whatever the names.

`FactsCache` reads a root once and gives every root whose objects say the
same things under other names the same facts with its own names put back
(a fleet runs a few templates under 20,000 names). Every test here
compares with `facts_of` without a cache, which reads each root directly.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from aibom_core.bom import MAX_CACHED_OBJECTS, FactsCache, RootView, facts_of, render
from aibom_core.graph import build_graph
from aibom_core.kinds import default_registry
from aibom_core.objects import Obj
from aibom_core.rollup import inventory
from aibom_core.scrape import object_signature, scrape
from tests.unit.kobj import mk

REG = default_registry()
ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = ROOT / "tests" / "upstream"
FLEET = ["deployment", "nim", "cronjob", "lws", "dcd"]
# The documents' digests, written by the code before the cache (same render,
# fixed input hash and tool version): the cache and orjson change no byte.
GOLDEN = Path(__file__).resolve().parent / "data" / "scan_documents.json"
DUMPS: dict[str, dict[str, Any]] = {
    "every-shape": {"roots": 27, "objects": 400},
    "fleet": {"roots": 25, "objects": 125, "shapes": FLEET},
}


def _gen_dump() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_dump", ROOT / "bench" / "gen_dump.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dump(**kwargs: Any) -> list[Obj]:
    objs = _gen_dump().generate(namespaces=3, **kwargs)
    return [o for o in objs if o["kind"] != "Namespace"]


def _views(objs: list[Obj]) -> Iterator[tuple[str, RootView]]:
    for entry in inventory(build_graph(objs, REG)):
        yield f"{entry.ref.namespace}/{entry.configmap_name}", entry.view


def _same_with_and_without(objs: list[Obj], cache: FactsCache | None = None) -> FactsCache:
    cache = cache if cache is not None else FactsCache()
    for where, v in _views(objs):
        assert facts_of(v, REG, cache=cache) == facts_of(v, REG), where
    return cache


@pytest.mark.parametrize("label", sorted(DUMPS))
def test_every_document_is_the_one_before_the_cache(label: str) -> None:
    golden = json.loads(GOLDEN.read_text())[label]
    cache = FactsCache()
    got = {}
    for where, v in _views(_dump(**DUMPS[label])):
        facts = facts_of(v, REG, cache=cache)
        data = render(facts, tool_version="golden", digest="sha256:" + "0" * 64)
        got[where] = hashlib.sha256(data).hexdigest()
    assert got == golden
    assert cache.hits > 0


def test_a_fleet_is_read_once_per_template() -> None:
    objs = _dump(roots=200, objects=1000, shapes=FLEET)
    cache = _same_with_and_without(objs)
    # Five shapes, two or three pods each: a handful of distinct roots.
    assert cache.misses <= 15
    assert cache.hits >= 185


def test_every_shape_with_and_without_the_cache() -> None:
    _same_with_and_without(_dump(roots=90, objects=1500))
    _same_with_and_without(_dump(roots=45, objects=300))


def _deployment(
    name: str,
    *,
    ns: str = "ns",
    pods: list[str],
    image_id: str = "a" * 64,
    image: str = "reg.io/vllm:1",
) -> list[Obj]:
    template = {"spec": {"containers": [{"name": "main", "image": image,
                                         "args": ["--model", "Qwen/Qwen3-0.6B"]}]}}  # fmt: skip
    dep = mk("Deployment", name, ns=ns, spec={"template": template})
    rs = mk("ReplicaSet", f"{name}-rs", dep, ns=ns, spec={"template": copy.deepcopy(template)})
    out = [dep, rs]
    for pod in pods:
        status = {"containerStatuses": [{"name": "main", "image": image,
                                         "imageID": f"reg.io/vllm@sha256:{image_id}"}]}  # fmt: skip
        out.append(mk("Pod", pod, rs, ns=ns, spec=copy.deepcopy(template["spec"]), status=status))
    return out


def test_names_that_sort_differently_get_their_own_order() -> None:
    # Locators sort as `<Kind>/<name>#`: `web!x` sorts before `web`, and pod
    # names that sort around the ReplicaSet's differ from root to root.
    objs = [
        *_deployment("web", pods=["web-rs-a", "web-rs-b"]),
        *_deployment("web!x", ns="b", pods=["web!x-rs-b", "web!x-rs-a"]),
        *_deployment("a", ns="c", pods=["zz", "a-rs.1", "a-rs!1"]),
        *_deployment("z", ns="d", pods=["a", "b", "c"]),
        *_deployment("p", ns="e", pods=["p", "p!1", "p-1"]),
    ]
    _same_with_and_without(objs)


def test_each_pod_keeps_its_own_evidence_whatever_the_name_order() -> None:
    # Same contents in the same reading order (a pod running image 1, then
    # one running image 2), names in another sort order: `x!1` sorts before
    # `x` as a locator (`!` < `#`), `y` before `z`.
    def pods(names: list[str], ns: str) -> list[Obj]:
        objs = _deployment(f"d{ns}", ns=ns, pods=[])
        for name, image in zip(names, ["reg.io/a:1", "reg.io/b:2"], strict=True):
            objs += _deployment(f"d{ns}", ns=ns, pods=[name], image=image)[2:]
        return objs

    _same_with_and_without([*pods(["x", "x!1"], "one"), *pods(["y", "z"], "two")])


def test_a_name_with_a_hash_sign_is_read_directly() -> None:
    cache = FactsCache()
    objs = [*_deployment("web", pods=["p#1", "p#2"]), *_deployment("web2", ns="b", pods=["q"])]
    _same_with_and_without(objs, cache)
    assert cache.misses == 1  # the root with `#` never reached the cache


def test_pods_that_pulled_other_digests_are_not_confused() -> None:
    objs = [
        *_deployment("a", pods=["a-1"], image_id="a" * 64),
        *_deployment("b", ns="b", pods=["b-1"], image_id="b" * 64),
    ]
    cache = _same_with_and_without(objs)
    assert cache.misses == 2
    digests = {v.root["metadata"]["name"]: facts_of(v, REG, cache=cache).digests
               for _, v in _views(objs)}  # fmt: skip
    assert digests == {"a": ("sha256:" + "a" * 64,), "b": ("sha256:" + "b" * 64,)}


def test_pods_that_differ_only_in_what_no_document_shows_share_facts() -> None:
    objs = []
    for i, ns in enumerate(("a", "b", "c")):
        dep, rs, pod = _deployment("web", ns=ns, pods=["web-1"])
        pod["metadata"]["resourceVersion"] = str(i)
        pod["spec"]["nodeName"] = f"node-{i}"
        pod["spec"]["volumes"] = [{"name": f"kube-api-access-{i}", "projected": {}}]
        pod["status"]["startTime"] = f"2026-10-0{i + 1}T00:00:00Z"
        pod["status"]["containerStatuses"][0].update(restartCount=i, ready=i == 0)
        objs += [dep, rs, pod]
    cache = _same_with_and_without(objs)
    assert (cache.misses, cache.hits) == (1, 2)


def test_a_nimservice_status_model_is_part_of_the_key() -> None:
    def nim(name: str, ns: str, served: str) -> Obj:
        spec = {"image": {"repository": "nvcr.io/nim/meta/llama", "tag": "1.3.3"}}
        return mk("NIMService", name, ns=ns, spec=spec, status={"model": {"name": served}})

    objs = [nim("a", "a", "meta/llama-3.1-8b"), nim("b", "b", "meta/llama-3.1-70b")]
    cache = _same_with_and_without(objs)
    assert cache.misses == 2


@pytest.mark.parametrize("key", ["model.aibom.dev/name", "model.aibom.dev/revision"])
def test_the_model_annotations_are_part_of_the_key(key: str) -> None:
    objs = []
    for ns, value in (("a", "org/model-a"), ("b", "org/model-b")):
        dep, rs, pod = _deployment("web", ns=ns, pods=["web-1"])
        dep["metadata"]["annotations"] = {"model.aibom.dev/name": "org/m", key: value}
        objs += [dep, rs, pod]
    cache = _same_with_and_without(objs)
    assert cache.misses == 2


def test_a_container_without_an_image_is_read_directly() -> None:
    # A KServe predictor `model`: its placeholder's bom-ref is its locator, a
    # name outside a locator, so its facts are never shared between names.
    path = UPSTREAM / "kserve" / "examples"
    isvcs = [d for f in sorted(path.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())
             if isinstance(d, dict) and d.get("kind") == "InferenceService"]  # fmt: skip
    assert isvcs
    _under_two_names(isvcs)


def _upstream_objects() -> list[Obj]:
    out = []
    for f in sorted(UPSTREAM.glob("*/examples/**/*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if isinstance(d, dict) and isinstance(d.get("metadata"), dict) and d.get("spec"):
                out.append(d)
    return out


def _under_two_names(objs: list[Obj]) -> FactsCache:
    """Each object as a root named `a`, then `b`: the same facts as without a cache."""
    cache = FactsCache()
    for obj in objs:
        for name in ("a", "b"):
            renamed = copy.deepcopy(obj)
            renamed["metadata"]["name"] = name
            v = RootView(root=renamed, status="root", reason=None, owned=(), pods=())
            assert facts_of(v, REG, cache=cache) == facts_of(v, REG), obj["metadata"]
    return cache


def test_every_upstream_example_under_two_names() -> None:
    objs = _upstream_objects()
    assert len(objs) > 20
    assert _under_two_names(objs).hits > 0


def test_the_object_signature_holds_all_that_scrape_reads() -> None:
    for obj in _upstream_objects():
        noisy = copy.deepcopy(obj)
        meta = noisy["metadata"]
        meta.update(name="other", namespace="elsewhere", uid="u", resourceVersion="9")
        meta.setdefault("labels", {})["x"] = "y"
        meta.setdefault("annotations", {})["unrelated"] = "z"
        status = noisy.setdefault("status", {})
        status["conditions"] = [{"type": "Ready"}]
        assert object_signature(noisy) == object_signature(obj)
        assert scrape(noisy, subject="S") == scrape(obj, subject="S")


def test_a_large_root_is_read_directly() -> None:
    pods = [f"p-{i:03d}" for i in range(MAX_CACHED_OBJECTS)]
    cache = FactsCache()
    _same_with_and_without(_deployment("big", pods=pods), cache)
    assert cache.hits == cache.misses == 0


def test_hostile_strings_stay_out_of_the_shared_facts() -> None:
    # A stand-in-like string in a spec: such facts are read directly.
    objs = _deployment("a", pods=["a-1"]) + _deployment("b", ns="b", pods=["b-1"])
    for o in objs:
        o["spec"].get("template", o)["spec"]["containers"][0]["args"] = ["--model", "\x00\u0100#x"]
    _same_with_and_without(objs)


def test_random_names_and_shapes() -> None:
    rnd = random.Random(15)
    alphabet = "ab-.!~z0"
    for _ in range(20):
        objs: list[Obj] = []
        cache = FactsCache()
        for n in range(6):
            name = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 4))) + str(n)
            pods = [name + "".join(rnd.choice(alphabet) for _ in range(3)) for _ in range(3)]
            objs += _deployment(name, ns=f"ns{n}", pods=pods, image_id=rnd.choice("ab") * 64)
        _same_with_and_without(objs, cache)
