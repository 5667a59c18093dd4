"""Quad's services as deploy/services lists them: the one list the deploy
tools, the checker, the benchmarks and the e2e tests read.

    from quaddeploy import services
    services.names()                 # ["accounts", "catalog", ...] in start order
    services.load()["orders"].host   # 4

From a shell (PYTHONPATH=deploy):

    python3 -m quaddeploy.services names [--fault KIND] [--store STORE]
    python3 -m quaddeploy.services field NAME COLUMN
    python3 -m quaddeploy.services json
    python3 -m quaddeploy.services check-manifest FILE...

A malformed line is refused with ServicesError naming the file and line, in
the words deploy/lib.sh's quad_services_read uses.
"""

import json
import os
import re
import sys
from collections import OrderedDict, namedtuple

DEFAULT_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "services")
COLUMNS = ("name", "exe", "store", "host", "workers", "faults")
STORES = ("sqlite", "postgres")
FAULTS = ("kill", "pause", "partition", "pg", "clock")

Service = namedtuple("Service", COLUMNS)
Service.__doc__ = """One line of deploy/services; faults is a tuple of kinds."""


class ServicesError(ValueError):
    """deploy/services cannot be read, or a line of it is malformed."""


def path():
    """The file read: QUAD_SERVICES_FILE (tests), else deploy/services."""
    return os.environ.get("QUAD_SERVICES_FILE") or DEFAULT_FILE


def parse(text, where="deploy/services"):
    """The services of text, an OrderedDict name -> Service in start order."""
    out = OrderedDict()
    hosts = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0]
        fields = line.split()
        if not fields:
            continue
        at = "%s line %d" % (where, n)
        if len(fields) != len(COLUMNS):
            raise ServicesError("%s: expected 6 fields (name exe store host workers faults), got: %s" % (at, line.strip()))
        name, exe, store, host, workers, faults = fields
        if not re.match(r"^[a-z][a-z0-9-]*$", name):
            raise ServicesError("%s: the name '%s' is not lower-case letters, digits and '-'" % (at, name))
        if name in out:
            raise ServicesError("%s: %s is listed twice" % (at, name))
        if exe != "quad-" + name:
            raise ServicesError("%s: the executable of %s must be quad-%s (the tools find its processes by that name), got '%s'"
                                % (at, name, name, exe))
        if store not in STORES:
            raise ServicesError("%s: the store of %s must be sqlite or postgres, got '%s'" % (at, name, store))
        if not re.match(r"^[1-9]$", host):
            raise ServicesError("%s: the host of %s must be 1 to 9, got '%s'" % (at, name, host))
        if host in hosts:
            raise ServicesError("%s: host %s is taken by %s" % (at, host, hosts[host]))
        if not (workers.isdigit() and 1 <= int(workers) <= 16):
            raise ServicesError("%s: the workers of %s must be 1 to 16, got '%s'" % (at, name, workers))
        kinds = () if faults == "-" else tuple(f for f in faults.split(",") if f)
        for f in kinds:
            if f not in FAULTS:
                raise ServicesError("%s: unknown fault '%s' for %s (faults: %s)" % (at, f, name, ", ".join(FAULTS)))
        hosts[host] = name
        out[name] = Service(name, exe, store, int(host), int(workers), kinds)
    if not out:
        raise ServicesError("%s lists no service" % where)
    return out


def load(file=None):
    """The services of deploy/services (or file), name -> Service in start order."""
    file = file or path()
    try:
        with open(file, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ServicesError("cannot read the list of services %s: %s" % (file, e.strerror))
    return parse(text, file)


def names(fault=None, store=None, file=None):
    """The names in start order; with fault, those the nemesis may do it to;
    with store, those on that store under --postgres."""
    return [s.name for s in load(file).values()
            if (fault is None or fault in s.faults) and (store is None or s.store == store)]


def env_var(service, what):
    """QUAD_<NAME>_<WHAT>, as deploy/stack spells a service's settings
    (QUAD_TELEMETRY_DB, QUAD_ACCOUNTS_WORKERS): '-' becomes '_'."""
    return "QUAD_%s_%s" % (service.upper().replace("-", "_"), what)


def host_address(subnet, service, worker, file=None):
    """The --hosts address of worker N of service (deploy/hosts.sh hosts_ip_of):
    subnet is "10.77.K"."""
    host = load(file)[service].host
    if 1 <= worker <= 9:
        return "%s.%d" % (subnet, 10 * host + worker)
    if worker <= 30:
        return "%s.%d" % (subnet, 200 + ((host - 1) * 7 + worker) % 54)
    raise ValueError("worker %d of %s: at most 30 workers have an address" % (worker, service))


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
    usage = ("usage: python3 -m quaddeploy.services names [--fault KIND] [--store STORE] | field NAME COLUMN | json"
             " | check-manifest FILE...")
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
