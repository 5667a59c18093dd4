"""The one generator: every artefact that the stack's description
(deploy/stack.json, read by quaddeploy.services) turns into.

    supervisord config    supervisord(home)            deploy/supervise.sh's sup_start
    a supervisord program program(name, command, ...)  deploy/supervise.sh's sup_add
    the --hosts table     hosts(subnet, brokers)       deploy/hosts.sh (hosts_ip_of)
    prometheus.yml        prometheus_yml(jobs, ...)    deploy/stack metrics, up --prometheus,
                                                       and Kubernetes' (kube.prometheus_config)
    the port table        quaddeploy.ports.stack       deploy/stack, deploy/kube, deploy/bench
    Kubernetes manifests  quaddeploy.kube.manifests    deploy/kube manifests

From a shell (PYTHONPATH=deploy), each prints the artefact or writes --out:

    python3 -m quaddeploy.generate supervisord --home HOME
    python3 -m quaddeploy.generate program NAME --command FILE --priority P [--user U] [--signal SIG] --directory DIR
    python3 -m quaddeploy.generate hosts --subnet 10.77.K --brokers N
    python3 -m quaddeploy.generate prometheus --out FILE [--rules GLOB]... [--interval 15s] [--json|--quiet] < targets
    python3 -m quaddeploy.generate manifests DIR

QUAD_STACK_FILE names another description (the tests change it).
Exit status: 0, 1 (the description or an input is refused, said why), 64 (usage).
"""

import json
import os
import re
import sys

try:
    from . import cli
    from . import services as services_list
except ImportError:  # run as a script, not as quaddeploy.X
    import cli  # type: ignore[no-redef]
    import services as services_list  # type: ignore[no-redef]

# ----------------------------------------------------------------- supervisord

SOCKET_MAX = 107  # a Unix socket's path, in bytes


def supervisor_paths(home):
    """Where a stack's supervisord keeps its files: the one place they are
    named (deploy/supervise.sh reads them through `generate paths`)."""
    d = os.path.join(home, "run", "supervisor")
    return {"dir": d, "conf": os.path.join(d, "supervisord.conf"), "sock": os.path.join(d, "supervisor.sock"),
            "programs": os.path.join(d, "programs"), "log": os.path.join(home, "logs", "supervisord.log"),
            "pid": os.path.join(d, "supervisord.pid"), "logs": os.path.join(home, "logs")}


def supervisord(home):
    """supervisord.conf of the stack in home: its socket (0700), its log
    never rotated, every program from programs/*.conf. Refuses a home that
    supervisord's config or socket cannot hold."""
    p = supervisor_paths(home)
    if len(p["sock"].encode()) > SOCKET_MAX:
        raise ValueError(f"QUAD_HOME is too long for supervisord's socket ({p['sock']} is {len(p['sock'].encode())} bytes, "
                         f"at most {SOCKET_MAX}): choose a shorter QUAD_HOME")
    if re.search(r"[\s\"'\\%]", home):
        raise ValueError(f"QUAD_HOME must not hold spaces, quotes, backslashes or % under supervisord: '{home}'")
    return f"""; Written by deploy/stack up for the stack in {home} (deploy/quaddeploy/generate.py); rewritten at each up.
[unix_http_server]
file={p['sock']}
chmod=0700

[supervisord]
logfile={p['log']}
logfile_maxbytes=0
loglevel=info
pidfile={p['pid']}
childlogdir={p['logs']}
identifier=quad-stack
umask=077
minfds=4096
directory={home}

[rpcinterface:supervisor]
supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface

[supervisorctl]
serverurl=unix://{p['sock']}

[include]
files={p['programs']}/*.conf
"""


def _whole(name, value):
    if not re.fullmatch(r"[0-9]+", str(value)):
        raise ValueError(f"{name} must be a whole number, got '{value}'")
    return int(value)


def program(name, command, priority, directory, user=None, signal="TERM", env=None):
    """The [program:NAME] section of one process: autorestart=unexpected with
    exitcodes=0 (a death is restarted, an exit 0 stays down), startsecs and
    startretries from QUAD_START_SECS (2) and QUAD_START_RETRIES (5),
    QUAD_RESTART=off for no restart, stopwaitsecs QUAD_STOP_TIMEOUT (10)
    before SIGKILL; no log of supervisord's own (the launcher appends the
    program's output to its log)."""
    env = os.environ if env is None else env
    if not re.fullmatch(r"[a-z][a-z0-9-]*", name):
        raise ValueError(f"a program's name is lower-case letters, digits and '-', got '{name}'")
    if signal not in ("TERM", "INT", "QUIT", "HUP", "KILL", "USR1", "USR2"):
        raise ValueError(f"unknown stop signal '{signal}'")
    start_secs = _whole("QUAD_START_SECS", env.get("QUAD_START_SECS") or 2)
    retries = _whole("QUAD_START_RETRIES", env.get("QUAD_START_RETRIES") or 5)
    stop_wait = _whole("QUAD_STOP_TIMEOUT", env.get("QUAD_STOP_TIMEOUT") or 10)
    lines = [f"[program:{name}]", f"command={command}", f"priority={_whole('priority', priority)}", "autostart=true",
             "autorestart=%s" % ("false" if env.get("QUAD_RESTART", "on") == "off" else "unexpected"), "exitcodes=0",
             f"startsecs={start_secs}", f"startretries={retries}", f"stopsignal={signal}", f"stopwaitsecs={stop_wait}",
             "stdout_logfile=NONE", "stderr_logfile=NONE"]
    if user:
        lines.append(f"user={user}")
    lines.append(f"directory={directory}")
    return "\n".join(lines) + "\n"


def programs(brokers, workers=None, file=None):
    """The programs of a stack with `brokers` brokers, in start order:
    broker, broker-K, then SERVICE-N for each worker (workers: name -> count,
    default the description's)."""
    out = ["broker"] + [f"broker-{k}" for k in range(2, brokers + 1)]
    for s in services_list.load(file).values():
        out += [f"{s.name}-{n}" for n in range(1, (workers or {}).get(s.name, s.workers) + 1)]
    return out


# ---------------------------------------------------------------------- hosts

def hosts(subnet, brokers, file=None):
    """Every --hosts host of a stack on net subnet ("10.77.K"), name ->
    address, no two alike: broker .2, pg .3, phones .4, broker-K .(100+K),
    worker N of the service on host i (1 to 9, deploy/stack.json) .(10*i+N)
    for N up to 9, then .(110+7*(i-1)+N-10) for N from 10 to 16 (.110 to
    .172). The root namespace is .1."""
    if not re.fullmatch(r"10\.77\.([0-9]|[1-9][0-9]|1[0-9][0-9]|2[0-4][0-9]|25[0-5])", subnet):
        raise ValueError(f"the hosts' net is 10.77.K with K from 0 to 255, got '{subnet}'")
    if services_list.MAX_WORKERS > 16:
        raise ValueError(f"the hosts' addresses have room for 16 workers of a service, the schema allows {services_list.MAX_WORKERS}")
    out = {"broker": f"{subnet}.2", "pg": f"{subnet}.3", "phones": f"{subnet}.4"}
    for k in range(2, brokers + 1):
        out[f"broker-{k}"] = f"{subnet}.{100 + k}"
    for s in services_list.load(file).values():
        for n in range(1, services_list.MAX_WORKERS + 1):
            last = 10 * s.host + n if n <= 9 else 110 + 7 * (s.host - 1) + n - 10
            out[f"{s.name}-{n}"] = f"{subnet}.{last}"
    return out


# ------------------------------------------------------------------ Prometheus

def _quoted(text):
    """A YAML double-quoted scalar (JSON's escapes are YAML's)."""
    return json.dumps(text)


def read_targets(lines):
    """JOB<TAB>INSTANCE<TAB>HOST:PORT lines (deploy/metrics.sh's metrics_targets)."""
    targets = []
    for n, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line:
            continue
        parts = line.split("\t")
        if len(parts) != 3 or not re.fullmatch(r"[^\s:]+:[0-9]+", parts[2]):
            raise ValueError(f"target line {n}: expected JOB<TAB>INSTANCE<TAB>HOST:PORT, got {line!r}")
        job, instance, address = parts
        targets.append({"job": job, "instance": instance, "address": address, "url": f"http://{address}/metrics"})
    return targets


def prometheus_yml(targets=(), interval="15s", rules=(), scrape_configs=None, header=None):
    """prometheus.yml: one scrape config per job with one static config per
    process (its own instance label), or the scrape_configs given as YAML
    lines (Kubernetes' service discovery); rule_files and an
    evaluation_interval when there are rules."""
    out = [header or "# Written by deploy/stack metrics (deploy/quaddeploy/generate.py): the scrape targets of this Quad stack.",
           "global:", f"  scrape_interval: {interval}"]
    if rules:
        out.append(f"  evaluation_interval: {interval}")
        out.append("rule_files:")
        out += [f"  - {_quoted(r)}" for r in rules]
    out.append("scrape_configs:")
    if scrape_configs is not None:
        out += scrape_configs
    jobs = {}
    for t in targets:
        jobs.setdefault(t["job"], []).append(t)
    for job, members in jobs.items():
        out += [f"  - job_name: {_quoted(job)}", "    metrics_path: /metrics", "    static_configs:"]
        for t in members:
            out += [f"      - targets: [{_quoted(t['address'])}]", "        labels:", f"          instance: {_quoted(t['instance'])}"]
    return "\n".join(out) + "\n"


def _write(path, text):
    new = path + ".new"
    with open(new, "w") as f:
        f.write(text)
    os.replace(new, path)


# ------------------------------------------------------------------- the CLI

def _main(argv):
    import argparse
    ap = cli.Parser(prog="python3 -m quaddeploy.generate", description=__doc__.split("\n\n")[0],
                    formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="what", required=True, parser_class=cli.Parser)
    p = sub.add_parser("supervisord", help="a stack's supervisord.conf")
    p.add_argument("--home", required=True)
    p = sub.add_parser("paths", help="where supervisord's files are, as shell assignments (SUP_DIR=...; deploy/supervise.sh)")
    p.add_argument("--home", required=True)
    p = sub.add_parser("program", help="one [program:NAME] of supervisord")
    p.add_argument("name")
    p.add_argument("--command", required=True, help="the program's launcher")
    p.add_argument("--priority", required=True, help="start order (lower first), stop order reversed")
    p.add_argument("--directory", required=True)
    p.add_argument("--user")
    p.add_argument("--signal", default="TERM")
    p = sub.add_parser("hosts", help="the --hosts table: NAME ADDRESS a line")
    p.add_argument("--subnet", required=True, help="10.77.K")
    p.add_argument("--brokers", type=int, default=services_list.brokers()["default"])
    p = sub.add_parser("prometheus", help="prometheus.yml from JOB<TAB>INSTANCE<TAB>HOST:PORT lines on stdin")
    p.add_argument("--out", required=True, help="where prometheus.yml goes")
    p.add_argument("--json", action="store_true", help="print the targets as JSON")
    p.add_argument("--rules", action="append", default=[], metavar="GLOB",
                   help="a rule file (or glob) for rule_files, with evaluation_interval = --interval")
    p.add_argument("--interval", default="15s", help="scrape_interval (default 15s)")
    p.add_argument("--quiet", action="store_true", help="print nothing")
    p = sub.add_parser("manifests", help="the Kubernetes manifests (deploy/kube manifests)")
    p.add_argument("dir")
    a = ap.parse_args(argv)
    try:
        if a.what == "supervisord":
            sys.stdout.write(supervisord(a.home))
        elif a.what == "paths":
            import shlex
            for key, path in supervisor_paths(a.home).items():
                print(f"SUP_{key.upper()}={shlex.quote(path)}")
        elif a.what == "program":
            sys.stdout.write(program(a.name, a.command, a.priority, a.directory, a.user, a.signal))
        elif a.what == "hosts":
            most = services_list.brokers()["max"]
            if not 1 <= a.brokers <= most:
                raise ValueError(f"brokers must be from 1 to {most}, got {a.brokers}")
            for name, address in hosts(a.subnet, a.brokers).items():
                print(name, address)
        elif a.what == "prometheus":
            return _prometheus(a)
        elif a.what == "manifests":
            from quaddeploy import kube
            kube.cmd_manifests(a.dir)
    except (ValueError, services_list.ServicesError) as e:
        sys.stderr.write(f"generate: {e}\n")
        return 1
    return 0


def _prometheus(a):
    targets = read_targets(sys.stdin)
    _write(a.out, prometheus_yml(targets, a.interval, a.rules))
    if a.quiet:
        return 0
    if a.json:
        print(json.dumps({"prometheus_yml": a.out, "targets": targets}, indent=2))
        return 0
    wj = max([len("JOB")] + [len(t["job"]) for t in targets])
    wi = max([len("INSTANCE")] + [len(t["instance"]) for t in targets])
    print(f"{'JOB':<{wj}}  {'INSTANCE':<{wi}}  URL")
    for t in targets:
        print(f"{t['job']:<{wj}}  {t['instance']:<{wi}}  {t['url']}")
    print(f"wrote {a.out} ({len(targets)} targets)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
