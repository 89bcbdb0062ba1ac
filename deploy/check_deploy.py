#!/usr/bin/env python3
"""Static checks of the deployment files against each other and against the code (run by
scripts/deploy_check.sh; no cluster, container or server needed).

  check_deploy.py helm RENDERED DEFAULTS VALUES   helm template's objects (JSON, as kubectl writes
                                                  them) for one values file (defaults + that file,
                                                  JSON likewise)
  check_deploy.py compose COMPOSE.yaml            needs PyYAML
  check_deploy.py systemd UNIT...
  check_deploy.py metrics FILE...                 every uma_* metric named exists in src/

Names are checked against the source: every --flag a binary is given is one of its CLI11 flags,
every UMA_* variable is read by the code or by deploy/docker/uma-entrypoint.
"""
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
ENTRYPOINT = ROOT / "deploy" / "docker" / "uma-entrypoint"
# Each binary's own declarations, and the Redis flag group every one of them declares through.
REDIS_FLAGS = SRC / "cluster" / "redis_flags.h"
FLAG_SOURCES = {
    "umad": [SRC / "daemon" / "daemon_flags.cc", REDIS_FLAGS],
    "uma-gw": [SRC / "gateway" / "gw_main.cc", REDIS_FLAGS],
    "uma-agent": [SRC / "agent" / "agent_main.cc", REDIS_FLAGS],
    "uma-store": [SRC / "tools" / "store" / "store_main.cc", REDIS_FLAGS],
}
ROLES = {"umad": "umad", "daemon": "umad", "gateway": "uma-gw", "gw": "uma-gw", "uma-gw": "uma-gw",
         "agent": "uma-agent", "uma-agent": "uma-agent", "store": "uma-store", "uma-store": "uma-store"}
errors = []


def fail(where, what):
    errors.append("%s: %s" % (where, what))


def flags_of(binary):
    """The flags a binary's CLI11 declarations accept (--name, -n, --no-name)."""
    text = "".join(path.read_text() for path in FLAG_SOURCES[binary])
    names = {"--help", "-h"}
    if binary == "umad":
        names.add("--version")
    for m in re.finditer(r'add_(?:option|flag)\(\s*"([^"]+)"', text):
        for part in m.group(1).split(","):
            part = part.strip().lstrip("!")
            if part.startswith("-"):
                names.add(part)
    return names


FLAGS = {b: flags_of(b) for b in FLAG_SOURCES}


def known_env():
    names = set()
    for path in list(SRC.rglob("*.cc")) + list(SRC.rglob("*.h")) + [ENTRYPOINT]:
        names.update(re.findall(r"\bUMA_[A-Z0-9_]+\b", path.read_text(errors="replace")))
    return names


ENV = known_env()


def check_args(where, args):
    """A command line of the image's entrypoint (role first) or of a binary itself."""
    if not args:
        return
    first = pathlib.PurePath(args[0]).name
    binary = ROLES.get(first)
    if binary is None:
        return  # not ours (sh, nginx, prometheus, python3)
    current = binary
    for a in args[1:]:
        if a == "--":
            if binary != "uma-agent":
                fail(where, "'--' only means something to uma-agent")
            current = "umad"  # what uma-agent hands every model's umad
            continue
        if not a.startswith("-") or re.fullmatch(r"-[0-9.]+", a):
            continue  # a value (or a negative number)
        name = a.split("=", 1)[0]
        if name not in FLAGS[current]:
            fail(where, "%s has no flag %s" % (current, name))


def check_env_name(where, name):
    if name.startswith("UMA_") and name not in ENV:
        fail(where, "no code reads the variable %s" % name)


# ---- helm -------------------------------------------------------------------------------------

def load_objects(path):
    text = pathlib.Path(path).read_text()
    decoder, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        obj, i = decoder.raw_decode(text, i)
        out.extend(obj.get("items", [obj]) if obj.get("kind") == "List" else [obj])


def merged(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = merged(a.get(k), v) if k in a else v
        return out
    return b


def values_of(path):
    objs = load_objects(path)
    return objs[0].get("spec", {}) if objs else {}


def pod_spec(obj):
    return obj.get("spec", {}).get("template", {}).get("spec")


def component(obj):
    return obj.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component")


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_helm(rendered, defaults, values_file):
    values = merged(values_of(defaults), values_of(values_file))
    objs = load_objects(rendered)
    where = pathlib.Path(values_file).name
    by_kind = {}
    for o in objs:
        meta = o.get("metadata", {})
        if not o.get("apiVersion") or not o.get("kind") or not meta.get("name"):
            fail(where, "an object without apiVersion, kind or metadata.name: %s" % json.dumps(o)[:120])
            continue
        if len(meta["name"]) > 63:
            fail(where, "%s/%s: name longer than 63 characters" % (o["kind"], meta["name"]))
        key = (o["kind"], meta["name"])
        if key in by_kind:
            fail(where, "%s/%s rendered twice" % key)
        by_kind[key] = o

    def of(kind, comp=None):
        return [o for (k, _), o in by_kind.items() if k == kind and (comp is None or component(o) == comp)]

    def want(kind, comp, n, why):
        got = len(of(kind, comp))
        if got != n:
            fail(where, "%d %s of component %s rendered, want %d (%s)" % (got, kind, comp, n, why))

    redis_on = values["redis"]["enabled"]
    want("Deployment", "gateway", 1, "the gateways")
    want("Service", "gateway", 1, "the gateways' Service")
    want("StatefulSet", "agent", 1, "the agents")
    want("Service", "agent", 1, "the agents' headless Service")
    want("StatefulSet", "redis", 1 if redis_on else 0, "redis.enabled")
    want("Service", "redis", 1 if redis_on else 0, "redis.enabled")
    want("HorizontalPodAutoscaler", "gateway", 1 if values["gateway"]["autoscaling"]["enabled"] else 0, "autoscaling")
    want("PodDisruptionBudget", "gateway", 1 if values["gateway"]["pdb"]["enabled"] else 0, "gateway.pdb")
    want("PodDisruptionBudget", "agent", 1 if values["agent"]["replicas"] > 1 else 0, "more than one agent")
    sm = values["metrics"]["serviceMonitor"]["enabled"]
    want("ServiceMonitor", "gateway", 1 if sm else 0, "metrics.serviceMonitor")
    want("ServiceMonitor", "agent", 1 if sm else 0, "metrics.serviceMonitor")

    # Secrets: rendered here (with their keys) or made beforehand, as values name them.
    rendered_secrets = {o["metadata"]["name"]: set(o.get("data", {})) | set(o.get("stringData", {}))
                        for o in of("Secret")}
    external = {e["existingSecret"] for e in values["secrets"].values() if e.get("existingSecret")}
    external |= {s["name"] for s in values.get("imagePullSecrets", [])}

    def secret_ref(at, name, key=None):
        if name in rendered_secrets:
            if key is not None and key not in rendered_secrets[name]:
                fail(where, "%s: Secret %s has no key %s" % (at, name, key))
        elif name not in external:
            fail(where, "%s: Secret %s is neither rendered nor named in values as existing" % (at, name))

    workloads = of("Deployment") + of("StatefulSet")
    for w in workloads:
        at = "%s/%s" % (w["kind"], w["metadata"]["name"])
        spec = pod_spec(w)
        if not spec:
            fail(where, "%s: no pod template" % at)
            continue
        tpl_labels = w["spec"]["template"].get("metadata", {}).get("labels", {})
        if not matches(w["spec"].get("selector", {}).get("matchLabels"), tpl_labels):
            fail(where, "%s: its selector does not select its own pods" % at)
        psc = spec.get("securityContext", {})
        claims = {c["metadata"]["name"] for c in w["spec"].get("volumeClaimTemplates", [])}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "secret" in v:
                secret_ref(at, v["secret"]["secretName"])
            for src in v.get("projected", {}).get("sources", []):
                if "secret" in src:
                    for item in src["secret"].get("items", [{}]):
                        secret_ref(at, src["secret"]["name"], item.get("key"))
        for s in spec.get("imagePullSecrets", []):
            secret_ref(at, s["name"])
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            cat = "%s: %s container %s" % (where, at, c["name"])
            if not c.get("image"):
                fail(cat, "no image")
            for probe in ("readinessProbe", "livenessProbe"):
                p = c.get(probe)
                if not p or not any(h in p for h in ("httpGet", "tcpSocket", "exec", "grpc")):
                    fail(cat, "no %s" % probe)
                    continue
                port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
                if isinstance(port, str) and port not in {x.get("name") for x in c.get("ports", [])}:
                    fail(cat, "%s names port %s, which it does not have" % (probe, port))
            res = c.get("resources", {})
            if not res.get("requests") or not res.get("limits", {}).get("memory"):
                fail(cat, "resources need requests and a memory limit")
            if not (c.get("securityContext", {}).get("runAsNonRoot") or psc.get("runAsNonRoot")):
                fail(cat, "may run as root")
            for e in c.get("env", []):
                check_env_name(cat, e["name"])
                ref = e.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    secret_ref(cat, ref["name"], ref.get("key"))
            for ef in c.get("envFrom", []):
                if "secretRef" in ef:
                    secret_ref(cat, ef["secretRef"]["name"])
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes and m["name"] not in claims:
                    fail(cat, "mounts %s, which is no volume" % m["name"])
            check_args(cat, (c.get("command") or []) + (c.get("args") or []))
        if component(w) == "agent":
            gpus = values["agent"]["gpus"]
            limits = spec["containers"][0].get("resources", {}).get("limits", {})
            if gpus > 0 and str(limits.get("nvidia.com/gpu")) != str(gpus):
                fail(where, "%s: %s GPUs in values, limits say %s" % (at, gpus, limits.get("nvidia.com/gpu")))
            if gpus == 0 and "nvidia.com/gpu" in limits:
                fail(where, "%s: a GPU limit for CPU agents" % at)
            store = values["agent"]["store"]["type"]
            has = "pvc" if "store" in claims else next((k for k in ("hostPath", "emptyDir") if k in volumes.get("store", {})), None)
            if has != store:
                fail(where, "%s: the NVMe tier is %s, values say %s" % (at, has, store))

    for s in of("Service"):
        at = "Service/%s" % s["metadata"]["name"]
        targets = [w for w in workloads if matches(s["spec"].get("selector"), w["spec"]["template"]["metadata"].get("labels", {}))]
        if not targets:
            fail(where, "%s selects no pods" % at)
        for p in s["spec"].get("ports", []):
            tp = p.get("targetPort")
            if isinstance(tp, str) and not any(tp in {x.get("name") for c in pod_spec(w)["containers"] for x in c.get("ports", [])}
                                               for w in targets):
                fail(where, "%s: targetPort %s is no container port" % (at, tp))
    for p in of("PodDisruptionBudget"):
        if not any(matches(p["spec"]["selector"].get("matchLabels"), w["spec"]["template"]["metadata"].get("labels", {})) for w in workloads):
            fail(where, "PodDisruptionBudget/%s selects no pods" % p["metadata"]["name"])
    for h in of("HorizontalPodAutoscaler"):
        ref = h["spec"]["scaleTargetRef"]
        if (ref["kind"], ref["name"]) not in by_kind:
            fail(where, "HorizontalPodAutoscaler/%s scales %s/%s, not rendered" % (h["metadata"]["name"], ref["kind"], ref["name"]))
        if h["spec"].get("minReplicas", 1) > h["spec"]["maxReplicas"]:
            fail(where, "HorizontalPodAutoscaler/%s: minReplicas over maxReplicas" % h["metadata"]["name"])
    for m in of("ServiceMonitor"):
        at = "ServiceMonitor/%s" % m["metadata"]["name"]
        svcs = [s for s in of("Service") if matches(m["spec"]["selector"].get("matchLabels"), s["metadata"].get("labels", {}))]
        if not svcs:
            fail(where, "%s selects no Service" % at)
        for ep in m["spec"].get("endpoints", []):
            if not any(ep.get("port") in {p.get("name") for p in s["spec"]["ports"]} for s in svcs):
                fail(where, "%s: port %s is on none of its Services" % (at, ep.get("port")))
            cred = ep.get("authorization", {}).get("credentials")
            if cred:
                secret_ref(at, cred["name"], cred.get("key"))
    return len(objs)


# ---- compose ----------------------------------------------------------------------------------

def check_compose(path):
    import yaml  # PyYAML: Debian's python3-yaml
    doc = yaml.safe_load(pathlib.Path(path).read_text())
    where = pathlib.Path(path).name
    services = doc.get("services", {})
    secrets = set(doc.get("secrets", {}))
    volumes = set(doc.get("volumes", {}) or {})
    base = pathlib.Path(path).parent
    ports = {}
    for name, s in services.items():
        at = "%s service %s" % (where, name)
        if s.get("network_mode") != "host":
            fail(where, "%s: not on the host's network" % at)
        if not s.get("restart"):
            fail(where, "%s: no restart policy" % at)
        if not s.get("healthcheck", {}).get("test"):
            fail(where, "%s: no health check" % at)
        for dep, cond in (s.get("depends_on") or {}).items():
            if dep not in services:
                fail(where, "%s: depends on %s, no such service" % (at, dep))
            elif cond.get("condition") == "service_healthy" and not services[dep].get("healthcheck"):
                fail(where, "%s: waits for %s to be healthy, which has no health check" % (at, dep))
        for sec in s.get("secrets", []):
            if sec not in secrets:
                fail(where, "%s: secret %s is not declared" % (at, sec))
        for v in s.get("volumes", []):
            src = v.split(":", 1)[0]
            if src.startswith("${"):
                continue  # the user's folder
            if src.startswith("."):
                if not (base / src).exists():
                    fail(where, "%s: mounts %s, which does not exist" % (at, src))
            elif src not in volumes:
                fail(where, "%s: volume %s is not declared" % (at, src))
        cmd = s.get("command") or []
        cmd = cmd.split() if isinstance(cmd, str) else cmd
        check_args(at, [re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", a) for a in cmd])
        for env in (s.get("environment") or {}):
            check_env_name(at, env)
        # The ports each service listens on: distinct, as everything shares the host's network.
        for a in cmd:
            m = re.match(r"--(?:listen|port|web\.listen-address)[= ](?:[0-9.]+:)?([0-9]+)$", a)
            if m:
                ports.setdefault(m.group(1), []).append(name)
        if "redis-server" in " ".join(cmd):
            m = re.search(r"--port ([0-9]+)", " ".join(cmd))
            if m:
                ports.setdefault(m.group(1), []).append(name)
    for p, who in ports.items():
        if len(who) > 1:
            fail(where, "port %s taken by %s" % (p, ", ".join(who)))
    for f in doc.get("secrets", {}).values():
        if not f.get("file"):
            fail(where, "a secret without a file")
    return len(services)


# ---- systemd ----------------------------------------------------------------------------------

def check_systemd(paths):
    for path in paths:
        where = pathlib.Path(path).name
        for line in pathlib.Path(path).read_text().splitlines():
            line = line.strip()
            if line.startswith("ExecStart="):
                args = line.split("=", 1)[1].split()
                check_args(where, [a for a in args if not a.startswith("$")])
            elif line.startswith("Environment="):
                name = line.split("=", 2)[1]
                if name.startswith("UMA_"):
                    check_env_name(where, name)


# ---- metrics ----------------------------------------------------------------------------------

def exported_metrics():
    names = set()
    for path in SRC.rglob("*.cc"):
        if path.name.endswith("_test.cc"):
            continue
        for literal in re.findall(r'"((?:[^"\\\n]|\\.)*)"', path.read_text()):
            names.update(re.findall(r"\b(uma_[a-z0-9_]+)", literal))
    # umad's table: the Prometheus column gets "uma_" in front (metrics/server_metrics.cc).
    table = (SRC / "metrics" / "server_metrics.cc").read_text()
    names.update("uma_" + n for n in re.findall(r'\{\s*(?:"[^"]*"|nullptr),\s*"([a-z0-9_]+)"', table))
    return names


def check_metrics(paths):
    exported = exported_metrics()
    used = 0
    for path in paths:
        text = pathlib.Path(path).read_text()
        for name in sorted(set(re.findall(r"\b(uma_[a-z0-9_]+)", text))):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in exported and base not in exported:
                fail(pathlib.Path(path).name, "metric %s is not exported by anything in src/" % name)
            used += 1
    return used


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "helm" and len(sys.argv) == 5:
        n = check_helm(*sys.argv[2:5])
        summary = "%d objects" % n
    elif what == "compose" and len(sys.argv) == 3:
        summary = "%d services" % check_compose(sys.argv[2])
    elif what == "systemd" and len(sys.argv) > 2:
        check_systemd(sys.argv[2:])
        summary = "%d units" % (len(sys.argv) - 2)
    elif what == "metrics" and len(sys.argv) > 2:
        summary = "%d metric names" % check_metrics(sys.argv[2:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for e in errors:
        print("  FAIL " + e)
    print("  %s: %s, %s" % (what, summary, "ok" if not errors else "%d problems" % len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
