"""The alarms of a chaos run (`deploy/chaos run --prometheus`): the alert
history read from the stack's Prometheus, and the checker's `alerts` check.

    python3 -m quaddeploy.alerts record --url http://127.0.0.1:PORT/ --start UNIX --t0-ms MS \\
        --out RUN_DIR/alerts.json [--wait-resolved S]

reads `ALERTS{alertstate="firing"}` over [start, now] with query_range (step
1 s, the run's rule evaluation interval) and writes alerts.json: one entry a
firing, {"alert", "labels", "first", "last", "resolved"} (UNIX seconds),
after waiting up to S seconds for the alerts still firing to resolve.

The check (check(), called by deploy/checker.py --alerts) reads alerts.json
beside the fault windows of faults.log (checker.fault_windows):

  seen      every fault of a kind in EXPECTED had one of its alerts firing,
            about its target, within the stated seconds of its start;
  resolved  every firing ended within its alert's resolve time (RESOLVE_S for
            the alerts of group quad-faults, else the longest range its
            expression reads plus 15 s) after the last fault in force while
            it fired healed; one still firing at the record's end within
            that time is not judged, and counted;
  no fault  no alert started firing while no fault was in force: every
            firing starts within a fault window, or at most its grace after
            one ends (GRACE_S for the group quad-faults; for the others
            their range plus their `for:`, plus GRACE_S).
"""

import argparse
import glob
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

RULES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "prometheus", "rules")

# The alerts that see a fault as it happens (group quad-faults): no `for:`,
# a 30 s window.
FAST = ("QuadBrokerRestarted", "QuadWorkerRestarted", "QuadWorkerNotAnswering", "QuadWorkersLost", "QuadStoreReconnected")
# A fast alert starts at most this long after its fault ended (a worker the
# broker drops 3 s after a kill or a pause, a store session opened at the
# next request after PostgreSQL came back).
GRACE_S = 10
# ... and resolves at most this long after it: its 30 s window and 15 s.
RESOLVE_S = 45
# A partition between the broker and a service is seen only when it lasts
# past the workers' heartbeat liveness (1 s x 3, Sources/QuadProcess) and
# two more seconds (a scrape, an evaluation).
HEARTBEAT_LIVENESS_S = 3

# fault (as checker.fault_windows names it) -> the alerts any of which must
# fire within `within` seconds of its start, about its target; None: no metric
# of the stack sees it, not expected (its alerts are allowed, not required).
# `target` picks the label that names the fault's target: job quad-SERVICE,
# service SERVICE, or any.
EXPECTED = [
    {"fault": "broker: kill broker K", "match": r"^kill broker (\d+)$", "kind": "broker",
     "alerts": ["QuadBrokerRestarted"], "within": 10, "target": "any",
     "how": "its uptime restarts (resets of quad_broker_uptime_seconds), or a scrape fails"},
    {"fault": "partition broker | SERVICE (5 s or longer)", "match": r"^partition broker \| (\w+)$", "kind": "partition",
     "alerts": ["QuadWorkersLost"], "within": 10, "target": "service", "min_s": HEARTBEAT_LIVENESS_S + 2,
     "how": "the brokers drop the service's workers after 3 missed heartbeats (quad_broker_workers falls)"},
    {"fault": "kill SERVICE", "match": r"^kill (\w+)$", "kind": "kill",
     "alerts": ["QuadWorkerRestarted", "QuadWorkerNotAnswering"], "within": 10, "target": "job",
     "how": "the worker's uptime restarts (quad_uptime_seconds), its scrapes fail while it is down"},
    {"fault": "pause SERVICE", "match": r"^pause (\w+)$", "kind": "pause",
     "alerts": ["QuadWorkerNotAnswering", "QuadWorkersLost"], "within": 10, "target": "service_or_job",
     "how": "a stopped worker fails its scrapes (up == 0); past 3 s the brokers drop it"},
    {"fault": "pg: restart postgres", "match": r"^restart postgres$", "kind": "pg",
     "alerts": ["QuadStoreReconnected"], "within": 20, "target": "any",
     "how": "the services on PostgreSQL (telemetry) open their session again (quad_store_reconnects_total) or answer 503"},
    {"fault": "clock: SERVICE/N skewed", "match": r"^clock (\w+)/\d+ ", "kind": "clock",
     "alerts": ["QuadWorkerRestarted", "QuadWorkerNotAnswering"], "within": 10, "target": "job",
     "how": "the worker is restarted under libfaketime: its uptime restarts"},
    {"fault": "partition phones | broker, broker: partition phones | broker-K", "match": r"phones \| broker", "kind": None,
     "alerts": None, "how": "not expected: the phones (quad-edge) are not scraped, and a broker sees only fewer requests"},
    {"fault": "pg: partition SERVICE | pg", "match": r"^pg partition ", "kind": None, "alerts": None,
     "how": "not expected: only a service on PostgreSQL notices, and only when a query waits past its timeout"},
    {"fault": "edge: kill quad-edge", "match": r"^kill quad-edge$", "kind": None, "alerts": None,
     "how": "not expected: quad-edge is not a target of the chaos run's Prometheus"},
    {"fault": "disk: host pg's disk full", "match": r"^disk full pg$", "kind": "disk", "alerts": None,
     "how": "not expected: the services' writes fail with 503 while it lasts; an error-rate alert may fire, which is allowed"},
    {"fault": "disk: PHONE file rolled back or corrupted, quad-edge killed inside a commit", "match": r"^(rollback|corrupt|crash) ",
     "kind": "disk", "alerts": None,
     "how": "not expected: a phone's file is not scraped; the phone says what it lost and sends its actions again"},
    {"fault": "scale SERVICE to N", "match": r"^scale ", "kind": None, "alerts": None,
     "how": "not expected (not a fault of a process): a scale down makes QuadWorkersLost fire, which is allowed"},
]


def expectation(window):
    """The row of EXPECTED for a fault window (None for an unknown one), and
    its target (a service name, or None)."""
    for row in EXPECTED:
        m = re.search(row["match"], window["what"])
        if m and (row["kind"] is None or row["kind"] == window["kind"]):
            return row, (m.group(1) if m.groups() else None)
    return None, None


# ------------------------------------------------------------ the rules


def rule_windows(rules_dir=RULES):
    """alert -> (longest range its expression reads, its for:), in seconds."""
    import yaml
    out = {}
    for f in sorted(glob.glob(os.path.join(rules_dir, "*.yml"))):
        for group in yaml.safe_load(open(f))["groups"]:
            for r in group["rules"]:
                if "alert" in r:
                    # Its ranges, and those of the recorded series it reads
                    # (quad:slo_bad:ratio_rate1h, ..._p99_5m).
                    ranges = [duration_s(x) for x in re.findall(r"\[(\d+[smhdw])\]", r["expr"])]
                    ranges += [duration_s(x) for x in re.findall(r"[a-z]:[a-z_0-9:]*?(?:_rate|:p99_)(\d+[smhdw])\b", r["expr"])]
                    out[r["alert"]] = (max(ranges or [0]), duration_s(r.get("for", "0s")))
    return out


def duration_s(text):
    m = re.fullmatch(r"(\d+)([smhdw])", str(text).strip())
    if not m:
        return 0
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def grace_s(alert, windows):
    if alert in FAST:
        return GRACE_S
    rng, for_ = windows.get(alert, (0, 0))
    return rng + for_ + GRACE_S


def resolve_s(alert, windows):
    if alert in FAST:
        return RESOLVE_S
    return windows.get(alert, (0, 0))[0] + 15


# ------------------------------------------------------------ the record


def query_range(url, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": "%.3f" % start, "end": "%.3f" % end, "step": "%gs" % step})
    with urllib.request.urlopen(url.rstrip("/") + "/api/v1/query_range?" + q, timeout=30) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError("Prometheus answered %s" % body)
    return body["data"]["result"]


def firings(result, step, end):
    """query_range's series of ALERTS{alertstate="firing"} as firings: runs
    of samples no more than 2 steps apart."""
    out = []
    for series in result:
        labels = {k: v for k, v in series["metric"].items() if k not in ("__name__", "alertstate")}
        name = labels.pop("alertname", "?")
        ts = sorted(float(t) for t, _ in series["values"])
        run = []
        for t in ts:
            if run and t - run[-1] > 2 * step + 0.001:
                out.append((name, labels, run[0], run[-1]))
                run = []
            run.append(t)
        if run:
            out.append((name, labels, run[0], run[-1]))
    return [{"alert": n, "labels": l, "first": a, "last": b, "resolved": b < end - 2 * step}
            for n, l, a, b in sorted(out, key=lambda x: (x[2], x[0]))]


def record(url, start, t0_ms, out, step=1.0, wait_resolved=0.0):
    """Waits (up to wait_resolved s) until no alert fires, then writes the
    firings since start to out. Returns the document."""
    deadline = time.time() + wait_resolved
    while True:
        now = time.time()
        firing = query_range(url, 'ALERTS{alertstate="firing"}', now - 2 * step, now, step)
        # Only the quad-faults alerts are waited for: the others read
        # minutes or hours, more than a run waits.
        still = [s for s in firing if s["values"] and float(s["values"][-1][0]) >= now - 2 * step - 0.5
                 and s["metric"].get("alertname") in FAST]
        if not still or now >= deadline:
            break
        time.sleep(2)
    end = time.time()
    result = []
    # query_range answers at most 11,000 points a series: in pieces.
    piece = 10000 * step
    t = start
    while t < end:
        result += query_range(url, 'ALERTS{alertstate="firing"}', t, min(end, t + piece), step)
        t += piece + step
    doc = {"prometheus": url, "step_s": step, "t0_ms": t0_ms, "from": start, "to": end,
           "alerts": firings(merge_series(result), step, end)}
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    return doc


def merge_series(result):
    by = {}
    for s in result:
        key = json.dumps(s["metric"], sort_keys=True)
        by.setdefault(key, {"metric": s["metric"], "values": []})["values"] += s["values"]
    return list(by.values())


# ------------------------------------------------------------ the check


def _about(alert, row, target):
    """Is the firing about the fault's target?"""
    if target is None or row["target"] == "any":
        return True
    labels = alert["labels"]
    job_ok = labels.get("job") == "quad-" + target
    svc_ok = labels.get("service") == target
    return {"job": job_ok, "service": svc_ok, "service_or_job": job_ok or svc_ok}[row["target"]]


def check(doc, windows, rules_dir=RULES):
    """The alerts check. doc: alerts.json; windows: the fault windows
    (seconds from the run's start, checker.fault_windows). Returns a dict:
    ok, figure, examples (up to 5 a kind of violation), seen, counts."""
    t0 = doc["t0_ms"] / 1000.0
    end_rel = doc["to"] - t0
    rw = rule_windows(rules_dir)
    alerts = [dict(a, start=a["first"] - t0, stop=a["last"] - t0) for a in doc["alerts"]]
    wins = [dict(w, end=(w["end"] if w["end"] is not None else end_rel)) for w in windows]
    missed, unresolved, unexplained, seen, not_expected, not_judged = [], [], [], [], [], 0
    step = doc.get("step_s", 1.0)
    # seen: each expected fault had its alert.
    for w in wins:
        row, target = expectation(w)
        if row is None or row["alerts"] is None:
            not_expected.append(w["what"])
            continue
        if w["end"] - w["start"] < row.get("min_s", 0):
            not_expected.append(w["what"] + " (%g s: shorter than %d s)" % (w["end"] - w["start"], row["min_s"]))
            continue
        lo, hi = w["start"] - 1, w["start"] + row["within"]
        hit = [a for a in alerts if a["alert"] in row["alerts"] and _about(a, row, target)
               and a["start"] <= hi and a["stop"] + step >= lo]
        if hit:
            first = min(hit, key=lambda a: a["start"])
            seen.append({"fault": w["what"], "at": w["start"], "alert": first["alert"],
                         "after_s": round(max(0.0, first["start"] - w["start"]), 1)})
        else:
            missed.append("%s at %s s: none of %s fired about %s within %d s" % (
                w["what"], w["start"], "/".join(row["alerts"]), target or "it", row["within"]))
    # no fault / resolved: each firing against the windows.
    for a in alerts:
        g = grace_s(a["alert"], rw)
        during = [w for w in wins if w["start"] - 1 <= a["start"] <= w["end"] + g]
        label = "%s%s" % (a["alert"], "".join("{%s}" % a["labels"][k] for k in ("instance", "service", "job") if k in a["labels"])[:80])
        if not during:
            before = [w for w in wins if w["end"] <= a["start"]]
            last = max(before, key=lambda w: w["end"]) if before else None
            unexplained.append("%s fired at %.0f s with no fault in force (%s)" % (
                label, a["start"], "the last healed at %.0f s, grace %d s" % (last["end"], g) if last else "before any fault"))
            continue
        # The last fault in force while it fired.
        healed = max(w["end"] for w in wins if w["start"] - 1 <= a["stop"] and w["end"] + g >= a["start"])
        limit = healed + resolve_s(a["alert"], rw)
        if not a["resolved"]:
            if end_rel < limit:
                not_judged += 1
            else:
                unresolved.append("%s still fired at the record's end (%.0f s), %.0f s after the last fault healed (%.0f s; allowed %d s)" % (
                    label, end_rel, end_rel - healed, healed, resolve_s(a["alert"], rw)))
        elif a["stop"] > limit:
            unresolved.append("%s fired until %.0f s, %.0f s after the last fault healed (%.0f s; allowed %d s)" % (
                label, a["stop"], a["stop"] - healed, healed, resolve_s(a["alert"], rw)))
    ok = not (missed or unresolved or unexplained)
    expected = len(seen) + len(missed)
    figure = "%d of %d faults seen by their alert%s; %d firings, %d resolved late, %d with no fault; %d faults not expected%s" % (
        len(seen), expected, (" (slowest %.0f s)" % max(s["after_s"] for s in seen)) if seen else "",
        len(alerts), len(unresolved), len(unexplained), len(not_expected),
        ("; %d still firing, within their time" % not_judged) if not_judged else "")
    examples = (["missed: " + m for m in missed[:5]] + ["unresolved: " + u for u in unresolved[:5]]
                + ["no fault: " + u for u in unexplained[:5]])
    return {"ok": ok, "figure": figure, "examples": examples, "seen": seen, "missed": missed,
            "unresolved": unresolved, "unexplained": unexplained, "not_expected": not_expected,
            "not_judged": not_judged, "firings": len(alerts)}


def table_text():
    """The table of EXPECTED, as docs/chaos.md shows it."""
    rows = ["| fault | alert (any of) | within |", "|---|---|---|"]
    for row in EXPECTED:
        if row["alerts"] is None:
            rows.append("| %s | %s | - |" % (row["fault"], row["how"]))
        else:
            rows.append("| %s | %s | %d s |" % (row["fault"], ", ".join("`%s`" % a for a in row["alerts"]), row["within"]))
    return "\n".join(rows)


def _main(argv):
    ap = argparse.ArgumentParser(prog="quaddeploy.alerts", description="the alerts of a chaos run")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="write alerts.json from Prometheus's HTTP API")
    r.add_argument("--url", required=True)
    r.add_argument("--start", type=float, required=True, help="UNIX seconds")
    r.add_argument("--t0-ms", type=int, required=True, help="the run's zero (faults.log), ms since the epoch")
    r.add_argument("--out", required=True)
    r.add_argument("--step", type=float, default=1.0)
    r.add_argument("--wait-resolved", type=float, default=0.0)
    sub.add_parser("table", help="print the table of expected alerts")
    a = ap.parse_args(argv)
    if a.cmd == "table":
        print(table_text())
        return 0
    try:
        doc = record(a.url, a.start, a.t0_ms, a.out, a.step, a.wait_resolved)
    except (OSError, RuntimeError, ValueError) as e:
        print("alerts: cannot read the alerts from %s: %s" % (a.url, e), file=sys.stderr)
        return 1
    names = sorted({x["alert"] for x in doc["alerts"]})
    print("alerts: %d firings (%s) in %s" % (len(doc["alerts"]), ", ".join(names) or "none", a.out))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
