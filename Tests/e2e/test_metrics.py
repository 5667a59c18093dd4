"""Prometheus metrics of a real stack (issue 15, point 4): `deploy/stack up`
starts every broker and worker with a /metrics port, `deploy/stack metrics`
lists them as scrape targets and writes a prometheus.yml, every target parses
with prometheus_client's own parser (not ours), and a short campus day on
quad-edge (with its --metrics) moves the request counters of the brokers, the
workers and quad-edge itself.

Fails on the code before it: deploy/stack had no `metrics` command, the stack
started no process with --metrics, and quad-edge had no /metrics.

Environment: QUAD_METRICS_TEST_PORT_BASE (where the search for a free port base starts, default 18600: the stack's ports
from there, its /metrics ports from base+100), QUAD_STACK_TIMEOUT (seconds for
deploy/stack up, default 300). deploy/stack sees the rest of the environment
(QUAD_BUILD_DIR, QUAD_BIN_DIR).
"""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402
from quadclient import error_code  # noqa: E402

# The first free port base from QUAD_METRICS_TEST_PORT_BASE (default 18600): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_METRICS_TEST_PORT_BASE", "18600")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
METRICS_BASE = PORT_BASE + 100
EDGE_METRICS = f"127.0.0.1:{METRICS_BASE + 9}"


def scrape(url, timeout=10):
    """The families of one /metrics, parsed by prometheus_client, by name."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        assert r.status == 200, url
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), (url, r.headers["Content-Type"])
        text = r.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def total(families, name, sample=None, **labels):
    """The sum of a family's samples (sample name `sample`, default the
    counter's `NAME_total` or the gauge's NAME) whose labels include `labels`."""
    # prometheus_client names a counter's family without `_total`, a
    # histogram's without `_count`, `_sum`, `_bucket`.
    family = families.get(name)
    for suffix in ("_total", "_count", "_sum", "_bucket"):
        if family is None and name.endswith(suffix):
            family = families.get(name[:-len(suffix)])
    if family is None:
        return 0.0
    want = sample or name
    return sum(s.value for s in family.samples if s.name == want and all(s.labels.get(k) == v for k, v in labels.items()))


@pytest.fixture(scope="module")
def stack():
    launched = quadclient.LaunchedStack("quad-metrics-", PORT_BASE, timeout=STACK_TIMEOUT)
    for k in ("QUAD_METRICS", "QUAD_BROKER_METRICS", "QUAD_EDGE_METRICS", "QUAD_METRICS_BASE"):
        launched.env.pop(k, None)
    try:
        launched.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    try:
        yield launched
    finally:
        launched.down()


def targets_of(stack, *args):
    listed = stack.run("metrics", "--json", *args)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return json.loads(listed.stdout)


def test_metrics_help_says_what_it_writes(stack):
    out = stack.run("metrics", "--help")
    assert out.returncode == 0, out.stderr
    assert "prometheus.yml" in out.stdout and "METRICS_BASE" in out.stdout
    assert "metrics" in stack.run("--help").stdout


def test_every_target_is_listed_written_to_prometheus_yml_and_parses(stack):
    found = targets_of(stack)
    targets = found["targets"]
    jobs = {t["job"] for t in targets}
    instances = {t["instance"] for t in targets}
    # Two brokers by default, and every worker of every built service.
    assert {"broker", "broker-2"} <= instances, targets
    assert "quad-broker" in jobs
    for service in ("accounts", "catalog", "orders", "reservations", "telemetry"):
        assert f"quad-{service}" in jobs, targets
    assert {"accounts/1", "accounts/2"} <= instances, targets  # accounts starts two workers
    # The addresses are the layout deploy/metrics.sh documents.
    by_instance = {t["instance"]: t["address"] for t in targets}
    assert by_instance["broker"] == f"127.0.0.1:{METRICS_BASE}"
    assert by_instance["broker-2"] == f"127.0.0.1:{METRICS_BASE + 1}"
    assert by_instance["accounts/1"] == f"127.0.0.1:{METRICS_BASE + 10}"
    assert by_instance["accounts/2"] == f"127.0.0.1:{METRICS_BASE + 11}"

    yml = Path(found["prometheus_yml"])
    assert yml == Path(stack.home, "prometheus.yml")
    text = yml.read_text()
    assert "scrape_configs:" in text and "static_configs:" in text
    for t in targets:
        assert f'"{t["address"]}"' in text and f'instance: "{t["instance"]}"' in text, t
        assert f'job_name: "{t["job"]}"' in text

    for t in targets:
        families = scrape(t["url"])
        assert families, t
        if t["job"] == "quad-broker":
            for name in ("quad_broker_requests", "quad_broker_workers", "quad_broker_queue_depth", "quad_broker_rate_limited"):
                assert name in families, (t, sorted(families))
            assert total(families, "quad_broker_workers", service="catalog") >= 1, t
        else:
            service = t["job"][len("quad-"):]
            for name in ("quad_requests", "quad_request_duration_seconds", "quad_uptime_seconds", "quad_store_errors"):
                assert name in families, (t, sorted(families))
            assert total(families, "quad_uptime_seconds", service=service) > 0, t


def test_a_campus_day_moves_the_request_counters(stack):
    before = {t["instance"]: scrape(t["url"]) for t in targets_of(stack)["targets"]}

    env = dict(stack.env)
    env.update({k: v for k, v in stack.exported().items() if k != "PATH"})
    bindir = os.environ.get("QUAD_BIN_DIR") or str(Path(os.environ.get("QUAD_BUILD_DIR") or ROOT / ".build") / "release")
    edge_bin = Path(bindir) / "quad-edge"
    assert edge_bin.exists(), f"no {edge_bin}"
    report = Path(stack.home, "edge-report.json")
    edge = subprocess.Popen(
        [str(edge_bin), "run", "--phones", "6", "--seed", "15", "--duration", "20", "--speed", "4", "--drain-timeout", "90",
         "--dir", str(Path(stack.home, "phones")), "--control", "none", "--metrics", EDGE_METRICS, "--report", str(report)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    listed_edge = False
    edge_seen = {}
    try:
        # While the day runs: deploy/stack metrics lists quad-edge, and its
        # counters move (it is scraped until its process ends).
        deadline = time.monotonic() + 240
        while edge.poll() is None and time.monotonic() < deadline:
            if not listed_edge:
                listed_edge = any(t["job"] == "quad-edge" and t["address"] == EDGE_METRICS for t in targets_of(stack)["targets"])
            try:
                edge_seen = scrape(f"http://{EDGE_METRICS}/metrics", timeout=5)
            except OSError:
                pass
            time.sleep(0.5)
        out, err = edge.communicate(timeout=60)
    finally:
        if edge.poll() is None:
            edge.kill()
            edge.communicate()
    assert edge.returncode == 0, f"quad-edge run exited {edge.returncode}:\n{out[-2000:]}\n{err[-3000:]}"
    assert listed_edge, "deploy/stack metrics never listed quad-edge while it served /metrics"
    assert edge_seen, "quad-edge's /metrics never answered"
    for name in ("quad_edge_phones", "quad_edge_phones_online", "quad_edge_actions_queued", "quad_edge_telemetry_buffered",
                 "quad_edge_actions_sent", "quad_edge_actions_acknowledged", "quad_edge_actions_failed", "quad_edge_requests",
                 "quad_edge_request_duration_seconds", "quad_edge_loop_timers_late_seconds", "quad_edge_loop_timer_overruns"):
        assert name in edge_seen, (name, sorted(edge_seen))
    # How late the loop ran its timers: a figure of seconds, never negative.
    assert 0 <= total(edge_seen, "quad_edge_loop_timers_late_seconds") < 60
    assert total(edge_seen, "quad_edge_phones") == 6
    assert total(edge_seen, "quad_edge_requests_total") > 0
    assert total(edge_seen, "quad_edge_requests_total", status="200") > 0
    assert total(edge_seen, "quad_edge_actions_sent_total") > 0
    assert total(edge_seen, "quad_edge_actions_acknowledged_total") > 0
    assert total(edge_seen, "quad_edge_request_duration_seconds_count") > 0

    # Every broker routes: the phones pick a frontend at random, so one
    # request goes through each broker by name as well.
    key = quadclient.broker_key(stack.home)
    for frontend in stack.frontends.split(","):
        c = quadclient.Client(frontend, key, src="metrics-test")
        try:
            answer = c.call("catalog.products.list", {}, timeout=30)
            assert error_code(answer) is None, answer
        finally:
            c.close()

    # The brokers' figures are copied into the registry once a second.
    deadline = time.monotonic() + 30
    while True:
        after = {t["instance"]: scrape(t["url"]) for t in targets_of(stack)["targets"]}
        moved = {}
        for instance, families in after.items():
            if instance.startswith("broker"):
                moved[instance] = (total(families, "quad_broker_requests_total") - total(before[instance], "quad_broker_requests_total"),
                                   total(families, "quad_broker_service_requests_total") - total(before[instance], "quad_broker_service_requests_total"))
        if all(a > 0 and b > 0 for a, b in moved.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert moved and all(a > 0 and b > 0 for a, b in moved.values()), moved

    # Every worker parses; the services the day uses answered more.
    by_service = {}
    for instance, families in after.items():
        if instance.startswith("broker") or instance.startswith("edge"):
            continue
        service = instance.split("/")[0]
        delta = total(families, "quad_requests_total") - total(before.get(instance, {}), "quad_requests_total")
        by_service[service] = by_service.get(service, 0) + delta
        assert "quad_request_duration_seconds" in families, instance
    for service in ("accounts", "catalog", "orders", "reservations", "telemetry"):
        assert by_service.get(service, 0) > 0, (service, by_service)
    # Some of them are status 200 with a type label of the contract.
    catalog = [f for i, f in after.items() if i.startswith("catalog/")]
    assert any(total(f, "quad_requests_total", status="200") > 0 for f in catalog)
