"""The checker fails on a real broken build, with the count of duplicates.

Takes quad-orders from the debug build, where the fault switches are
compiled in (Package.swift: QUAD_FAULTS in debug builds only;
Sources/QuadRuntime/Faults.swift), puts it beside the production (release)
binaries, and runs a short chaos run (deploy/chaos run) with
QUAD_FAULT_SKIP_IDEMPOTENCY=1: the orders service then applies a repeated
request id again instead of answering the stored reply. Partitions and kills
make phones retry under the same id, so some orders.cart.add runs twice and
a cart holds a unit no phone added. The checker must exit 1 with only its
duplicated check failing, and count exactly the repeated applications the
orders workers logged (each 200 to a repeated id is an application in this
build), give or take a worker SIGKILLed between its commit and its log line.

Then the session checks (issue 30): a second short run on the same broken
build, with QUAD_FAULT_EDGE_SESSIONS=1 (quad-edge from the debug build: a
third of the phones show stale views, a third keep their first saved copies,
Sources/QuadPhone/SessionFaults.swift) and QUAD_FAULT_STALE_ANSWERS=1
(orders.return answers the order as it was), must fail exactly the four
session checks (monotonic, ryw, wfr, converged), each with examples from the
phones its fault was given to.

Also proves the switches cannot break a production build: the production
binaries do not contain the variables' names. (Tests/e2e/test_chaos.sh runs
its chaos run on the production build with the variable set, and passes.)

As root, like test_chaos.sh: network namespaces and nftables. About 6
minutes (deploy/test has built both configurations before).
"""

import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "deploy"))
import quadclient  # noqa: E402
CHAOS = os.path.join(ROOT, "deploy", "chaos")
SWITCH = b"QUAD_FAULT_SKIP_IDEMPOTENCY"
SWITCHES = {"quad-orders": [SWITCH, b"QUAD_FAULT_STALE_ANSWERS"], "quad-edge": [b"QUAD_FAULT_EDGE_SESSIONS"]}


def swift_env():
    env = dict(os.environ)
    if shutil.which("swift") is None and os.path.exists("/opt/swift/usr/bin/swift"):
        env["PATH"] = "/opt/swift/usr/bin:" + env.get("PATH", "")
    for s in ("ACCOUNTS", "CATALOG", "FAVORITES", "ORDERS", "RESERVATIONS", "TELEMETRY", "ANALYTICS"):
        env.pop("QUAD_%s_DB" % s, None)
    for k in ("QUAD_HOME", "QUAD_FRONTEND", "QUAD_BACKEND", "QUAD_EVENTS_IN", "QUAD_EVENTS_OUT", "QUAD_INTERNAL", "QUAD_BIN_DIR"):
        env.pop(k, None)
    return env


def build(env, scratch, *extra):
    p = subprocess.run(["swift", "build", "--scratch-path", scratch, *extra], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, "swift build %s failed:\n%s" % (" ".join(extra), (p.stdout + p.stderr)[-4000:])


def up_to_date(folder, names):
    """Whether every binary `names` in `folder` is newer than every source."""
    try:
        built = min(os.path.getmtime(os.path.join(folder, n)) for n in names)
    except OSError:
        return False
    newest = os.path.getmtime(os.path.join(ROOT, "Package.swift"))
    for top in ("Sources",):
        for d, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                newest = max(newest, os.path.getmtime(os.path.join(d, f)))
    return built >= newest


@pytest.fixture(scope="module")
def broken_bin(tmp_path_factory):
    """A folder of the production binaries with quad-orders and quad-edge from the debug build."""
    assert os.geteuid() == 0, "needs root: network namespaces and nftables"
    env = swift_env()
    scratch = os.path.abspath(os.environ.get("QUAD_BUILD_DIR") or os.path.join(ROOT, ".build"))
    # Built only when a source is newer than the binaries (deploy/test
    # built both): SwiftPM holds the build folder's lock while `swift test`
    # runs, and a build here would wait for it.
    if not up_to_date(os.path.join(scratch, "release"), ["quad-orders", "quad-edge", "quad-broker"]):
        build(env, scratch, "-c", "release")
    # The debug build has the fault switches (Package.swift: faultSwitches).
    if not up_to_date(os.path.join(scratch, "debug"), list(SWITCHES)):
        build(env, scratch, "--product", "quad-orders", "--product", "quad-edge")
    release = os.path.join(scratch, "release")
    folder = str(tmp_path_factory.mktemp("broken-bin"))
    production = [f for f in glob.glob(os.path.join(release, "quad*")) if os.path.isfile(f) and os.access(f, os.X_OK)]
    assert all(any(f.endswith("/" + n) for f in production) for n in SWITCHES), "no quad-orders or quad-edge in %s" % release
    for f in production:
        shutil.copy2(f, folder)
    for name in SWITCHES:
        shutil.copy2(os.path.join(scratch, "debug", name), os.path.join(folder, name))
    return {"bin": folder, "production": production, "env": env}


def test_production_binaries_have_no_fault_switch(broken_bin):
    every = [s for switches in SWITCHES.values() for s in switches]
    carrying = [(f, s.decode()) for f in broken_bin["production"] for s in every if s in open(f, "rb").read()]
    assert carrying == [], "production binaries that read a fault switch: %s" % carrying
    for name, switches in SWITCHES.items():
        built = open(os.path.join(broken_bin["bin"], name), "rb").read()
        for s in switches:
            assert s in built, "the debug build of %s has no switch %s" % (name, s.decode())


@pytest.fixture
def run_folder():
    """The run's folder: open to others, as PostgreSQL (user postgres) keeps
    its data in it; removed afterwards (the failure message quotes the run)."""
    folder = tempfile.mkdtemp(prefix="quad-chaos-faults.")
    os.chmod(folder, 0o755)
    yield os.path.join(folder, "run")
    # The run takes its stack down as it ends; should it not have (one CI
    # run left a whole --hosts stack running under supervisord, its folder
    # removed), down again here, before the folder goes.
    home = os.path.join(folder, "run", "home")
    if os.path.exists(os.path.join(home, "run")):
        env = dict(os.environ, QUAD_HOME=home)
        down = subprocess.run([os.path.join(ROOT, "deploy", "stack"), "down"], env=env, capture_output=True, text=True, timeout=300)
        if down.returncode != 0:
            print("deploy/stack down of the run's stack exited %d:\n%s" % (down.returncode, (down.stdout + down.stderr)[-2000:]))
    shutil.rmtree(folder, ignore_errors=True)


def run_env(broken_bin, **switches):
    """The chaos run's environment: the broken build's binaries, the fault
    switches, and a port base and a hosts net of its own, never the
    defaults a stack of the machine may hold."""
    env = dict(broken_bin["env"], QUAD_BIN_DIR=broken_bin["bin"], **switches)
    for k in ("QUAD_METRICS_BASE", "QUAD_EDGE_CONTROL"):
        env.pop(k, None)
    env["QUAD_PORT_BASE"] = str(quadclient.free_port_base(int(os.environ.get("QUAD_TEST_PORT_BASE", "22700"))))
    env["QUAD_HOSTS_NET"] = str(quadclient.free_hosts_net(int(os.environ.get("QUAD_TEST_HOSTS_NET_FROM", "0"))))
    return env


def test_the_checker_counts_the_duplicates_of_a_build_that_skips_idempotency(broken_bin, run_folder):
    out = run_folder
    # Students only add to their carts here: a unit added twice that the
    # student's next set or removal overwrites leaves no trace in any store
    # (the stored replies, the order lines and the cart all agree), so with
    # cart edits on the checker cannot count every repeated application the
    # orders workers log. test_chaos.sh and test_chaos.py check the ledger
    # with the edits on.
    env = run_env(broken_bin, QUAD_FAULT_SKIP_IDEMPOTENCY="1", QUAD_CART_EDITS="off")
    # Dense faults: phones cut off from the broker every 8 s or so (a
    # request in flight, or sent into the cut, reaches orders and is
    # retried), a service cut off or killed in between. A retry that
    # reaches orders twice is a matter of timing: 90 s with a cut every 12 s
    # made none in one CI run of five (a day whose phones answer sooner
    # has fewer requests in flight at a cut); 120 s with twice the cuts
    # made none once too. Pauses as well: a worker stopped for 2 to 5 s
    # keeps requests past the phones' 2.5 s timeout, their retries wait in
    # the broker's queue beside them, and both are applied once it resumes.
    # Up to 300 s for the phones to drain after the day (the run's default is
    # 120): in one CI run they took 104 s after these dense faults, and the
    # day ended before its final read and its last telemetry, which the
    # checker then counted as not converged and missing.
    p = subprocess.run([CHAOS, "run", "--phones", "20", "--duration", "120", "--seed", "5", "--partition-every", "4",
                        "--kill-every", "10", "--pause-every", "6", "--scale-service", "none", "--faults", "partition,kill,pause",
                        "--hold-seconds", "600", "--drain-timeout", "300", "--out", out],
                       env=env, capture_output=True, text=True, timeout=1200)
    log = p.stdout + p.stderr
    assert os.path.exists(os.path.join(out, "check.json")), "the run wrote no check.json (exit %d):\n%s" % (p.returncode, log[-4000:])
    verdict = json.load(open(os.path.join(out, "check.json")))
    logs = os.path.join(out, "home", "logs")
    assert any("applies a repeated request id again" in open(f).read() for f in glob.glob(os.path.join(logs, "orders.*.log"))), \
        "the orders workers did not run with the fault on"

    # What the orders workers did: every 200 to orders.cart.add is an
    # application in this build; an id applied n times is n - 1 duplicates.
    applied = collections.Counter()
    for f in glob.glob(os.path.join(logs, "orders.*.log")):
        for line in open(f, errors="replace"):
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and e.get("type") == "orders.cart.add" and e.get("status") == 200:
                applied[e["id"]] += 1
    repeated = sum(n - 1 for n in applied.values() if n > 1)
    kills = sum(1 for line in open(os.path.join(out, "faults.log")) if "] kill orders " in line)

    failed = sorted(c["name"] for c in verdict["checks"] if not c["ok"])
    duplicated = verdict["counts"]["duplicated"]
    summary = "exit %d, failed %s, duplicated %d, repeated applications in the orders logs %d, orders killed %d\n%s" % (
        p.returncode, failed, duplicated, repeated, kills, log[-3000:])
    assert repeated >= 1, "no request was applied twice: the faults caused no retry that reached orders twice; " + summary
    assert p.returncode == 1, summary
    assert failed == ["duplicated"], summary
    assert repeated <= duplicated <= repeated + kills, summary
    assert "verdict: FAIL" in p.stdout and "applied twice" in p.stdout, summary
    dup = next(c for c in verdict["checks"] if c["name"] == "duplicated")
    assert "%d duplicated effects" % duplicated in dup["figures"] and dup["examples"], summary
    print("broken build: checker exit %d, failed %s, %s; orders logged %d repeated applications, orders killed %d times" % (
        p.returncode, failed, dup["figures"], repeated, kills))


def phone_number(example):
    """The number of the phone an example names ('phone-007: ...' is 7)."""
    head = example.split(":", 1)[0].split()[0]
    return int(head.rsplit("-", 1)[1])


def test_each_session_check_fails_on_a_build_that_breaks_its_guarantee(broken_bin, run_folder):
    out = run_folder
    env = run_env(broken_bin, QUAD_FAULT_EDGE_SESSIONS="1", QUAD_FAULT_STALE_ANSWERS="1")
    # No nemesis: what fails is the build, not the network.
    p = subprocess.run([CHAOS, "run", "--phones", "15", "--duration", "90", "--seed", "3", "--speed", "8",
                        "--partition-every", "0", "--kill-every", "0", "--pause-every", "0", "--broker-every", "0",
                        "--pg-every", "0", "--edge-every", "0", "--clock-every", "0", "--disk-every", "0", "--scale-service", "none",
                        "--out", out], env=env, capture_output=True, text=True, timeout=1200)
    log = p.stdout + p.stderr
    assert os.path.exists(os.path.join(out, "check.json")), "the run wrote no check.json (exit %d):\n%s" % (p.returncode, log[-4000:])
    verdict = json.load(open(os.path.join(out, "check.json")))
    checks = {c["name"]: c for c in verdict["checks"]}
    failed = sorted(n for n, c in checks.items() if not c["ok"])
    summary = "exit %d, failed %s, sessions %s\n%s" % (p.returncode, failed, verdict.get("sessions"), p.stdout[-4000:])
    assert p.returncode == 1, summary
    assert failed == ["converged", "monotonic", "ryw", "wfr"], summary
    # Each with examples from the phones given its fault.
    for name, numbers in (("monotonic", {1}), ("converged", {2})):
        assert checks[name]["examples"], summary
        assert any(phone_number(e) % 3 in numbers for e in checks[name]["examples"]), summary
    assert any(phone_number(e) % 3 == 1 for e in checks["ryw"]["examples"]), summary
    assert checks["wfr"]["examples"] and all("orders.return" in e for e in checks["wfr"]["examples"]), summary
    print("session faults: " + "; ".join("%s: %s" % (n, checks[n]["figures"]) for n in failed))
