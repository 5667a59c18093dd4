"""Prometheus scrape targets of a running stack, and a prometheus.yml for them.

Reads the targets `deploy/stack metrics` found, one a line on stdin as
``JOB<TAB>INSTANCE<TAB>HOST:PORT`` (job quad-broker, quad-SERVICE or
quad-edge; instance broker, broker-2, catalog/1, edge), prints them (a table,
or JSON with --json) and writes the file of --out: one scrape config per job,
one static config per process so that each carries its own ``instance``
label (the process's name, not its address).

For the Prometheus of `deploy/stack up --prometheus` (deploy/metrics.sh) the
same file gets its rule files (--rules, deploy/prometheus/rules/*.yml), a
shorter scrape and evaluation interval (--interval) and no table (--quiet).
"""

import argparse
try:
    from . import cli
except ImportError:  # run as a script, not as quaddeploy.X
    import cli  # type: ignore[no-redef]
import json
import os
import sys


def read_targets(lines):
    targets = []
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        job, instance, address = line.split("\t")
        targets.append({"job": job, "instance": instance, "address": address, "url": f"http://{address}/metrics"})
    return targets


def quoted(text):
    """A YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(text)


def prometheus_yml(targets, interval="15s", rules=()):
    jobs = {}
    for t in targets:
        jobs.setdefault(t["job"], []).append(t)
    out = [
        "# Written by deploy/stack metrics: the scrape targets of this Quad stack.",
        "global:",
        f"  scrape_interval: {interval}",
    ]
    if rules:
        out.append(f"  evaluation_interval: {interval}")
        out.append("rule_files:")
        out += [f"  - {quoted(r)}" for r in rules]
    out.append("scrape_configs:")
    for job, members in jobs.items():
        out += [f"  - job_name: {quoted(job)}", "    metrics_path: /metrics", "    static_configs:"]
        for t in members:
            out += [
                f"      - targets: [{quoted(t['address'])}]",
                "        labels:",
                f"          instance: {quoted(t['instance'])}",
            ]
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = cli.Parser(prog="deploy/stack metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="where prometheus.yml goes")
    parser.add_argument("--json", action="store_true", help="print the targets as JSON")
    parser.add_argument("--rules", action="append", default=[], metavar="GLOB",
                        help="a rule file (or glob) for rule_files, with evaluation_interval = --interval")
    parser.add_argument("--interval", default="15s", help="scrape_interval (default 15s)")
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    args = parser.parse_args(argv)
    targets = read_targets(sys.stdin)
    text = prometheus_yml(targets, args.interval, args.rules)
    new = args.out + ".new"
    with open(new, "w") as f:
        f.write(text)
    os.replace(new, args.out)
    if args.quiet:
        return 0
    if args.json:
        print(json.dumps({"prometheus_yml": args.out, "targets": targets}, indent=2))
    else:
        width_job = max([len("JOB")] + [len(t["job"]) for t in targets])
        width_instance = max([len("INSTANCE")] + [len(t["instance"]) for t in targets])
        print(f"{'JOB':<{width_job}}  {'INSTANCE':<{width_instance}}  URL")
        for t in targets:
            print(f"{t['job']:<{width_job}}  {t['instance']:<{width_instance}}  {t['url']}")
        print(f"wrote {args.out} ({len(targets)} targets)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
