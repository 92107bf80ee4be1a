#!/usr/bin/env python3
"""Cross-checks of the deployment packages that no off-the-shelf tool makes.

scripts/package-tests runs the real tools first (hadolint, docker compose config, helm
lint/template, kubernetes-validate, promtool, systemd-analyze) and then these, which
check what ties the pieces together: that selectors select, probes hit named ports,
grace periods exceed the drain grace, every config key is one tether knows, and so on.
Each check prints what it verified; any failure exits 1.

Usage: checks.py dockerfile|compose|chart|systemd|toml ... (see main()).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
FAILURES: list[str] = []


def rel(path: str) -> str:
    return os.path.relpath(Path(path).resolve(), ROOT)


def ok(msg: str) -> None:
    print(f"    verified: {msg}")


def check(cond: bool, msg: str) -> bool:
    if cond:
        ok(msg)
    else:
        print(f"    FAILED: {msg}")
        FAILURES.append(msg)
    return cond


# ---------------------------------------------------------------- tether's config keys

# Keys the deployment packages use that issue 31 adds to tether while these packages
# are written. Accepted only until the code declares them; printed as pending meanwhile.
PENDING_KEYS = {("server", "drain_grace_secs"), ("telemetry", "metrics_listen")}
TABLE_STRUCTS = {
    "server": "ServerFile",
    "cluster": "ClusterFile",
    "store": "StoreFile",
    "pool": "PoolFile",
    "telemetry": "TelemetryFile",
    "attachments": "AttachmentsFile",
    "delegation": "DelegationFile",
}


def struct_fields() -> dict[str, set[str]]:
    """`pub struct X { pub field: … }` of tether's config sources: X -> fields."""
    out: dict[str, set[str]] = {}
    for path in sorted((ROOT / "crates/tether/src").glob("*.rs")):
        text = path.read_text()
        for m in re.finditer(r"pub struct (\w+)\s*\{(.*?)\n\}", text, re.S):
            out.setdefault(m.group(1), set()).update(
                re.findall(r"^\s*pub (\w+):", m.group(2), re.M)
            )
    return out


def check_tether_toml(text: str, where: str) -> dict:
    try:
        conf = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        check(False, f"{where}: parses as TOML ({e})")
        return {}
    ok(f"{where}: parses as TOML")
    fields = struct_fields()
    top = fields.get("FileConfig", set())
    check(bool(top), "tether's FileConfig found in crates/tether/src/config.rs")
    unknown, pending = [], []
    for key, value in conf.items():
        subs = list(value) if isinstance(value, dict) else []
        if key not in top:
            if subs and all((key, sub) in PENDING_KEYS for sub in subs):
                pending += [f"{key}.{sub}" for sub in subs]
            else:
                unknown.append(key)
            continue
        known = fields.get(TABLE_STRUCTS.get(key, ""))
        for sub in subs:
            if known is None or sub in known:
                continue
            (pending if (key, sub) in PENDING_KEYS else unknown).append(f"{key}.{sub}")
    check(not unknown, f"{where}: every key is one tether's config declares (unknown: {unknown or 'none'})")
    if pending:
        print(f"    note: {where}: {sorted(pending)} not in crates/tether/src yet (issue 31 adds them)")
    return conf


# ---------------------------------------------------------------- Dockerfile

def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    out, buf = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if buf and s.startswith("#"):
            continue
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        word, _, rest = buf.partition(" ")
        out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def dockerignore_regex(pattern: str) -> re.Pattern:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore's patterns (last match wins, `!` re-includes) drop path:
    a pattern that matches the path or one of its parent directories drops it."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pat in patterns:
        neg = pat.startswith("!")
        rx = dockerignore_regex(pat.lstrip("!").strip("/"))
        if any(rx.match(p) for p in prefixes):
            ignored = not neg
    return ignored


def version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3]) or (0,)


def cmd_dockerfile(dockerfile: str, dockerignore: str) -> None:
    text = Path(dockerfile).read_text()
    ins = dockerfile_instructions(text)
    args = {}
    stages: list[dict] = []
    for word, rest in ins:
        if word == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda v: args.get(v.group(1) or v.group(2), ""), m.group(1))
            stages.append({"image": image, "name": m.group(2), "ins": []})
        elif stages:
            stages[-1]["ins"].append((word, rest))
    names = {s["name"]: s for s in stages if s["name"]}
    check(len(stages) > 1, f"multi-stage: {len(stages)} stages ({', '.join(str(s['name']) for s in stages)})")
    for target in ("runtime", "with-agents"):
        check(target in names, f"target {target!r} exists (docker build --target {target})")

    def chain(stage: dict) -> list[dict]:
        out = [stage]
        while out[-1]["image"] in names:
            out.append(names[out[-1]["image"]])
        return list(reversed(out))

    for s in stages:
        if s["image"] in names:
            continue
        image = s["image"]
        name, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
        check(bool(tag) and tag != "latest", f"base image {image} is pinned to a tag")
        if name.split("/")[-1] in ("rust", "node"):
            check(bool(re.match(r"\d+\.\d+\.\d+-", tag)), f"base image {image}: an exact x.y.z version")
    for target in ("runtime", "with-agents"):
        if target not in names:
            continue
        flat = [i for st in chain(names[target]) for i in st["ins"]]
        users = [r for w, r in flat if w == "USER"]
        final = users[-1] if users else "root"
        uid = final.split(":")[0]
        check(uid.isdigit() and uid != "0", f"{target}: final USER is a numeric non-root uid ({final})")
        health = [r for w, r in flat if w == "HEALTHCHECK"]
        check(bool(health) and "/api/v1/health" in health[-1], f"{target}: HEALTHCHECK on /api/v1/health")
        exposed = " ".join(r for w, r in flat if w == "EXPOSE").split()
        check({"7878", "9464"} <= set(exposed), f"{target}: EXPOSE 7878 9464 ({' '.join(exposed)})")
        vols = " ".join(r for w, r in flat if w == "VOLUME")
        check("/var/lib/tether" in vols, f"{target}: VOLUME for the data dir ({vols})")
        entry = [r for w, r in flat if w == "ENTRYPOINT"]
        check(bool(entry) and "tini" in entry[-1], f"{target}: an init (tini) is PID 1 and forwards signals")
        stop = [r for w, r in flat if w == "STOPSIGNAL"]
        check(not stop or stop[-1] == "SIGTERM", f"{target}: stop signal SIGTERM (starts the drain)")
        env = " ".join(r for w, r in flat if w == "ENV")
        check("TETHER_HOME=/var/lib/tether/" in env, "TETHER_HOME is inside the data volume")
    # The toolchains the ARGs pin satisfy what the sources ask for.
    msrv = re.search(r'^rust-version = "([\d.]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    rust = args.get("RUST_VERSION", "")
    check(bool(msrv) and version(rust) >= version(msrv.group(1)),
          f"RUST_VERSION {rust} ≥ the workspace's rust-version {msrv.group(1) if msrv else '?'}")
    lock = json.loads((ROOT / "tools/agents/package-lock.json").read_text())
    node = args.get("NODE_VERSION", "")
    for pkg in json.loads((ROOT / "tools/agents/package.json").read_text())["dependencies"]:
        want = (lock["packages"].get(f"node_modules/{pkg}", {}).get("engines") or {}).get("node", "")
        floor = re.match(r"\s*>=\s*v?([\d.]+)\s*$", want)
        check(not want or (floor is not None and version(node) >= version(floor.group(1))),
              f"NODE_VERSION {node} satisfies {pkg}'s engines.node {want or '(none)'}")
    runs = " ".join(r for w, r in (names.get("builder") or {"ins": []})["ins"] if w == "RUN")
    check("cargo build --release --locked -p tether" in runs, "builder: cargo build --release --locked -p tether")
    agents = " ".join(r for st in stages for w, r in st["ins"] if w in ("COPY", "RUN") and st["name"] == "agents-build")
    check("tools/agents/package-lock.json" in agents and "npm ci" in agents,
          "agent CLIs come from tools/agents/package-lock.json with npm ci (the pinned versions)")

    patterns = [l.strip() for l in Path(dockerignore).read_text().splitlines() if l.strip() and not l.startswith("#")]
    for must in ("target", ".git", "tools/agents/node_modules"):
        check(dockerignored(must, patterns), f".dockerignore excludes {must}")
    check(dockerignored("tests/browser/node_modules", patterns), ".dockerignore excludes every node_modules")
    for w, rest in ((w, r) for st in stages for w, r in st["ins"]):
        if w != "COPY" or "--from=" in rest:
            continue
        srcs = [a for a in rest.split() if not a.startswith("--")][:-1]
        for src in srcs:
            check((ROOT / src).exists() and not dockerignored(src.rstrip("/"), patterns),
                  f"COPY source {src} exists and is in the build context")


# ---------------------------------------------------------------- compose

def duration_secs(v) -> float:
    if isinstance(v, (int, float)):
        return v / 1e9 if v > 10_000 else float(v)  # compose's JSON gives nanoseconds
    if re.fullmatch(r"\s*[\d.]+\s*", str(v)):
        return float(v)  # systemd: a bare number is seconds
    total = 0.0
    for num, unit in re.findall(r"([\d.]+)(ms|h|m|s)", str(v)):
        total += float(num) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001}[unit]
    return total


def cmd_compose(config_json: str, compose_dir: str) -> None:
    conf = json.loads(Path(config_json).read_text())
    services = conf["services"]
    pg = [n for n, s in services.items() if s.get("image", "").startswith("postgres:")]
    check(len(pg) == 1 and services[pg[0]]["image"].startswith("postgres:15"),
          f"one PostgreSQL 15 service ({', '.join(services[p]['image'] for p in pg)})")
    nodes = sorted(n for n, s in services.items() if s.get("environment", {}).get("TETHER_DATABASE_URL"))
    check(len(nodes) == 3, f"3 tether nodes on the database ({', '.join(nodes)})")
    for name, s in services.items():
        hc = s.get("healthcheck") or {}
        check(bool(hc.get("test")) and not hc.get("disable"), f"{name}: has a healthcheck")
    tomls = []
    for n in nodes:
        s = services[n]
        env = s["environment"]
        dep = s.get("depends_on", {}).get(pg[0], {}) if pg else {}
        check(dep.get("condition") == "service_healthy", f"{n}: depends_on {pg[0] if pg else '?'} service_healthy")
        check(pg and f"@{pg[0]}:" in env["TETHER_DATABASE_URL"], f"{n}: TETHER_DATABASE_URL points at the compose database")
        check(bool(env.get("TETHER_TOKEN")), f"{n}: TETHER_TOKEN set (from .env)")
        check("/api/v1/ready" in " ".join(s["healthcheck"]["test"]) and "Host: localhost" in " ".join(s["healthcheck"]["test"]),
              f"{n}: healthcheck is readiness with Host: localhost")
        check(duration_secs(s.get("stop_grace_period", 10)) > 30, f"{n}: stop_grace_period exceeds the drain grace")
        mounts = {v["target"]: v for v in s.get("volumes", [])}
        check(mounts.get("/var/lib/tether", {}).get("type") == "volume", f"{n}: its data volume at /var/lib/tether")
        conf_mount = mounts.get("/etc/tether/tether.toml", {})
        check(conf_mount.get("type") == "bind" and conf_mount.get("read_only") is True
              and env.get("TETHER_CONFIG") == "/etc/tether/tether.toml", f"{n}: tether.toml mounted read-only as TETHER_CONFIG")
        tomls.append(Path(conf_mount.get("source", "/nonexistent")))
        for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME"):
            check(any(env.get(var, "").startswith(t + "/") or env.get(var) == t for t in mounts
                      if mounts[t].get("type") == "volume" and t != "/var/lib/tether"),
                  f"{n}: {var} lies on a shared volume")
    data = [next((v["source"] for v in services[n]["volumes"] if v["target"] == "/var/lib/tether"), None) for n in nodes]
    check(len(set(data)) == len(nodes), f"each node its own data volume ({', '.join(map(str, data))})")
    shared = [sorted((v["target"], v["source"]) for v in services[n]["volumes"]
                     if v["type"] == "volume" and v["target"] != "/var/lib/tether") for n in nodes]
    check(all(x == shared[0] for x in shared) and len(shared[0]) >= 3,
          f"the nodes share the same volumes at the same paths ({', '.join(t for t, _ in shared[0])})")
    tokens = {services[n]["environment"]["TETHER_TOKEN"] for n in nodes}
    check(len(tokens) == 1, "one token for every node")
    if tomls and tomls[0].exists():
        tconf = check_tether_toml(tomls[0].read_text(), "compose tether.toml")
        roots = tconf.get("workspace_roots", [])
        targets = {v["target"] for v in services[nodes[0]]["volumes"]}
        check(bool(roots) and all(r in targets for r in roots), f"workspace_roots {roots} are shared volumes")
        att = tconf.get("cluster", {}).get("attachments_dir")
        check(att in targets, f"[cluster] attachments_dir {att} is a shared volume")
        grace = tconf.get("server", {}).get("drain_grace_secs", 30)
        check(all(duration_secs(services[n].get("stop_grace_period", 10)) >= grace + 10 for n in nodes),
              f"stop_grace_period ≥ drain_grace_secs ({grace}) + 10 s")
        hosts = set(tconf.get("server", {}).get("allowed_hosts", []))
        check(set(nodes) <= hosts, f"allowed_hosts lists the nodes' names ({sorted(hosts)})")
        ml = tconf.get("telemetry", {}).get("metrics_listen", "")
        published = [p for n in nodes for p in services[n].get("ports", []) if str(p.get("target")) == ml.rpartition(":")[2]]
        check(len(published) == len(nodes), f"the metrics port {ml} is published for every node")
    else:
        check(False, "the mounted tether.toml exists")


# ---------------------------------------------------------------- Helm chart

def load_docs(path: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(Path(path).read_text()) if d]


def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def cmd_chart(rendered: str, expect: str, rules_file: str, crds_out: str, rules_out: str) -> None:
    docs = load_docs(rendered)
    want = dict(kv.split("=") for kv in expect.split(",") if kv)
    kinds = [d["kind"] for d in docs]
    ok(f"{len(docs)} documents: {', '.join(sorted(kinds))}")
    by_kind: dict[str, list[dict]] = {}
    bad = [str(d.get("kind")) for d in docs
           if not (all(k in d for k in ("apiVersion", "kind", "metadata")) and d["metadata"].get("name"))]
    check(not bad, f"every document has apiVersion, kind and metadata.name ({bad or 'all'})")
    for d in docs:
        by_kind.setdefault(d.get("kind"), []).append(d)
    for kind, count in want.items():
        check(len(by_kind.get(kind, [])) == int(count), f"{count} × {kind} (toggles)")

    sts = by_kind.get("StatefulSet", [None])[0]
    if not check(sts is not None, "a StatefulSet"):
        return
    spec = sts["spec"]
    tmpl = spec["template"]
    pod_labels = tmpl["metadata"]["labels"]
    check(matches(spec["selector"]["matchLabels"], pod_labels), "StatefulSet selector matches its pod template labels")
    svcs = {s["metadata"]["name"]: s for s in by_kind.get("Service", [])}
    gov = svcs.get(spec.get("serviceName"))
    check(gov is not None and gov["spec"].get("clusterIP") == "None",
          f"serviceName {spec.get('serviceName')} is a headless Service of the chart")
    pod = tmpl["spec"]
    c = next(x for x in pod["containers"] if x["name"] == "tether")
    port_names = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    for s in svcs.values():
        check(matches(s["spec"]["selector"], pod_labels), f"Service {s['metadata']['name']} selects the pods")
        for p in s["spec"]["ports"]:
            check(p["targetPort"] in port_names, f"Service {s['metadata']['name']} port {p['name']} → container port {p['targetPort']}")
    env = {e["name"]: e for e in c.get("env", [])}
    for probe, path in (("readinessProbe", "/api/v1/ready"), ("livenessProbe", "/api/v1/health"), ("startupProbe", "/api/v1/health")):
        g = (c.get(probe) or {}).get("httpGet", {})
        hdrs = {h["name"].lower(): h["value"] for h in g.get("httpHeaders", [])}
        check(g.get("path") == path and g.get("port") in port_names and hdrs.get("host") == "localhost",
              f"{probe}: GET {path} on port {g.get('port')} with Host: localhost")
    listen = env.get("TETHER_LISTEN", {}).get("value", "")
    check(listen.endswith(f":{port_names.get('http')}"), f"TETHER_LISTEN {listen} is the http port")
    for var, val in (("TETHER_TOKEN", "secretKeyRef"), ("TETHER_DATABASE_URL", "secretKeyRef")):
        check(val in (env.get(var, {}).get("valueFrom") or {}), f"{var} comes from a Secret")
    check(pod["securityContext"].get("runAsNonRoot") is True and pod["securityContext"].get("runAsUser", 0) != 0,
          "pod runs as non-root")
    sc = c.get("securityContext", {})
    check(sc.get("readOnlyRootFilesystem") is True and sc.get("allowPrivilegeEscalation") is False,
          "container: read-only root filesystem, no privilege escalation")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"] for v in pod.get("volumes", [])} | {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
    check(set(mounts) <= vols, f"every volumeMount has a volume ({', '.join(sorted(mounts))})")
    for ic in pod.get("initContainers", []):
        check({m["name"] for m in ic.get("volumeMounts", [])} <= vols, f"initContainer {ic['name']}: its volumes exist")
    check(env.get("TETHER_HOME", {}).get("value", "").startswith(mounts.get("data", "?") + "/"),
          "TETHER_HOME lies in the per-pod data volume (volumeClaimTemplate)")
    check(any(t["metadata"]["name"] == "data" for t in spec.get("volumeClaimTemplates", [])), "a per-pod data volumeClaimTemplate")
    shared = next((v for v in pod["volumes"] if "persistentVolumeClaim" in v), None)
    check(shared is not None and shared["name"] in mounts, "the shared claim is mounted")
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME"):
        check(env.get(var, {}).get("value", "").startswith(mounts.get(shared["name"] if shared else "", "?") + "/"),
              f"{var} is on the shared volume")
    cms = {m["metadata"]["name"]: m for m in by_kind.get("ConfigMap", [])}
    cmvol = next((v for v in pod["volumes"] if "configMap" in v), None)
    cm = cms.get(cmvol["configMap"]["name"]) if cmvol else None
    if check(cm is not None and "tether.toml" in cm["data"], "the config volume is the chart's ConfigMap with tether.toml"):
        conf = check_tether_toml(cm["data"]["tether.toml"], "rendered tether.toml")
        check(env.get("TETHER_CONFIG", {}).get("value") == f"{mounts['config']}/tether.toml", "TETHER_CONFIG is the mounted tether.toml")
        grace = conf.get("server", {}).get("drain_grace_secs", 30)
        tgp = pod.get("terminationGracePeriodSeconds", 30)
        check(tgp >= grace + 10, f"terminationGracePeriodSeconds {tgp} ≥ drain_grace_secs {grace} + 10")
        roots = conf.get("workspace_roots", [])
        check(roots and all(r.startswith(mounts.get(shared["name"] if shared else "", "?") + "/") for r in roots),
              f"workspace_roots {roots} on the shared volume")
        att = conf.get("cluster", {}).get("attachments_dir", "")
        check(att.startswith(mounts.get(shared["name"] if shared else "", "?") + "/"), f"attachments_dir {att} on the shared volume")
        hosts = conf.get("server", {}).get("allowed_hosts", [])
        check(any(h == list(svcs)[0] or h.startswith(list(svcs)[0] + ".") for h in hosts) or not svcs,
              f"allowed_hosts has the Service's names ({len(hosts)} names)")
        ml = conf.get("telemetry", {}).get("metrics_listen")
        if "metrics" in port_names:
            check(ml is not None and ml.endswith(f":{port_names['metrics']}"), f"metrics_listen {ml} is the metrics port")
        else:
            check(ml is None, "metrics off: no metrics_listen")
    sa = pod.get("serviceAccountName")
    check(sa in {s["metadata"]["name"] for s in by_kind.get("ServiceAccount", [])} or sa == "default",
          f"serviceAccountName {sa} exists")
    for pdb in by_kind.get("PodDisruptionBudget", []):
        s = pdb["spec"]
        check(matches(s.get("selector", {}).get("matchLabels", {}), pod_labels), "PodDisruptionBudget selector matches the pods")
        check(("minAvailable" in s) != ("maxUnavailable" in s), "PodDisruptionBudget sets minAvailable or maxUnavailable")
    for sm in by_kind.get("ServiceMonitor", []):
        sel = sm["spec"]["selector"]["matchLabels"]
        hit = [s for s in svcs.values() if matches(sel, s["metadata"]["labels"])]
        check(len(hit) == 1, f"ServiceMonitor selects exactly one Service ({[h['metadata']['name'] for h in hit]})")
        for ep in sm["spec"]["endpoints"]:
            check(bool(hit) and ep["port"] in {p["name"] for p in hit[0]["spec"]["ports"]},
                  f"ServiceMonitor endpoint port {ep['port']} is a port of that Service")
    crds = by_kind.get("ServiceMonitor", []) + by_kind.get("PrometheusRule", [])
    Path(crds_out).write_text(json.dumps(crds))
    for pr in by_kind.get("PrometheusRule", []):
        plain = yaml.safe_load(Path(rules_file).read_text())
        check(pr["spec"] == plain, f"PrometheusRule spec equals {rel(rules_file)}")
        Path(rules_out).write_text(yaml.safe_dump(pr["spec"]))


# ---------------------------------------------------------------- systemd

REQUIRED_SECURITY = [
    "NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
    "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups",
    "ProtectClock", "ProtectHostname", "ProtectProc", "RestrictSUIDSGID", "RestrictRealtime",
    "LockPersonality", "SystemCallArchitectures", "UserOrDynamicUser", "AmbientCapabilities",
    "CapabilityBoundingSet_CAP_SYS_ADMIN", "CapabilityBoundingSet_CAP_NET_ADMIN",
    "RestrictAddressFamilies_AF_PACKET", "RestrictAddressFamilies_OTHER",
    "SystemCallFilter_module", "SystemCallFilter_raw_io", "SystemCallFilter_reboot", "UMask",
]
# What the agents need (Node's JIT, bubblewrap's namespaces): hardening that must stay off.
MUST_STAY_OFF = {
    "MemoryDenyWriteExecute": "Node.js's JIT needs writable+executable memory",
    "RestrictNamespaces_user": "bubblewrap (codex/claude command sandbox) makes user namespaces",
}


def unit_directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, _, v = line.partition("=")
            out.setdefault(k.strip(), []).append(v.strip())
    return out


def cmd_systemd(unit: str, security_json: str) -> None:
    report = {x["json_field"]: x for x in json.loads(Path(security_json).read_text())}
    for field in REQUIRED_SECURITY:
        check(report.get(field, {}).get("set") is True, f"systemd-analyze security: {field} ✓")
    for field, why in MUST_STAY_OFF.items():
        check(report.get(field, {}).get("set") is False, f"systemd-analyze security: {field} left off ({why})")
    d = unit_directives(Path(unit).read_text())
    last = lambda k, default="": (d.get(k) or [default])[-1]
    check(last("KillSignal") == "SIGTERM", "KillSignal=SIGTERM (starts the drain)")
    check(last("KillMode") == "mixed", "KillMode=mixed (SIGTERM to tether alone: running turns finish)")
    check(duration_secs(last("TimeoutStopSec", "90")) >= 30 + 10, f"TimeoutStopSec={last('TimeoutStopSec')} ≥ default drain grace 30 s + 10 s")
    check(last("Restart") == "on-failure", "Restart=on-failure")
    check(last("User") not in ("", "root", "0"), f"a dedicated user ({last('User')})")
    check("tether" in " ".join(d.get("StateDirectory", [])).split(), "StateDirectory=tether")
    env = " ".join(d.get("Environment", []))
    check("TETHER_HOME=/var/lib/tether" in env.split(), "TETHER_HOME=/var/lib/tether")
    fams = " ".join(d.get("RestrictAddressFamilies", [])).split()
    check({"AF_UNIX", "AF_INET", "AF_INET6"} <= set(fams), f"RestrictAddressFamilies allows {' '.join(fams)}")
    check("@system-service" in " ".join(d.get("SystemCallFilter", [])), "SystemCallFilter=@system-service")
    check(last("CapabilityBoundingSet", "x") == "", "CapabilityBoundingSet= (empty)")
    check(last("ProtectSystem") == "strict" and bool(d.get("ReadWritePaths")),
          f"ProtectSystem=strict with ReadWritePaths={' '.join(d.get('ReadWritePaths', []))} for the workspace")


def cmd_toml(path: str) -> None:
    check_tether_toml(Path(path).read_text(), rel(path))


def main() -> None:
    cmd, *rest = sys.argv[1:]
    {"dockerfile": cmd_dockerfile, "compose": cmd_compose, "chart": cmd_chart,
     "systemd": cmd_systemd, "toml": cmd_toml}[cmd](*rest)
    if FAILURES:
        print(f"    {len(FAILURES)} check(s) failed")
        sys.exit(1)


if __name__ == "__main__":
    main()
