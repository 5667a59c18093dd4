"""Quad on Kubernetes, and the same containers played with podman.

One description of the containers (``containers``) gives both:

- ``manifests DIR``: the plain manifests of deploy/k8s (two brokers with a
  Service each, a Deployment per service, PostgreSQL as a StatefulSet,
  the keys as a Secret made by a kustomize secretGenerator), and
- ``up`` / ``down`` / ``env``: one Pod with every container, played with
  ``podman kube play`` on this machine (host network, 127.0.0.1 only).

Usage: python3 -m quaddeploy.kube {manifests DIR | keys DIR | up | down | env | play-spec}
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

from . import generate
from . import ports as port_table
from . import services as services_list

# The services in start order, and those on PostgreSQL: deploy/stack.json.
SERVICES = services_list.names()
ON_POSTGRES = set(services_list.names(store="postgres"))
BROKERS = 2
BASE = int(os.environ.get("QUAD_KUBE_PORT_BASE", "26000"))
POD = "quad-kube"
IMAGE = os.environ.get("QUAD_IMAGE", "localhost/quad:latest")
PG_IMAGE = os.environ.get("QUAD_PG_IMAGE", "localhost/quad-postgres:latest")
HOME = "/var/lib/quad"
SECRETS = "/run/secrets/quad"
ADMIN = "admin@quad.campus"
GRACE_SECONDS = 15
# The files of the Secret quad-keys (and of the host folder podman mounts).
KEY_FILES = ["broker.key", "broker.pub", "services.key", "services.pub", "accounts.key", "accounts.pub",
             "admin.password", "pgpass", "pg.password"]


# Every port from the one table (deploy/quaddeploy/ports.py), at BASE: the
# same names, and the same layout, as a stack of deploy/stack at that base.
PORTS = {p.name: p.port for p in port_table.stack(BASE, BROKERS, SERVICES)}


def broker_ports(k):
    """Broker k's ports (from 1): frontend, backend, events in, events out, internal, metrics, updates."""
    return {"frontend": PORTS[f"broker{k}.frontend"], "backend": PORTS[f"broker{k}.backend"],
            "events-in": PORTS[f"broker{k}.events-in"], "events-out": PORTS[f"broker{k}.events-out"],
            "internal": PORTS[f"broker{k}.internal"], "metrics": PORTS[f"metrics.broker.{k}"], "updates": PORTS[f"broker{k}.updates"]}


def metrics_port(service):
    """The /metrics port of a service's container: its first worker's."""
    return PORTS[f"metrics.{service}.1"]


PG_PORT = PORTS["postgres.1"]
DASHBOARD_PORT = PORTS["dashboard"]


def broker_host(k, local):
    return "127.0.0.1" if local else f"quad-broker-{k}"


def endpoint_list(name, local):
    return ",".join(f"tcp://{broker_host(k, local)}:{broker_ports(k)[name]}" for k in range(1, BROKERS + 1))


def resources(cpu_request, memory_request, cpu_limit, memory_limit):
    return {"requests": {"cpu": cpu_request, "memory": memory_request},
            "limits": {"cpu": cpu_limit, "memory": memory_limit}}


def probes(port):
    """httpGet on the process's own metrics server (Sources/QuadMetrics,
    Health): /readyz is 200 once a worker's store is open and a broker knows
    it (a broker: once its sockets are bound), /healthz while its loop
    turns (503 after 10 s without a turn: restart it)."""
    def probe(path, period, failures, delay):
        return {"httpGet": {"path": path, "port": port}, "initialDelaySeconds": delay,
                "periodSeconds": period, "timeoutSeconds": 3, "failureThreshold": failures}
    return {"readinessProbe": probe("/readyz", 5, 3, 2), "livenessProbe": probe("/healthz", 10, 6, 10)}


def broker_container(k, local):
    ports = broker_ports(k)
    bind = "127.0.0.1" if local else "0.0.0.0"
    zbind = "127.0.0.1" if local else "*"
    command = ["quad-entry", "quad-broker"]
    for name in ["frontend", "backend", "events-in", "events-out", "internal", "updates"]:
        command += [f"--{name}", f"tcp://{zbind}:{ports[name]}"]
    command += ["--metrics", f"{bind}:{ports['metrics']}",
                "--curve-key", f"{HOME}/keys/broker.key",
                "--service-keys", f"{HOME}/keys/services.pub",
                "--accounts-key", f"{HOME}/keys/accounts.pub"]
    c = {"name": f"broker-{k}", "image": IMAGE, "command": command,
         "ports": [{"name": n[:15], "containerPort": p} for n, p in ports.items()],
         "env": [{"name": "QUAD_HOME", "value": HOME}],
         "resources": resources("100m", "64Mi", "1", "256Mi"),
         "volumeMounts": [{"name": "keys", "mountPath": SECRETS, "readOnly": True}]}
    c.update(probes(ports["metrics"]))
    return c


def service_container(s, local):
    bind = "127.0.0.1" if local else "0.0.0.0"
    env = [{"name": "QUAD_HOME", "value": HOME}]
    for name in ["frontend", "backend", "events-in", "events-out", "internal"]:
        env.append({"name": "QUAD_" + name.upper().replace("-", "_"), "value": endpoint_list(name, local)})
    # The internal sockets cross the pods' network: CURVE with the services' key.
    env += [{"name": "QUAD_SERVICE_KEY_FILE", "value": f"{HOME}/keys/services.key"},
            {"name": "QUAD_BROKER_KEY_FILE", "value": f"{HOME}/keys/broker.pub"},
            {"name": "QUAD_METRICS", "value": f"{bind}:{metrics_port(s)}"}]
    command = ["quad-entry", f"quad-{s}"]
    if s in ON_POSTGRES:
        host = "127.0.0.1" if local else "quad-postgres"
        env += [{"name": f"QUAD_{s.upper()}_DB", "value": f"postgres://quad@{host}:{PG_PORT}/quad_{s}"},
                {"name": "PGPASSFILE", "value": f"{HOME}/keys/pgpass"}]
    else:
        command += ["--db", f"{HOME}/db/{s}.db"]
    if s == "accounts":
        command += ["--signing-key", f"{HOME}/keys/accounts.key", "--admin-email", ADMIN,
                    "--admin-password-file", f"{HOME}/keys/admin.password"]
    ports = [{"name": "metrics", "containerPort": metrics_port(s)}]
    if s == "analytics":
        command += ["--http", f"{bind}:{DASHBOARD_PORT}"]
        ports.append({"name": "dashboard", "containerPort": DASHBOARD_PORT})
    heavy = s in ("accounts", "analytics")
    c = {"name": s, "image": IMAGE, "command": command, "ports": ports, "env": env,
         "resources": resources("100m", "64Mi", "1", "512Mi" if heavy else "256Mi"),
         "volumeMounts": [{"name": "keys", "mountPath": SECRETS, "readOnly": True}]}
    if s not in ON_POSTGRES:
        c["volumeMounts"].append({"name": "data", "mountPath": f"{HOME}/db"})
    c.update(probes(metrics_port(s)))
    return c


# PostgreSQL's first start makes the cluster, the role quad (its password
# from the Secret) and one database per service on it; then it serves.
PG_SCRIPT = """set -eu
pw=$(cat /run/secrets/quad/pg.password)
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    initdb -D "$PGDATA" -U postgres -A trust -E UTF8 >/dev/null
    printf 'local all postgres trust\\nhost all quad 0.0.0.0/0 scram-sha-256\\n' >"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses= -k /tmp" start >/dev/null
    psql -X -q -h /tmp -U postgres -v ON_ERROR_STOP=1 -c "CREATE ROLE quad LOGIN PASSWORD '$pw'"
    for db in DATABASES; do psql -X -q -h /tmp -U postgres -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db OWNER quad"; done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses=LISTEN -p PORT -k /tmp
"""


def postgres_container(local):
    script = (PG_SCRIPT.replace("DATABASES", " ".join(f"quad_{s}" for s in SERVICES if s in ON_POSTGRES))
              .replace("LISTEN", "127.0.0.1" if local else "*").replace("PORT", str(PG_PORT)))
    return {"name": "postgres", "image": PG_IMAGE, "command": ["sh", "-c", script],
            "ports": [{"name": "postgres", "containerPort": PG_PORT}],
            "env": [{"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"}],
            "resources": resources("100m", "128Mi", "1", "512Mi"),
            "volumeMounts": [{"name": "keys", "mountPath": SECRETS, "readOnly": True},
                             {"name": "pgdata", "mountPath": "/var/lib/postgresql/data"}],
            "readinessProbe": {"exec": {"command": ["pg_isready", "-h", "127.0.0.1", "-p", str(PG_PORT)]},
                               "periodSeconds": 5},
            "livenessProbe": {"tcpSocket": {"port": PG_PORT}, "periodSeconds": 10, "failureThreshold": 6}}


# ------------------------------------------------------------------- k8s

LABELS = {"app.kubernetes.io/part-of": "quad"}


def meta(name, component):
    return {"name": name, "labels": dict(LABELS, **{"app.kubernetes.io/name": component})}


def pod_spec(containers, volumes, uid=10001):
    return {"terminationGracePeriodSeconds": GRACE_SECONDS,
            "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid},
            "containers": containers, "volumes": volumes}


def secret_volume(mode=0o440):
    return {"name": "keys", "secret": {"secretName": "quad-keys", "defaultMode": mode}}


def deployment(name, component, container, volumes, strategy=None):
    # An image that is :latest is pulled every time by default: from where?
    container.setdefault("imagePullPolicy", "IfNotPresent")
    spec = {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": component}},
            "template": {"metadata": {"labels": dict(LABELS, **{"app.kubernetes.io/name": component})},
                         "spec": pod_spec([container], volumes)}}
    if strategy:
        spec["strategy"] = {"type": strategy}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name, component), "spec": spec}


def service(name, component, ports):
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(name, component),
            "spec": {"selector": {"app.kubernetes.io/name": component},
                     "ports": [{"name": n[:15], "port": p, "targetPort": p} for n, p in ports]}}


def manifests():
    """(file name, [documents]) for deploy/k8s."""
    files = []
    for k in range(1, BROKERS + 1):
        name = f"quad-broker-{k}"
        files.append((f"broker-{k}.yaml", [
            deployment(name, name, broker_container(k, False), [secret_volume()]),
            service(name, name, list(broker_ports(k).items()))]))
    pg = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("quad-postgres", "quad-postgres"),
          "spec": {"serviceName": "quad-postgres", "replicas": 1,
                   "selector": {"matchLabels": {"app.kubernetes.io/name": "quad-postgres"}},
                   "template": {"metadata": {"labels": dict(LABELS, **{"app.kubernetes.io/name": "quad-postgres"})},
                                "spec": pod_spec([dict(postgres_container(False), imagePullPolicy="IfNotPresent")],
                                                 [secret_volume()], uid=10002)},
                   "volumeClaimTemplates": [{"metadata": {"name": "pgdata"},
                                             "spec": {"accessModes": ["ReadWriteOnce"],
                                                      "resources": {"requests": {"storage": "2Gi"}}}}]}}
    files.append(("postgres.yaml", [pg, service("quad-postgres", "quad-postgres", [("postgres", PG_PORT)])]))
    for s in SERVICES:
        name = f"quad-{s}"
        docs = []
        volumes = [secret_volume()]
        if s not in ON_POSTGRES:
            # The service's SQLite file: its replicas share it, so they run
            # on the node of this one volume (see docs/kubernetes.md on scaling).
            docs.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(f"{name}-data", name),
                         "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
            volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": f"{name}-data"}})
        docs.insert(0, deployment(name, name, service_container(s, False), volumes,
                                  strategy=None if s in ON_POSTGRES else "Recreate"))
        if s == "analytics":
            docs.append(service(name, name, [("dashboard", DASHBOARD_PORT)]))
        files.append((f"{s}.yaml", docs))
    return files


# The optional Prometheus of deploy/k8s/optional/prometheus.yaml: not in the
# kustomization; `kubectl apply -f deploy/k8s/optional/prometheus.yaml` beside
# the stack. It finds every broker and worker pod of its namespace (the
# container port named "metrics") and loads the rules of deploy/prometheus.
PROMETHEUS_IMAGE = os.environ.get("QUAD_PROMETHEUS_IMAGE", "docker.io/prom/prometheus:v2.42.0")
PROMETHEUS_PORT = 9090
RULES_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "prometheus", "rules")


def prometheus_config():
    """prometheus.yml: pods of its own namespace that are part of Quad and
    have a port named metrics; job quad-broker for a broker, quad-SERVICE
    for a service's workers (the jobs the rules read), instance the pod."""
    return generate.prometheus_yml(interval="15s", rules=["/etc/prometheus/quad-*.yml"], header="# Quad on Kubernetes (deploy/kube manifests).",
                                   scrape_configs=[
        "  - job_name: quad",
        "    kubernetes_sd_configs:",
        "      - role: pod",
        "        namespaces:",
        "          own_namespace: true",
        "    relabel_configs:",
        "      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_part_of, __meta_kubernetes_pod_container_port_name]",
        "        regex: quad;metrics",
        "        action: keep",
        "      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name]",
        "        target_label: job",
        "      - source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name]",
        "        regex: quad-broker-[0-9]+",
        "        target_label: job",
        "        replacement: quad-broker",
        "      - source_labels: [__meta_kubernetes_pod_name]",
        "        target_label: instance",
    ])


def prometheus_manifests():
    name = "quad-prometheus"
    rules = {f: open(os.path.join(RULES_DIR, f)).read() for f in sorted(os.listdir(RULES_DIR)) if f.endswith(".yml")}
    labels = {"app.kubernetes.io/name": name}
    container = {"name": "prometheus", "image": PROMETHEUS_IMAGE, "imagePullPolicy": "IfNotPresent",
                 "args": ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus",
                          f"--web.listen-address=0.0.0.0:{PROMETHEUS_PORT}"],
                 "ports": [{"name": "web", "containerPort": PROMETHEUS_PORT}],
                 "resources": resources("100m", "256Mi", "1", "1Gi"),
                 "readinessProbe": {"httpGet": {"path": "/-/ready", "port": PROMETHEUS_PORT}, "periodSeconds": 5},
                 "livenessProbe": {"httpGet": {"path": "/-/healthy", "port": PROMETHEUS_PORT}, "periodSeconds": 10,
                                   "failureThreshold": 6},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/prometheus", "readOnly": True},
                                  {"name": "data", "mountPath": "/prometheus"}]}
    spec = pod_spec([container], [{"name": "config", "configMap": {"name": name}}, {"name": "data", "emptyDir": {}}])
    spec["serviceAccountName"] = name
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "labels": labels}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name, "labels": labels},
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name, "labels": labels},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels},
         "data": dict({"prometheus.yml": prometheus_config()}, **rules)},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels}, "spec": spec}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": labels},
         "spec": {"selector": labels, "ports": [{"name": "web", "port": PROMETHEUS_PORT, "targetPort": PROMETHEUS_PORT}]}},
    ]


def kustomization(files):
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f for f, _ in files],
            # `deploy/kube keys deploy/k8s/keys` makes these files (never checked in).
            "secretGenerator": [{"name": "quad-keys", "files": [f"keys/{f}" for f in KEY_FILES]}],
            "generatorOptions": {"disableNameSuffixHash": True}}


# ------------------------------------------------------------------ YAML

def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    plain = s and all(c.isalnum() or c in "-_./:" for c in s) and not s[0].isdigit() \
        and s not in ("true", "false", "yes", "no", "on", "off", "null", "y", "n") and ":" not in s
    return s if plain else json.dumps(s)


def to_yaml(v, indent=0):
    pad = " " * indent
    out = []
    if isinstance(v, dict):
        for key, item in v.items():
            if isinstance(item, str) and "\n" in item:
                out.append(f"{pad}{key}: |")
                out += [f"{pad}  {line}" if line else "" for line in item.rstrip("\n").split("\n")]
            elif isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{key}:")
                out.append(to_yaml(item, indent + 2 if isinstance(item, dict) else indent))
            else:
                out.append(f"{pad}{key}: {scalar(item) if not isinstance(item, (dict, list)) else ('{}' if isinstance(item, dict) else '[]')}")
    elif isinstance(v, list):
        for item in v:
            if isinstance(item, (dict, list)) and item:
                body = to_yaml(item, indent + 2).split("\n")
                out.append(f"{pad}- {body[0].lstrip()}")
                out += body[1:]
            elif isinstance(item, str) and "\n" in item:
                out.append(f"{pad}- |")
                out += [f"{pad}    {line}" if line else "" for line in item.rstrip("\n").split("\n")]
            else:
                out.append(f"{pad}- {scalar(item)}")
    return "\n".join(out)


def write_docs(path, docs, mode=0o644):
    text = "\n---\n".join(to_yaml(d) for d in docs) + "\n"
    fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


HEADER = "# Generated by `deploy/kube manifests` (deploy/quaddeploy/kube.py); edit there.\n"


def cmd_manifests(out):
    os.makedirs(out, exist_ok=True)
    files = manifests()
    for name, docs in files:
        write_docs(os.path.join(out, name), docs)
    write_docs(os.path.join(out, "kustomization.yaml"), [kustomization(files)])
    # Not a resource of the kustomization: applied on its own, when wanted.
    os.makedirs(os.path.join(out, "optional"), exist_ok=True)
    write_docs(os.path.join(out, "optional", "prometheus.yaml"), prometheus_manifests())
    for name in [f for f, _ in files] + ["kustomization.yaml", os.path.join("optional", "prometheus.yaml")]:
        p = os.path.join(out, name)
        text = open(p).read()
        with open(p, "w") as f:
            f.write(HEADER + text)
    print(f"wrote {len(files) + 2} files in {out}")


# ------------------------------------------------------------------ keys

def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def make_keys(d):
    """Every key of the Secret quad-keys in folder d (mode 700, files 0600),
    made once: an existing file is kept."""
    import secrets
    os.makedirs(d, exist_ok=True)
    os.chmod(d, 0o700)

    def put(name, text):
        p = os.path.join(d, name)
        if not os.path.exists(p):
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")
    have = lambda n: os.path.exists(os.path.join(d, n))
    import zmq
    for name in ("broker", "services"):
        if not have(f"{name}.key"):
            public, secret = zmq.curve_keypair()
            put(f"{name}.key", secret.decode())
            put(f"{name}.pub", public.decode())
    if not have("accounts.key"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives import serialization as ser
        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(ser.Encoding.Raw, ser.PrivateFormat.Raw, ser.NoEncryption())
        public = key.public_key().public_bytes(ser.Encoding.Raw, ser.PublicFormat.Raw)
        # libsodium's 64-byte secret key: the seed, then the public key.
        put("accounts.key", b64url(seed + public))
        put("accounts.pub", b64url(public))
    put("admin.password", os.environ.get("QUAD_ADMIN_PASSWORD") or secrets.token_urlsafe(18))
    if not have("pg.password"):
        pw = secrets.token_urlsafe(24)
        put("pg.password", pw)
        put("pgpass", f"*:*:*:quad:{pw}")
    for n in KEY_FILES:
        os.chmod(os.path.join(d, n), 0o600)


# ---------------------------------------------------------------- podman

def state_dir():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    return os.path.abspath(os.environ.get("QUAD_KUBE_HOME") or os.path.join(root, ".quad-kube"))


def play_spec(state):
    """One Pod with every container, on the host's network (127.0.0.1
    only): what podman 4.3's kube play runs of the manifests."""
    containers = [broker_container(k, True) for k in range(1, BROKERS + 1)]
    containers.append(postgres_container(True))
    containers += [service_container(s, True) for s in SERVICES]
    volumes = [{"name": "keys", "hostPath": {"path": f"{state}/secrets/quad", "type": "Directory"}},
               {"name": "pgkeys", "hostPath": {"path": f"{state}/secrets/postgres", "type": "Directory"}},
               {"name": "pgdata", "hostPath": {"path": f"{state}/pgdata", "type": "Directory"}}]
    for c in containers:
        # podman 4.3 turns probes into healthchecks run by systemd timers
        # (with curl for httpGet); deploy/kube asks /healthz and /readyz itself instead.
        c.pop("readinessProbe", None)
        c.pop("livenessProbe", None)
        c.pop("ports", None)
        if c["name"] == "postgres":
            c["securityContext"] = {"runAsUser": 10002, "runAsGroup": 10002}
            c["volumeMounts"][0]["name"] = "pgkeys"
        else:
            c["securityContext"] = {"runAsUser": 10001, "runAsGroup": 10001}
        for m in c.get("volumeMounts", []):
            if m["name"] == "data":
                m["name"] = f"data-{c['name']}"
                volumes.append({"name": m["name"], "hostPath": {"path": f"{state}/data/{c['name']}", "type": "Directory"}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": POD, "labels": LABELS},
           "spec": {"hostNetwork": True, "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": GRACE_SECONDS,
                    "containers": containers, "volumes": volumes}}
    return pod


def podman(*args, check=True, capture=True):
    r = subprocess.run(["podman", *args], text=True, stdout=subprocess.PIPE if capture else None,
                       stderr=subprocess.STDOUT if capture else None)
    if check and r.returncode != 0:
        die(f"podman {' '.join(args)} failed (exit {r.returncode}): {(r.stdout or '').strip()}")
    return r


def die(message):
    print(f"kube: error: {message}", file=sys.stderr)
    sys.exit(1)


def port_open(port):
    import socket
    s = socket.socket()
    s.settimeout(0.5)
    try:
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def probe(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def targets():
    """(name, metrics port) of every Quad process of the pod."""
    return [(f"broker-{k}", broker_ports(k)["metrics"]) for k in range(1, BROKERS + 1)] + \
        [(s, metrics_port(s)) for s in SERVICES]


def bin_dir():
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    build = os.environ.get("QUAD_BUILD_DIR") or os.path.join(root, ".build")
    return os.environ.get("QUAD_BIN_DIR") or os.path.join(os.path.abspath(build), "release")


def env_exports(state):
    keys = f"{state}/secrets/quad"
    lines = {
        "QUAD_HOME": state,
        "QUAD_FRONTEND": endpoint_list("frontend", True),
        "QUAD_BROKER_KEY": open(f"{keys}/broker.pub").read().strip(),
        "QUAD_ADMIN_PASSWORD_FILE": f"{keys}/admin.password",
        "QUAD_ANALYTICS_URL": f"http://127.0.0.1:{DASHBOARD_PORT}",
    }
    # Left from a deploy/stack shell: not this pod's.
    out = [f"unset QUAD_BACKEND QUAD_EVENTS_IN QUAD_INTERNAL QUAD_SERVICE_KEY_FILE QUAD_TOKEN"]
    out += [f"export {k}={sh_quote(v)}" for k, v in lines.items()]
    out.append(f"export QUAD_EVENTS_OUT={sh_quote(endpoint_list('events-out', True))}")
    out.append(f'export PATH={sh_quote(bin_dir())}:"$PATH"')
    return out


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def prepare_state(state):
    """Keys, data folders and the play file under `state`; the folders a
    container writes belong to its uid (10001 quad, 10002 postgres)."""
    os.makedirs(state, exist_ok=True)
    os.chmod(state, 0o711)
    keys = f"{state}/secrets/quad"
    make_keys(keys)
    pgkeys = f"{state}/secrets/postgres"
    os.makedirs(pgkeys, exist_ok=True)
    shutil.copyfile(f"{keys}/pg.password", f"{pgkeys}/pg.password")
    os.chmod(f"{pgkeys}/pg.password", 0o600)
    for root, uid in ((f"{state}/secrets/quad", 10001), (pgkeys, 10002)):
        os.chown(root, uid, uid)
        os.chmod(root, 0o700)
        for n in os.listdir(root):
            os.chown(os.path.join(root, n), uid, uid)
    os.chmod(f"{state}/secrets", 0o711)
    os.makedirs(f"{state}/pgdata", exist_ok=True)
    os.chown(f"{state}/pgdata", 10002, 10002)
    os.chmod(f"{state}/pgdata", 0o700)
    for s in SERVICES:
        if s not in ON_POSTGRES:
            d = f"{state}/data/{s}"
            os.makedirs(d, exist_ok=True)
            os.chown(d, 10001, 10001)
            os.chmod(d, 0o700)
    play = f"{state}/pod.yaml"
    write_docs(play, [play_spec(state)])
    return play


def pod_exists():
    return podman("pod", "exists", POD, check=False).returncode == 0


def pod_logs(tail=15):
    r = podman("ps", "-a", "--pod", "--filter", f"pod={POD}", "--format", "{{.Names}} {{.Status}}", check=False)
    print(r.stdout, file=sys.stderr)
    for name in [l.split()[0] for l in (r.stdout or "").splitlines() if l.strip()]:
        if name.endswith("-infra"):
            continue
        logs = podman("logs", "--tail", str(tail), name, check=False)
        print(f"--- last lines of {name}:\n{logs.stdout}", file=sys.stderr)


def quadctl_ok(exports, *args, timeout=10):
    env = dict(os.environ)
    for k in ("QUAD_BACKEND", "QUAD_EVENTS_IN", "QUAD_INTERNAL", "QUAD_SERVICE_KEY_FILE", "QUAD_TOKEN"):
        env.pop(k, None)
    env.update(exports)
    try:
        r = subprocess.run([os.path.join(bin_dir(), "quadctl"), "--timeout", "3000", "--attempts", "1", *args], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return r.returncode == 0, r.stdout


def cmd_up(timeout):
    if shutil.which("podman") is None:
        die("podman is not installed (apt-get install -y podman runc debootstrap)")
    if os.geteuid() != 0:
        die("deploy/kube up runs rootful podman and gives the pod's folders to uid 10001 and 10002: run it as root")
    for image in (IMAGE, PG_IMAGE):
        if podman("image", "exists", image, check=False).returncode != 0:
            die(f"no image {image}: build it with deploy/image")
    if pod_exists():
        print(f"The pod {POD} is already running; nothing to do (deploy/kube down stops it).")
        return
    busy = [p for p in [broker_ports(k)[n] for k in range(1, BROKERS + 1) for n in broker_ports(k)]
            + [PG_PORT, DASHBOARD_PORT] + [metrics_port(s) for s in SERVICES] if port_open(p)]
    if busy:
        die(f"ports in use on 127.0.0.1: {busy} (another deploy/kube up? QUAD_KUBE_PORT_BASE moves them)")
    state = state_dir()
    play = prepare_state(state)
    started = time.monotonic()
    print(f"Playing {play} with podman kube play (pod {POD}, host network, 127.0.0.1:{min(PORTS.values())}-{max(PORTS.values())}) ...", flush=True)
    podman("kube", "play", play)
    deadline = started + timeout
    exports = dict(line[len("export "):].split("=", 1) for line in env_exports(state) if line.startswith("export QUAD_"))
    exports = {k: v.strip("'") for k, v in exports.items()}
    pending = dict(targets())
    print(f"Waiting (up to {timeout} s) for the probes of {len(pending)} processes (/healthz, /readyz), then each service's sys.health through both brokers ...", flush=True)
    while pending:
        for name, port in list(pending.items()):
            if probe(port, "/healthz") and probe(port, "/readyz"):
                print(f"  {name:<14} /healthz and /readyz ok on 127.0.0.1:{port}  ({time.monotonic() - started:.0f} s)", flush=True)
                del pending[name]
        if pending and time.monotonic() > deadline:
            pod_logs()
            die(f"no 200 on /healthz and /readyz from {', '.join(pending)} within {timeout} s")
        time.sleep(0.5)
    # Registered with each broker and answering: sys.health through each frontend.
    for s in SERVICES:
        for k in range(1, BROKERS + 1):
            one = dict(exports, QUAD_FRONTEND=f"tcp://127.0.0.1:{broker_ports(k)['frontend']}")
            while True:
                ok, out = quadctl_ok(one, "call", f"{s}.sys.health")
                if ok:
                    break
                if time.monotonic() > deadline:
                    pod_logs()
                    die(f"{s}.sys.health through broker {k} did not answer within {timeout} s: {out.strip()}")
                time.sleep(0.5)
        print(f"  {s:<14} sys.health ok through {BROKERS} brokers  ({time.monotonic() - started:.0f} s)", flush=True)
    print(f"""Quad is up in pod {POD} after {time.monotonic() - started:.0f} s: {BROKERS} brokers, {', '.join(SERVICES)}, PostgreSQL.
  frontends  {exports['QUAD_FRONTEND']}
  keys       {state}/secrets/quad (the Secret's files; admin {ADMIN}, password in admin.password)
  dashboard  http://127.0.0.1:{DASHBOARD_PORT}/signin
  logs       podman logs {POD}-catalog   (containers {POD}-broker-1 ... {POD}-analytics)
Use quadctl against it from this shell with:
  eval "$(deploy/kube env)"
  quadctl call catalog.products.list '{{"limit":5}}'""")


def cmd_down():
    state = state_dir()
    play = f"{state}/pod.yaml"
    if not pod_exists():
        print(f"The pod {POD} is not running.")
        return
    started = time.monotonic()
    if os.path.exists(play):
        podman("kube", "down", play)
    if pod_exists():
        podman("pod", "rm", "-f", "-t", str(GRACE_SECONDS), POD)
    print(f"The pod {POD} is down after {time.monotonic() - started:.0f} s; databases and keys stay in {state}.")


def cmd_env():
    state = state_dir()
    if not os.path.exists(f"{state}/secrets/quad/broker.pub"):
        die(f"no keys in {state}/secrets/quad: start the pod first (deploy/kube up)")
    print("\n".join(env_exports(state)))


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 64
    cmd = argv[0]
    if cmd == "manifests" and len(argv) == 2:
        cmd_manifests(argv[1])
    elif cmd == "keys" and len(argv) == 2:
        make_keys(argv[1])
        print(f"keys in {argv[1]}: {', '.join(KEY_FILES)}")
    elif cmd == "play-spec" and len(argv) == 1:
        print(to_yaml(play_spec(state_dir())))
    elif cmd == "up" and len(argv) == 1:
        cmd_up(int(os.environ.get("QUAD_HEALTH_TIMEOUT", "180")))
    elif cmd == "down" and len(argv) == 1:
        cmd_down()
    elif cmd == "env" and len(argv) == 1:
        cmd_env()
    else:
        print(__doc__, file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
