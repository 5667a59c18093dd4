"""The one table of Quad's default ports.

Every port a stack takes, from its port base (QUAD_PORT_BASE, default 7700),
its brokers (1 to 8) and its services, by the layout deploy/stack.json
describes (its "ports", read through quaddeploy.services); and the ports
deploy/bench takes for its own stacks and peers. No other file computes a
port: deploy/stack and the scripts it sources read QUAD_PORT_<NAME> from
`--shell` (deploy/lib.sh's quad_ports_load), deploy/kube's manifests and
deploy/bench import it, and the e2e tests check the tools against it;
Tests/e2e/test_ports.py checks that no two of them collide and that
`deploy/stack env` agrees.

    from quaddeploy import ports
    ports.stack(7700, 2)              # [Port(name, port, what), ...]
    ports.free_base(17700, 2)         # a base whose every port is free now
    ports.bench(29700)                # deploy/bench's plan

From a shell (PYTHONPATH=deploy):

    python3 -m quaddeploy.ports --base 7700 --brokers 2 [--table|--json|--shell]
    python3 -m quaddeploy.ports --free-from 17700 --brokers 2
    python3 -m quaddeploy.ports --bench 29700 [--table|--json|--shell]

The layout, from the port base B (broker K from 1, service I from 0 in
deploy/stack.json's order), with the offsets of deploy/stack.json:

    B+10*(K-1)            broker K's public frontend (on --hosts every broker
                          serves on B on its own host's address)
    B+10*(K-1)+1..+4      broker K's internal sockets on --hosts (backend,
                          events in, events out, internal frontend); ipc://
                          on loopback, reserved all the same
    B+10*(K-1)+9          broker K's updates socket (its frontend's port + 9)
    B+80                  the analytics dashboard (QUAD_ANALYTICS_HTTP)
    B+85                  catalog's images (QUAD_CATALOG_IMAGES)
    B+86                  reservations' images (QUAD_RESERVATIONS_IMAGES_HTTP)
    B+88                  the phones' control socket (quad-edge --control,
                          QUAD_EDGE_CONTROL)
    B+89                  Prometheus of `deploy/stack up --prometheus`: its
                          web page and HTTP API (QUAD_PROMETHEUS_PORT)
    B+90..B+99            PostgreSQL of `deploy/stack up --postgres`: the first
                          free from B+90 (QUAD_PG_PORT)
    M = B+100             QUAD_METRICS_BASE, the first /metrics port:
    M+K-1                 broker K's /metrics
    M+9                   quad-edge's /metrics (quad-edge --metrics)
    M+10+20*I+N-1         worker N (1 to 20) of the I-th service's /metrics

A stack thus spans B to B+110+20*S-1 for S services (B+269 with eight).
"""

import argparse
try:
    from . import cli
except ImportError:  # run as a script, not as quaddeploy.X
    import cli  # type: ignore[no-redef]
import json
import os
import re
import socket
import sys
from collections import namedtuple

from quaddeploy import services as services_list



def layout():
    """The port layout's offsets, as deploy/stack.json (or QUAD_STACK_FILE)
    says now: stack.schema.json says what each is."""
    return services_list.port_layout()


def max_brokers():
    return services_list.brokers()["max"]


# The real description's values, for those that import them; the functions
# below read the layout when called, so a changed description is followed.
_L = layout()
DEFAULT_BASE = _L["base"]
MAX_BROKERS = services_list.brokers()["max"]
DEFAULT_BROKERS = services_list.brokers()["default"]
INTERNAL = tuple(_L["internal"])
UPDATES = _L["updates"]
PORT_MAX = 65535

Port = namedtuple("Port", ("name", "port", "what"))


def service_names(services=None):
    return list(services) if services is not None else services_list.names()


def metrics_width(services=None):
    """The ports of the /metrics range: brokers, quad-edge and every worker."""
    L = layout()
    return L["metrics_workers"] + L["metrics_workers_per_service"] * len(service_names(services))


def span(services=None):
    """How many ports from the base a stack reserves (metrics at their default)."""
    return layout()["metrics"] + metrics_width(services)


def stack(base=DEFAULT_BASE, brokers=2, services=None, metrics_base=None):
    """Every port a stack at `base` with `brokers` brokers takes, as Ports
    in the order of the layout. metrics_base: QUAD_METRICS_BASE (None for
    base+100, "off" for none)."""
    L = layout()
    most = max_brokers()
    if not 1 <= brokers <= most:
        raise ValueError(f"brokers must be from 1 to {most}, got {brokers}")
    names = service_names(services)
    out = []
    for k in range(1, brokers + 1):
        front = base + L["broker_stride"] * (k - 1)
        hosts = "" if k == 1 else " (on --hosts: base of its own host)"
        out.append(Port(f"broker{k}.frontend", front, f"broker {k}'s frontend{hosts}"))
        for j, sock in enumerate(L["internal"], 1):
            out.append(Port(f"broker{k}.{sock}", front + j,
                            f"broker 1's {sock} on --hosts (ipc:// on loopback)" if k == 1 else
                            f"reserved (on --hosts broker {k}'s {sock} is base+{j} of its own host)"))
        out.append(Port(f"broker{k}.updates", front + L["updates"], f"broker {k}'s updates socket (its frontend + {L['updates']})"))
    out.append(Port("dashboard", base + L["dashboard"], "the analytics dashboard"))
    out.append(Port("catalog.images", base + L["catalog_images"], "catalog's images"))
    out.append(Port("reservations.images", base + L["reservations_images"], "reservations' images"))
    out.append(Port("edge.control", base + L["edge_control"], "the phones' control socket (quad-edge)"))
    out.append(Port("prometheus", base + L["prometheus"], "Prometheus of up --prometheus (web page, HTTP API)"))
    for j in range(L["postgres_tries"]):
        out.append(Port(f"postgres.{j + 1}", base + L["postgres_first"] + j, "PostgreSQL of --postgres: the first free of these (QUAD_PG_PORT)"))
    m = base + L["metrics"] if metrics_base is None else metrics_base
    if m != "off":
        m = int(m)
        for k in range(1, most + 1):
            out.append(Port(f"metrics.broker.{k}", m + k - 1, "/metrics of broker K (M+K-1; M: QUAD_METRICS_BASE, default base+100)"))
        out.append(Port("metrics.edge", m + L["metrics_edge"], "/metrics of quad-edge (M+9; quad-edge --metrics)"))
        for i, s in enumerate(names):
            for n in range(1, L["metrics_workers_per_service"] + 1):
                out.append(Port(f"metrics.{s}.{n}", m + L["metrics_workers"] + L["metrics_workers_per_service"] * i + n - 1,
                                f"/metrics of {s}'s worker N (M+10+20*{i}+N-1)"))
    for p in out:
        if not 0 < p.port <= PORT_MAX:
            raise ValueError(f"port base {base}: {p.name} would be port {p.port}, past {PORT_MAX}")
    return out


def collisions(ports):
    """Pairs of Ports that share a port number."""
    seen, out = {}, []
    for p in ports:
        if p.port in seen:
            out.append((seen[p.port], p))
        else:
            seen[p.port] = p
    return out


# deploy/bench: its SQLite stack at the base, its PostgreSQL stack one stack
# span later (rounded up to 100), then its peers, each with a few ports to
# find a free one in.
BENCH_DEFAULT_BASE = 29700
BENCH_PEER_WIDTH = 10
BENCH_PEERS = ("nats", "edge_control", "edge_control_memory", "edge_nowhere", "postgres", "nats_tls")


def bench(base=BENCH_DEFAULT_BASE, services=None):
    """deploy/bench's plan: {"sqlite_stack": base, "postgres_stack": base, "nats": first, ...}
    with "width" (ports each peer may search) and "last" (its last port)."""
    stride = -(-span(services) // 100) * 100
    plan = {"sqlite_stack": base, "postgres_stack": base + stride}
    first = base + 2 * stride
    for j, name in enumerate(BENCH_PEERS):
        plan[name] = first + BENCH_PEER_WIDTH * j
    plan["width"] = BENCH_PEER_WIDTH
    plan["last"] = first + BENCH_PEER_WIDTH * len(BENCH_PEERS) - 1
    if plan["last"] > PORT_MAX:
        raise ValueError(f"bench port base {base}: its ports would run to {plan['last']}, past {PORT_MAX}")
    return plan


def bench_ports(base=BENCH_DEFAULT_BASE, services=None, brokers=MAX_BROKERS):
    """Every port deploy/bench may take: both stacks' and each peer's range."""
    plan = bench(base, services)
    out = []
    for name in ("sqlite", "postgres"):
        out += [p._replace(name=f"{name}-stack.{p.name}", what=f"bench's {name} stack: {p.what}")
                for p in stack(plan[name + "_stack"], brokers, services)]
    for name in BENCH_PEERS:
        out += [Port(f"{name}.{j + 1}", plan[name] + j, f"bench's {name.replace('_', ' ')}: the first free of these") for j in range(plan["width"])]
    return out


def port_free(port, host="127.0.0.1"):
    """Nothing listens on host:port and a server could bind it now (a port
    that some connection holds as its local end cannot be bound)."""
    with socket.socket() as s:
        s.settimeout(0.5)
        if s.connect_ex((host, port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_base(start, brokers=MAX_BROKERS, services=None, step=100, tries=200):
    """The first base from `start` (in steps of `step`) whose every port of
    the table is free on 127.0.0.1 now; None when none of `tries` is."""
    base = start
    for _ in range(tries):
        try:
            ports = stack(base, brokers, services)
        except ValueError:
            return None
        if all(port_free(p.port) for p in ports):
            return base
        base += step
    return None


def _print(ports, fmt, extra=None):
    if fmt == "json":
        print(json.dumps({"ports": [p._asdict() for p in ports], **(extra or {})}, indent=1))
    elif fmt == "shell":
        for key, value in (extra or {}).items():
            print(f"{shell_name(key)}={value}")
        # Each port by its name (QUAD_PORT_BROKER1_FRONTEND=7700, ...): what
        # deploy/stack and its scripts read, so that no port is computed twice.
        for p in ports:
            print(f"QUAD_PORT_{shell_name(p.name)}={p.port}")
        # Not ports: the broker's updates socket is its frontend's port + this,
        # and the /metrics range's width from its first port.
        print(f"QUAD_PORT_UPDATES_OFFSET={layout()['updates']}")
        metrics = [p.port for p in ports if p.name.startswith("metrics.")]
        if metrics:
            print(f"QUAD_PORT_METRICS_WIDTH={max(metrics) - min(metrics) + 1}")
        print("QUAD_PORTS=\"%s\"" % " ".join(str(p.port) for p in ports))
    else:
        for line in table_lines(ports):
            print(line)


def shell_name(name):
    """A port's name as bash spells a variable: metrics.catalog.1 -> METRICS_CATALOG_1."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def table_lines(ports):
    """The table as text: PORT(S) NAME WHAT, a run of numbered ports of one
    kind (NAME.1, NAME.2, ...) folded into one line."""
    lines, run = [], []

    def family(p):
        m = re.fullmatch(r"(.*)\.(\d+)", p.name)
        return m.group(1) if m else None

    def flush():
        if run:
            first, last = run[0], run[-1]
            where = str(first.port) if first is last else f"{first.port}-{last.port}"
            name = first.name if first is last else f"{family(first)}.{{{first.name.rsplit('.', 1)[1]}..{last.name.rsplit('.', 1)[1]}}}"
            lines.append(f"{where:<12} {name:<32} {first.what}")
            run.clear()

    for p in ports:
        if run and not (family(p) and family(p) == family(run[-1]) and p.port == run[-1].port + 1):
            flush()
        run.append(p)
    flush()
    return lines


def _main(argv):
    ap = cli.Parser(prog="python3 -m quaddeploy.ports",
                                 description="The one table of Quad's default ports (deploy/quaddeploy/ports.py).")
    ap.add_argument("--base", type=int, default=int(os.environ.get("QUAD_PORT_BASE") or DEFAULT_BASE),
                    help="the port base (default QUAD_PORT_BASE, else 7700)")
    ap.add_argument("--brokers", type=int, default=DEFAULT_BROKERS, help=f"brokers, 1 to {MAX_BROKERS} (default {DEFAULT_BROKERS})")
    ap.add_argument("--metrics-base", help="QUAD_METRICS_BASE (default base+100; off: none)")
    ap.add_argument("--stack-file", help="the description of the stack (default deploy/stack.json, or QUAD_STACK_FILE)")
    fmt = ap.add_mutually_exclusive_group()
    fmt.add_argument("--table", dest="fmt", action="store_const", const="table", help="a table: PORT(S) NAME WHAT (default)")
    fmt.add_argument("--json", dest="fmt", action="store_const", const="json", help="JSON: {\"ports\": [{name, port, what}]}")
    fmt.add_argument("--shell", dest="fmt", action="store_const", const="shell",
                     help="NAME=VALUE lines for bash, and QUAD_PORTS with every port")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--free-from", type=int, metavar="PORT",
                      help="print the first port base from PORT (in steps of 100) whose every port is free now; exit 1 if none")
    what.add_argument("--bench", type=int, nargs="?", const=BENCH_DEFAULT_BASE, metavar="BASE",
                      help=f"deploy/bench's ports from BASE (default {BENCH_DEFAULT_BASE})")
    args = ap.parse_args(argv)
    try:
        if args.stack_file:
            os.environ["QUAD_STACK_FILE"] = args.stack_file
        names = [s for s in services_list.load()]
        if args.free_from is not None:
            base = free_base(args.free_from, args.brokers, names)
            if base is None:
                sys.stderr.write(f"ports: no port base from {args.free_from} (in steps of 100) has all its {span(names)} ports free\n")
                return 1
            print(base)
            return 0
        if args.bench is not None:
            plan = bench(args.bench, names)
            _print(bench_ports(args.bench, names), args.fmt or "table", {f"bench.{k}": v for k, v in plan.items()})
            return 0
        metrics = args.metrics_base if args.metrics_base in (None, "off") else int(args.metrics_base)
        ports = stack(args.base, args.brokers, names, metrics)
    except (ValueError, services_list.ServicesError) as e:
        sys.stderr.write(f"ports: {e}\n")
        return 64
    L = layout()
    extra = {"port_base": args.base, "brokers": args.brokers, "span": span(names),
             "metrics_base": args.base + L["metrics"] if metrics is None else metrics,
             "edge_control": f"tcp://127.0.0.1:{args.base + L['edge_control']}",
             "prometheus": f"http://127.0.0.1:{args.base + L['prometheus']}/"}
    _print(ports, args.fmt or "table", extra)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
