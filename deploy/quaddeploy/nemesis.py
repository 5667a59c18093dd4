"""The nemesis schedule of `deploy/chaos run`: which fault, when, on whom,
drawn from the seed before anything runs, one line a fault ("T KIND ARGS",
T in seconds from the start of the campus day), sorted by T (stable).

deploy/chaos calls it and runs the lines:

    python3 -m quaddeploy.nemesis --seed 5 --duration 90 --running "accounts catalog ..." \\
        --partition-every 20 --kill-every 30 ...

It was a loop in deploy/chaos on bash's $RANDOM; BashRandom draws the same
numbers, so a seed gives the same schedule as before (the kinds added later
still draw after the first ones). The services each kind may hit are the
running ones whose faults field in deploy/stack.json names it, in start order
(the clock fault's in the order it drew them before: CLOCK_DRAW_ORDER).
"""

import argparse
try:
    from . import cli
except ImportError:  # run as a script, not as quaddeploy.X
    import cli  # type: ignore[no-redef]
import sys

from . import services as services_list


class BashRandom:
    """bash 5.1+'s $RANDOM after RANDOM=seed: Park-Miller's minimal standard
    generator, its 32-bit state folded to 15 bits, never the same number
    twice in a row (variables.c: intrand32, brand, get_random_number)."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFF
        self.last = 0

    def _draw(self):
        x = self.state or 123459876
        h = x // 127773
        t = 16807 * (x - 127773 * h) - 2836 * h
        self.state = t + 0x7FFFFFFF if t < 0 else t
        return ((self.state >> 16) ^ (self.state & 0xFFFF)) & 0x7FFF

    def next(self):
        rv = self._draw()
        while rv == self.last:
            rv = self._draw()
        self.last = rv
        return rv


def schedule(seed, duration, targets, brokers=1, partition_every=0, kill_every=0, pause_every=0, broker_every=0,
             pg_every=0, edge_every=0, clock_every=0, max_skew=90, scale_service="none", scale_to=0,
             disk_every=0, phones=1):
    """The lines of the schedule. targets maps a fault kind (partition, kill,
    pause, pg, clock) to the services it may hit, in the order drawn from."""
    r = BashRandom(seed)
    quiet = duration - 5  # every fault ends 5 s before the day does
    sched = []

    def pick(kind):
        names = targets.get(kind) or []
        if not names:
            raise ValueError("no running service takes the %s fault (deploy/stack.json, faults field)" % kind)
        return names[r.next() % len(names)]

    if partition_every > 0:
        k = 0
        t = 5
        while t + 3 < quiet:
            d = 3 + r.next() % 6
            if t + d > quiet:
                d = quiet - t
            if k % 2 == 0:
                a, b = "phones", "broker"
            else:
                a, b = "broker", pick("partition")
            sched += ["%d partition %s %s" % (t, a, b), "%d heal %s %s" % (t + d, a, b)]
            k += 1
            t += partition_every
    if kill_every > 0:
        for t in range(10, quiet, kill_every):
            sched.append("%d kill %s" % (t, pick("kill")))
    if pause_every > 0:
        t = 15
        while t + 2 < quiet:
            d = 2 + r.next() % 4
            if t + d > quiet:
                d = quiet - t
            sched.append("%d pause %s %d" % (t, pick("pause"), d))
            t += pause_every
    if scale_service != "none" and scale_to > 1:
        sched += ["%d scale %s %d" % (duration // 3, scale_service, scale_to), "%d scale %s 1" % (2 * duration // 3, scale_service)]
    # The kinds added later draw after the first ones: a seed's partitions,
    # kills and pauses are the same as before they came.
    if broker_every > 0:
        k = 0
        t = 20
        while t + 3 < quiet:
            b = 1 + r.next() % brokers
            if k % 2 == 0:
                sched.append("%d broker-kill %d" % (t, b))
            else:
                d = 3 + r.next() % 6
                if t + d > quiet:
                    d = quiet - t
                host = "broker-%d" % b
                sched += ["%d broker-partition phones %s" % (t, host), "%d broker-heal phones %s" % (t + d, host)]
            k += 1
            t += broker_every
    if pg_every > 0:
        k = 0
        t = 30
        while t + 3 < quiet:
            if k % 2 == 0:
                sched.append("%d pg-restart" % t)
            else:
                d = 3 + r.next() % 6
                if t + d > quiet:
                    d = quiet - t
                a = pick("pg")
                sched += ["%d pg-partition %s pg" % (t, a), "%d pg-heal %s pg" % (t + d, a)]
            k += 1
            t += pg_every
    if edge_every > 0:
        t = 35
        while t + 20 <= duration:
            sched.append("%d edge-kill" % t)
            t += edge_every
    if clock_every > 0 and targets.get("clock"):
        t = 25
        while t + 5 < quiet:
            a = pick("clock")
            d = 30 + r.next() % (max_skew - 29)
            d = -d if r.next() % 2 else d
            sched.append("%d clock-skew %s %+d" % (t, a, d))
            d = 15 + r.next() % 16
            if t + d > quiet:
                d = quiet - t
            sched.append("%d clock-restore %s" % (t + d, a))
            t += clock_every
    if disk_every > 0:
        # Storage, in turn: a phone's file loses its last writes (a
        # snapshot, then 5 to 15 s later the file put back as it was: the
        # phone K of `phones`, by its place among the phone files); host
        # pg's disk full for 3 to 8 s, then emptied; a phone's file damaged
        # (pages overwritten, cut short, or all garbage); quad-edge killed
        # inside a phone's next commit (not in the last 20 s of the day, as
        # the edge kind).
        k = 0
        t = 40
        while t + 5 < quiet:
            if k % 4 == 3:
                p = 1 + r.next() % max(1, phones)
                if t + 20 <= duration:
                    sched.append("%d phone-crash %d" % (t, p))
            elif k % 4 == 2:
                p = 1 + r.next() % max(1, phones)
                sched.append("%d phone-%s %d" % (t, ("corrupt", "truncate", "garbage")[r.next() % 3], p))
            elif k % 4 == 0:
                p = 1 + r.next() % max(1, phones)
                d = 5 + r.next() % 11
                if t + d > quiet:
                    d = quiet - t
                sched += ["%d phone-snapshot %d" % (t, p), "%d phone-rollback %d" % (t + d, p)]
            else:
                d = 3 + r.next() % 6
                if t + d > quiet:
                    d = quiet - t
                sched += ["%d disk-full pg" % t, "%d disk-free pg" % (t + d)]
            k += 1
            t += disk_every
    # sort -n -s -k1,1: by time, stable.
    return sorted(sched, key=lambda line: int(line.split(" ", 1)[0]))


# The clock fault drew from "reservations catalog orders" when deploy/chaos
# listed them itself: drawn in that order (the others after, in start order),
# a seed skews the same service as before. Which services take the fault is
# the file's to say; this is only the order of the draw.
CLOCK_DRAW_ORDER = ("reservations", "catalog", "orders")


def targets_of(running, file=None):
    """Each fault kind's services: those of running (names) whose faults
    column names the kind, in start order (clock: CLOCK_DRAW_ORDER first)."""
    listed = services_list.load(file)
    running = set(running)
    out = {kind: [s.name for s in listed.values() if s.name in running and kind in s.faults]
           for kind in services_list.FAULTS}
    first = [s for s in CLOCK_DRAW_ORDER if s in out["clock"]]
    out["clock"] = first + [s for s in out["clock"] if s not in first]
    return out


def _main(argv):
    ap = cli.Parser(prog="quaddeploy.nemesis", description="the nemesis schedule of deploy/chaos run")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--duration", type=int, required=True)
    ap.add_argument("--running", default="", help="the running services, space-separated")
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--phones", type=int, default=1, help="the phones of the day (the disk fault picks one)")
    for kind in ("partition", "kill", "pause", "broker", "pg", "edge", "clock", "disk"):
        ap.add_argument("--%s-every" % kind, type=int, default=0)
    ap.add_argument("--max-skew", type=int, default=90)
    ap.add_argument("--scale-service", default="none")
    ap.add_argument("--scale-to", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        lines = schedule(a.seed, a.duration, targets_of(a.running.split()), brokers=a.brokers,
                         partition_every=a.partition_every, kill_every=a.kill_every, pause_every=a.pause_every,
                         broker_every=a.broker_every, pg_every=a.pg_every, edge_every=a.edge_every,
                         clock_every=a.clock_every, max_skew=a.max_skew, scale_service=a.scale_service, scale_to=a.scale_to,
                         disk_every=a.disk_every, phones=a.phones)
    except (ValueError, services_list.ServicesError) as e:
        print("nemesis: error: %s" % e, file=sys.stderr)
        return 1
    # One line even when empty: the schedule bash's `printf '%s\n' "${sched[@]}" | sort` made.
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
