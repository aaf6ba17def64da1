"""Per-kind scrapers: where each kind keeps its containers, and what they say.

A scraper turns one raw object (a dict as `kubectl get -o json` prints it)
into `Container` records: the image as written, the command line, the
environment, the mounted model sources, and what the object's structured
fields declare about models and runtimes (Dynamo `modelRef` and component
`type`, NIMService `status.model`, the `model.aibom.dev/*` annotations). Each
record keeps JSON pointers to where it was read, so every fact in the
document can name its evidence.

Field paths, checked against the upstream CRDs and examples that tests/upstream/SOURCES.md
names (repository, commit, path; the files the tests read are vendored beside it):

- Deployment, StatefulSet, DaemonSet, Job, ReplicaSet: `spec.template`
- CronJob: `spec.jobTemplate.spec.template`
- LeaderWorkerSet: `spec.leaderWorkerTemplate.{leaderTemplate,workerTemplate}`
  (leaderTemplate optional); DisaggregatedSet:
  `spec.roles[].spec.leaderWorkerTemplate`
- DynamoGraphDeployment v1beta1: `spec.components[]` with `podTemplate`
  (PodTemplateSpec; the main container is named `main`), `type`, `modelRef`,
  `frontendSidecar` (a container name); graph-wide `spec.env`,
  `spec.backendFramework`
- DynamoGraphDeployment v1alpha1: `spec.services{<name>}` with
  `extraPodSpec.{mainContainer,containers,initContainers,volumes}`, `envs`,
  `componentType`, `modelRef`, `frontendSidecar{image,args,envs}`,
  `volumeMounts[{name,mountPoint}]` naming graph `spec.pvcs[]`; graph-wide
  `spec.envs`
- DynamoComponentDeployment: the same component spec at top level (v1beta1
  `spec.podTemplate`, v1alpha1 `spec.extraPodSpec`): a one-component graph
- NIMService: `spec.image{repository,tag}`, `spec.command/args/env`,
  `spec.storage.{nimCache{name,profile},pvc,hostPath}`, `status.model.name`,
  `spec.initContainers[]`/`spec.sidecarContainers[]` (image as
  `{repository,tag}`)
- Grove PodClique: `spec.podSpec` (a PodSpec, not a template); PodCliqueSet:
  `spec.template.cliques[].spec.podSpec`
- Pod: `spec.containers`, `spec.initContainers`
- KServe InferenceService v1beta1: `spec.{predictor,transformer,explainer}`
  (each an inline PodSpec: `containers` with the main one named
  `kserve-container`, `initContainers`, `volumes`); the predictor's `model`
  (ModelSpec: `modelFormat{name,version}`, `runtime`, `storageUri`,
  `storage{key,path}`, `protocolVersion` and inline container fields), the
  deprecated framework fields (`sklearn`, `huggingface`, ... with
  `storageUri`), `workerSpec` (multi-node)
- KubeRay (ray.io v1): RayCluster `spec.headGroupSpec.template` and
  `spec.workerGroupSpecs[].template`; RayService the same RayClusterSpec at
  `spec.rayClusterConfig`; RayJob at `spec.rayClusterSpec`, plus
  `spec.submitterPodTemplate` (the submitter Job's Pods)

Shapes are recognised by the fields present, not by apiVersion, and an object
whose kind is unknown is tried against the generic pod-template places, so a
kind added by configuration is scraped without a release. Odd input (missing
fields, a string where a dict belongs, null lists) yields what could be read,
never an exception. Pure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aibom_core.evidence import Confidence, Source, escape_token
from aibom_core.objects import Obj, annotations_of, name_of

MODEL_NAME_ANNOTATION = "model.aibom.dev/name"
MODEL_REVISION_ANNOTATION = "model.aibom.dev/revision"

# Dynamo component types -> the runtime the operator runs for them.
_DYNAMO_ROLES = {
    "frontend": "dynamo-frontend",
    "planner": "dynamo-planner",
    "worker": "dynamo-worker",
    "prefill": "dynamo-worker",
    "decode": "dynamo-worker",
}
_DYNAMO_WORKER_TYPES = frozenset({"worker", "prefill", "decode"})
# spec.backendFramework enum values -> our runtime names.
_DYNAMO_BACKENDS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt-llm"}


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str | None  # None when set from elsewhere (valueFrom)
    value_from: str | None  # "secretKeyRef", "configMapKeyRef", ... when valueFrom
    pointer: str


@dataclass(frozen=True, slots=True)
class Volume:
    """A model source a container mounts (or, for NIM, the operator mounts)."""

    kind: str  # "pvc" | "hostpath" | "nimcache"
    name: str  # claim name, host path, NIMCache name
    mount_path: str | None
    pointer: str  # where the volume is defined
    profile: str | None = None  # NIMCache profile


@dataclass(frozen=True, slots=True)
class ModelDecl:
    """A model named by a structured field (not by a command line)."""

    id: str
    revision: str | None
    confidence: Confidence
    source: Source
    pointer: str
    via: str  # "modelRef", "annotation", "status.model", "storageUri"
    # An unresolved declaration (a storage location, not an identity): why,
    # and the (property, value) kept as its evidence.
    reason: str | None = None
    detail: tuple[str, str] | None = None
    properties: tuple[tuple[str, str], ...] = ()  # e.g. ("aibom.model.format", "huggingface")


@dataclass(frozen=True, slots=True)
class RuntimeDecl:
    """A runtime named by a structured field (Dynamo type/backendFramework, the NIMService kind)."""

    runtime: str
    confidence: Confidence
    source: Source
    pointer: str
    rule: str = ""  # the field that declares it (`aibom.runtime.rule`)


@dataclass(frozen=True, slots=True)
class Container:
    """One container of one object, as the spec writes it."""

    subject: str  # "<Kind>/<name>" of the object it was read from
    pointer: str  # JSON pointer to the container
    name: str
    image: str  # as written; "" when absent
    image_pointer: str
    command: tuple[str, ...]
    command_pointer: str
    args: tuple[str, ...]
    args_pointer: str
    env: tuple[EnvVar, ...]
    volumes: tuple[Volume, ...]
    init: bool
    in_pod: bool  # read from a Pod: supplementary evidence (bom.py)
    models: tuple[ModelDecl, ...] = ()
    runtimes: tuple[RuntimeDecl, ...] = ()


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What an enclosing object adds to the containers of one pod spec."""

    subject: str
    in_pod: bool
    main: str | None = None  # the container the structured hints belong to
    main_models: tuple[ModelDecl, ...] = ()
    main_runtimes: tuple[RuntimeDecl, ...] = ()
    main_env: tuple[EnvVar, ...] = ()  # env the operator merges into the main container
    main_volumes: tuple[Volume, ...] = ()
    all_models: tuple[ModelDecl, ...] = ()  # annotations: every serving container
    sidecar_runtimes: dict[str, tuple[RuntimeDecl, ...]] = field(default_factory=dict)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _strs(value: Any) -> tuple[str, ...]:
    """A string list; numbers YAML wrote unquoted are kept as text, others dropped."""
    if not isinstance(value, list):
        return ()
    if all(type(item) is str for item in value):
        return tuple(value)
    out = []
    for item in value:
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            out.append(str(item))
    return tuple(out)


def _ptr(base: str, *tokens: str | int) -> str:
    out = base
    for token in tokens:
        text = str(token)
        if "~" in text or "/" in text:
            text = escape_token(text)
        out += "/" + text
    return out


def _env(items: Any, base: str) -> tuple[EnvVar, ...]:
    if not items:
        return ()
    out = []
    for i, raw in enumerate(_list(items)):
        item = _dict(raw)
        name = _str(item.get("name"))
        if not name:
            continue
        source = _dict(item.get("valueFrom"))
        if source:
            kind = next((k for k in sorted(source) if isinstance(source[k], dict)), "valueFrom")
            out.append(EnvVar(name=name, value=None, value_from=kind, pointer=_ptr(base, i)))
        else:
            value = item.get("value")
            text = _str(value) if not isinstance(value, int | float) else str(value)
            out.append(EnvVar(name=name, value=text, value_from=None, pointer=_ptr(base, i)))
    return tuple(out)


def _pod_volumes(spec: dict[str, Any], spec_ptr: str) -> dict[str, tuple[str, str, str]]:
    """Volume name -> (kind, source name, pointer) for the model-source kinds."""
    out: dict[str, tuple[str, str, str]] = {}
    for i, raw in enumerate(_list(spec.get("volumes"))):
        vol = _dict(raw)
        name = _str(vol.get("name"))
        claim = _str(_dict(vol.get("persistentVolumeClaim")).get("claimName"))
        host = _str(_dict(vol.get("hostPath")).get("path"))
        if name and claim:
            out[name] = ("pvc", claim, f"{spec_ptr}/volumes/{i}")
        elif name and host:
            out[name] = ("hostpath", host, f"{spec_ptr}/volumes/{i}")
    return out


def _mounts(c: dict[str, Any], volumes: dict[str, tuple[str, str, str]]) -> tuple[Volume, ...]:
    if not volumes:
        return ()
    out = []
    for raw in _list(c.get("volumeMounts")):
        mount = _dict(raw)
        found = volumes.get(_str(mount.get("name")))
        if found is not None:
            kind, source, vptr = found
            path = _str(mount.get("mountPath"))
            out.append(Volume(kind=kind, name=source, mount_path=path, pointer=vptr))
    return tuple(out)


def _container(
    c: dict[str, Any],
    ptr: str,
    *,
    ctx: _Ctx,
    init: bool,
    volumes: dict[str, tuple[str, str, str]],
    default_name: str = "",
) -> Container:
    name = _str(c.get("name")) or default_name
    is_main = not init and ctx.main is not None and name == ctx.main
    env = _env(c.get("env"), f"{ptr}/env")
    mounts = _mounts(c, volumes)
    models: tuple[ModelDecl, ...] = () if init else ctx.all_models
    runtimes = ctx.sidecar_runtimes.get(name, ()) if not init else ()
    if is_main:
        # The operator merges graph/service env behind the container's own.
        env = env + ctx.main_env
        mounts = mounts + ctx.main_volumes
        models = ctx.main_models + models
        runtimes = ctx.main_runtimes + runtimes
    return _container_at(
        c,
        ptr,
        ctx,
        name=name,
        image=_str(c.get("image")),
        env=env,
        volumes=mounts,
        init=init,
        models=models,
        runtimes=runtimes,
    )


def _container_at(
    c: dict[str, Any],
    ptr: str,
    ctx: _Ctx,
    *,
    name: str,
    image: str,
    env: tuple[EnvVar, ...],
    volumes: tuple[Volume, ...],
    init: bool,
    models: tuple[ModelDecl, ...] = (),
    runtimes: tuple[RuntimeDecl, ...] = (),
) -> Container:
    """A Container at `ptr`: its command and args as written, the rest as the caller read it."""
    return Container(
        subject=ctx.subject,
        pointer=ptr,
        name=name,
        image=image,
        image_pointer=f"{ptr}/image",
        command=_strs(c.get("command")),
        command_pointer=f"{ptr}/command",
        args=_strs(c.get("args")),
        args_pointer=f"{ptr}/args",
        env=env,
        volumes=volumes,
        init=init,
        in_pod=ctx.in_pod,
        models=models,
        runtimes=runtimes,
    )


def _pod_spec(spec: Any, spec_ptr: str, ctx: _Ctx) -> list[Container]:
    spec = _dict(spec)
    volumes = _pod_volumes(spec, spec_ptr)
    out = []
    for key, init in (("initContainers", True), ("containers", False)):
        for i, c in enumerate(_list(spec.get(key))):
            if isinstance(c, dict):
                out.append(
                    _container(c, f"{spec_ptr}/{key}/{i}", ctx=ctx, init=init, volumes=volumes)
                )
    return out


def _annotation_models(annotations: Any, ann_ptr: str) -> tuple[ModelDecl, ...]:
    """`model.aibom.dev/name` (and `/revision`) on an object or a pod template."""
    ann = _dict(annotations)
    model = _str(ann.get(MODEL_NAME_ANNOTATION)).strip()
    if not model:
        return ()
    revision = _str(ann.get(MODEL_REVISION_ANNOTATION)).strip() or None
    return (
        ModelDecl(
            id=model,
            revision=revision,
            confidence=Confidence.DECLARED,
            source=Source.ANNOTATION,
            pointer=_ptr(ann_ptr, MODEL_NAME_ANNOTATION),
            via="annotation",
        ),
    )


def _template(template: Any, base: str, ctx: _Ctx) -> list[Container]:
    """A PodTemplateSpec at `base`: its containers, plus its own model annotations."""
    template = _dict(template)
    extra = _annotation_models(
        _dict(template.get("metadata")).get("annotations"), _ptr(base, "metadata", "annotations")
    )
    if extra:
        ctx = _replace(ctx, all_models=ctx.all_models + extra)
    return _pod_spec(template.get("spec"), _ptr(base, "spec"), ctx)


def _replace(ctx: _Ctx, **changes: Any) -> _Ctx:
    values = {f: getattr(ctx, f) for f in ctx.__dataclass_fields__}
    values.update(changes)
    return _Ctx(**values)


def _lws_template(lwt: Any, base: str, ctx: _Ctx) -> list[Container]:
    lwt = _dict(lwt)
    out = []
    for key in ("leaderTemplate", "workerTemplate"):
        if key in lwt:
            out += _template(lwt[key], _ptr(base, key), ctx)
    return out


# --- Dynamo ------------------------------------------------------------------


def _model_ref(ref: Any, ptr: str) -> tuple[ModelDecl, ...]:
    ref = _dict(ref)
    model = _str(ref.get("name")).strip()
    if not model:
        return ()
    return (
        ModelDecl(
            id=model,
            revision=_str(ref.get("revision")).strip() or None,
            confidence=Confidence.DECLARED,
            source=Source.SPEC,
            pointer=f"{ptr}/name",
            via="modelRef",
        ),
    )


def _dynamo_runtimes(
    component_type: str, type_ptr: str, backend: str, backend_ptr: str
) -> tuple[RuntimeDecl, ...]:
    out = []
    role = _DYNAMO_ROLES.get(component_type)
    if role is not None:
        out.append(
            RuntimeDecl(role, Confidence.DECLARED, Source.SPEC, type_ptr, "field dynamo type")
        )
    framework = _DYNAMO_BACKENDS.get(backend)
    if framework is not None and component_type in _DYNAMO_WORKER_TYPES:
        out.append(
            RuntimeDecl(
                framework, Confidence.DECLARED, Source.SPEC, backend_ptr,
                "field dynamo backendFramework",
            )
        )  # fmt: skip
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Graph:
    """Graph-wide settings a component inherits."""

    env: tuple[EnvVar, ...] = ()
    backend: str = ""
    backend_ptr: str = ""
    pvcs: dict[str, str] = field(default_factory=dict)  # v1alpha1 PVC name -> pointer


def _component_runtimes(
    comp: dict[str, Any], base: str, graph: _Graph, *, type_key: str
) -> tuple[RuntimeDecl, ...]:
    """The Dynamo runtimes a component declares: its type, and its backend or the graph's."""
    backend, backend_ptr = graph.backend, graph.backend_ptr
    if _str(comp.get("backendFramework")):
        backend, backend_ptr = _str(comp["backendFramework"]), _ptr(base, "backendFramework")
    return _dynamo_runtimes(_str(comp.get(type_key)), _ptr(base, type_key), backend, backend_ptr)


def _component_v1beta1(
    comp: dict[str, Any], base: str, ctx: _Ctx, graph: _Graph
) -> list[Container]:
    """A v1beta1 component spec (a DGD `spec.components[i]`, or a DCD `spec`)."""
    runtimes = _component_runtimes(comp, base, graph, type_key="type")
    template = _dict(comp.get("podTemplate"))
    containers = [c for c in _list(_dict(template.get("spec")).get("containers")) if c]
    names = [_str(_dict(c).get("name")) for c in containers]
    # New components must have a container named `main`; older ones may not,
    # then the only container (if there is just one) is the one hints belong to.
    main = "main" if "main" in names or len(names) != 1 else names[0]
    sidecar = _str(comp.get("frontendSidecar"))
    sidecars: dict[str, tuple[RuntimeDecl, ...]] = {}
    if sidecar:
        sidecars[sidecar] = (
            RuntimeDecl(
                "dynamo-frontend",
                Confidence.DECLARED,
                Source.SPEC,
                _ptr(base, "frontendSidecar"),
                "field dynamo frontendSidecar",
            ),
        )
    ctx = _replace(
        ctx,
        main=main,
        main_models=_model_ref(comp.get("modelRef"), _ptr(base, "modelRef")),
        main_runtimes=runtimes,
        main_env=graph.env,
        sidecar_runtimes=sidecars,
    )
    return _template(template, _ptr(base, "podTemplate"), ctx)


def _component_v1alpha1(
    comp: dict[str, Any], base: str, ctx: _Ctx, graph: _Graph
) -> list[Container]:
    """A v1alpha1 service spec (a DGD `spec.services[name]`, or a DCD `spec`)."""
    runtimes = _component_runtimes(comp, base, graph, type_key="componentType")
    env = _env(comp.get("envs"), _ptr(base, "envs")) + graph.env
    mounts = []
    for i, raw in enumerate(_list(comp.get("volumeMounts"))):
        mount = _dict(raw)
        pvc = _str(mount.get("name"))
        if pvc and not mount.get("useAsCompilationCache"):
            mounts.append(
                Volume(
                    kind="pvc",
                    name=pvc,
                    mount_path=_str(mount.get("mountPoint")) or None,
                    pointer=graph.pvcs.get(pvc, _ptr(base, "volumeMounts", i)),
                )
            )
    eps = _dict(comp.get("extraPodSpec"))
    eps_ptr = _ptr(base, "extraPodSpec")
    volumes = _pod_volumes(eps, eps_ptr)
    main_spec = _dict(eps.get("mainContainer"))
    main = _str(main_spec.get("name")) or "main"
    ctx = _replace(
        ctx,
        main=main,
        main_models=_model_ref(comp.get("modelRef"), _ptr(base, "modelRef")),
        main_runtimes=runtimes,
        main_env=env,
        main_volumes=tuple(mounts),
    )
    out = _pod_spec(eps, eps_ptr, ctx)
    if main_spec:
        out.append(
            _container(
                main_spec,
                _ptr(eps_ptr, "mainContainer"),
                ctx=ctx,
                init=False,
                volumes=volumes,
                default_name="main",
            )
        )
    sidecar = _dict(comp.get("frontendSidecar"))
    if sidecar:
        sptr = _ptr(base, "frontendSidecar")
        out.append(
            Container(
                subject=ctx.subject,
                pointer=sptr,
                name="",
                image=_str(sidecar.get("image")),
                image_pointer=_ptr(sptr, "image"),
                command=(),
                command_pointer=_ptr(sptr, "command"),
                args=_strs(sidecar.get("args")),
                args_pointer=_ptr(sptr, "args"),
                env=_env(sidecar.get("envs"), _ptr(sptr, "envs")),
                volumes=(),
                init=False,
                in_pod=ctx.in_pod,
                runtimes=(
                    RuntimeDecl(
                        "dynamo-frontend",
                        Confidence.DECLARED,
                        Source.SPEC,
                        sptr,
                        "field dynamo frontendSidecar",
                    ),
                ),
            )
        )
    return out


def _dynamo_component(comp: Any, base: str, ctx: _Ctx, graph: _Graph) -> list[Container]:
    """Either component shape, recognised by its fields (v1beta1 `podTemplate`/`type`,
    v1alpha1 `extraPodSpec`/`componentType`/a `frontendSidecar` object)."""
    comp = _dict(comp)
    out = []
    if "podTemplate" in comp or "type" in comp:
        out += _component_v1beta1(comp, base, ctx, graph)
    if (
        "extraPodSpec" in comp
        or "componentType" in comp
        or isinstance(comp.get("frontendSidecar"), dict)
    ):
        out += _component_v1alpha1(comp, base, ctx, graph)
    return out


def _graph(spec: dict[str, Any]) -> _Graph:
    env = _env(spec.get("env"), "/spec/env") + _env(spec.get("envs"), "/spec/envs")
    pvcs = {}
    for i, pvc in enumerate(_list(spec.get("pvcs"))):
        name = _str(_dict(pvc).get("name"))
        if name:
            pvcs[name] = _ptr("/spec/pvcs", i)
    return _Graph(
        env=env,
        backend=_str(spec.get("backendFramework")),
        backend_ptr="/spec/backendFramework",
        pvcs=pvcs,
    )


def _scrape_dgd(obj: Obj, ctx: _Ctx) -> list[Container]:
    spec = _dict(obj.get("spec"))
    graph = _graph(spec)
    out = []
    for i, comp in enumerate(_list(spec.get("components"))):
        out += _dynamo_component(comp, _ptr("/spec/components", i), ctx, graph)
    services = _dict(spec.get("services"))
    for name in sorted(services, key=str):
        out += _dynamo_component(services[name], _ptr("/spec/services", name), ctx, graph)
    return out


def _scrape_dcd(obj: Obj, ctx: _Ctx) -> list[Container]:
    spec = _dict(obj.get("spec"))
    return _dynamo_component(spec, "/spec", ctx, _graph(spec))


# --- NIM ---------------------------------------------------------------------


def nim_image(image: Any) -> str:
    """`spec.image{repository,tag}` as a reference (a `sha256:` tag is a digest)."""
    image = _dict(image)
    repository = _str(image.get("repository")).strip()
    raw_tag = image.get("tag")
    # YAML reads an unquoted `tag: 1.12` as a number; the operator gets a string.
    tag = str(raw_tag) if isinstance(raw_tag, int | float) else _str(raw_tag).strip()
    if not repository:
        return ""
    if tag.startswith("sha256:"):
        return f"{repository}@{tag}"
    return f"{repository}:{tag}" if tag else repository


def _nim_container(c: dict[str, Any], ptr: str, ctx: _Ctx, *, init: bool) -> Container:
    return _container_at(
        c,
        ptr,
        ctx,
        name=_str(c.get("name")),
        image=nim_image(c.get("image")),
        env=_env(c.get("env"), f"{ptr}/env"),
        volumes=(),
        init=init,
    )


def _scrape_nim(obj: Obj, ctx: _Ctx) -> list[Container]:
    spec = _dict(obj.get("spec"))
    storage = _dict(spec.get("storage"))
    volumes = []
    cache = _dict(storage.get("nimCache"))
    if _str(cache.get("name")):
        volumes.append(
            Volume(
                kind="nimcache",
                name=_str(cache["name"]),
                mount_path=None,
                pointer="/spec/storage/nimCache",
                profile=_str(cache.get("profile")) or None,
            )
        )
    for kind, name, pointer in (
        ("pvc", _str(_dict(storage.get("pvc")).get("name")), "/spec/storage/pvc"),
        ("hostpath", _str(storage.get("hostPath")), "/spec/storage/hostPath"),
    ):
        if name:
            volumes.append(Volume(kind=kind, name=name, mount_path=None, pointer=pointer))
    models = list(ctx.all_models)
    status_model = _str(_dict(_dict(obj.get("status")).get("model")).get("name")).strip()
    if status_model:
        models.append(
            ModelDecl(
                id=status_model,
                revision=None,
                confidence=Confidence.VERIFIED,
                source=Source.STATUS,
                pointer="/status/model/name",
                via="status.model",
            )
        )
    main = Container(
        subject=ctx.subject,
        pointer="/spec",
        name="",
        image=nim_image(spec.get("image")),
        image_pointer="/spec/image",
        command=_strs(spec.get("command")),
        command_pointer="/spec/command",
        args=_strs(spec.get("args")),
        args_pointer="/spec/args",
        env=_env(spec.get("env"), "/spec/env"),
        volumes=tuple(volumes),
        init=False,
        in_pod=ctx.in_pod,
        models=tuple(models),
        runtimes=(
            RuntimeDecl("nim", Confidence.DECLARED, Source.SPEC, "/spec/image", "kind NIMService"),
        ),
    )
    out = [main]
    for key, init in (("initContainers", True), ("sidecarContainers", False)):
        for i, c in enumerate(_list(spec.get(key))):
            if isinstance(c, dict):
                out.append(_nim_container(c, _ptr("/spec", key, i), ctx, init=init))
    return out


# --- KServe ------------------------------------------------------------------

KSERVE_MAIN = "kserve-container"
# The deprecated per-framework predictor fields, and the model format each is.
_KSERVE_FRAMEWORKS = (
    "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "pmml",
    "lightgbm", "paddle", "huggingface",
)  # fmt: skip
# The ServingRuntime KServe picks for a model format (config/runtimes: the
# autoSelect runtimes; v2-protocol sklearn/xgboost/lightgbm go to MLServer),
# as our runtime names. Inferred: a cluster may install other runtimes.
_KSERVE_FORMAT_RUNTIME = {
    "huggingface": "kserve-huggingfaceserver",
    "sklearn": "kserve-sklearnserver",
    "xgboost": "kserve-xgbserver",
    "lightgbm": "kserve-lgbserver",
    "pmml": "kserve-pmmlserver",
    "paddle": "kserve-paddleserver",
    "tensorflow": "tensorflow-serving",
    "pytorch": "torchserve",
    "onnx": "triton",
    "tensorrt": "triton",
    "triton": "triton",
    "mlflow": "mlserver",
}
_KSERVE_V2_MLSERVER = frozenset({"sklearn", "xgboost", "lightgbm"})
# KServe's own ClusterServingRuntime names, as our runtime names.
_KSERVE_RUNTIMES = {
    "kserve-huggingfaceserver": "kserve-huggingfaceserver",
    "kserve-huggingfaceserver-multinode": "kserve-huggingfaceserver",
    "kserve-sklearnserver": "kserve-sklearnserver",
    "kserve-xgbserver": "kserve-xgbserver",
    "kserve-lgbserver": "kserve-lgbserver",
    "kserve-pmmlserver": "kserve-pmmlserver",
    "kserve-paddleserver": "kserve-paddleserver",
    "kserve-tensorflow-serving": "tensorflow-serving",
    "kserve-torchserve": "torchserve",
    "kserve-tritonserver": "triton",
    "kserve-mlserver": "mlserver",
}


def kserve_storage(uri: str, ptr: str) -> tuple[ModelDecl, Volume | None]:
    """What a `storageUri` says: a model identity, or a location (unresolved) and its data.

    `hf://org/model[:revision]` and `https://huggingface.co/org/model` name a
    Hugging Face model; `oci://registry/repo:tag` a modelcar image (an OCI
    artifact: the identity). `pvc://claim/path`, `s3://`, `gs://`, `https://`,
    `azure://`, `hdfs://`... name a place: the model stays unresolved, the
    URI is its evidence and the place a `data` component.
    """
    uri = uri.strip()
    scheme, sep, rest = uri.partition("://")
    scheme = scheme.lower()
    if sep and scheme == "hf" and rest:
        model, _, revision = rest.partition(":")
        model = model.strip("/")
        if model.count("/") == 1:
            return ModelDecl(
                id=model, revision=revision or None, confidence=Confidence.DECLARED,
                source=Source.SPEC, pointer=ptr, via="storageUri",
            ), None  # fmt: skip
    if sep and scheme in ("http", "https") and rest.split("/")[0] in (
        "huggingface.co", "www.huggingface.co", "hf.co",
    ):  # fmt: skip
        return ModelDecl(
            id=uri, revision=None, confidence=Confidence.DECLARED,
            source=Source.SPEC, pointer=ptr, via="storageUri",
        ), None  # fmt: skip
    if sep and scheme == "oci" and rest:
        return ModelDecl(
            id=uri, revision=None, confidence=Confidence.DECLARED,
            source=Source.SPEC, pointer=ptr, via="storageUri",
        ), None  # fmt: skip
    volume: Volume | None = None
    if sep and scheme == "pvc" and rest:
        claim = rest.partition("/")[0]
        volume = Volume(kind="pvc", name=claim, mount_path=None, pointer=ptr)
    elif sep and rest:
        volume = Volume(kind="storage-uri", name=uri, mount_path=None, pointer=ptr)
    return ModelDecl(
        id="",
        revision=None,
        confidence=Confidence.UNRESOLVED,
        source=Source.SPEC,
        pointer=ptr,
        via="storageUri",
        reason=f"storageUri {uri}: a storage location, not a model identity",
        detail=("aibom.model.storage-uri", uri),
    ), volume


def _kserve_model_container(
    spec: dict[str, Any], ptr: str, ctx: _Ctx, *, format_name: str, protocol: str
) -> Container:
    """The predictor's `model` (or a framework field): a container the runtime fills in."""
    models: list[ModelDecl] = list(ctx.all_models)
    volumes: list[Volume] = []
    props: tuple[tuple[str, str], ...] = ()
    fmt = _dict(spec.get("modelFormat"))
    fmt_name = _str(fmt.get("name")).strip() or format_name
    fmt_ptr = _ptr(ptr, "modelFormat", "name") if _str(fmt.get("name")) else ptr
    if fmt_name:
        version = _str(fmt.get("version")).strip()
        props = (("aibom.model.format", f"{fmt_name}@{version}" if version else fmt_name),)
    uri = _str(spec.get("storageUri")).strip()
    if uri:
        decl, volume = kserve_storage(uri, _ptr(ptr, "storageUri"))
        models.append(_with(decl, props))
        if volume is not None:
            volumes.append(volume)
    storage = _dict(spec.get("storage"))
    if storage:
        key, path = _str(storage.get("key")), _str(storage.get("path"))
        where = " ".join(
            x for x in (f"key {key}" if key else "", f"path {path}" if path else "") if x
        )
        models.append(
            ModelDecl(
                id="", revision=None, confidence=Confidence.UNRESOLVED, source=Source.SPEC,
                pointer=_ptr(ptr, "storage"), via="storage",
                reason=f"storage {where or '(empty)'}: a storage location, not a model identity",
                detail=("aibom.model.storage-uri", f"storage {where}".strip()),
                properties=props,
            )
        )  # fmt: skip
    runtimes: list[RuntimeDecl] = []
    runtime = _str(spec.get("runtime")).strip()
    if runtime:
        runtimes.append(
            RuntimeDecl(
                _KSERVE_RUNTIMES.get(runtime, runtime), Confidence.DECLARED, Source.SPEC,
                _ptr(ptr, "runtime"), f"field kserve runtime {runtime}",
            )
        )  # fmt: skip
    elif fmt_name:
        name = _KSERVE_FORMAT_RUNTIME.get(fmt_name.lower())
        if fmt_name.lower() in _KSERVE_V2_MLSERVER and protocol == "v2":
            name = "mlserver"
        if name is not None:
            runtimes.append(
                RuntimeDecl(
                    name, Confidence.INFERRED, Source.SPEC, fmt_ptr,
                    f"field kserve modelFormat {fmt_name}",
                )
            )  # fmt: skip
    return Container(
        subject=ctx.subject,
        pointer=ptr,
        name=_str(spec.get("name")) or KSERVE_MAIN,
        image=_str(spec.get("image")),
        image_pointer=_ptr(ptr, "image"),
        command=_strs(spec.get("command")),
        command_pointer=_ptr(ptr, "command"),
        args=_strs(spec.get("args")),
        args_pointer=_ptr(ptr, "args"),
        env=_env(spec.get("env"), _ptr(ptr, "env")),
        volumes=tuple(volumes),
        init=False,
        in_pod=ctx.in_pod,
        models=tuple(models),
        runtimes=tuple(runtimes),
    )


def _with(decl: ModelDecl, props: tuple[tuple[str, str], ...]) -> ModelDecl:
    if not props:
        return decl
    return replace(decl, properties=decl.properties + props)


def _scrape_isvc(obj: Obj, ctx: _Ctx) -> list[Container]:
    spec = _dict(obj.get("spec"))
    out: list[Container] = []
    for component in ("predictor", "transformer", "explainer"):
        comp = _dict(spec.get(component))
        if not comp:
            continue
        base = _ptr("/spec", component)
        # Custom containers: the inline PodSpec; `kserve-container` is the main one.
        out += _pod_spec(comp, base, ctx)
        if component != "predictor":
            continue
        protocol = ""
        model = _dict(comp.get("model"))
        if model:
            protocol = _str(model.get("protocolVersion"))
            out.append(
                _kserve_model_container(
                    model, _ptr(base, "model"), ctx, format_name="", protocol=protocol
                )
            )
        for framework in _KSERVE_FRAMEWORKS:
            fw = _dict(comp.get(framework))
            if fw:
                out.append(
                    _kserve_model_container(
                        fw, _ptr(base, framework), ctx, format_name=framework,
                        protocol=_str(fw.get("protocolVersion")),
                    )
                )  # fmt: skip
        worker = _dict(comp.get("workerSpec"))
        if worker:
            out += _pod_spec(worker, _ptr(base, "workerSpec"), ctx)
    return out


# --- KubeRay -------------------------------------------------------------------


def _ray_cluster_spec(spec: Any, base: str, ctx: _Ctx) -> list[Container]:
    """A RayClusterSpec at `base`: the head group's Pod template and each worker group's."""
    spec = _dict(spec)
    head = _dict(spec.get("headGroupSpec")).get("template")
    out = _template(head, _ptr(base, "headGroupSpec", "template"), ctx)
    for i, group in enumerate(_list(spec.get("workerGroupSpecs"))):
        template = _dict(group).get("template")
        out += _template(template, _ptr(base, "workerGroupSpecs", i, "template"), ctx)
    return out


def _scrape_raycluster(obj: Obj, ctx: _Ctx) -> list[Container]:
    return _ray_cluster_spec(obj.get("spec"), "/spec", ctx)


def _scrape_rayservice(obj: Obj, ctx: _Ctx) -> list[Container]:
    config = _dict(obj.get("spec")).get("rayClusterConfig")
    return _ray_cluster_spec(config, "/spec/rayClusterConfig", ctx)


def _scrape_rayjob(obj: Obj, ctx: _Ctx) -> list[Container]:
    spec = _dict(obj.get("spec"))
    out = _ray_cluster_spec(spec.get("rayClusterSpec"), "/spec/rayClusterSpec", ctx)
    return out + _template(spec.get("submitterPodTemplate"), "/spec/submitterPodTemplate", ctx)


# --- the rest ------------------------------------------------------------------


def _scrape_template(obj: Obj, ctx: _Ctx) -> list[Container]:
    return _template(_dict(obj.get("spec")).get("template"), "/spec/template", ctx)


def _scrape_cronjob(obj: Obj, ctx: _Ctx) -> list[Container]:
    job = _dict(_dict(obj.get("spec")).get("jobTemplate"))
    return _template(_dict(job.get("spec")).get("template"), "/spec/jobTemplate/spec/template", ctx)


def _scrape_lws(obj: Obj, ctx: _Ctx) -> list[Container]:
    spec = _dict(obj.get("spec"))
    return _lws_template(spec.get("leaderWorkerTemplate"), "/spec/leaderWorkerTemplate", ctx)


def _scrape_disaggregated(obj: Obj, ctx: _Ctx) -> list[Container]:
    out = []
    for i, role in enumerate(_list(_dict(obj.get("spec")).get("roles"))):
        lwt = _dict(_dict(role).get("spec")).get("leaderWorkerTemplate")
        out += _lws_template(lwt, _ptr("/spec/roles", i, "spec", "leaderWorkerTemplate"), ctx)
    return out


def _scrape_podclique(obj: Obj, ctx: _Ctx) -> list[Container]:
    return _pod_spec(_dict(obj.get("spec")).get("podSpec"), "/spec/podSpec", ctx)


def _scrape_podcliqueset(obj: Obj, ctx: _Ctx) -> list[Container]:
    out = []
    cliques = _list(_dict(_dict(obj.get("spec")).get("template")).get("cliques"))
    for i, clique in enumerate(cliques):
        podspec = _dict(_dict(clique).get("spec")).get("podSpec")
        out += _pod_spec(podspec, _ptr("/spec/template/cliques", i, "spec", "podSpec"), ctx)
    return out


def _scrape_pod(obj: Obj, ctx: _Ctx) -> list[Container]:
    return _pod_spec(obj.get("spec"), "/spec", ctx)


def _scrape_generic(obj: Obj, ctx: _Ctx) -> list[Container]:
    """A kind we have no scraper for: try the places pod templates usually live."""
    spec = _dict(obj.get("spec"))
    if isinstance(spec.get("template"), dict):
        return _scrape_template(obj, ctx)
    if isinstance(spec.get("jobTemplate"), dict):
        return _scrape_cronjob(obj, ctx)
    if isinstance(spec.get("leaderWorkerTemplate"), dict):
        return _scrape_lws(obj, ctx)
    if isinstance(spec.get("podSpec"), dict):
        return _scrape_podclique(obj, ctx)
    if isinstance(spec.get("containers"), list):
        return _scrape_pod(obj, ctx)
    return []


_Scraper = Callable[[Obj, _Ctx], list[Container]]

# Keyed by (group, Kind); the group is checked so a same-named kind of another
# API group falls through to the generic scraper instead of a wrong shape.
_SCRAPERS: dict[tuple[str, str], _Scraper] = {
    ("apps", "Deployment"): _scrape_template,
    ("apps", "StatefulSet"): _scrape_template,
    ("apps", "DaemonSet"): _scrape_template,
    ("apps", "ReplicaSet"): _scrape_template,
    ("batch", "Job"): _scrape_template,
    ("batch", "CronJob"): _scrape_cronjob,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _scrape_lws,
    ("disaggregatedset.x-k8s.io", "DisaggregatedSet"): _scrape_disaggregated,
    ("nvidia.com", "DynamoGraphDeployment"): _scrape_dgd,
    ("nvidia.com", "DynamoComponentDeployment"): _scrape_dcd,
    ("apps.nvidia.com", "NIMService"): _scrape_nim,
    ("grove.io", "PodClique"): _scrape_podclique,
    ("grove.io", "PodCliqueSet"): _scrape_podcliqueset,
    ("", "Pod"): _scrape_pod,
    ("serving.kserve.io", "InferenceService"): _scrape_isvc,
    ("ray.io", "RayCluster"): _scrape_raycluster,
    ("ray.io", "RayService"): _scrape_rayservice,
    ("ray.io", "RayJob"): _scrape_rayjob,
}


def pod_signature(pod: Obj) -> list[Any]:
    """Everything `scrape` reads from a pod, minus the pod's identity.

    Pods of one ReplicaSet or StatefulSet revision are alike: a pod whose
    signature an earlier pod of the same root had yields the same facts, and
    skipping its scrape is most of the cost of a root with many pods. Only
    model-source volumes count, so per-pod token volumes do not split them.
    Compare signatures with `==` (deep, at C speed); they hold raw lists and
    dicts, so they are not hashable.
    """
    spec = _dict(pod.get("spec"))
    sources = []
    for raw in _list(spec.get("volumes")):
        vol = _dict(raw)
        if "persistentVolumeClaim" in vol or "hostPath" in vol:
            sources.append(vol)
    names = {_str(v.get("name")) for v in sources}
    parts: list[Any] = [sources]
    for key in ("initContainers", "containers"):
        for raw in _list(spec.get(key)):
            c = _dict(raw)
            mounts = (
                [m for m in _list(c.get("volumeMounts")) if _str(_dict(m).get("name")) in names]
                if names
                else None
            )
            parts.append(
                (key, c.get("name"), c.get("image"), c.get("command"), c.get("args"),
                 c.get("env"), mounts)
            )  # fmt: skip
    ann = annotations_of(pod)
    if ann:
        parts.append((ann.get(MODEL_NAME_ANNOTATION), ann.get(MODEL_REVISION_ANNOTATION)))
    return parts


def object_signature(obj: Obj) -> tuple[Any, ...]:
    """Everything `scrape` reads from an object, minus the object's identity.

    `scrape` reads an object's `apiVersion` and `kind` (which scraper), its
    model annotations, its `spec` and, of its status, only `status.model.name`
    (a NIMService's served model); its name only makes the subject. Two
    objects with equal signatures yield the same containers but for the
    subject. For a Pod, `pod_signature` is the finer key (it leaves out the
    per-pod volumes). Holds raw values: compare with `==`, or serialize.
    """
    ann = annotations_of(obj)
    status = obj.get("status")
    model = status.get("model") if isinstance(status, dict) else None
    return (
        obj.get("apiVersion"),
        obj.get("kind"),
        ann.get(MODEL_NAME_ANNOTATION),
        ann.get(MODEL_REVISION_ANNOTATION),
        obj.get("spec"),
        model.get("name") if isinstance(model, dict) else None,
    )


def subject_of(obj: Obj) -> str:
    """`<Kind>/<name>`, the object part of every locator."""
    return f"{_str(obj.get('kind')) or 'Object'}/{name_of(obj)}"


def scrape(obj: Any, *, subject: str | None = None) -> tuple[Container, ...]:
    """Every container one object declares, with its hints. Never raises on odd input.

    `subject`: what the containers' locators name the object as (default
    `subject_of(obj)`); the document's fact cache passes a stand-in.
    """
    if not isinstance(obj, dict):
        return ()
    kind = _str(obj.get("kind"))
    group = _str(obj.get("apiVersion")).rpartition("/")[0]
    ctx = _Ctx(
        subject=subject_of(obj) if subject is None else subject,
        in_pod=(group, kind) == ("", "Pod"),
        all_models=_annotation_models(annotations_of(obj), "/metadata/annotations"),
    )
    scraper = _SCRAPERS.get((group, kind), _scrape_generic)
    return tuple(scraper(obj, ctx))


__all__ = [
    "MODEL_NAME_ANNOTATION",
    "MODEL_REVISION_ANNOTATION",
    "Container",
    "EnvVar",
    "ModelDecl",
    "RuntimeDecl",
    "Volume",
    "nim_image",
    "object_signature",
    "pod_signature",
    "scrape",
    "subject_of",
]
