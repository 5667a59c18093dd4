"""A campus of many phones over several quad-edge processes (deploy/campus):
the plan (how many processes, their phones, seeds and prefixes), the
machine's limits checked before anything starts, the processes' progress
lines read, and their reports merged into one.

The merge sums what counts (phones, actions by type and outcome, reads,
telemetry, news, rentals, ...), keeps the largest of what is a duration or a
peak (the end-of-day drain, the day's length), and takes percentiles from the
processes' histograms (the report's ``histograms``: counts by value), which
makes them exact. Where a process's report has no histogram, the merged
percentile is an upper bound: the largest of the processes' own (at most 5%
of all samples lie above the largest p95), and the report says so in
``campus.percentiles``.
"""

import json
import os
import re
import resource

# quad-edge takes 1 to 1000 phones (--phones).
MAX_PER_PROCESS = 1000
# What one phone costs, by default: 1,000 phones of quad-edge held 1,059
# MiB resident at the end of a 120 s day at --speed 1 with 2,000 phones on
# the stack, 1,786 MiB with 5,000 (2026-12-05: queues that grow while the
# broker lags, SQLite's cache and WAL index, the pictures' memory cache),
# so 2 MiB a phone; the process itself (runtime, ZeroMQ's threads).
PHONE_MEMORY_KIB = 2048
PROCESS_MEMORY_KIB = 64 * 1024
# Open files of one phone: its SQLite file with -wal and -shm, its two
# sockets (each a mailbox and a connection): 5,664 descriptors for 1,000
# phones (2026-12-05), with room to spare; and of the process.
FDS_PER_PHONE = 8
FDS_PER_PROCESS = 64
# A phone's files on disk (SQLite, keychain, pictures cached).
PHONE_DISK_KIB = 1024
# The campus's processes get seeds (S * SEED_STEP + K) mod 2^31-1, K from 1.
SEED_STEP = 10007


class LimitError(Exception):
    """The machine cannot give what the campus needs; the message names the
    limit, the figure needed and the figure there is."""


def plan(phones, per_process):
    """The phones of each process: as few processes as --per-process allows,
    sizes differing by at most one (30 at 12 a process: 10, 10, 10)."""
    if phones < 1:
        raise ValueError(f"--phones must be at least 1, got {phones}")
    if not 1 <= per_process <= MAX_PER_PROCESS:
        raise ValueError(f"--per-process must be from 1 to {MAX_PER_PROCESS} (quad-edge's --phones), got {per_process}")
    n = -(-phones // per_process)
    base, extra = divmod(phones, n)
    return [base + (1 if k < extra else 0) for k in range(n)]


def seed_of(seed, k):
    """Process k's seed (k from 1), distinct for every k below SEED_STEP."""
    return (seed * SEED_STEP + k) % (2**31 - 1)


def name_of(k, processes):
    """Process k's name, p01 ... (the width of the largest)."""
    return "p" + str(k).zfill(max(2, len(str(processes))))


def meminfo_kib(path="/proc/meminfo"):
    """MemAvailable (or MemFree) in KiB."""
    found = {}
    with open(path) as f:
        for line in f:
            key, _, rest = line.partition(":")
            found[key] = int(rest.split()[0])
    return found.get("MemAvailable", found.get("MemFree", 0))


def check_limits(sizes, folder, phone_kib=PHONE_MEMORY_KIB, process_kib=PROCESS_MEMORY_KIB,
                 fds_per_phone=FDS_PER_PHONE, phone_disk_kib=PHONE_DISK_KIB, available_kib=None, nofile_hard=None,
                 disk_free_kib=None, file_max=None):
    """What the campus needs against what the machine has: memory (all the
    processes), open files (each process raises its soft RLIMIT_NOFILE to
    the hard one; the system's file-max for all), disk for the phones'
    files. Returns the figures as a dict; raises LimitError naming the first
    limit that does not fit."""
    phones = sum(sizes)
    need_kib = phones * phone_kib + len(sizes) * process_kib
    if available_kib is None:
        available_kib = meminfo_kib()
    if nofile_hard is None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        nofile_hard = hard if hard != resource.RLIM_INFINITY else 1 << 30
    if disk_free_kib is None:
        probe = folder
        while probe and not os.path.exists(probe):
            probe = os.path.dirname(probe)
        st = os.statvfs(probe or "/")
        disk_free_kib = st.f_bavail * st.f_frsize // 1024
    if file_max is None:
        try:
            with open("/proc/sys/fs/file-max") as f:
                file_max = int(f.read().split()[0])
        except (OSError, ValueError):
            file_max = 1 << 62
    fds_each = max(sizes) * fds_per_phone + FDS_PER_PROCESS
    fds_all = phones * fds_per_phone + len(sizes) * FDS_PER_PROCESS
    disk_kib = phones * phone_disk_kib
    figures = {
        "memory_needed_mib": round(need_kib / 1024), "memory_available_mib": round(available_kib / 1024),
        "fds_per_process_needed": fds_each, "rlimit_nofile_hard": nofile_hard,
        "fds_needed": fds_all, "file_max": file_max,
        "disk_needed_mib": round(disk_kib / 1024), "disk_free_mib": round(disk_free_kib / 1024),
    }
    if need_kib > available_kib:
        raise LimitError(
            f"memory: {phones:,} phones over {len(sizes):,} processes need about {need_kib / 1048576:.1f} GiB "
            f"({phone_kib} KiB a phone, --phone-memory-kib, and {process_kib // 1024} MiB a process), and the machine has "
            f"{available_kib / 1048576:.1f} GiB available (MemAvailable in /proc/meminfo): run fewer phones")
    if fds_each > nofile_hard:
        raise LimitError(
            f"open files: a process of {max(sizes):,} phones needs about {fds_each:,} descriptors ({fds_per_phone} a phone, "
            f"--fds-per-phone), above RLIMIT_NOFILE's hard limit {nofile_hard:,}: lower --per-process to "
            f"{max(1, (nofile_hard - FDS_PER_PROCESS) // fds_per_phone)} or raise the limit (ulimit -Hn, limits.conf)")
    if fds_all > file_max:
        raise LimitError(
            f"open files: {phones:,} phones need about {fds_all:,} descriptors in all, above the system's "
            f"/proc/sys/fs/file-max {file_max:,}: run fewer phones or raise fs.file-max")
    if disk_kib > disk_free_kib:
        raise LimitError(
            f"disk: {phones:,} phones' files need about {disk_kib / 1024:,.0f} MiB ({phone_disk_kib} KiB a phone) in "
            f"{folder}, which has {disk_free_kib / 1024:,.0f} MiB free: choose another --dir or run fewer phones")
    return figures


# ---------------------------------------------------------------- progress

SIGNING = re.compile(r"^campus signing in (\d+) s · (\d+)/(\d+) phones have a session")
DAY = re.compile(r"^campus (day|draining) (\S+)[^·]*· phones (\d+) \(online (\d+)\) · actions (\d+): done (\d+), rejected (\d+), "
                 r"pending (\d+)(?: · telemetry queued (\d+))?")


def parse_progress(line):
    """A quad-edge run progress line as a dict (phase signing, day or
    draining, with its figures), or None for any other line."""
    m = SIGNING.match(line)
    if m:
        return {"phase": "signing", "seconds": int(m[1]), "sessions": int(m[2]), "phones": int(m[3])}
    m = DAY.match(line)
    if m:
        return {"phase": "day" if m[1] == "day" else "draining", "clock": m[2], "phones": int(m[3]), "online": int(m[4]),
                "created": int(m[5]), "done": int(m[6]), "rejected": int(m[7]), "pending": int(m[8]),
                "telemetry": int(m[9] or 0)}
    return None


def progress_line(elapsed, states):
    """One line for the whole campus, from each process's last progress
    (states: name -> {"progress": dict or None, "exit": code or None})."""
    phases = {"waiting": 0, "starting": 0, "signing": 0, "day": 0, "draining": 0, "exited": 0}
    sessions = phones_signing = 0
    a = {"created": 0, "done": 0, "rejected": 0, "pending": 0, "telemetry": 0, "online": 0, "phones": 0}
    for s in states.values():
        p = s.get("progress")
        if s.get("waiting"):
            phases["waiting"] += 1
        elif s.get("exit") is not None:
            phases["exited"] += 1
        elif p is None:
            phases["starting"] += 1
        else:
            phases[p["phase"]] += 1
        if p is None:
            continue
        if p["phase"] == "signing":
            sessions += p["sessions"]
            phones_signing += p["phones"]
        else:
            for k in a:
                a[k] += p.get(k, 0)
    parts = [f"campus {elapsed:.0f} s", f"processes: {len(states) - phases['exited'] - phases['waiting']} running"
             + "".join(f", {n} {k}" for k, n in phases.items() if n and k not in ("exited", "waiting"))
             + (f", {phases['waiting']} not started yet" if phases["waiting"] else "")
             + (f", {phases['exited']} exited" if phases["exited"] else "")]
    if phones_signing:
        parts.append(f"signing in: {sessions:,}/{phones_signing:,} phones have a session")
    if a["phones"]:
        parts.append(f"in the day: {a['phones']:,} phones ({a['online']:,} online), actions {a['created']:,}: done {a['done']:,}, "
                     f"rejected {a['rejected']:,}, queued {a['pending']:,} · telemetry queued {a['telemetry']:,}")
    return " · ".join(parts)


# ---------------------------------------------------------------- merge

PERCENTILE = re.compile(r"^(p\d+|max)(_ms)?$")
# The report's percentiles that its histograms stand behind: (path to the
# percentiles' object, histogram name, the keys of its median, p95 and max).
HISTOGRAMMED = [
    (("drain", "after_reconnect_ms"), "drain_after_reconnect_ms", ("p50", "p95", "max")),
    (("drain", "without_session_ms"), "drain_without_session_ms", ("p50", "p95", "max")),
    (("drain", "connect_ms"), "drain_connect_ms", ("p50", "p95", "max")),
    (("live", "latency_ms"), "live_latency_ms", ("p50", "p95", "max")),
    (("live", "news", "latency_ms"), "news_latency_ms", ("p50", "p95", "max")),
    (("sign_in_before_day",), "sign_in_ms", ("p50_ms", "p95_ms", "max_ms")),
]


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def merge_values(key, values, notes, path):
    """The generic merge of one key's values across the processes' reports:
    numbers summed, durations (…_ms, ms) and peaks (max) the largest,
    percentiles the largest (an upper bound, noted), objects key by key,
    lists joined, booleans all true."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    first = present[0]
    if isinstance(first, bool):
        return all(bool(v) for v in present)
    if is_number(first):
        nums = [v for v in present if is_number(v)]
        if key == "min":
            return min(nums)
        if PERCENTILE.match(key) or key == "ms" or key.endswith("_ms"):
            if PERCENTILE.match(key) and key != "max" and len(nums) > 1:
                notes.add("/".join(path))
            return max(nums)
        total = sum(nums)
        return round(total, 6) if isinstance(total, float) else total
    if isinstance(first, dict):
        keys = []
        for v in present:
            if isinstance(v, dict):
                keys += [k for k in v if k not in keys]
        return {k: merge_values(k, [v.get(k) if isinstance(v, dict) else None for v in present], notes, path + (k,))
                for k in keys}
    if isinstance(first, list):
        return [x for v in present if isinstance(v, list) for x in v]
    return first if all(v == first for v in present) else present


def histogram_merge(hists):
    """Counts by value added up."""
    total = {}
    for h in hists:
        for k, n in (h or {}).items():
            total[int(k)] = total.get(int(k), 0) + int(n)
    return total


def percentile(counts, q):
    """The q-th percentile of samples given as {value: count}, as quad-edge
    takes it from a sorted list: the element at min(n - 1, floor(n * q))."""
    n = sum(counts.values())
    if n == 0:
        return None
    index = min(n - 1, int(n * q))
    seen = 0
    for v in sorted(counts):
        seen += counts[v]
        if seen > index:
            return v
    return max(counts)


def pattern(reason):
    """A refusal's message with its particulars blanked (as Report.pattern)."""
    return " ".join("…" if any(c.isdigit() for c in w) else w for w in (reason or "").split(" "))


def merge_reasons(lists, extra=("offline",)):
    """Refusals by type, code and reason (particulars blanked), counted."""
    found = {}
    for lst in lists:
        for x in lst or []:
            key = (x.get("type"), x.get("code"), pattern(x.get("reason")))
            e = found.setdefault(key, dict(x, count=0, **{k: 0 for k in extra if k in x}))
            e["count"] += x.get("count", 0)
            for k in extra:
                if k in x and k in e:
                    e[k] += x.get(k, 0)
    return sorted(found.values(), key=lambda e: (-e["count"], e.get("type") or ""))


def get(d, path):
    for k in path:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def merge(reports, seed=None):
    """The processes' reports (a list of dicts) as one."""
    notes = set()
    keys = []
    for r in reports:
        keys += [k for k in r if k not in keys]
    merged = {k: merge_values(k, [r.get(k) for r in reports], notes, (k,)) for k in keys}
    # What is not a sum.
    merged["rejected"] = merge_reasons([r.get("rejected") for r in reports])
    if "cart_edits" in merged:
        merged["cart_edits"]["rejected_reasons"] = merge_reasons([get(r, ("cart_edits", "rejected_reasons")) for r in reports])
    if "max_queue" in merged:
        # Each process's busiest phone; all phones at once is at most the sum
        # of each process's peak (the peaks need not coincide).
        merged["max_queue"]["phone"] = max(get(r, ("max_queue", "phone")) or 0 for r in reports)
    if "driver_answers" in merged:
        merged["driver_answers"]["answers"] = max(get(r, ("driver_answers", "answers")) or 0 for r in reports)
    if "resumed" in merged:
        merged["resumed"]["restarts"] = max(get(r, ("resumed", "restarts")) or 0 for r in reports)
        for k in ("day_started_ms", "this_run_started_ms"):
            vals = [get(r, ("resumed", k)) for r in reports if get(r, ("resumed", k)) is not None]
            if vals:
                merged["resumed"][k] = min(vals)
        merged["resumed"]["since_this_run"] = (reports[0].get("resumed") or {}).get("since_this_run", [])
    for k in ("speed",):
        if k in merged:
            merged[k] = reports[0].get(k)
    if seed is not None:
        merged["seed"] = seed
    images = merged.get("images")
    if isinstance(images, dict) and isinstance(images.get("hits"), dict):
        hits = sum(v for v in images["hits"].values() if is_number(v))
        misses = images.get("misses") or 0
        images["hit_ratio"] = None if hits + misses == 0 else round(hits / (hits + misses), 3)
    # Percentiles from the histograms, when every process has them.
    exact = []
    for path, name, (k50, k95, kmax) in HISTOGRAMMED:
        target = get(merged, path)
        if not isinstance(target, dict):
            continue
        hists = [get(r, ("histograms", name)) for r in reports]
        if any(h is None for h in hists):
            continue
        counts = histogram_merge(hists)
        for q, key in ((0.5, k50), (0.95, k95)):
            if key in target:
                target[key] = percentile(counts, q)
                notes.discard("/".join(path + (key,)))
        if kmax in target:
            target[kmax] = max(counts) if counts else None
        exact.append("/".join(path))
    a = merged.get("actions") or {}
    parts_accounted = all(r.get("accounted") is True for r in reports)
    sums = (a.get("created") == (a.get("done") or 0) + (a.get("rejected") or 0) + (a.get("pending") or 0))
    final = all(r.get("final") is True for r in reports)
    merged["final"] = final
    merged["accounted"] = bool(parts_accounted and sums and (not final or a.get("pending") == 0))
    merged["percentiles"] = {
        "exact": exact,
        "upper_bound": sorted(notes),
        "how": "exact: from the processes' histograms; upper_bound: the largest of the processes' own (no histogram in their reports)",
    }
    return merged


def resource_lines(when, res):
    """The peaks sampled, a line a group of processes: each one's peak, and
    the group's together (the sum at one sample) where it has several."""
    lines = []
    others = []
    for name in sorted(res, key=lambda n: (n != "quad-edge", n != "brokers", n)):
        x = res[name]
        if name.endswith("-total"):
            continue
        if name not in ("quad-edge", "brokers", "quad-accounts"):
            others.append(x)
            continue
        n = len(x.get("by_process") or {})
        t = res.get(name + "-total")

        def together(k, unit):
            return f" ({t[k]:,.0f}{unit} together)" if t else ""

        lines.append(f"{when}, {name} ({n} process{'es' if n != 1 else ''}): peak CPU {x['cpu_percent_peak']:.0f}% of a core a process"
                     f"{together('cpu_percent_peak', '%')}, peak RSS {x['rss_mib_peak']:,.0f} MiB a process{together('rss_mib_peak', ' MiB')}, "
                     f"{x['fds_peak']:,} descriptors ({x.get('sockets_peak', 0):,} sockets), {x['threads_peak']} threads; "
                     f"{x.get('cpu_seconds', 0):,.0f} CPU seconds in all.")
    if others:
        n = sum(len(x.get("by_process") or {}) for x in others)
        lines.append(f"{when}, the other services ({n} processes): peak CPU at most {max(x['cpu_percent_peak'] for x in others):.0f}% of a core, "
                     f"peak RSS at most {max(x['rss_mib_peak'] for x in others):,.0f} MiB; "
                     f"{sum(x.get('cpu_seconds', 0) for x in others):,.0f} CPU seconds in all.")
    return lines


def sign_in_figures(sb, pc):
    """'; a phone's sign-in p50 .., p95 .., N answers 429' when the report has them."""
    if sb.get("p50_ms") is None and sb.get("rate_limited") is None:
        return ""
    bound = " (upper bounds)" if any(u.startswith("sign_in_before_day") for u in pc.get("upper_bound", [])) else ""
    return (f"; a phone's sign-in p50 {fmt_ms(sb.get('p50_ms'))}, p95 {fmt_ms(sb.get('p95_ms'))}{bound}, "
            f"{sb.get('rate_limited', 0):,} answers 429, {sb.get('failed_tries', 0):,} tries failed otherwise")


def fmt_ms(v):
    return "-" if v is None else f"{v:,} ms"


def words(r):
    """The merged report in words."""
    c = r.get("campus") or {}
    lines = []
    sizes = c.get("phones_per_process") or []
    each = (f"{sizes[0]:,} each" if len(set(sizes)) == 1 else f"{min(sizes):,} to {max(sizes):,} each") if sizes else ""
    lines.append(f"Campus: {r.get('phones', 0):,} phones over {r.get('processes', 0)} quad-edge processes ({each}), seed {c.get('seed')}, "
                 f"speed {r.get('speed')}x, {(r.get('duration_ms') or 0) / 1000:.0f} s day; wall time {c.get('wall_s', 0):.0f} s; "
                 f"{r.get('activities', 0):,} activities.")
    pc = r.get("percentiles") or {}
    sp = c.get("sign_in_phase")
    if sp:
        lines.append(f"Sign-in apart, before every day: {sp.get('phones_with_session', 0):,} of {sp.get('phones', 0):,} new phones "
                     f"signed in, in {sp.get('wall_s', 0):.0f} s (wall, {sp.get('processes')} processes at once; "
                     f"{sp.get('phones_per_second') or 0:.1f} phones a second)"
                     + sign_in_figures(sp.get("sign_in_before_day") or {}, sp.get("percentiles") or {}) + ".")
    sb = r.get("sign_in_before_day") or {}
    if sb:
        lines.append(f"Sign-in at the day's start: {sb.get('phones_with_session', 0):,} of {r.get('phones', 0):,} phones had a session; "
                     f"the slowest process took {fmt_ms(sb.get('ms'))}" + sign_in_figures(sb, pc) + ".")
    a = r.get("actions") or {}
    lines.append(f"Actions: {a.get('created', 0):,} made; {a.get('done', 0):,} done, {a.get('rejected', 0):,} rejected with a reason, "
                 f"{a.get('pending', 0):,} still pending.")
    d = r.get("drain") or {}
    after = d.get("after_reconnect_ms") or {}

    def how(path):
        bound = any(u.startswith(path) for u in pc.get("upper_bound", []))
        return " (an upper bound: the largest of the processes')" if bound else ""

    if after.get("count"):
        lines.append(f"Drain after reconnect: {after['count']:,} reconnects with a queue; median {fmt_ms(after.get('p50'))}, "
                     f"p95 {fmt_ms(after.get('p95'))}, max {fmt_ms(after.get('max'))}{how('drain/after_reconnect_ms')}.")
        connect = d.get("connect_ms") or {}
        if connect.get("count"):
            lines.append(f"Of it, the new connection (TCP and CURVE handshake, radio on to the first action on the wire): "
                         f"median {fmt_ms(connect.get('p50'))}, p95 {fmt_ms(connect.get('p95'))}{how('drain/connect_ms')}.")
    if d.get("end_of_day_ms") is not None:
        lines.append(f"End of day: outboxes drained in {fmt_ms(d.get('end_of_day_ms'))} (the slowest process), "
                     f"{d.get('outbox_left', 0):,} actions left.")
    live = r.get("live") or {}
    if live.get("phones_with_feed"):
        lat = live.get("latency_ms") or {}
        news = live.get("news") or {}
        nl = news.get("latency_ms") or {}
        lines.append(f"Live updates: {live.get('received', 0):,} received by {live['phones_with_feed']:,} feeds, latency p50 "
                     f"{fmt_ms(lat.get('p50'))}, p95 {fmt_ms(lat.get('p95'))}{how('live/latency_ms')}; {live.get('applied', 0):,} applied.")
        lines.append(f"News by the feeds: {news.get('received', 0):,} received (latency p50 {fmt_ms(nl.get('p50'))}, p95 "
                     f"{fmt_ms(nl.get('p95'))}{how('live/news/latency_ms')}), {news.get('for_another_user', 0)} for another user.")
    n = r.get("notifications") or {}
    if n:
        lines.append(f"News delivered (the phones' files): {n.get('received', 0):,} received by {n.get('phones', 0):,} phones, "
                     f"{n.get('not_theirs', 0)} not theirs.")
    t = r.get("telemetry") or {}
    lines.append(f"Telemetry: {t.get('sent', 0):,} events sent; {t.get('accepted', 0):,} accepted, {t.get('duplicate', 0):,} duplicates, "
                 f"{t.get('rejected', 0):,} rejected, {t.get('queued', 0):,} still queued.")
    lines += resource_lines("The day", c.get("resources") or {})
    if sp and sp.get("resources"):
        lines += resource_lines("The sign-in", sp["resources"])
    for p in c.get("process_list") or []:
        if p.get("exit") != 0:
            lines.append(f"Process {p['name']} ({p['phones']} phones, seed {p['seed']}) exited {p.get('exit')}.")
    lines.append("Every action is accounted for." if r.get("accounted") else "NOT every action is accounted for.")
    bounds = pc.get("upper_bound") or []
    if bounds:
        lines.append("Percentiles given as upper bounds (the processes' reports had no histograms): " + ", ".join(bounds) + ".")
    return "\n".join(lines)


# ---------------------------------------------------------------- /proc

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_sample(pid):
    """(cpu seconds, rss KiB, open descriptors, threads, sockets among the
    descriptors) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] == "Z":
            return None
        cpu = (int(fields[11]) + int(fields[12])) / TICKS
        threads = int(fields[17])
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                    break
        fds = sockets = 0
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                fds += 1
                try:
                    sockets += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
                except OSError:
                    pass
        except OSError:
            pass
        return cpu, rss, fds, threads, sockets
    except (OSError, ValueError, IndexError):
        return None


class Watch:
    """Peaks of a set of processes, sampled now and then: CPU (% of one core
    over the interval), RSS, open descriptors, threads; each process and, per
    group, the group's sum at one sample."""

    def __init__(self):
        self.last = {}
        self.first = {}
        self.used = {}
        self.peaks = {}  # label -> dict
        self.group_peaks = {}

    def sample(self, groups, now):
        """groups: group name -> {label: pid}."""
        for group, members in groups.items():
            tot = {"cpu": 0.0, "rss": 0, "fds": 0, "threads": 0, "sockets": 0}
            for label, pid in members.items():
                s = proc_sample(pid)
                if s is None:
                    continue
                cpu, rss, fds, threads, sockets = s
                prev = self.last.get((label, pid))
                self.last[(label, pid)] = (now, cpu)
                first = self.first.setdefault((label, pid), cpu)
                pct = None
                if prev and now > prev[0]:
                    pct = 100.0 * (cpu - prev[1]) / (now - prev[0])
                p = self.peaks.setdefault(group, {}).setdefault(label, {"cpu": 0.0, "rss": 0, "fds": 0, "threads": 0, "cpu_s": 0.0,
                                                                        "sockets": 0})
                p["rss"], p["fds"], p["threads"] = max(p["rss"], rss), max(p["fds"], fds), max(p["threads"], threads)
                p["sockets"] = max(p["sockets"], sockets)
                # CPU used since the first sample, over every pid the label had.
                self.used[(label, pid)] = cpu - first
                p["cpu_s"] = sum(v for (lab, _), v in self.used.items() if lab == label)
                if pct is not None:
                    p["cpu"] = max(p["cpu"], pct)
                    tot["cpu"] += pct
                tot["rss"] += rss
                tot["fds"] += fds
                tot["threads"] += threads
                tot["sockets"] += sockets
            g = self.group_peaks.setdefault(group, {"cpu": 0.0, "rss": 0, "fds": 0, "threads": 0, "sockets": 0})
            for k in g:
                g[k] = max(g[k], tot[k])

    def summary(self):
        out = {}
        for group, labels in self.peaks.items():
            if not labels:
                continue
            per = list(labels.values())
            out[group] = {"cpu_percent_peak": round(max(p["cpu"] for p in per), 1),
                          "rss_mib_peak": round(max(p["rss"] for p in per) / 1024, 1),
                          "fds_peak": max(p["fds"] for p in per), "threads_peak": max(p["threads"] for p in per),
                          "sockets_peak": max(p["sockets"] for p in per),
                          "cpu_seconds": round(sum(p["cpu_s"] for p in per), 1),
                          "by_process": {k: {"cpu_percent_peak": round(p["cpu"], 1), "rss_mib_peak": round(p["rss"] / 1024, 1),
                                             "fds_peak": p["fds"], "sockets_peak": p["sockets"], "threads_peak": p["threads"],
                                             "cpu_seconds": round(p["cpu_s"], 1)}
                                         for k, p in sorted(labels.items())}}
            if len(per) > 1:
                g = self.group_peaks[group]
                out[group + "-total"] = {"cpu_percent_peak": round(g["cpu"], 1), "rss_mib_peak": round(g["rss"] / 1024, 1),
                                         "fds_peak": g["fds"], "sockets_peak": g["sockets"], "threads_peak": g["threads"]}
        return out


def stack_pids(home):
    """The running stack's processes from its pid files ($QUAD_HOME/run/*.pid):
    the brokers in group "brokers" (broker, broker-2, ...), each service's
    workers in a group of their program (quad-accounts: accounts.1, ...)."""
    groups = {}
    run = os.path.join(home, "run")
    try:
        names = sorted(os.listdir(run))
    except OSError:
        return groups
    for name in names:
        if not name.endswith(".pid"):
            continue
        try:
            with open(os.path.join(run, name)) as f:
                pid = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                program = os.path.basename(f.read().split(b"\0")[0].decode(errors="replace"))
        except OSError:
            continue
        if not program.startswith("quad-"):
            continue  # a stale pid file, its pid taken by another program
        label = name[:-4]  # broker, broker-2, catalog.1, ...
        group = "brokers" if program == "quad-broker" else program
        groups.setdefault(group, {})[label] = pid
    return groups


def dump(obj):
    return json.dumps(obj, indent=2, sort_keys=True)


__all__ = ["LimitError", "plan", "seed_of", "name_of", "check_limits", "parse_progress", "progress_line", "merge", "words",
           "percentile", "histogram_merge", "Watch", "stack_pids"]
