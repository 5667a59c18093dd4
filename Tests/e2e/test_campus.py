"""deploy/campus (issue 26, point 3): a campus of N phones over several
quad-edge processes against one stack, their reports merged into one.

Against a stack of its own (deploy/stack up, two brokers, on a free port
base): 30 phones at 12 a process run as three processes of 10, each with its
own phone names, folder and seed; the merged report has 30 phones, 3
processes, and every action of the parts: created, done, rejected and
pending are the sums of the processes' own reports, and so are the drains
counted and the live updates received; the run exits 0 and printed progress
lines. Without a stack: the split, the merge of percentiles (exact from the
reports' histograms, an upper bound said so without them), the refusal of a
campus the machine's memory cannot hold, and a process that fails failing
the run with its name and its last lines.

Environment: QUAD_BIN_DIR (executables; else deploy/stack builds them as
usual), QUAD_CAMPUS_PORT_BASE (where the search for a free port base
starts, default 27300), QUAD_STACK_TIMEOUT (seconds for deploy/stack up,
default 300).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
from quaddeploy import campus as cq  # noqa: E402

CAMPUS = ROOT / "deploy" / "campus"
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
# A stack takes ports from its base up to base+~190 (brokers, metrics from
# base+100, dashboard, image servers, PostgreSQL).
WIDTH = 200


def port_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) != 0


def free_port_base(start):
    """The first base from `start`, in steps of WIDTH, whose WIDTH ports are
    all free, never in the default stack's range (7700-8200)."""
    base = start
    for _ in range(100):
        if not (base + WIDTH > 7700 and base < 8200) and all(port_free(base + k) for k in range(WIDTH)):
            return base
        base += WIDTH
    raise RuntimeError(f"no {WIDTH} free ports in a row from {start}")


def campus(*args, env=None, timeout=600):
    return subprocess.run([str(CAMPUS), *args], cwd=ROOT, env=env or dict(os.environ), capture_output=True, text=True,
                          timeout=timeout)


# ---------------------------------------------------------------- no stack

def test_the_phones_are_split_evenly_over_as_few_processes_as_the_limit_allows():
    assert cq.plan(30, 12) == [10, 10, 10]
    assert cq.plan(10_000, 1000) == [1000] * 10
    assert cq.plan(2_001, 1000) == [667, 667, 667]
    assert cq.plan(7, 1000) == [7]
    with pytest.raises(ValueError, match="per-process"):
        cq.plan(10, 1001)
    seeds = {cq.seed_of(7, k) for k in range(1, 101)}
    assert len(seeds) == 100


def report(drains, live, created, done):
    r = {"final": True, "phones": 10, "accounted": True,
         "actions": {"created": created, "done": done, "rejected": created - done, "pending": 0,
                     "by_type": {"orders.place": {"done": done, "rejected": created - done}}},
         "drain": {"after_reconnect_ms": {"count": len(drains), "p50": None, "p95": None, "max": max(drains)},
                   "connect_ms": {"count": len(drains), "p50": None, "p95": None, "max": max(drains) // 2},
                   "end_of_day_ms": 40, "outbox_left": 0},
         "live": {"phones_with_feed": 10, "received": len(live), "latency_ms": {"p50": None, "p95": None, "max": max(live)},
                  "news": {"received": 2, "for_another_user": 0, "latency_ms": {"p50": 5, "p95": 9}}},
         "rejected": [{"type": "orders.place", "code": "conflict", "reason": f"product {created} is sold out", "count": created - done}],
         "histograms": {"drain_after_reconnect_ms": {}, "drain_connect_ms": {}, "live_latency_ms": {}}}
    # Each drain's new connection took half of it.
    for name, samples, target in (("drain_after_reconnect_ms", drains, r["drain"]["after_reconnect_ms"]),
                                  ("drain_connect_ms", [d // 2 for d in drains], r["drain"]["connect_ms"]),
                                  ("live_latency_ms", live, r["live"]["latency_ms"])):
        s = sorted(samples)
        target["p50"] = s[min(len(s) - 1, int(len(s) * 0.5))]
        target["p95"] = s[min(len(s) - 1, int(len(s) * 0.95))]
        for v in s:
            r["histograms"][name][str(v)] = r["histograms"][name].get(str(v), 0) + 1
    return r


def test_merged_percentiles_are_exact_from_the_histograms():
    a = report([10] * 95 + [5000] * 5, list(range(100)), 50, 40)
    b = report([20] * 100, list(range(100, 200)), 30, 30)
    m = cq.merge([a, b], seed=7)
    everything = sorted([10] * 95 + [5000] * 5 + [20] * 100)
    assert m["drain"]["after_reconnect_ms"]["p95"] == everything[int(200 * 0.95)] == 20
    assert m["drain"]["connect_ms"]["p95"] == 10 and m["drain"]["connect_ms"]["max"] == 2500
    assert "drain/connect_ms" in m["percentiles"]["exact"]
    # The largest of the two p95s (5000) would have been far off.
    assert max(a["drain"]["after_reconnect_ms"]["p95"], b["drain"]["after_reconnect_ms"]["p95"]) == 5000
    assert m["live"]["latency_ms"]["p50"] == 100 and m["live"]["latency_ms"]["max"] == 199
    assert m["drain"]["after_reconnect_ms"]["count"] == 200
    assert m["actions"]["created"] == 80 and m["actions"]["done"] == 70 and m["actions"]["rejected"] == 10
    assert m["actions"]["by_type"]["orders.place"] == {"done": 70, "rejected": 10}
    assert m["drain"]["end_of_day_ms"] == 40, "a duration is the largest, not a sum"
    # The same refusal with other particulars counts as one reason.
    assert len(m["rejected"]) == 1 and m["rejected"][0]["count"] == 10
    assert m["accounted"] is True
    assert "drain/after_reconnect_ms" in m["percentiles"]["exact"]
    # No histogram of news latencies: the merged one is the larger, and said to be a bound.
    assert "live/news/latency_ms/p95" in m["percentiles"]["upper_bound"]


def test_without_histograms_a_merged_percentile_is_the_largest_and_said_so():
    a = report([10] * 95 + [5000] * 5, list(range(100)), 50, 40)
    b = report([20] * 100, list(range(100, 200)), 30, 30)
    del a["histograms"]
    m = cq.merge([a, b])
    assert m["drain"]["after_reconnect_ms"]["p95"] == 5000
    assert "drain/after_reconnect_ms/p95" in m["percentiles"]["upper_bound"]
    assert "upper bound" in cq.words(dict(m, processes=2, campus={}))
    b["actions"]["pending"] = 1
    b["accounted"] = False
    assert cq.merge([a, b])["accounted"] is False


def test_a_campus_the_memory_cannot_hold_is_refused_naming_the_limit():
    r = campus("--phones", str(10**9), "--check")
    assert r.returncode == 1, r.stderr
    assert "refusing to start: memory" in r.stderr and "MemAvailable" in r.stderr, r.stderr
    r = campus("--phones", "100", "--per-process", "1001")
    assert r.returncode == 64 and "--per-process" in r.stderr, r.stderr
    r = campus("--help")
    assert r.returncode == 0 and "--per-process" in r.stdout


@pytest.fixture(scope="module")
def edge_env():
    """An environment whose QUAD_BIN_DIR has quad-edge (building it when
    QUAD_BIN_DIR is not set, as deploy/stack does)."""
    env = dict(os.environ)
    if not env.get("QUAD_BIN_DIR"):
        build = os.environ.get("QUAD_BUILD_DIR", str(ROOT / ".build"))
        subprocess.run(["swift", "build", "-c", "release", "--product", "quad-edge", "--scratch-path", build], cwd=ROOT,
                       check=True, timeout=3600)
        env["QUAD_BIN_DIR"] = os.path.join(build, "release")
    return env


def test_a_process_that_fails_fails_the_run_with_its_name_and_last_lines(edge_env):
    folder = tempfile.mkdtemp(prefix="quad-campus-fail-")
    env = dict(edge_env, QUAD_FRONTEND=f"tcp://127.0.0.1:{free_port_base(27100)}", QUAD_BROKER_KEY="off")
    r = campus("--phones", "4", "--per-process", "2", "--dir", folder, "--duration", "5", "--", "--action-timeout-ms", "1",
               env=env, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "process p0" in r.stderr and "exited 64" in r.stderr, r.stderr
    # Its own last lines, named by the process: quad-edge's usage error.
    assert "| " in r.stderr and "action-timeout-ms" in r.stderr.split("exited 64", 1)[1], r.stderr
    shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- a stack

@pytest.fixture(scope="module")
def stack():
    base = free_port_base(int(os.environ.get("QUAD_CAMPUS_PORT_BASE", "27300")))
    launched = quadclient.LaunchedStack("quad-campus-", base, timeout=STACK_TIMEOUT)
    try:
        launched.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    try:
        yield launched
    finally:
        launched.down()
        shutil.rmtree(launched.home, ignore_errors=True)


def test_thirty_phones_over_three_processes_merge_into_one_report(stack):
    folder = tempfile.mkdtemp(prefix="quad-campus-run-")
    out = os.path.join(folder, "campus.json")
    # QUAD_FRONTEND is not in the stack's environment: the campus reads
    # the endpoints from deploy/stack env, as a user's shell would.
    assert "QUAD_FRONTEND" not in stack.env
    r = campus("--phones", "30", "--per-process", "12", "--seed", "7", "--speed", "20", "--duration", "15",
               "--dir", folder, "--report", out, "--progress-every", "2", env=stack.env, timeout=420)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}"
    merged = json.load(open(out))
    assert merged["phones"] == 30
    assert merged["processes"] == 3
    assert merged["campus"]["phones_per_process"] == [10, 10, 10]
    assert merged["accounted"] is True and merged["exit_ok"] is True
    parts = [json.load(open(os.path.join(folder, f"p0{k}.json"))) for k in (1, 2, 3)]
    assert [p["phones"] for p in parts] == [10, 10, 10]
    for key in ("created", "done", "rejected", "pending"):
        assert merged["actions"][key] == sum(p["actions"][key] for p in parts), key
    a = merged["actions"]
    assert a["created"] > 0 and a["pending"] == 0 and a["created"] == a["done"] + a["rejected"]
    for t, outcomes in merged["actions"]["by_type"].items():
        for o, n in outcomes.items():
            assert n == sum(p["actions"]["by_type"].get(t, {}).get(o, 0) for p in parts), (t, o)
    assert merged["drain"]["after_reconnect_ms"]["count"] == sum(p["drain"]["after_reconnect_ms"]["count"] for p in parts)
    assert merged["live"]["received"] == sum(p["live"]["received"] for p in parts)
    assert merged["notifications"]["received"] == sum(p["notifications"]["received"] for p in parts)
    # Each process its own seed, prefix and folder: 30 distinct phones.
    assert len({p["seed"] for p in parts}) == 3
    names = {f for k in (1, 2, 3) for f in os.listdir(os.path.join(folder, f"p0{k}")) if f.endswith(".db")}
    assert len(names) == 30 and {n[:8] for n in names} == {"campus01", "campus02", "campus03"}, sorted(names)
    assert all(x["exit"] == 0 for x in merged["campus"]["process_list"])
    assert merged["campus"]["resources"]["quad-edge"]["fds_peak"] > 0
    assert "brokers" in merged["campus"]["resources"]
    # Progress while it ran, one line for the whole campus.
    assert "processes: " in r.stderr and "in the day:" in r.stderr, r.stderr[-3000:]
    assert "30 phones over 3 quad-edge processes" in r.stdout and "Every action is accounted for." in r.stdout, r.stdout
    shutil.rmtree(folder, ignore_errors=True)
