"""deploy/stack.json describes the stack once, and deploy/quaddeploy/services.py
is its one reader: bash gets it through `python3 -m quaddeploy.services shell`
(deploy/lib.sh's quad_services_read), the port table from its "ports"; a
malformed description is refused naming the service and the field, by
Python, by bash and by deploy/stack; deploy/stack, deploy/chaos,
deploy/hosts.sh, deploy/pg.sh, deploy/bench, deploy/checker.py and
Tests/e2e/test_chaos.py each see what it says (the real file, and a changed
one given as QUAD_STACK_FILE); the --hosts addresses are those of before; the
nemesis schedule that moved from deploy/chaos to deploy/quaddeploy/nemesis.py
draws what the bash loop drew for the same seed. No stack runs: each tool is
asked what it knows."""

import copy
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
sys.path.insert(0, DEPLOY)

from quaddeploy import generate, nemesis, ports, services  # noqa: E402

EXPECTED = ["accounts", "catalog", "favorites", "orders", "reservations", "telemetry", "analytics", "notifications"]
REAL = json.load(open(os.path.join(DEPLOY, "stack.json")))


def service(name, store, host, workers, faults):
    return {"name": name, "exe": "quad-" + name, "store": store, "host": host, "workers": workers, "faults": faults}


# A description unlike the real one: favorites gone, reservations first, a
# service of host 8 added, orders on PostgreSQL, catalog with 3 workers.
CHANGED = dict(REAL, services=[
    service("reservations", "sqlite", 5, 1, ["kill", "pause"]),
    service("accounts", "sqlite", 1, 2, ["kill", "pause", "partition", "pg"]),
    dict(service("catalog", "sqlite", 2, 3, ["kill", "clock"]), why="a comment"),
    service("orders", "postgres", 4, 1, ["kill", "pause", "partition", "pg", "clock"]),
    service("occupancy", "postgres", 8, 1, []),
])


def bash(script, env=None):
    return subprocess.run(["bash", "-c", 'set -euo pipefail; source "$QUAD_ROOT/deploy/lib.sh"\n' + script],
                          env=dict(os.environ, QUAD_ROOT=ROOT, **(env or {})), capture_output=True, text=True, timeout=60)


def bash_view(env=None):
    """Every field as deploy/lib.sh reads it, one service a line."""
    p = bash('quad_services_read\nfor s in "${SERVICES[@]}"; do printf "%s %s %s %s %s %s\\n" "$s" "${SERVICE_EXE[$s]}" '
             '"${SERVICE_STORE[$s]}" "${SERVICE_HOST[$s]}" "${SERVICE_WORKERS[$s]}" "${SERVICE_FAULTS[$s]}"; done', env)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def python_view(file=None):
    return ["%s %s %s %d %d %s" % (s.name, s.exe, s.store, s.host, s.workers, ",".join(s.faults))
            for s in services.load(file).values()]


def write(tmp_path, doc, name="stack.json"):
    f = tmp_path / name
    f.write_text(json.dumps(doc, indent=1))
    return str(f)


@pytest.fixture
def changed(tmp_path):
    return write(tmp_path, CHANGED, "changed.json")


def test_the_file_lists_the_services_of_today():
    assert services.names() == EXPECTED
    assert services.names(store="postgres") == ["telemetry", "analytics"]
    assert services.names(fault="clock") == ["catalog", "orders", "reservations"]
    assert services.load()["accounts"].workers == 2
    assert services.env_var("telemetry", "DB") == "QUAD_TELEMETRY_DB"
    assert services.brokers() == {"default": 2, "max": 8}


def test_the_description_meets_its_schema_and_the_schema_refuses_what_the_reader_refuses(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.load(open(os.path.join(DEPLOY, "stack.schema.json")))
    jsonschema.validate(REAL, schema)
    jsonschema.validate(CHANGED, schema)
    for doc, _ in MALFORMED:
        if isinstance(doc, dict) and all(isinstance(s, dict) for s in doc.get("services", [])) \
                and not _only_the_reader_knows(doc):
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate(doc, schema)


def _only_the_reader_knows(doc):
    """Rules a schema cannot say: an executable named after its service, a
    name or a host listed twice, no more default brokers than the most."""
    names = [s.get("name") for s in doc["services"]]
    hosts = [s.get("host") for s in doc["services"]]
    b = doc.get("brokers", {})
    return (b.get("default", 0) > b.get("max", 8) or any(s.get("exe") != "quad-%s" % s.get("name") for s in doc["services"])
            or len(set(names)) != len(names) or len(set(hosts)) != len(hosts))


def test_bash_and_python_read_the_same_fields(changed):
    assert bash_view() == python_view()
    assert bash_view({"QUAD_STACK_FILE": changed}) == python_view(changed)
    assert python_view(changed)[0] == "reservations quad-reservations sqlite 5 1 kill,pause"
    assert python_view(changed)[-1] == "occupancy quad-occupancy postgres 8 1 "
    p = bash('quad_services_read; echo "$QUAD_DEFAULT_BROKERS $QUAD_MAX_BROKERS"')
    assert p.stdout.split() == ["2", "8"]


def test_the_command_line_says_what_the_module_does():
    env = dict(os.environ, PYTHONPATH=DEPLOY)
    run = lambda *a: subprocess.run([sys.executable, "-m", "quaddeploy.services", *a], env=env, capture_output=True, text=True)
    assert run("names").stdout.split() == EXPECTED
    assert run("names", "--store", "postgres").stdout.split() == ["telemetry", "analytics"]
    assert run("field", "orders", "host").stdout.strip() == "4"
    assert run("field", "orders", "faults").stdout.strip() == "kill,pause,partition,pg,clock"
    p = run("field", "nosuch", "host")
    assert p.returncode == 1 and "unknown service 'nosuch'" in p.stderr
    assert run("bogus").returncode == 64
    assert run("--help").returncode == 0 and "shell" in run("--help").stdout


def _with(n, **fields):
    doc = copy.deepcopy(REAL)
    doc["services"][n].update(fields)
    return doc


def _without(n, field):
    doc = copy.deepcopy(REAL)
    del doc["services"][n][field]
    return doc


MALFORMED = [
    (_without(0, "faults"), "service 1 (accounts): expected the fields name exe store host workers faults (and why); missing: faults"),
    (_with(0, extra=1), "service 1 (accounts): expected the fields name exe store host workers faults (and why); missing: none; unknown: extra"),
    (_with(0, name="Accounts", exe="quad-Accounts"), "service 1: the name \"Accounts\" is not lower-case"),
    (_with(2, name="catalog", exe="quad-catalog", host=9), "service 3 (catalog): catalog is listed twice"),
    (_with(0, exe="accountsd"), "service 1 (accounts): the executable of accounts must be quad-accounts"),
    (_with(0, store="mysql"), "service 1 (accounts): the store of accounts must be sqlite or postgres, got \"mysql\""),
    (_with(0, host=10), "service 1 (accounts): the host of accounts must be 1 to 9, got 10"),
    (_with(0, host="1"), "service 1 (accounts): the host of accounts must be 1 to 9, got \"1\""),
    (_with(2, host=1), "service 3 (favorites): host 1 is taken by accounts"),
    (_with(0, workers=17), "service 1 (accounts): the workers of accounts must be 1 to 16, got 17"),
    (_with(0, faults=["kill", "crash"]), "service 1 (accounts): unknown fault 'crash' for accounts"),
    (_with(0, faults="kill"), "service 1 (accounts): the faults of accounts must be a list"),
    (dict(REAL, brokers={"default": 3, "max": 2}), "brokers must be {\"default\": D, \"max\": M} with 1 <= D <= M <= 8"),
    (dict(REAL, ports=dict(REAL["ports"], updates="9")), "ports.updates must be a positive integer, got \"9\""),
    (dict(REAL, ports={k: v for k, v in REAL["ports"].items() if k != "dashboard"}), "missing: dashboard"),
    (dict(REAL, services=[]), "lists no service"),
    (dict(REAL, servces=[]), "unknown field(s) servces"),
    ("{not json", "is not JSON"),
]


@pytest.mark.parametrize("doc,message", MALFORMED, ids=range(len(MALFORMED)))
def test_a_malformed_description_is_refused_naming_the_service_and_the_field(tmp_path, doc, message):
    if isinstance(doc, str):
        f = tmp_path / "stack.json"
        f.write_text(doc)
        f = str(f)
    else:
        f = write(tmp_path, doc)
    with pytest.raises(services.ServicesError) as e:
        services.load(f)
    assert f in str(e.value) and message in str(e.value)
    p = bash("quad_services_read", {"QUAD_STACK_FILE": f})
    assert p.returncode == 1
    assert message in p.stderr and "cannot read the description of the stack" in p.stderr
    # deploy/stack stops on it before doing anything.
    p = subprocess.run([os.path.join(DEPLOY, "stack"), "--help"], env=dict(os.environ, QUAD_STACK_FILE=f),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and message in p.stderr


def test_the_port_table_follows_the_description(tmp_path):
    """A port moved, the stride and the metrics range changed, a service
    added: the table, the bash view of it and deploy/stack env follow, and
    no two ports collide."""
    doc = copy.deepcopy(CHANGED)
    doc["ports"].update(dashboard=70, edge_control=77, updates=8, broker_stride=12, metrics=150, metrics_workers_per_service=10)
    doc["brokers"] = {"default": 3, "max": 5}
    f = write(tmp_path, doc)
    env = dict(os.environ, QUAD_STACK_FILE=f, PYTHONPATH=DEPLOY)
    got = json.loads(subprocess.run([sys.executable, "-m", "quaddeploy.ports", "--base", "20000", "--json"], env=env,
                                    capture_output=True, text=True, timeout=60, check=True).stdout)
    table = {p["name"]: p["port"] for p in got["ports"]}
    assert got["brokers"] == 3, "the description's default"
    assert table["dashboard"] == 20070 and table["edge.control"] == 20077
    assert [table[f"broker{k}.frontend"] for k in (1, 2, 3)] == [20000, 20012, 20024]
    assert table["broker2.updates"] == 20020
    assert table["metrics.broker.1"] == 20150 and table["metrics.broker.5"] == 20154 and "metrics.broker.6" not in table
    assert table["metrics.reservations.1"] == 20160 and table["metrics.accounts.1"] == 20170 and "metrics.occupancy.10" in table
    assert "metrics.occupancy.11" not in table and "metrics.favorites.1" not in table
    assert len(set(table.values())) == len(table), "no two ports collide"
    p = subprocess.run([sys.executable, "-m", "quaddeploy.ports", "--base", "20000", "--brokers", "6"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 64 and "brokers must be from 1 to 5, got 6" in p.stderr
    # What bash loads, and what the launcher computes from it.
    p = bash("quad_ports_load 20000 3; echo $QUAD_PORT_DASHBOARD $QUAD_PORT_BROKER3_UPDATES $QUAD_PORT_UPDATES_OFFSET", env)
    assert p.stdout.split() == ["20070", "20032", "8"], p.stderr
    p = subprocess.run([os.path.join(DEPLOY, "stack"), "env"], env=dict(env, QUAD_PORT_BASE="20000", QUAD_HOME=str(tmp_path / "home")),
                       capture_output=True, text=True, timeout=60)
    assert "QUAD_FRONTEND=tcp://127.0.0.1:20000,tcp://127.0.0.1:20012,tcp://127.0.0.1:20024" in p.stdout.replace("\\", ""), p.stdout + p.stderr
    # The real description still gives the real table.
    assert {p.name: p.port for p in ports.stack(7700, 2)}["dashboard"] == 7780


def test_every_tool_sees_the_file(tmp_path, changed):
    for file, want in ((None, EXPECTED), (changed, services.names(file=changed))):
        env = dict(os.environ, QUAD_HOME=str(tmp_path / "home"))
        if file:
            env["QUAD_STACK_FILE"] = file
        # deploy/stack: its help, and the names it refuses.
        p = subprocess.run([os.path.join(DEPLOY, "stack"), "--help"], env=env, capture_output=True, text=True, timeout=60)
        assert "Services: %s\n" % " ".join(want) in p.stdout
        p = subprocess.run([os.path.join(DEPLOY, "stack"), "logs", "nosuch"], env=env, capture_output=True, text=True, timeout=60)
        assert "(services: %s, broker [K], postgres)" % " ".join(want) in p.stderr
        # deploy/chaos, on a stack that says nothing but that it runs.
        os.makedirs(tmp_path / "home" / "run", exist_ok=True)
        (tmp_path / "home" / "run" / "endpoints").write_text("")
        p = subprocess.run([os.path.join(DEPLOY, "chaos"), "kill", "nosuch"], env=env, capture_output=True, text=True, timeout=60)
        assert "unknown service 'nosuch' (services: %s)" % " ".join(want) in p.stderr, p.stderr
        # deploy/checker.py, Tests/e2e/test_chaos.py and deploy/bench, imported.
        for module, where in (("checker", DEPLOY), ("test_chaos", os.path.dirname(os.path.abspath(__file__)))):
            p = subprocess.run([sys.executable, "-c", "import %s; print(' '.join(%s.SERVICES))" % (module, module)],
                               env=dict(env, PYTHONPATH=where), capture_output=True, text=True, timeout=60)
            assert p.stdout.split() == want, (module, p.stderr)
        p = subprocess.run([sys.executable, "-c", "import importlib.machinery as m; b = m.SourceFileLoader('bench', %r).load_module(); "
                            "print(' '.join(b.PG_SERVICES))" % os.path.join(DEPLOY, "bench")], env=env, capture_output=True, text=True, timeout=60)
        assert p.stdout.split() == services.names(store="postgres", file=file), p.stderr
        # deploy/pg.sh: the services --postgres puts on PostgreSQL.
        p = bash('quad_services_read; source "$QUAD_ROOT/deploy/pg.sh"; pg_services', env)
        assert p.stdout.split() == services.names(store="postgres", file=file), p.stderr


def old_address(subnet, index, n):
    """hosts_ip_of before the list of services, from the service's index in
    SERVICES; workers 10 to 16 since their addresses stopped colliding
    (before, worker 18 of host 1 and worker 10 of host 2 were both .217)."""
    if 1 <= n <= 9:
        return "%s.%d" % (subnet, 10 * (index + 1) + n)
    return "%s.%d" % (subnet, 110 + 7 * index + n - 10)


def test_the_hosts_addresses_are_those_of_before(changed):
    workers = [1, 2, 9, 10, 12, 16]
    script = 'quad_services_read; source "$QUAD_ROOT/deploy/hosts.sh"; HOSTS_SUBNET=10.77.70\n' \
             'for s in "${SERVICES[@]}"; do for n in %s; do hosts_ip_of "$s-$n"; done; done\n' \
             'hosts_ip_of nosuch-1 || echo refused; hosts_ip_of accounts-17 || echo refused' % " ".join(map(str, workers))
    got = bash(script).stdout.split()
    want = [old_address("10.77.70", i, n) for i in range(len(EXPECTED)) for n in workers] + ["refused", "refused"]
    assert got == want
    assert got[:2] == ["10.77.70.11", "10.77.70.12"] and "10.77.70.71" in got  # accounts-1, accounts-2, analytics-1
    table = generate.hosts("10.77.70", 8)
    assert [table[f"{s}-{n}"] for s in EXPECTED for n in workers] == want[:-2]
    # The address follows the host column, not the line's place.
    got = bash(script, {"QUAD_STACK_FILE": changed}).stdout.split()
    assert got[:len(workers)] == [old_address("10.77.70", 4, n) for n in workers]  # reservations, host 5


# The schedule loop of deploy/chaos before it moved to quaddeploy/nemesis.py,
# word for word but for its inputs: the services it drew from come in as
# SERVICES_RUNNING and SKEW (it had 'for s in reservations catalog orders',
# and '[[ -f $RUN/$s.1.pid ]]' for each).
OLD_SCHEDULE = r'''
sched_old() {
    RANDOM=$seed
    local services=($SERVICES_RUNNING) s t sched=() k=0 d a b
    local quiet=$((duration - 5))  # every fault ends 5 s before the day does
    local nb=${BROKERS:-1} skew_services=($SKEW) bhost
    broker_host() { if (($1 == 1)); then printf 'broker-1'; else printf 'broker-%d' "$1"; fi; }
    if ((pevery > 0)); then
        for ((t = 5; t + 3 < quiet; t += pevery)); do
            d=$((3 + RANDOM % 6))
            ((t + d > quiet)) && d=$((quiet - t))
            if ((k % 2 == 0)); then a=phones b=broker; else a=broker b=${services[RANDOM % ${#services[@]}]}; fi
            sched+=("$t partition $a $b" "$((t + d)) heal $a $b")
            k=$((k + 1))
        done
    fi
    if ((kevery > 0)); then
        for ((t = 10; t < quiet; t += kevery)); do sched+=("$t kill ${services[RANDOM % ${#services[@]}]}"); done
    fi
    if ((zevery > 0)); then
        for ((t = 15; t + 2 < quiet; t += zevery)); do
            d=$((2 + RANDOM % 4))
            ((t + d > quiet)) && d=$((quiet - t))
            sched+=("$t pause ${services[RANDOM % ${#services[@]}]} $d")
        done
    fi
    if [[ $ssvc != none ]] && ((sto > 1)); then
        sched+=("$((duration / 3)) scale $ssvc $sto" "$((2 * duration / 3)) scale $ssvc 1")
    fi
    if ((bevery > 0)); then
        k=0
        for ((t = 20; t + 3 < quiet; t += bevery)); do
            b=$((1 + RANDOM % nb))
            if ((k % 2 == 0)); then
                sched+=("$t broker-kill $b")
            else
                d=$((3 + RANDOM % 6))
                ((t + d > quiet)) && d=$((quiet - t))
                bhost=$(broker_host "$b")
                sched+=("$t broker-partition phones $bhost" "$((t + d)) broker-heal phones $bhost")
            fi
            k=$((k + 1))
        done
    fi
    if ((gevery > 0)); then
        k=0
        for ((t = 30; t + 3 < quiet; t += gevery)); do
            if ((k % 2 == 0)); then
                sched+=("$t pg-restart")
            else
                d=$((3 + RANDOM % 6))
                ((t + d > quiet)) && d=$((quiet - t))
                a=${services[RANDOM % ${#services[@]}]}
                sched+=("$t pg-partition $a pg" "$((t + d)) pg-heal $a pg")
            fi
            k=$((k + 1))
        done
    fi
    if ((eevery > 0)); then
        for ((t = 35; t + 20 <= duration; t += eevery)); do sched+=("$t edge-kill"); done
    fi
    if ((cevery > 0 && ${#skew_services[@]} > 0)); then
        for ((t = 25; t + 5 < quiet; t += cevery)); do
            a=${skew_services[RANDOM % ${#skew_services[@]}]}
            d=$((30 + RANDOM % (maxskew - 29)))
            ((RANDOM % 2)) && d=-$d || d=+$d
            sched+=("$t clock-skew $a $d")
            d=$((15 + RANDOM % 16))
            ((t + d > quiet)) && d=$((quiet - t))
            sched+=("$((t + d)) clock-restore $a")
        done
    fi
    mapfile -t sched < <(printf '%s\n' "${sched[@]}" | sort -n -s -k1,1)
    printf '%s\n' "${sched[@]}"
}
'''

# (seed, duration, brokers, pevery, kevery, zevery, bevery, gevery, eevery, cevery, maxskew, ssvc, sto)
RUNS = [
    (1, 60, 1, 20, 30, 45, 40, 50, 50, 50, 90, "catalog", 3),  # deploy/chaos run's defaults
    (5, 90, 2, 6, 20, 20, 20, 20, 30, 30, 90, "catalog", 3),
    (11, 120, 2, 15, 20, 0, 0, 0, 50, 25, 120, "none", 0),
    (0, 300, 3, 7, 11, 13, 17, 19, 23, 29, 3600, "orders", 4),
    (2 ** 31 + 12345, 200, 8, 5, 5, 5, 5, 5, 5, 5, 30, "catalog", 2),
    (99999999999, 45, 1, 0, 0, 0, 0, 0, 0, 0, 90, "none", 0),  # nothing drawn: one empty line, as before
] + [(seed, 40 + 13 * seed, 1 + seed % 3, 3 + seed % 17, 4 + seed % 23, seed % 19, seed % 29, seed % 31, seed % 37, seed % 41,
      30 + 97 * seed % 500, "catalog" if seed % 2 else "none", seed % 5) for seed in range(2, 40)]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: "seed%d" % r[0])
def test_the_schedule_is_the_one_bash_drew(run):
    seed, duration, brokers, pevery, kevery, zevery, bevery, gevery, eevery, cevery, maxskew, ssvc, sto = run
    running = EXPECTED if seed % 3 else ["accounts", "orders", "telemetry"]  # some runs with services not built
    targets = nemesis.targets_of(running)
    env = {"seed": seed, "duration": duration, "BROKERS": brokers, "pevery": pevery, "kevery": kevery, "zevery": zevery,
           "bevery": bevery, "gevery": gevery, "eevery": eevery, "cevery": cevery, "maxskew": maxskew, "ssvc": ssvc, "sto": sto,
           # every kind but clock drew from one list of every running service
           "SERVICES_RUNNING": " ".join(targets["kill"]), "SKEW": " ".join(targets["clock"])}
    assert targets["kill"] == targets["pause"] == targets["partition"] == targets["pg"]
    # the old loop's 'for s in reservations catalog orders', of those running
    assert targets["clock"] == [s for s in ["reservations", "catalog", "orders"] if s in running]
    p = bash(OLD_SCHEDULE + "sched_old", {k: str(v) for k, v in env.items()})
    assert p.returncode == 0, p.stderr
    cmd = [sys.executable, "-m", "quaddeploy.nemesis", "--seed", str(seed), "--duration", str(duration), "--running", " ".join(running),
           "--brokers", str(brokers), "--partition-every", str(pevery), "--kill-every", str(kevery), "--pause-every", str(zevery),
           "--broker-every", str(bevery), "--pg-every", str(gevery), "--edge-every", str(eevery), "--clock-every", str(cevery),
           "--max-skew", str(maxskew), "--scale-service", ssvc, "--scale-to", str(sto)]
    q = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=DEPLOY), capture_output=True, text=True, timeout=60)
    assert q.returncode == 0, q.stderr
    assert q.stdout == p.stdout


def test_bash_random_is_bashs():
    p = bash('RANDOM=7; for i in $(seq 500); do echo $RANDOM; done')
    r = nemesis.BashRandom(7)
    assert [int(x) for x in p.stdout.split()] == [r.next() for _ in range(500)]


def test_a_schedule_with_no_service_to_hit_is_refused():
    with pytest.raises(ValueError, match="no running service takes the kill fault"):
        nemesis.schedule(1, 60, nemesis.targets_of([]), kill_every=10)


def test_manifests_are_checked_against_the_list():
    def workload(name, exe, kind="Deployment"):
        return {"kind": kind, "metadata": {"name": name},
                "spec": {"template": {"spec": {"containers": [{"name": "main", "command": ["/usr/local/bin/" + exe]}]}}}}
    good = [workload("quad-" + s, "quad-" + s) for s in EXPECTED] + [workload("broker", "quad-broker", "StatefulSet"),
                                                                    {"kind": "Service", "metadata": {"name": "broker"}}]
    assert services.manifest_problems(good) == []
    assert services.manifest_problems([{"kind": "List", "items": good}]) == []
    bad = [w for w in good if w["metadata"]["name"] != "quad-favorites"] + [workload("occupancy", "quad-occupancy")]
    bad[0] = workload("quad-accounts", "quad-catalog")
    assert services.manifest_problems(bad) == [
        "quad-accounts runs ['/usr/local/bin/quad-catalog'], not quad-accounts",
        "no Deployment or StatefulSet for service favorites (named favorites or quad-favorites)",
        "occupancy is a workload of no service in %s" % services.path(),
    ]


def test_fuzz_refuses_a_service_it_has_no_target_for(tmp_path, changed):
    """deploy/fuzz checks quad-fuzz's targets against the list (a built
    quad-fuzz is needed: the plain release build's, as the generator)."""
    build = os.path.abspath(os.environ.get("QUAD_BUILD_DIR") or os.path.join(ROOT, ".build"))
    if not os.access(os.path.join(build, "release", "quad-fuzz"), os.X_OK):
        pytest.skip("no %s/release/quad-fuzz (swift build -c release --product quad-fuzz)" % build)
    env = dict(os.environ, QUAD_FUZZ_GENERATOR_BUILD=build, QUAD_FUZZ_DIR=str(tmp_path / "fuzz"), QUAD_STACK_FILE=changed)
    p = subprocess.run([os.path.join(DEPLOY, "fuzz"), "--generator", "--no-build", "--runs", "10"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 1
    assert "quad-fuzz has no target service-occupancy for the service occupancy of deploy/stack.json" in p.stderr
    assert "==>" not in p.stdout  # refused before any target ran
