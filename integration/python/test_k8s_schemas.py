"""Every rendered Istio manifest in k8s/ validates against its CRD's openAPIV3Schema
(k8s/schemas/, vendored from istio/api), the way the API server would check it, and strictly:
unknown fields are errors (as with `kubectl apply --validate=strict`) except where the schema
preserves unknown fields (pluginConfig, EnvoyFilter patch values).

CEL rules (x-kubernetes-validations) are not evaluated by jsonschema; the few that concern
these manifests are checked by hand below."""

import copy
import json
import pathlib

import jsonschema
import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"

# Kinds without a vendored schema (Gateway's CRD was not among the schemas provided; the
# Deployment patch is a strategic-merge patch, not a resource).
# ConfigMap is a core kind (no CRD schema among these).
UNVALIDATED = {"Gateway", "ConfigMap"}


def strict(schema):
    """Kubernetes structural schema -> JSON schema that rejects unknown fields."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node and not node.get(
                "x-kubernetes-preserve-unknown-fields"
            ):
                node.setdefault("additionalProperties", False)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    # apiVersion/kind/metadata are checked by the API server itself.
    s.setdefault("properties", {}).update(
        {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    )
    return s


def schemas():
    out = {}
    for f in sorted((K8S / "schemas").glob("*.json")):
        d = json.loads(f.read_text())
        out[d["kind"]] = (f"{d['group']}/{d['version']}", strict(d["openAPIV3Schema"]))
    return out


def manifests():
    docs = []
    for f in sorted(K8S.glob("*/*.yaml")):
        if f.parent.name == "schemas" or f.name == "keys-patch.yaml":
            continue
        for d in yaml.safe_load_all(f.read_text()):
            if d:
                docs.append((f"{f.relative_to(K8S)}:{d['kind']}/{d['metadata']['name']}", d))
    return docs


SCHEMAS = schemas()
DOCS = manifests()


def test_every_kind_has_a_schema_or_is_listed():
    kinds = {d["kind"] for _, d in DOCS}
    # No WasmPlugin: the EnvoyFilter inserts the decision filter itself (see the README).
    assert {"EnvoyFilter", "ServiceEntry", "DestinationRule", "VirtualService", "ConfigMap"} <= kinds
    assert "WasmPlugin" not in kinds
    assert kinds - set(SCHEMAS) <= UNVALIDATED, kinds - set(SCHEMAS)


@pytest.mark.parametrize("name,doc", DOCS, ids=[n for n, _ in DOCS])
def test_manifest_validates_against_its_crd_schema(name, doc):
    if doc["kind"] in UNVALIDATED:
        pytest.skip(f"no schema for {doc['kind']}")
    api_version, schema = SCHEMAS[doc["kind"]]
    assert doc["apiVersion"] == api_version, name
    jsonschema.validate(doc, schema, cls=jsonschema.Draft7Validator)


def test_cel_rules_that_apply():
    filters = [(n, d) for n, d in DOCS if d["kind"] == "EnvoyFilter"]
    assert filters
    for name, d in filters:
        spec = d["spec"]
        # "only one of targetRefs or workloadSelector can be set"
        assert sum(k in spec for k in ("workloadSelector", "targetRefs")) == 1, name
        for p in spec["configPatches"]:
            # Extension configs are added by name, never matched.
            assert (p["applyTo"] == "EXTENSION_CONFIG") == ("match" not in p), (name, p["applyTo"])


def test_sds_config_map_is_mounted_and_holds_no_key():
    """The key files' SDS resources: in the ConfigMap, naming a file of the mounted key Secret
    (keys: files, the default) and never holding a key; the keys patch mounts both."""
    for variant in ("egress-gateway", "sidecar"):
        maps = [
            d
            for n, d in DOCS
            if n.startswith(variant + "/") and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "switchyard-sds"
        ]
        assert len(maps) == 1, variant
        assert maps[0]["data"], variant
        for file, text in maps[0]["data"].items():
            secret = json.loads(text)["resources"][0]["generic_secret"]["secret"]
            assert list(secret) == ["filename"], file
            assert secret["filename"].startswith("/etc/switchyard/keys/"), file
        patch = yaml.safe_load((K8S / variant / "keys-patch.yaml").read_text())["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in patch["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in patch["containers"][0]["volumeMounts"]}
        assert volumes["switchyard-sds"]["configMap"]["name"] == maps[0]["metadata"]["name"]
        assert mounts["switchyard-sds"] == "/etc/switchyard/sds"
        assert "secretName" in volumes["switchyard-keys"]["secret"]
        assert mounts["switchyard-keys"] == "/etc/switchyard/keys"
        # No key as an environment variable of the proxy (only the bootstrap override's path).
        assert [e["name"] for e in patch["containers"][0].get("env", [])] == ["ISTIO_BOOTSTRAP_OVERRIDE"], variant


def test_bootstrap_override_is_mounted_and_named_by_istio_bootstrap_override():
    """istio-agent hands Envoy the file ISTIO_BOOTSTRAP_OVERRIDE names (pkg/envoy/proxy.go at
    release-1.31). The keys patch sets the variable and mounts the ConfigMap itself, with no
    sidecar.istio.io/bootstrapOverride annotation: only injection reads that, and istioctl's
    istio-egress chart is not injected. The ConfigMap carries the metrics' stats_tags only."""
    for variant in ("egress-gateway", "sidecar"):
        template = yaml.safe_load((K8S / variant / "keys-patch.yaml").read_text())["spec"]["template"]
        assert "sidecar.istio.io/bootstrapOverride" not in template.get("metadata", {}).get("annotations", {}), variant
        (proxy,) = template["spec"]["containers"]
        path = {e["name"]: e.get("value") for e in proxy["env"]}["ISTIO_BOOTSTRAP_OVERRIDE"]
        mount = next(m for m in proxy["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
        volume = next(v for v in template["spec"]["volumes"] if v["name"] == mount["name"])
        name = volume["configMap"]["name"]
        maps = [d for n, d in DOCS if n.startswith(variant + "/") and d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
        assert maps, variant
        for m in maps:
            override = json.loads(m["data"][path[len(mount["mountPath"]) + 1 :]])
            tags = {t["tag_name"] for t in override["stats_config"]["stats_tags"]}
            assert {"model", "endpoint", "gen_ai_provider_name", "gen_ai_token_type", "caller"} <= tags, tags
            assert list(override) == ["stats_config"], "the override changes nothing but the label rules"


def test_sidecar_patch_container_has_an_image_and_its_mounts_live_where_the_pods_do():
    """The sidecar patch adds istio-proxy to an application pod template: the API server refuses a
    container without image, and `auto` is what Istio's injector replaces (pkg/kube/inject/webhook.go).
    The gateway patch names no image (the charts' Deployments have theirs; istioctl's is not
    injected, so `auto` would stay). What the sidecar mounts, and the selector-based Telemetry,
    are in the namespaces the ServiceEntries are exported to, never only in istio-system."""
    side = yaml.safe_load((K8S / "sidecar" / "keys-patch.yaml").read_text())["spec"]["template"]["spec"]
    assert side["containers"][0]["image"] == "auto"
    gw = yaml.safe_load((K8S / "egress-gateway" / "keys-patch.yaml").read_text())["spec"]["template"]["spec"]
    assert "image" not in gw["containers"][0]
    docs = [d for n, d in DOCS if n.startswith("sidecar/")]
    exported = {tuple(d["spec"]["exportTo"]) for d in docs if d["kind"] in ("ServiceEntry", "DestinationRule", "VirtualService")}
    assert len(exported) == 1, exported
    (namespaces,) = exported
    assert "*" not in namespaces and "." not in namespaces, namespaces
    for kind, name in (("ConfigMap", "switchyard-sds"), ("ConfigMap", "switchyard-bootstrap"), ("Telemetry", "switchyard-genai")):
        found = sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
        assert found == sorted(namespaces), (kind, name, found)


def test_telemetry_selects_the_workloads_the_envoyfilter_patches():
    """The GenAI span attributes go to exactly the proxies that run the filters, and read only
    what the filter writes (its filter state) or sets (its response headers)."""
    for variant in ("egress-gateway", "sidecar"):
        docs = [d for n, d in DOCS if n.startswith(variant + "/")]
        telemetry = [d for d in docs if d["kind"] == "Telemetry"]
        if not telemetry:
            continue
        (t,) = telemetry
        (ef,) = [d for d in docs if d["kind"] == "EnvoyFilter"]
        assert t["spec"]["selector"]["matchLabels"] == ef["spec"]["workloadSelector"]["labels"], variant
        tags = t["spec"]["tracing"][0]["customTags"]
        assert "providers" not in t["spec"]["tracing"][0], "the mesh's tracing provider is inherited"
        for name, tag in tags.items():
            kind, value = next(iter(tag.items()))
            assert kind in ("formatter", "literal"), name
            if kind == "formatter":
                v = value["value"]
                assert v.startswith("%FILTER_STATE(wasm.switchyard.") or v.startswith("%RESP(x-switchyard-"), (name, v)
        assert {"gen_ai.request.model", "gen_ai.response.model", "gen_ai.provider.name", "gen_ai.usage.input_tokens"} <= set(tags)
        # Every plugin configuration the EnvoyFilter carries (JSON strings) turns the attributes on.
        configs = []

        def walk(node):
            if isinstance(node, dict):
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)
            elif isinstance(node, str) and node.startswith("{") and '"providers"' in node:
                configs.append(json.loads(node))

        walk(ef)
        assert configs, variant
        for c in configs:
            assert c["telemetry"]["request_attributes"] is True, "the filter must write what the tags read"
