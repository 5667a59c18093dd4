"""The one table of ports (deploy/quaddeploy/ports.py): no two defaults of
the project take the same port, for any port base and broker count, and the
tools agree with the table.

- For many port bases and every broker count 1 to 8, no two ports of a
  stack collide (frontends, internal ports on --hosts, updates sockets,
  dashboard, image servers, the phones' control socket, PostgreSQL's ports,
  the /metrics range of brokers, quad-edge and every worker), nor those of
  deploy/bench's two stacks and its peers.
- `deploy/stack env` (nothing started: QUAD_PORT_BASE, QUAD_BROKERS and a
  QUAD_HOME with no stack) prints the table's frontends, updates sockets,
  dashboard and QUAD_EDGE_CONTROL.
- deploy/metrics.sh gives every process the table's /metrics port.
- quad-edge's default --control, and quadctl phone's, is base 7700's
  control port, 7788 (the binaries from QUAD_BIN_DIR, /work/bin or
  .build/release).
- deploy/bench's plan: its peers' ports and its stacks' spans come from the
  table, below the kernel's ephemeral ports where the raw baselines bind.
- The description changed (a service added and one gone, worker counts, a
  port base, a broker count): the table, `deploy/stack env`,
  deploy/metrics.sh and the Kubernetes manifests of deploy/kube all follow.

Seconds; starts nothing.
"""

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "deploy"))
from quaddeploy import ports  # noqa: E402
from quaddeploy import services  # noqa: E402

SERVICES = services.names()
SPAN = ports.span(SERVICES)
BASES = [1024, 7700, 17700, 18600, 20100, 29700, 31000] + list(range(2000, 65535 - SPAN, 211))


def by_name(table):
    return {p.name: p.port for p in table}


def test_the_default_layout():
    t = by_name(ports.stack(7700, 2))
    assert t["broker1.frontend"] == 7700 and t["broker2.frontend"] == 7710
    assert t["broker1.updates"] == 7709 and t["broker2.updates"] == 7719
    assert [t[f"broker1.{s}"] for s in ports.INTERNAL] == [7701, 7702, 7703, 7704]
    assert t["dashboard"] == 7780 and t["catalog.images"] == 7785 and t["reservations.images"] == 7786
    assert t["edge.control"] == 7788
    assert t["postgres.1"] == 7790 and t["postgres.10"] == 7799
    assert t["metrics.broker.1"] == 7800 and t["metrics.broker.8"] == 7807 and t["metrics.edge"] == 7809
    assert t[f"metrics.{SERVICES[0]}.1"] == 7810 and t[f"metrics.{SERVICES[0]}.20"] == 7829
    last = SERVICES[-1]
    assert t[f"metrics.{last}.20"] == 7800 + 10 + 20 * (len(SERVICES) - 1) + 19
    assert max(t.values()) == 7700 + ports.span() - 1


@pytest.mark.parametrize("brokers", range(1, 9))
def test_no_two_ports_of_a_stack_collide(brokers):
    for base in BASES:
        table = ports.stack(base, brokers, SERVICES)
        assert ports.collisions(table) == [], f"base {base}, {brokers} broker(s): {ports.collisions(table)[:3]}"
        assert len([p for p in table if p.name.endswith(".frontend")]) == brokers
        assert all(base <= p.port < base + SPAN for p in table), f"base {base}: a port outside the stack's span"


def test_a_metrics_base_elsewhere_is_checked_too():
    # QUAD_METRICS_BASE inside the stack's own ports is a collision the table reports.
    assert ports.collisions(ports.stack(17700, 2, metrics_base=17700 + 80)) != []
    assert ports.collisions(ports.stack(17700, 8, metrics_base=40000)) == []
    assert not [p for p in ports.stack(17700, 2, metrics_base="off") if p.name.startswith("metrics.")]


def test_no_two_ports_of_the_bench_collide():
    for base in [ports.BENCH_DEFAULT_BASE, 1024, 20000, 40000, 60000]:
        table = ports.bench_ports(base)
        assert ports.collisions(table) == [], f"bench base {base}: {ports.collisions(table)[:3]}"
        plan = ports.bench(base)
        assert plan["postgres_stack"] >= plan["sqlite_stack"] + ports.span()
        assert plan["nats"] >= plan["postgres_stack"] + ports.span()
        assert max(p.port for p in table) == plan["last"]


def test_the_bench_stays_below_the_ephemeral_ports():
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except OSError:
        low = 32768
    assert ports.bench()["last"] < low, "deploy/bench's default ports reach the kernel's ephemeral ports"
    # The user's default stack and the bench's stacks are apart.
    assert 7700 + ports.span() <= ports.BENCH_DEFAULT_BASE


def test_a_base_too_high_is_refused():
    with pytest.raises(ValueError, match="past 65535"):
        ports.stack(65500, 1)


def stack_env(base, brokers, **extra):
    home = tempfile.mkdtemp(prefix="quad-ports-")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("QUAD_") or k in ("QUAD_BIN_DIR", "QUAD_BUILD_DIR")}
    env.update(QUAD_HOME=os.path.join(home, "none"), QUAD_PORT_BASE=str(base), QUAD_BROKERS=str(brokers), **extra)
    r = subprocess.run([os.path.join(ROOT, "deploy", "stack"), "env"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(home, "none")), "deploy/stack env made the stack's home"
    os.rmdir(home)
    exports, notes = {}, {}
    for line in r.stdout.splitlines():
        if line.startswith("export "):
            k, v = line[len("export "):].split("=", 1)
            exports[k] = shlex.split(v)[0]
        elif line.startswith("# ") and ": " in line:
            k, v = line[2:].split(": ", 1)
            notes[k] = v
    return exports, notes


@pytest.mark.parametrize("base,brokers", [(7700, 2), (17700, 1), (31000, 3), (40000, 8)])
def test_deploy_stack_env_agrees_with_the_table(base, brokers):
    t = by_name(ports.stack(base, brokers))
    exports, notes = stack_env(base, brokers)
    assert exports["QUAD_PORT_BASE"] == str(base)
    assert exports["QUAD_FRONTEND"] == ",".join(f"tcp://127.0.0.1:{t[f'broker{k}.frontend']}" for k in range(1, brokers + 1))
    assert notes["updates"] == ",".join(f"tcp://127.0.0.1:{t[f'broker{k}.updates']}" for k in range(1, brokers + 1))
    assert notes["dashboard"] == f"http://127.0.0.1:{t['dashboard']}/"
    assert exports["QUAD_EDGE_CONTROL"] == f"tcp://127.0.0.1:{t['edge.control']}"


def test_the_table_prints_for_bash():
    r = subprocess.run([sys.executable, "-m", "quaddeploy.ports", "--base", "17700", "--brokers", "3", "--shell"],
                       cwd=os.path.join(ROOT, "deploy"), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    values = dict(line.split("=", 1) for line in r.stdout.splitlines())
    assert values["EDGE_CONTROL"] == "tcp://127.0.0.1:17788" and values["METRICS_BASE"] == "17800"
    assert values["QUAD_PORTS"].strip('"').split() == [str(p.port) for p in ports.stack(17700, 3)]
    r = subprocess.run([sys.executable, "-m", "quaddeploy.ports", "--brokers", "9"],
                       cwd=os.path.join(ROOT, "deploy"), capture_output=True, text=True, timeout=30)
    assert r.returncode == 64 and "brokers must be from 1 to 8" in r.stderr


def test_deploy_metrics_sh_agrees_with_the_table():
    """metrics_port of deploy/metrics.sh for every broker, quad-edge and
    worker: the table's port, moved with the stack's METRICS_BASE (the
    table is read at another base, 7700, and moved to 17800)."""
    base = 17700
    script = f"""
        source "{ROOT}/deploy/lib.sh"
        usage_error() {{ echo "$*" >&2; exit 64; }}
        source "{ROOT}/deploy/metrics.sh"
        quad_ports_load 7700 8
        SERVICES=({' '.join(SERVICES)})
        METRICS_BASE={base + 100}
        for k in 1 2 3 4 5 6 7 8; do echo "metrics.broker.$k $(metrics_port broker $k)"; done
        echo "metrics.edge $(metrics_port edge)"
        for s in "${{SERVICES[@]}}"; do for n in $(seq 1 20); do echo "metrics.$s.$n $(metrics_port "$s" "$n")"; done; done
        metrics_port {SERVICES[0]} 21 && echo "worker 21 has a port"
        true
    """
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    want = {p.name: str(p.port) for p in ports.stack(base, 8) if p.name.startswith("metrics.")}
    assert got == want


def test_lib_sh_finds_a_free_port_base():
    import socket
    # Something of ours listens on broker 2's updates socket of the first base tried: that base is not free.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.listen()
        start = port - 19
        if start < 1024 or start + ports.span() > 65535:
            pytest.skip(f"the kernel gave port {port}, too close to an end")
        r = subprocess.run(["bash", "-c", f'source "{ROOT}/deploy/lib.sh"; quad_free_port_base {start} 2'],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = int(r.stdout)
        assert got != start and (got - start) % 100 == 0
        assert port not in [p.port for p in ports.stack(got, 8)]


def binary(name):
    for d in (os.environ.get("QUAD_BIN_DIR"), "/work/bin", os.path.join(ROOT, ".build", "release")):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


@pytest.mark.parametrize("command", [["quad-edge", "--help"], ["quadctl", "phone", "--help"]])
def test_the_phones_default_control_is_the_tables(command):
    """quad-edge's default --control, and quadctl phone's, is base 7700's edge.control (7788)."""
    exe = binary(command[0])
    if exe is None:
        pytest.skip(f"no {command[0]} built (QUAD_BIN_DIR, /work/bin or .build/release)")
    env = {k: v for k, v in os.environ.items() if k != "QUAD_EDGE_CONTROL"}
    r = subprocess.run([exe, *command[1:]], env=env, capture_output=True, text=True, timeout=30)
    text = r.stdout + r.stderr
    control = by_name(ports.stack(ports.DEFAULT_BASE, 2))["edge.control"]
    # The option's own line (the summary may name --control before the options).
    m = re.search(r"^\s*--control VALUE[^\n]*\(default: (tcp://127\.0\.0\.1:\d+)\)", text, re.M)
    assert m, f"{' '.join(command)} names no default --control:\n{text[-2000:]}"
    assert m.group(1) == f"tcp://127.0.0.1:{control}", \
        f"{' '.join(command)}: the default --control is {m.group(1)}, the table's is {control} (broker 1's updates socket is 7709)"


def test_the_docs_show_the_table():
    """docs/operations.md's table of ports (section Ports) is what `python3 -m quaddeploy.ports` prints for the
    default stack."""
    r = subprocess.run([sys.executable, "-m", "quaddeploy.ports", "--base", "7700", "--brokers", "2", "--table"],
                       cwd=os.path.join(ROOT, "deploy"), capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    page = open(os.path.join(ROOT, "docs", "operations.md")).read()
    assert "```text\n" + r.stdout + "```" in page, \
        "docs/operations.md's table of ports differs from (cd deploy && python3 -m quaddeploy.ports --base 7700 --brokers 2): paste its output"


# A description unlike the real one: a service added (occupancy, host 8),
# favorites gone, worker counts changed.
def _service(name, store, host, workers, faults):
    return {"name": name, "exe": "quad-" + name, "store": store, "host": host, "workers": workers, "faults": faults}


CHANGED = json.dumps(dict(json.load(open(os.path.join(ROOT, "deploy", "stack.json"))), services=[
    _service("reservations", "sqlite", 5, 1, ["kill", "pause"]),
    _service("accounts", "sqlite", 1, 2, ["kill", "pause", "partition", "pg"]),
    _service("catalog", "sqlite", 2, 3, ["kill", "clock"]),
    _service("orders", "postgres", 4, 1, ["kill", "pause", "partition", "pg", "clock"]),
    _service("occupancy", "postgres", 8, 1, []),
]))


@pytest.mark.parametrize("base,brokers", [(7700, 2), (41000, 3)])
def test_every_artefact_follows_the_description(tmp_path, base, brokers):
    """The stack's description changed (services, workers, port base,
    brokers): the table, `deploy/stack env`, deploy/metrics.sh and the
    Kubernetes manifests all follow it, and no two ports collide."""
    changed = tmp_path / "stack.json"
    changed.write_text(CHANGED)
    names = services.names(file=str(changed))
    assert names == ["reservations", "accounts", "catalog", "orders", "occupancy"]
    table = ports.stack(base, brokers, names)
    t = by_name(table)
    assert ports.collisions(table) == []
    assert "metrics.occupancy.1" in t and not any(n.startswith("metrics.favorites.") for n in t)

    # deploy/stack env: the frontends, updates sockets, dashboard and control socket of the table.
    exports, notes = stack_env(base, brokers, QUAD_STACK_FILE=str(changed))
    assert exports["QUAD_FRONTEND"] == ",".join(f"tcp://127.0.0.1:{t[f'broker{k}.frontend']}" for k in range(1, brokers + 1))
    assert notes["updates"] == ",".join(f"tcp://127.0.0.1:{t[f'broker{k}.updates']}" for k in range(1, brokers + 1))
    assert exports["QUAD_EDGE_CONTROL"] == f"tcp://127.0.0.1:{t['edge.control']}"

    # deploy/metrics.sh: every worker 'up' starts (the description's count) has the table's port.
    script = f"""
        set -euo pipefail
        ROOT="{ROOT}"
        source "{ROOT}/deploy/lib.sh"
        usage_error() {{ echo "$*" >&2; exit 64; }}
        source "{ROOT}/deploy/metrics.sh"
        quad_services_read
        quad_ports_load {base} {brokers}
        metrics_choose
        for s in "${{SERVICES[@]}}"; do
            for ((n = 1; n <= SERVICE_WORKERS[$s]; n++)); do echo "metrics.$s.$n $(metrics_port "$s" "$n")"; done
        done
    """
    r = subprocess.run(["bash", "-c", script], env=dict(os.environ, QUAD_STACK_FILE=str(changed), QUAD_HOME=str(tmp_path / "home")),
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    got = dict(line.split() for line in r.stdout.splitlines())
    workers = {s.name: s.workers for s in services.load(str(changed)).values()}
    assert got == {f"metrics.{s}.{n}": str(t[f"metrics.{s}.{n}"]) for s in names for n in range(1, workers[s] + 1)}
    assert len(got) == 8  # 1 + 2 + 3 + 1 + 1

    # The Kubernetes manifests (two brokers there): a Deployment for the
    # added service, none for the one gone, every port the table's.
    out = tmp_path / "k8s"
    r = subprocess.run([os.path.join(ROOT, "deploy", "kube"), "manifests", str(out)],
                       env=dict(os.environ, QUAD_STACK_FILE=str(changed), QUAD_KUBE_PORT_BASE=str(base)),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert (out / "occupancy.yaml").exists() and not (out / "favorites.yaml").exists()
    k2 = by_name(ports.stack(base, 2, names))
    occupancy = (out / "occupancy.yaml").read_text()
    assert f"containerPort: {k2['metrics.occupancy.1']}" in occupancy
    broker2 = (out / "broker-2.yaml").read_text()
    for name in ("frontend", "backend", "events-in", "events-out", "internal", "updates"):
        assert f"containerPort: {k2[f'broker2.{name}']}" in broker2, name
    assert f"containerPort: {k2['metrics.broker.2']}" in broker2
    assert f"postgres://quad@quad-postgres:{k2['postgres.1']}/quad_occupancy" in occupancy
