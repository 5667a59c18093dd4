"""Quad's stack as deploy/stack.json describes it, once: its services in
start order, its brokers and the layout of its ports. The one reader of that
file: the deploy tools (bash through `shell`), the port table (ports.py), the
checker, the benchmarks and the e2e tests get the stack from here.

    from quaddeploy import services
    services.names()                 # ["accounts", "catalog", ...] in start order
    services.load()["orders"].host   # 4
    services.description()["ports"]  # the port layout's offsets

From a shell (PYTHONPATH=deploy):

    python3 -m quaddeploy.services names [--fault KIND] [--store STORE]
    python3 -m quaddeploy.services field NAME COLUMN
    python3 -m quaddeploy.services json
    python3 -m quaddeploy.services shell
    python3 -m quaddeploy.services check-manifest FILE...

A description the schema (deploy/stack.schema.json) or the rules below
refuse is refused with ServicesError naming the file, the service and the
field.
"""

import json
import os
import re
import sys
from collections import OrderedDict, namedtuple

DEPLOY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_FILE = os.path.join(DEPLOY, "stack.json")
SCHEMA_FILE = os.path.join(DEPLOY, "stack.schema.json")
COLUMNS = ("name", "exe", "store", "host", "workers", "faults")
STORES = ("sqlite", "postgres")
FAULTS = ("kill", "pause", "partition", "pg", "clock")
# The most workers of one service (the schema's maximum of `workers`): what
# a service's default, up and scale accept and what --hosts gives an address
# (deploy/stack gets it as QUAD_MAX_WORKERS). Past it the workers only share
# the same cores.
with open(SCHEMA_FILE) as _f:
    MAX_WORKERS = json.load(_f)["properties"]["services"]["items"]["properties"]["workers"]["maximum"]
PORT_FIELDS = ("base", "broker_stride", "internal", "updates", "dashboard", "catalog_images", "reservations_images", "edge_control",
               "prometheus", "postgres_first", "postgres_tries", "metrics", "metrics_edge", "metrics_workers", "metrics_workers_per_service")

Service = namedtuple("Service", COLUMNS)
Service.__doc__ = """One service of deploy/stack.json; faults is a tuple of kinds."""


class ServicesError(ValueError):
    """deploy/stack.json cannot be read, or it is malformed."""


def path():
    """The file read: QUAD_STACK_FILE (tests), else deploy/stack.json."""
    return os.environ.get("QUAD_STACK_FILE") or DEFAULT_FILE


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check(doc, where="deploy/stack.json"):
    """Checks a parsed description: what the schema says, and the rules it
    cannot (an executable named after its service, hosts unique). Returns
    (services, brokers, ports): an OrderedDict name -> Service in start
    order, {"default", "max"} and the port layout."""
    if not isinstance(doc, dict):
        raise ServicesError("%s: expected an object with brokers, ports and services" % where)
    extra = set(doc) - {"$schema", "about", "brokers", "ports", "services"}
    if extra:
        raise ServicesError("%s: unknown field(s) %s (fields: brokers, ports, services)" % (where, ", ".join(sorted(extra))))
    brokers = doc.get("brokers")
    if not (isinstance(brokers, dict) and set(brokers) == {"default", "max"} and all(_int(v) for v in brokers.values())
            and 1 <= brokers["max"] <= 8 and 1 <= brokers["default"] <= brokers["max"]):
        raise ServicesError("%s: brokers must be {\"default\": D, \"max\": M} with 1 <= D <= M <= 8, got %s" % (where, json.dumps(brokers)))
    ports = doc.get("ports")
    if not isinstance(ports, dict) or set(ports) != set(PORT_FIELDS):
        have = set(ports) if isinstance(ports, dict) else set()
        raise ServicesError("%s: ports must have exactly %s (missing: %s; unknown: %s)"
                            % (where, ", ".join(PORT_FIELDS), ", ".join(sorted(set(PORT_FIELDS) - have)) or "none",
                               ", ".join(sorted(have - set(PORT_FIELDS))) or "none"))
    for k in PORT_FIELDS:
        v = ports[k]
        ok = (isinstance(v, list) and all(isinstance(x, str) for x in v)) if k == "internal" else (_int(v) and v >= 1)
        if not ok:
            raise ServicesError("%s: ports.%s must be %s, got %s" % (where, k, "a list of names" if k == "internal" else "a positive integer",
                                                                     json.dumps(v)))
    listed = doc.get("services")
    if not isinstance(listed, list) or not listed:
        raise ServicesError("%s lists no service" % where)
    out = OrderedDict()
    hosts = {}
    for n, s in enumerate(listed, 1):
        at = "%s: service %d" % (where, n)
        if not isinstance(s, dict):
            raise ServicesError("%s: expected an object, got %s" % (at, json.dumps(s)))
        name = s.get("name")
        if not (isinstance(name, str) and re.match(r"^[a-z][a-z0-9-]*$", name)):
            raise ServicesError("%s: the name %s is not lower-case letters, digits and '-'" % (at, json.dumps(name)))
        at = "%s (%s)" % (at, name)
        missing = [c for c in COLUMNS if c not in s]
        unknown = sorted(set(s) - set(COLUMNS) - {"why"})
        if missing or unknown:
            raise ServicesError("%s: expected the fields name exe store host workers faults (and why); missing: %s; unknown: %s"
                                % (at, ", ".join(missing) or "none", ", ".join(unknown) or "none"))
        exe, store, host, workers, faults = s["exe"], s["store"], s["host"], s["workers"], s["faults"]
        if name in out:
            raise ServicesError("%s: %s is listed twice" % (at, name))
        if exe != "quad-" + name:
            raise ServicesError("%s: the executable of %s must be quad-%s (the tools find its processes by that name), got %s"
                                % (at, name, name, json.dumps(exe)))
        if store not in STORES:
            raise ServicesError("%s: the store of %s must be sqlite or postgres, got %s" % (at, name, json.dumps(store)))
        if not (_int(host) and 1 <= host <= 9):
            raise ServicesError("%s: the host of %s must be 1 to 9, got %s" % (at, name, json.dumps(host)))
        if host in hosts:
            raise ServicesError("%s: host %d is taken by %s" % (at, host, hosts[host]))
        if not (_int(workers) and 1 <= workers <= MAX_WORKERS):
            raise ServicesError("%s: the workers of %s must be 1 to %d, got %s" % (at, name, MAX_WORKERS, json.dumps(workers)))
        if not (isinstance(faults, list) and all(isinstance(f, str) for f in faults)):
            raise ServicesError("%s: the faults of %s must be a list of %s, got %s" % (at, name, ", ".join(FAULTS), json.dumps(faults)))
        for f in faults:
            if f not in FAULTS:
                raise ServicesError("%s: unknown fault '%s' for %s (faults: %s)" % (at, f, name, ", ".join(FAULTS)))
        if len(set(faults)) != len(faults):
            raise ServicesError("%s: a fault of %s is listed twice: %s" % (at, name, ", ".join(faults)))
        hosts[host] = name
        out[name] = Service(name, exe, store, host, workers, tuple(faults))
    return out, dict(brokers), dict(ports)


def parse(text, where="deploy/stack.json"):
    """The services of a description's text, an OrderedDict name -> Service in start order."""
    return check(_json(text, where), where)[0]


def _json(text, where):
    try:
        return json.loads(text)
    except ValueError as e:
        raise ServicesError("%s is not JSON: %s" % (where, e))


_cache = {}


def description(file=None):
    """(services, brokers, ports) of deploy/stack.json (or file), checked."""
    file = file or path()
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ServicesError("cannot read the description of the stack %s: %s" % (file, e.strerror))
    if (file, text) not in _cache:
        _cache[(file, text)] = check(_json(text, file), file)
    return _cache[(file, text)]


def load(file=None):
    """The services of deploy/stack.json (or file), name -> Service in start order."""
    return description(file)[0]


def brokers(file=None):
    """{"default": D, "max": M}: the brokers a stack starts and may have."""
    return description(file)[1]


def port_layout(file=None):
    """The port layout's offsets (stack.schema.json says what each is)."""
    return description(file)[2]


def shell(file=None):
    """The description as bash assignments, for deploy/lib.sh's
    quad_services_read to eval: SERVICES, SERVICE_EXE, SERVICE_STORE,
    SERVICE_HOST, SERVICE_WORKERS, SERVICE_FAULTS (comma-separated) and
    QUAD_DEFAULT_BROKERS, QUAD_MAX_BROKERS, QUAD_MAX_WORKERS."""
    import shlex
    services, b, _ = description(file)
    out = ["SERVICES=(%s)" % " ".join(shlex.quote(n) for n in services)]
    for column, var in (("exe", "SERVICE_EXE"), ("store", "SERVICE_STORE"), ("host", "SERVICE_HOST"), ("workers", "SERVICE_WORKERS"),
                        ("faults", "SERVICE_FAULTS")):
        pairs = []
        for s in services.values():
            v = getattr(s, column)
            pairs.append("[%s]=%s" % (shlex.quote(s.name), shlex.quote(",".join(v) if isinstance(v, tuple) else str(v))))
        out.append("declare -gA %s=(%s)" % (var, " ".join(pairs)))
    out.append("QUAD_DEFAULT_BROKERS=%d QUAD_MAX_BROKERS=%d QUAD_MAX_WORKERS=%d" % (b["default"], b["max"], MAX_WORKERS))
    return "\n".join(out)


def names(fault=None, store=None, file=None):
    """The names in start order; with fault, those the nemesis may do it to;
    with store, those on that store under --postgres."""
    return [s.name for s in load(file).values()
            if (fault is None or fault in s.faults) and (store is None or s.store == store)]


def env_var(service, what):
    """QUAD_<NAME>_<WHAT>, as deploy/stack spells a service's settings
    (QUAD_TELEMETRY_DB, QUAD_ACCOUNTS_WORKERS): '-' becomes '_'."""
    return "QUAD_%s_%s" % (service.upper().replace("-", "_"), what)


def manifest_problems(documents, file=None):
    """What a set of Kubernetes manifests gets wrong against the list, as
    sentences (empty: they agree). documents are parsed YAML/JSON objects (a
    List's items are looked into). A service must have a Deployment or
    StatefulSet whose name is the service's (or quad-NAME), whose first
    container runs quad-NAME; a workload named after no service, other than
    the broker, PostgreSQL and quad-edge, is reported too."""
    want = load(file)
    found = {}
    stack = list(documents)
    while stack:
        d = stack.pop(0)
        if not isinstance(d, dict):
            continue
        if d.get("kind") == "List":
            stack.extend(d.get("items") or [])
            continue
        if d.get("kind") not in ("Deployment", "StatefulSet"):
            continue
        name = (d.get("metadata") or {}).get("name", "")
        short = name[len("quad-"):] if name.startswith("quad-") else name
        containers = (((d.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or [{}]
        c = containers[0]
        argv = list(c.get("command") or []) + list(c.get("args") or [])
        found[short] = (name, argv)
    problems = []
    for s in want.values():
        if s.name not in found:
            problems.append("no Deployment or StatefulSet for service %s (named %s or quad-%s)" % (s.name, s.name, s.name))
            continue
        name, argv = found[s.name]
        # The image's quad-entry (deploy/quad-entry) runs the program it is given.
        if argv[:1] and os.path.basename(str(argv[0])) == "quad-entry":
            argv = argv[1:]
        if not any(os.path.basename(str(a)) == s.exe for a in argv[:1]):
            problems.append("%s runs %s, not %s" % (name, argv[:1] or "the image's entry point", s.exe))
    for short, (name, _) in found.items():
        if short not in want and not re.match(r"^(broker(-\d+)?|postgres(ql)?|pg|edge|phones)$", short):
            problems.append("%s is a workload of no service in %s" % (name, file or path()))
    return problems


def _main(argv):
    usage = ("usage: python3 -m quaddeploy.services names [--fault KIND] [--store STORE] | field NAME COLUMN | json | shell"
             " | check-manifest FILE...\n"
             "The stack as deploy/stack.json (or QUAD_STACK_FILE) describes it.")
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv:
        print(usage, file=sys.stderr)
        return 64
    try:
        if argv[0] == "names":
            opts = dict(zip(argv[1::2], argv[2::2]))
            if len(argv) % 2 == 0 or set(opts) - {"--fault", "--store"}:
                print(usage, file=sys.stderr)
                return 64
            print("\n".join(names(fault=opts.get("--fault"), store=opts.get("--store"))))
        elif argv[0] == "field" and len(argv) == 3:
            services = load()
            if argv[1] not in services:
                print("services: unknown service '%s' (services: %s)" % (argv[1], " ".join(services)), file=sys.stderr)
                return 1
            if argv[2] not in COLUMNS:
                print("services: unknown column '%s' (columns: %s)" % (argv[2], " ".join(COLUMNS)), file=sys.stderr)
                return 64
            value = getattr(services[argv[1]], argv[2])
            print(",".join(value) if isinstance(value, tuple) else value)
        elif argv[0] == "shell" and len(argv) == 1:
            print(shell())
        elif argv[0] == "json" and len(argv) == 1:
            print(json.dumps([dict(s._asdict(), faults=list(s.faults)) for s in load().values()], indent=2))
        elif argv[0] == "check-manifest" and len(argv) > 1:
            docs = []
            for f in argv[1:]:
                with open(f, encoding="utf-8") as fh:
                    text = fh.read()
                try:
                    import yaml  # PyYAML, when the manifests are YAML
                    docs.extend(yaml.safe_load_all(text))
                except ImportError:
                    docs.append(json.loads(text))
            problems = manifest_problems(docs)
            for p in problems:
                print("services: " + p, file=sys.stderr)
            return 1 if problems else 0
        else:
            print(usage, file=sys.stderr)
            return 64
    except ServicesError as e:
        print("services: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
