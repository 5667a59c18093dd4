"""The summary of a `deploy/chaos run`: run.json in the run's folder (the
phones, the seed, the exits of quad-edge and of the checker, the faults as
they ran and counted by kind, the edge and checker reports, when the phones'
outboxes drained; with --prometheus the alerts fired, by name, and the
alerts check) and two or three lines on standard output. deploy/chaos calls

    python3 -m quaddeploy.chaosreport RUN_DIR PHONES DURATION SEED EDGE_EXIT CHECKER_EXIT

once the checker has run.
"""

import glob
import json
import os
import re
import sys
from collections import Counter

# Which kind a line of faults.log is, tried in order: the first match counts.
COUNTED = [("broker", r"broker: (kill broker \d+ \(|partition )"), ("pg", r"pg: (restart postgres \(starting|partition )"),
           ("edge", r"edge: kill quad-edge \("), ("clock", r"clock: \S+ [+-]\d+s \(restarted"),
           ("partition", r"partition "), ("kill", r"kill \w+ \(restarted"), ("pause", r"pause \S+ for "), ("scale", r"scale .*\(starting\)"),
           ("disk", r"disk: (\S+ file (rolled back|corrupted)|host pg's disk full \(|\S+ quad-edge killed inside)")]


def faults_by_kind(lines):
    """The faults of faults.log that took effect, counted by kind (a line
    saying FAILED is not counted)."""
    kinds = Counter()
    for line in lines:
        m = re.match(r"\[\s*\d+s\] (.*)", line)
        if not m or "FAILED" in line:
            continue
        for kind, rx in COUNTED:
            if re.match(rx, m.group(1)):
                kinds[kind] += 1
                break
    return kinds


def summarize(d, phones, duration, seed, edge_rc, check_rc):
    """Writes d/run.json and prints the faults by kind and the convergence."""
    def load(name):
        try:
            return json.load(open(os.path.join(d, name)))
        except (OSError, ValueError):
            return None
    run = {"phones": phones, "duration_s": duration, "seed": seed, "edge_exit": edge_rc, "checker_exit": check_rc,
           "faults": open(os.path.join(d, "faults.log")).read().splitlines(), "edge": load("edge.json"), "check": load("check.json"),
           "valid": edge_rc == 0 and check_rc == 0}
    run["edge_earlier"] = [load(os.path.basename(f)) for f in sorted(glob.glob(os.path.join(d, "edge.[0-9]*.json")))]
    kinds = faults_by_kind(run["faults"])
    run["faults_by_kind"] = dict(kinds)
    print("faults by kind: " + (", ".join("%s %d" % kv for kv in sorted(kinds.items())) or "none"))
    edge = run["edge"] or {}
    drain = (edge.get("drain") or {}).get("end_of_day_ms")
    run["converged_ms"] = drain
    if drain is not None:
        print("converged: every phone's outbox drained %d ms after the last heal (end of the day)" % drain)
    # --prometheus: the alerts that fired (alerts.json) and the alerts check.
    alerts = load("alerts.json")
    if alerts is not None:
        fired = Counter(a["alert"] for a in alerts.get("alerts", []))
        run["alerts_fired"] = dict(fired)
        run["alerts_check"] = (run["check"] or {}).get("alerts")
        print("alerts fired: " + (", ".join("%s %d" % kv for kv in sorted(fired.items())) or "none")
              + " (alerts.json; report.html draws them beside the fault windows)")
    json.dump(run, open(os.path.join(d, "run.json"), "w"), indent=2)
    return run


if __name__ == "__main__":
    if len(sys.argv) != 7:
        print("usage: python3 -m quaddeploy.chaosreport RUN_DIR PHONES DURATION SEED EDGE_EXIT CHECKER_EXIT", file=sys.stderr)
        sys.exit(64)
    summarize(sys.argv[1], *map(int, sys.argv[2:]))
