"""deploy/quaddeploy/generate.py, the one generator of what deploy/stack.json
becomes: a description changed (a service added and one gone, a worker
count, a port base, a broker count) and every artefact follows it, through
the same code the launcher runs:

- supervisord: the config of a stack's home, and a [program:NAME] for each
  of the stack's programs (as deploy/supervise.sh's sup_add writes it),
  read back with configparser, as supervisord reads it;
- the --hosts table: an address for each program's host, no two alike, as
  deploy/hosts.sh's hosts_ip_of answers it;
- prometheus.yml: deploy/metrics.sh's targets of a stack with those
  programs (pid files and executables made here), written by
  `deploy/stack metrics`' generator: a job per program kind, an instance
  per process, each at the port table's /metrics port, no two ports alike;
- the launcher's help names the description's services.

No stack runs; seconds."""

import configparser
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
sys.path.insert(0, DEPLOY)

from quaddeploy import generate, ports, services  # noqa: E402
import json  # noqa: E402


def _service(name, store, host, workers, faults):
    return {"name": name, "exe": "quad-" + name, "store": store, "host": host, "workers": workers, "faults": faults}


REAL = json.load(open(os.path.join(DEPLOY, "stack.json")))
# favorites gone, occupancy (host 8) added, catalog with 3 workers.
CHANGED = dict(REAL, services=[
    _service("reservations", "sqlite", 5, 1, ["kill", "pause"]),
    _service("accounts", "sqlite", 1, 2, ["kill", "pause", "partition", "pg"]),
    _service("catalog", "sqlite", 2, 3, ["kill", "clock"]),
    _service("orders", "postgres", 4, 1, ["kill", "pause", "partition", "pg", "clock"]),
    _service("occupancy", "postgres", 8, 1, []),
])


@pytest.fixture
def changed(tmp_path):
    f = tmp_path / "stack.json"
    f.write_text(json.dumps(CHANGED))
    return str(f)


def env_with(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUAD_") or k in ("QUAD_BIN_DIR", "QUAD_BUILD_DIR")}
    env.update(PYTHONPATH=DEPLOY, **extra)
    return env


def gen(args, **extra):
    return subprocess.run([sys.executable, "-m", "quaddeploy.generate"] + args, env=env_with(**extra), capture_output=True,
                          text=True, timeout=60)


def bash(script, **extra):
    return subprocess.run(["bash", "-c", 'set -euo pipefail; source "$QUAD_ROOT/deploy/lib.sh"\n' + script],
                          env=env_with(QUAD_ROOT=ROOT, **extra), capture_output=True, text=True, timeout=120)


def test_the_programs_follow_the_description(changed):
    assert generate.programs(3, file=changed) == [
        "broker", "broker-2", "broker-3", "reservations-1", "accounts-1", "accounts-2", "catalog-1", "catalog-2", "catalog-3",
        "orders-1", "occupancy-1"]
    assert generate.programs(1, {"catalog": 2}, file=changed)[:5] == ["broker", "reservations-1", "accounts-1", "accounts-2", "catalog-1"]
    real = generate.programs(REAL["brokers"]["default"])
    assert [p for p in real if p.startswith("accounts-")] == ["accounts-1", "accounts-2"] and "favorites-1" in real


def test_supervisord_reads_the_config_and_every_program(tmp_path, changed):
    home = str(tmp_path / "home")
    r = gen(["supervisord", "--home", home], QUAD_STACK_FILE=changed)
    assert r.returncode == 0, r.stderr
    conf = configparser.RawConfigParser(inline_comment_prefixes=(";",))
    conf.read_string(r.stdout)
    paths = generate.supervisor_paths(home)
    assert conf["unix_http_server"]["file"] == paths["sock"] and conf["unix_http_server"]["chmod"] == "0700"
    assert conf["include"]["files"] == paths["programs"] + "/*.conf"
    assert conf["supervisord"]["logfile"] == paths["log"] and conf["supervisord"]["logfile_maxbytes"] == "0"
    # deploy/supervise.sh finds supervisord where the config puts it.
    got = bash('source "$QUAD_ROOT/deploy/supervise.sh"; printf "%s\\n" "$SUP_DIR" "$SUP_CONF" "$SUP_SOCK" "$SUP_PROGRAMS" "$SUP_LOG"',
               QUAD_HOME=home)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == [paths[k] for k in ("dir", "conf", "sock", "programs", "log")], got.stdout
    # A program of each, written by sup_add's generator with the settings deploy/stack takes.
    for name in generate.programs(3, file=changed):
        r = gen(["program", name, "--command", f"{paths['programs']}/{name}.sh", "--priority", "10" if name.startswith("broker") else "100",
                 "--directory", home], QUAD_STACK_FILE=changed, QUAD_START_SECS="3", QUAD_STOP_TIMEOUT="7")
        assert r.returncode == 0, r.stderr
        conf.read_string(r.stdout)
        p = conf[f"program:{name}"]
        assert p["command"] == f"{paths['programs']}/{name}.sh" and p["autorestart"] == "unexpected" and p["exitcodes"] == "0"
        assert (p["startsecs"], p["startretries"], p["stopwaitsecs"], p["stopsignal"]) == ("3", "5", "7", "TERM")
    assert len([s for s in conf.sections() if s.startswith("program:")]) == 11
    r = gen(["program", "postgres", "--command", "/x.sh", "--priority", "5", "--directory", home, "--user", "postgres",
             "--signal", "INT"], QUAD_RESTART="off")
    conf.read_string(r.stdout)
    p = conf["program:postgres"]
    assert (p["user"], p["stopsignal"], p["autorestart"]) == ("postgres", "INT", "false")


@pytest.mark.parametrize("args,said", [
    (["supervisord", "--home", "/tmp/a b"], "must not hold spaces"),
    (["supervisord", "--home", "/tmp/" + "h" * 90], "too long for supervisord's socket"),
    (["program", "x-1", "--command", "/x", "--priority", "1", "--directory", "/tmp", "--signal", "STOP"], "unknown stop signal"),
    (["hosts", "--subnet", "10.77.300", "--brokers", "2"], "10.77.K with K from 0 to 255"),
    (["hosts", "--subnet", "10.77.1", "--brokers", "9"], "brokers must be from 1 to 8"),
])
def test_what_the_generator_cannot_make_is_refused_saying_why(args, said):
    r = gen(args)
    assert r.returncode == 1 and said in r.stderr, (r.returncode, r.stderr)
    assert r.stdout == ""


def test_a_bad_start_setting_is_refused_by_name():
    r = gen(["program", "catalog-1", "--command", "/x", "--priority", "100", "--directory", "/tmp"], QUAD_START_SECS="2s")
    assert r.returncode == 1 and "QUAD_START_SECS must be a whole number, got '2s'" in r.stderr


def test_the_command_line_says_what_it_does_and_refuses_a_wrong_one():
    r = gen(["--help"])
    assert r.returncode == 0 and "supervisord" in r.stdout and "prometheus" in r.stdout and "hosts" in r.stdout
    for sub in ("supervisord", "program", "hosts", "prometheus", "manifests"):
        assert gen([sub, "--help"]).returncode == 0, sub
    assert gen(["bogus"]).returncode == 64
    assert gen(["hosts", "--bogus"]).returncode == 64


def test_the_hosts_follow_the_description_and_bash_reads_the_table(changed):
    table = generate.hosts("10.77.70", 3, file=changed)
    assert len(set(table.values())) == len(table), "two hosts share an address"
    assert all(a.startswith("10.77.70.") and 2 <= int(a.rsplit(".", 1)[1]) <= 254 for a in table.values())
    assert table["occupancy-1"] == "10.77.70.81" and table["reservations-1"] == "10.77.70.51" and table["broker-3"] == "10.77.70.103"
    assert "favorites-1" not in table and "broker-4" not in table
    programs = generate.programs(3, file=changed)
    got = bash('quad_services_read; source "$QUAD_ROOT/deploy/hosts.sh"; HOSTS_SUBNET=10.77.70; hosts_table_load\n'
               'for p in %s; do printf "%%s %%s\\n" "$p" "$(hosts_ip_of "$p")"; done\n'
               'hosts_ip_of favorites-1 || echo refused' % " ".join(programs), QUAD_STACK_FILE=changed)
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    every = generate.hosts("10.77.70", 8, file=changed)
    assert lines[:-1] == [f"{p} {every[p]}" for p in programs] and lines[-1] == "refused"


@pytest.mark.parametrize("base,brokers", [(7700, 2), (41000, 3)])
def test_prometheus_scrapes_every_program_at_the_tables_port(tmp_path, changed, base, brokers):
    """deploy/metrics.sh's targets of a stack running the programs (a pid
    file each, an executable per service), through the generator."""
    names = services.names(file=changed)
    table = {p.name: p.port for p in ports.stack(base, brokers, names)}
    assert ports.collisions(ports.stack(base, brokers, names)) == []
    run, bindir = tmp_path / "run", tmp_path / "bin"
    run.mkdir()
    bindir.mkdir()
    programs = generate.programs(brokers, file=changed)
    for s in names:
        (bindir / f"quad-{s}").write_text("#!/bin/sh\n")
        (bindir / f"quad-{s}").chmod(0o755)
    for p in programs:
        if not p.startswith("broker"):
            s, n = p.rsplit("-", 1)
            (run / f"{s}.{n}.pid").write_text("1\n")
    out = tmp_path / "prometheus.yml"
    script = f"""
        ROOT="$QUAD_ROOT" RUN="{run}" BIN="{bindir}" BROKERS={brokers} QUAD_HOME="{tmp_path}"
        usage_error() {{ echo "$*" >&2; exit 64; }}
        built() {{ [[ -x $BIN/quad-$1 ]]; }}
        broker_prog() {{ if (($1 == 1)); then printf 'broker\\n'; else printf 'broker-%s\\n' "$1"; fi; }}
        quad_services_read
        source "$QUAD_ROOT/deploy/hosts.sh"
        source "$QUAD_ROOT/deploy/metrics.sh"
        quad_ports_load {base} {brokers}
        metrics_choose
        instances_of() {{ local f; for f in "$RUN/$1".*.pid; do [[ -e $f ]] || continue; f=${{f%.pid}}; printf '%s\\n' "${{f##*.}}"; done | sort -n; }}
        metrics_targets | quad_generate prometheus --out "{out}" --quiet
    """
    r = bash(script, QUAD_STACK_FILE=changed)
    assert r.returncode == 0, r.stderr
    import yaml
    doc = yaml.safe_load(out.read_text())
    got = {}
    for job in doc["scrape_configs"]:
        for sc in job["static_configs"]:
            got[sc["labels"]["instance"]] = (job["job_name"], sc["targets"][0])
    want = {}
    for p in programs:
        if p.startswith("broker"):
            k = 1 if p == "broker" else int(p.split("-")[1])
            want[p] = ("quad-broker", f"127.0.0.1:{table[f'metrics.broker.{k}']}")
        else:
            s, n = p.rsplit("-", 1)
            want[f"{s}/{n}"] = (f"quad-{s}", f"127.0.0.1:{table[f'metrics.{s}.{n}']}")
    assert got == want
    assert len({t for _, t in got.values()}) == len(got), "two processes share a /metrics port"


def test_the_launchers_help_names_the_described_services(changed):
    r = subprocess.run([os.path.join(DEPLOY, "stack"), "--help"], env=env_with(QUAD_STACK_FILE=changed), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "Services: reservations accounts catalog orders occupancy\n" in r.stdout
