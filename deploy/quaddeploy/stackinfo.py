"""What deploy/stack, deploy/test and deploy/supervise.sh ask of a running
stack that bash cannot read well: JSON, /proc, HTTP and supervisord's
XML-RPC. Each is a subcommand, so no Python is written inside bash.

    python3 -m quaddeploy.stackinfo workers < services.json
        the broker's view (quadctl services --json on stdin), one line per
        registered worker: INSTANCE SERVED busy|idle PID
    python3 -m quaddeploy.stackinfo processes HOME PID
        the processes of the stack in HOME that are not of PID's session,
        by pid: PID PROGRAM
    python3 -m quaddeploy.stackinfo dashboard LOG AGE PASSWORD_FILE
        where the analytics worker whose log is LOG, started AGE seconds
        ago, serves the dashboard (nothing when it has not logged it)
    python3 -m quaddeploy.stackinfo ready URL
        exit 0 when URL answers 2xx within 2 s, 1 otherwise
    python3 -m quaddeploy.stackinfo supervised SOCKET
        every program of the supervisord on SOCKET (XML-RPC): NAME STATE
        PID UPTIME, PID and UPTIME "-" with no process; run it with the
        Python supervisorctl runs on (it has supervisor's modules)
    python3 -m quaddeploy.stackinfo digest LOG
        the lines of a test's log that say why it failed, then its end
        (at most 1,400 characters), for deploy/test's summary

Exit status: 0, 1 (the question failed), 64 (usage).
"""

import json
import os
import re
import sys
import time
import urllib.request

try:
    from . import cli
except ImportError:  # run as a script, not as quaddeploy.X
    import cli  # type: ignore[no-redef]


def workers(services):
    """(instance, served, busy|idle, pid) of each worker in a sys.services reply."""
    out = []
    for s in services.get("services", []):
        for w in s.get("workers", []):
            out.append((w.get("instance", "?"), w.get("served", "-"), "busy" if w.get("busy") else "idle", w.get("pid", "-")))
    return out


def processes(home, pid, proc="/proc"):
    """(pid, program) of each live process with QUAD_HOME=home in its
    environment or home in its command line, outside pid's session."""
    home_b = home.encode()
    wanted = b"QUAD_HOME=" + home_b
    mine = os.getsid(pid)
    out = []
    for entry in sorted((e for e in os.listdir(proc) if e.isdigit()), key=int):
        try:
            with open(f"{proc}/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b") ", 1)[1].split()
            if fields[0] == b"Z" or int(fields[3]) == mine:
                continue
            with open(f"{proc}/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"{proc}/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if wanted not in env and not any(home_b in a for a in argv):
                continue
        except (OSError, IndexError, ValueError):
            continue
        out.append((int(entry), os.path.basename(argv[0].decode(errors="replace")) or "?"))
    return out


def dashboard(lines, age_s, password_file, now=None):
    """The dashboard line of the last entry with "http" that the process,
    started age_s seconds ago, logged; None when there is none."""
    since = ((now if now is not None else time.time()) - age_s - 2) * 1000
    found = None
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "http" in entry and isinstance(entry.get("ts", 0), (int, float)) and entry.get("ts", 0) >= since:
            found = "%s/signin   (sign in as an admin; the admin password is in %s)" % (entry["http"], password_file)
    return found


def ready(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return 200 <= r.status < 300
    except (OSError, ValueError):
        return False


def supervised(socket_path):
    import xmlrpc.client
    from supervisor.xmlrpc import SupervisorTransport  # the Python supervisorctl runs on has it
    server = xmlrpc.client.ServerProxy("http://127.0.0.1", transport=SupervisorTransport(None, None, "unix://" + socket_path))
    out = []
    for p in server.supervisor.getAllProcessInfo():
        alive = p["pid"] and p["statename"] in ("STARTING", "RUNNING", "STOPPING")
        out.append((p["name"], p["statename"], p["pid"] if alive else "-", max(0, p["now"] - p["start"]) if alive else "-"))
    return out


# A test's own words of why first (its "error:" and "FAIL (step)" lines,
# which a pytest failure buries under its assertion's header), then the rest.
_MARKS = re.compile(r"FAIL|Error|error:|^E  |Traceback|timed out|still runs after|assert", re.I)
_FIRST = re.compile(r"error:|FAIL \(|: FAIL|timed out|still runs after|checker:")


def digest(lines, budget=1400):
    said = [l for l in lines if _FIRST.search(l)][:6]
    said += [l for l in lines if _MARKS.search(l) and l not in said][:8 - len(said)]
    tail = [l for l in lines[-8:] if l not in said]
    out, used = [], 0
    for l in said + ["..."] + tail:
        l = l if len(l) <= 220 else l[:217] + "..."
        if used + len(l) > budget:
            break
        out.append(l)
        used += len(l) + 1
    return out


def _main(argv):
    ap = cli.Parser(prog="python3 -m quaddeploy.stackinfo", description=__doc__.split("\n\n")[0],
                    formatter_class=__import__("argparse").RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    sub = ap.add_subparsers(dest="command", required=True, parser_class=cli.Parser)
    sub.add_parser("workers", help="the broker's workers, from quadctl services --json on stdin")
    p = sub.add_parser("processes", help="the stack's processes outside a session")
    p.add_argument("home")
    p.add_argument("pid", type=int)
    p = sub.add_parser("dashboard", help="where an analytics worker serves the dashboard")
    p.add_argument("log")
    p.add_argument("age", type=int)
    p.add_argument("password_file")
    p = sub.add_parser("ready", help="exit 0 when URL answers 2xx")
    p.add_argument("url")
    p = sub.add_parser("supervised", help="supervisord's programs, over XML-RPC")
    p.add_argument("socket")
    p = sub.add_parser("digest", help="why a test's log says it failed")
    p.add_argument("log")
    a = ap.parse_args(argv)
    if a.command == "workers":
        try:
            rows = workers(json.load(sys.stdin))
        except ValueError as e:
            sys.stderr.write(f"stackinfo: not a sys.services reply: {e}\n")
            return 1
        for row in rows:
            print(*row)
    elif a.command == "processes":
        for row in processes(a.home, a.pid):
            print(*row)
    elif a.command == "dashboard":
        try:
            with open(a.log, errors="replace") as f:
                line = dashboard(f, a.age, a.password_file)
        except OSError:
            return 1
        if line is None:
            return 1
        print(line)
    elif a.command == "ready":
        return 0 if ready(a.url) else 1
    elif a.command == "supervised":
        try:
            rows = supervised(a.socket)
        except Exception as e:  # noqa: BLE001 - no supervisord, or not this one: the caller says so
            sys.stderr.write(f"stackinfo: supervisord on {a.socket}: {e}\n")
            return 1
        for row in rows:
            print(*row)
    elif a.command == "digest":
        with open(a.log, errors="replace") as f:
            lines = f.read().splitlines()
        print("\n".join("  " + l for l in digest(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
