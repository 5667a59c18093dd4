"""The README and the docs run as written (issue 26, point 4; issue 29, point 4).

Runs the ```sh and ```console blocks of README.md and then of every page of
docs/ (in the order PAGES gives: each page goes on from what the pages before
it left), in order, in one bash process, as a new user would type them in one
terminal, against the stack that the README's own `deploy/quickstart` starts,
and checks what each page shows. A page without such blocks runs nothing; a
new page of docs/ runs without being named (PAGES' "docs/*"); a broken command
in any page fails the test, naming the page and the line.

Which blocks run
  Every ```sh and ```console block runs, unless a marker line (an HTML
  comment, invisible on GitHub) stands just before its opening fence:
    <!-- readme-test: skip (reason) -->              the block does not run
    <!-- readme-test: skip-command PREFIX (reason) --> its commands that
                                                       start with PREFIX do not
    <!-- readme-test: follow PREFIX SECONDS (reason) -->
        commands starting with PREFIX run until stopped (quadctl watch, a
        following `logs`): after SECONDS they get SIGINT, as from Ctrl-C;
        still running then, or exit 0, is a pass
    <!-- readme-test: fails PREFIX (reason) -->
        commands starting with PREFIX must exit non-zero (a refusal shown as
        text, not as a JSON error body)
    <!-- readme-test: timeout PREFIX SECONDS (reason) -->
        commands starting with PREFIX get SECONDS (default
        QUAD_README_COMMAND_TIMEOUT, 300) before they count as hung
    <!-- readme-test: files NAME[=BYTES]... (reason) -->
        before the block, the test writes a small PNG picture under each NAME
        in the working folder (a picture the reader has of their own), of
        BYTES bytes when given (the size the page shows)
  Several markers may stand one per line before a fence. Blocks without a
  language (diagrams) never run.

Commands and output
  In a ```sh block every line that is not blank or a comment starts a
  command. In a ```console block a line starting with `$ ` starts a command;
  the lines after it, up to the next `$ `, are what it prints. A command goes
  on over the next lines while bash finds it incomplete (an open quote, a
  trailing backslash). Each command runs in the same bash process (so eval,
  export and `&` jobs carry on, as in a terminal), with stdin from /dev/null,
  in a working folder of its own whose `deploy/` (and every other top-level
  entry) is the repository's. Every command must exit 0, except a console
  command whose shown output is an error body (a JSON object with `code` and
  a `status` of 400 or more): that one must exit non-zero and print it.

What is compared (output lines of console blocks; `  # ...` ends a comment)
  - A line starting with `{` or `[` is JSON in which `…` elides: `…` alone
    (a value, members, array items), `"01a2…"` (a string not compared) and
    `1796…` (a number not compared). Each field shown must exist in some
    JSON value the command printed (stdout or stderr), with the value shown;
    objects may have more fields; each element shown in an array must match
    some element of the printed array. Strings that are dates or times
    (`2026-12-04`, `2026-12-01T02:24:37Z`) are not compared either.
  - Any other line is compared word by word (whitespace-separated) with some
    line printed, in order (a line of `…` alone stands for lines not
    shown): a word holding a digit matches any word (times, sizes, ids,
    elided or not), except a word of exactly three digits (an HTTP status,
    compared); in a word holding `…` and no digit, `…` matches anything
    (`broker…` is `broker` or `broker-2`); every other word must be the
    same.
  - Values a reader copies: a command may name a value a page showed in
    an earlier output, elided (`"01a3…"`, `"04536bd5…"`) or whole but not
    compared (a trace id). The test substitutes the value
    that output actually printed, as the reader would copy theirs.
  - A campus day run with `quad-edge run ... --report FILE` must write FILE,
    and its report must account for every action (`accounted` true, no
    action pending, no outbox left).

Where it runs
  A free port base (the whole range base..base+310 free on 127.0.0.1, below
  the ephemeral ports; QUAD_README_PORT_BASE to choose one), QUAD_HOME in a temporary folder,
  binaries from QUAD_BIN_DIR when set (else deploy/stack builds
  .build/release if needed). QUAD_README=PATH runs another README (a broken
  copy, to see the test fail); QUAD_README_PAGES="docs/a.md docs/b.md" runs
  those pages after it instead of PAGES ("" the README alone). The stack is stopped at the end whatever
  happened; the temporary folder is kept when the test fails (its path is
  printed) and QUAD_README_KEEP=1 keeps it always.
"""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zlib
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = Path(os.environ.get("QUAD_README", ROOT / "README.md")).resolve()
# The pages whose commands run after the README's, in this order, in the same
# shell against the same stack: each goes on from what the ones before left
# (the stack the README's deploy/quickstart started, `eval "$(deploy/stack
# env)"`, Ana signed in, her orders). "docs/*" stands for every other page of
# docs/, by name. operations.md comes last: it ends with `deploy/stack down`.
PAGES = ["docs/quadctl.md", "docs/pictures.md", "docs/phones.md", "docs/protocol.md", "docs/security.md",
         "docs/chaos.md", "docs/kubernetes.md", "docs/*", "docs/operations.md"]
COMMAND_TIMEOUT = float(os.environ.get("QUAD_README_COMMAND_TIMEOUT", "300"))
ELL = "\u2026"  # …

# --------------------------------------------------------------- the README


class Command:
    def __init__(self, page, text, line, block_line, lang):
        self.page = page            # the page's name: README.md, docs/phones.md
        self.text = text            # as written (may span lines)
        self.line = line            # the page's line number of its first line
        self.block_line = block_line
        self.lang = lang
        self.expected = []          # (line number, text) printed, console only
        self.follow = None          # seconds, for a following command
        self.timeout = COMMAND_TIMEOUT
        self.skip = None            # reason
        self.fails = False          # must exit non-zero (marker `fails`)

    def __repr__(self):
        return f"{self.page}:{self.line}: {self.text}"


MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(.*?)\s*-->\s*$")


def incomplete(text):
    """True while bash would wait for more lines: an open quote or
    construct, or a trailing backslash."""
    if text.rstrip("\n").endswith("\\"):
        return True
    r = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
    return r.returncode != 0 and ("unexpected end of file" in r.stderr or "unexpected EOF" in r.stderr)


def parse_markers(lines):
    """The marker lines just above a fence, as (kind, args, reason)."""
    markers = []
    for raw in lines:
        m = MARKER.match(raw)
        kind, _, rest = m.group(1).partition(" ")
        reason = ""
        r = re.search(r"\((.*)\)\s*$", rest)
        if r:
            reason, rest = r.group(1), rest[:r.start()].strip()
        markers.append((kind, rest.strip(), reason))
    return markers


def page_name(path):
    """README.md, docs/phones.md: the path from the repository's top."""
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return Path(path).name


def pages():
    """README.md, then the pages of PAGES in their order (QUAD_README_PAGES,
    space-separated, instead when set; empty: the README alone)."""
    wanted = os.environ.get("QUAD_README_PAGES")
    order = wanted.split() if wanted is not None else PAGES
    named = {p for p in order if p != "docs/*"}
    out = [README]
    for p in order:
        if p == "docs/*":
            out += [f for f in sorted((ROOT / "docs").glob("*.md")) if page_name(f) not in named]
        else:
            assert (ROOT / p).is_file(), f"{p} is in the test's list of pages, and is no file"
            out.append(ROOT / p)
    return out


def parse_pages():
    """Every command of README.md and of the pages after it, in order."""
    commands = []
    for path in pages():
        commands += parse_readme(path)
    return commands


def parse_readme(path):
    """Every command of a page's sh and console blocks, in order."""
    name = page_name(path)
    lines = path.read_text().split("\n")
    commands = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        lang, start = fence.group(1), i + 1  # start: the page's line number of the fence
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = lines[i + 1:j]
        above, k = [], i - 1
        while k >= 0 and MARKER.match(lines[k]):
            above.insert(0, lines[k])
            k -= 1
        i = j + 1
        if lang not in ("sh", "console"):
            continue
        markers = parse_markers(above)
        block = []
        n = 0
        while n < len(body):
            line, number = body[n], start + 1 + n
            if lang == "console" and not line.startswith("$ "):
                if block:
                    block[-1].expected.append((number, line))
                elif line.strip():
                    raise AssertionError(f"{name}:{number}: output before any command in a console block: {line}")
                n += 1
                continue
            if lang == "sh" and (not line.strip() or line.lstrip().startswith("#")):
                n += 1
                continue
            text = line[2:] if lang == "console" else line
            while incomplete(text) and n + 1 < len(body):
                n += 1
                text += "\n" + body[n]
            block.append(Command(name, text, number, start, lang))
            n += 1
        for c in block:
            for kind, args, reason in markers:
                if kind == "skip":
                    c.skip = reason or "skipped"
                elif kind == "skip-command" and c.text.startswith(args):
                    c.skip = reason or "skipped"
                elif kind == "fails":
                    if c.text.startswith(args):
                        c.fails = True
                elif kind in ("follow", "timeout"):
                    prefix, _, secs = args.rpartition(" ")
                    if c.text.startswith(prefix):
                        if kind == "follow":
                            c.follow = float(secs)
                        else:
                            c.timeout = float(secs)
                elif kind == "files":
                    pass
                elif kind not in ("skip-command",):
                    raise AssertionError(f"{name}:{start}: unknown readme-test marker '{kind}'")
        files = [name for kind, args, _ in markers if kind == "files" for name in args.split()]
        if block:
            block[0].files = files
        commands.extend(block)
    return commands


# ------------------------------------------------------- elided JSON, parsed


class Elided:
    """`…` alone: any value (or, in an object or array, any more of them)."""


class ElidedText:
    def __init__(self, text):
        self.text = text


class Lax:
    """An object or array as the page shows it."""

    def __init__(self, value):
        self.value = value


class ElidedParser:
    def __init__(self, text):
        self.s = text
        self.i = 0

    def ws(self):
        while self.i < len(self.s) and self.s[self.i] in " \t\r\n":
            self.i += 1

    def value(self):
        self.ws()
        c = self.s[self.i]
        if c == "{":
            return self.obj()
        if c == "[":
            return self.arr()
        if c == '"':
            return self.string()
        if c == ELL:
            self.i += 1
            return Elided()
        m = re.compile(r"-?\d+(\.\d+)?([eE][-+]?\d+)?").match(self.s, self.i)
        if m:
            self.i = m.end()
            if self.s.startswith(ELL, self.i):
                self.i += 1
                return ElidedText(m.group(0) + ELL)
            return json.loads(m.group(0))
        for word, v in (("true", True), ("false", False), ("null", None)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return v
        raise ValueError(f"cannot read JSON at column {self.i + 1}: {self.s[self.i:self.i + 20]!r}")

    def string(self):
        m = re.compile(r'"(?:[^"\\]|\\.)*"').match(self.s, self.i)
        if not m:
            raise ValueError(f"unterminated string at column {self.i + 1}")
        self.i = m.end()
        text = json.loads(m.group(0))
        return ElidedText(text) if ELL in text else text

    def obj(self):
        self.i += 1
        out = {}
        while True:
            self.ws()
            if self.s[self.i] == "}":
                self.i += 1
                return Lax(out)
            if self.s[self.i] == ELL:
                self.i += 1
            else:
                key = self.string()
                key = key.text if isinstance(key, ElidedText) else key
                self.ws()
                if self.s[self.i] != ":":
                    raise ValueError(f"expected ':' at column {self.i + 1}")
                self.i += 1
                out[key] = self.value()
            self.ws()
            if self.s[self.i] == ",":
                self.i += 1

    def arr(self):
        self.i += 1
        out = []
        while True:
            self.ws()
            if self.s[self.i] == "]":
                self.i += 1
                return Lax(out)
            v = self.value()
            if not isinstance(v, Elided):
                out.append(v)
            self.ws()
            if self.s[self.i] == ",":
                self.i += 1

    def parse(self):
        v = self.value()
        self.ws()
        if self.i != len(self.s):
            raise ValueError(f"text after the JSON at column {self.i + 1}")
        return v


DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([T ][0-9:.]+Z?)?$")


def match_json(want, got, path, copied):
    """Mismatches of `got` against the page's `want` ([] when it matches);
    fills `copied` with the values printed where the page elides them."""
    if isinstance(want, Elided):
        return []
    if isinstance(want, ElidedText):
        if isinstance(got, (dict, list)) or got is None:
            return [f"{path}: the page shows {want.text!r}, printed {json.dumps(got)}"]
        copied[want.text] = got if isinstance(got, str) else json.dumps(got)
        return []
    if isinstance(want, Lax) and isinstance(want.value, dict):
        if not isinstance(got, dict):
            return [f"{path}: the page shows an object, printed {json.dumps(got)[:200]}"]
        errors = []
        for k, v in want.value.items():
            if k not in got:
                errors.append(f"{path}.{k}: missing (printed fields: {', '.join(sorted(got))})")
            else:
                errors += match_json(v, got[k], f"{path}.{k}", copied)
        return errors
    if isinstance(want, Lax):
        if not isinstance(got, list):
            return [f"{path}: the page shows an array, printed {json.dumps(got)[:200]}"]
        errors, used = [], set()
        for n, w in enumerate(want.value):
            best = None
            for m, g in enumerate(got):
                if m in used:
                    continue
                scratch = {}
                e = match_json(w, g, f"{path}[{m}]", scratch)
                if not e:
                    used.add(m)
                    copied.update(scratch)
                    best = []
                    break
                if best is None or len(e) < len(best):
                    best = e
            if best is None:
                errors.append(f"{path}: the page shows an element {n + 1}, the array printed has {len(got)}")
            else:
                errors += best
        return errors
    if isinstance(want, str) and DATE.match(want):
        if not isinstance(got, str):
            return [f"{path}: the page shows the time {want!r}, printed {json.dumps(got)}"]
        copied[want] = got
        return []
    if isinstance(want, bool) or isinstance(got, bool) or want is None:
        ok = want is got
    else:
        ok = want == got
    return [] if ok else [f"{path}: the page shows {json.dumps(want)}, printed {json.dumps(got)[:200]}"]


def json_values(text):
    """Every JSON value printed: the whole text, or one per line."""
    values = []
    try:
        values.append(json.loads(text))
    except ValueError:
        pass
    for line in text.splitlines():
        line = line.strip()
        if line[:1] in ("{", "["):
            try:
                values.append(json.loads(line))
            except ValueError:
                pass
    return values


def word_matches(want, got, copied):
    if re.fullmatch(r"\d{3}", want):
        return want == got
    if re.search(r"\d", want):
        if ELL in want or len(want) >= 8:
            copied[want] = got
        return True
    if ELL in want:
        if re.fullmatch(".*".join(re.escape(p) for p in want.split(ELL)), got):
            copied[want] = got
            return True
        return False
    return want == got


def match_lines(want_lines, printed_lines, copied, page):
    """Each line the page shows, word by word, against the printed lines, in order."""
    errors, at = [], 0
    for number, want in want_lines:
        words = want.split()
        if words == [ELL]:
            continue
        found = None
        for n in range(at, len(printed_lines)):
            got = printed_lines[n].split()
            scratch = {}
            if len(got) == len(words) and all(word_matches(w, g, scratch) for w, g in zip(words, got)):
                found = n
                copied.update(scratch)
                break
        if found is None:
            errors.append(f"{page}:{number}: no printed line matches {want!r}")
        else:
            at = found + 1
    return errors


def strip_comment(line):
    return re.sub(r"\s{2,}#\s.*$", "", line).rstrip()


def is_error_body(value):
    return (isinstance(value, Lax) and isinstance(value.value, dict) and "code" in value.value
            and isinstance(value.value.get("status"), int) and value.value["status"] >= 400)


# ------------------------------------------------------------- the machine


def port_free(port):
    """Free to listen on, as the stack's servers do (SO_REUSEADDR: a
    connection of the last run in TIME-WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def ephemeral_ports():
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return low, high


def free_port_base():
    """A base whose frontends (base..+79), dashboard (+80), image servers
    (+85, +86), phones' control socket (+88), PostgreSQL (+90) and /metrics
    ports (+100..+310) are all free: QUAD_README_PORT_BASE, else the first
    such base from QUAD_README_PORT_FROM (20000) by 400, below the kernel's ephemeral ports (the
    local ends of other programs' connections) and away from the default
    stack's 7700-8200."""
    wanted = os.environ.get("QUAD_README_PORT_BASE")
    low, high = ephemeral_ports()
    start = int(os.environ.get("QUAD_README_PORT_FROM", "20000"))
    candidates = [int(wanted)] if wanted else [b for b in range(start, 65000 - 320, 400)
                                               if b + 320 < low or b > high]
    busy = {}
    for base in candidates:
        ports = list(range(base, base + 91)) + list(range(base + 100, base + 311))
        taken = [p for p in ports if not port_free(p)]
        if not taken:
            return base
        busy[base] = taken[:5]
    raise AssertionError("no free port base: " + "; ".join(f"base {b}: port {', '.join(map(str, t))} in use"
                                                           for b, t in list(busy.items())[:5]))


def png(path, size=None):
    """A small valid PNG (16x16 grey stripes), padded with a tEXt chunk to
    `size` bytes when given."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    w = h = 16
    raw = b"".join(b"\0" + bytes((x * 16 + y) & 0xFF for x in range(w)) for y in range(h))
    head = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
    tail = chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    if size is not None:
        pad = size - len(head) - len(tail) - 12 - len(b"Comment\0")
        assert pad >= 0, f"a PNG of {size} bytes is too small for the test's picture"
        head += chunk(b"tEXt", b"Comment\0" + b"x" * pad)
    Path(path).write_bytes(head + tail)


def children_of(pid):
    """Every descendant of `pid`, from /proc."""
    kids = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_all(pids):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() and "Z" not in state(p) for p in pids):
            time.sleep(0.2)


def state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


# pytest's capsys, to show progress as it goes even when pytest captures
# output (deploy/test runs `pytest -q`).
CAPSYS = None


def log(msg):
    line = f"[{time.strftime('%H:%M:%S')}] {msg}"
    if CAPSYS is not None:
        with CAPSYS.disabled():
            print(line, flush=True)
    else:
        print(line, flush=True)


def tail(path, n=25):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    | " + l for l in lines[-n:])


class Shell:
    """One bash process, fed one command at a time, as a terminal."""

    def __init__(self, cwd, env, out):
        self.out = Path(out)
        self.out.mkdir()
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], stdin=subprocess.PIPE, cwd=cwd, env=env,
                                     stdout=subprocess.DEVNULL, stderr=open(self.out / "shell.err", "w"),
                                     text=True, start_new_session=True)
        self.n = 0

    def run(self, text, timeout):
        """(exit status or None when it ran out of time, stdout path, stderr path, seconds)."""
        self.n += 1
        o, e, rc = self.out / f"{self.n}.out", self.out / f"{self.n}.err", self.out / f"{self.n}.rc"
        before = set(children_of(self.proc.pid))
        self.proc.stdin.write(f"{{ {text}\n}} </dev/null >{shlex.quote(str(o))} 2>{shlex.quote(str(e))}; "
                              f"echo $? >{shlex.quote(str(rc))}.tmp; mv {shlex.quote(str(rc))}.tmp {shlex.quote(str(rc))}\n")
        self.proc.stdin.flush()
        started = time.monotonic()
        while not rc.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"the shell exited ({self.proc.returncode}) running: {text}\n{tail(self.out / 'shell.err')}")
            if time.monotonic() - started > timeout:
                # Stop what this command started, as Ctrl-C would; its `&` jobs too.
                kill_all([p for p in children_of(self.proc.pid) if p not in before])
                wait = time.monotonic() + 15
                while not rc.exists() and time.monotonic() < wait:
                    time.sleep(0.1)
                return None, o, e, time.monotonic() - started
            time.sleep(0.05)
        return int(rc.read_text().strip() or "255"), o, e, time.monotonic() - started

    def close(self):
        kill_all(children_of(self.proc.pid))
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# ------------------------------------------------------------------ the test


def check_report(path, c):
    """A campus day's report accounts for every action."""
    line = f"{c.page}:{c.line}"
    p = Path(path)
    if not p.exists():
        return [f"{line}: the campus day wrote no report {path}"]
    r = json.loads(p.read_text())
    errors = []
    actions = r.get("actions", {})
    if r.get("accounted") is not True:
        errors.append(f"{line}: {path}: accounted is {r.get('accounted')!r}, not true (actions {json.dumps({k: v for k, v in actions.items() if k != 'by_type'})})")
    if actions.get("pending", 0) != 0:
        errors.append(f"{line}: {path}: {actions.get('pending')} actions still pending")
    if r.get("drain", {}).get("outbox_left", 0) != 0:
        errors.append(f"{line}: {path}: {r['drain']['outbox_left']} actions left in outboxes")
    if not actions.get("created"):
        errors.append(f"{line}: {path}: no action was created")
    log(f"  report {path}: {actions.get('created')} actions, {actions.get('done')} done, {actions.get('rejected')} rejected, "
        f"{actions.get('pending')} pending, accounted {r.get('accounted')}")
    return errors


def test_readme_runs_as_written(capsys):
    global CAPSYS
    CAPSYS = capsys
    commands = parse_pages()
    assert commands, f"{README} has no sh or console block"
    base = free_port_base()
    tmp = Path(tempfile.mkdtemp(prefix="quad-readme-"))
    work, home = tmp / "work", tmp / "home"
    work.mkdir()
    # The working folder sees the repository's top-level entries, so
    # `deploy/quickstart` is the repository's; what commands write lands here.
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".quad", ".build") and not entry.name.startswith(".quad"):
            (work / entry.name).symlink_to(entry)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUAD_") or k in ("QUAD_BIN_DIR", "QUAD_BUILD_DIR")}
    env.update(QUAD_ROOT=str(ROOT), QUAD_HOME=str(home), QUAD_PORT_BASE=str(base), TERM="dumb")
    if "QUAD_BUILD_DIR" not in env:
        env["QUAD_BUILD_DIR"] = str(ROOT / ".build")
    log(f"{', '.join(page_name(p) for p in pages())}: {len(commands)} commands; port base {base}; QUAD_HOME {home}; "
        f"binaries {env.get('QUAD_BIN_DIR') or env['QUAD_BUILD_DIR'] + '/release (built if needed)'}")
    shell = Shell(work, env, tmp / "out")
    failures, copied, ran = [], {}, 0
    try:
        for c in commands:
            for name in getattr(c, "files", []):
                name, _, size = name.partition("=")
                png(work / name, int(size) if size else None)
                log(f"(wrote a picture {name} for the block at {c.page}:{c.block_line})")
            if c.skip:
                log(f"skip {c.page}:{c.line}: {c.text.splitlines()[0]}  ({c.skip})")
                continue
            text = c.text
            for key in sorted(copied, key=len, reverse=True):
                if key in text:
                    text = text.replace(key, copied[key])
            if text != c.text:
                log(f"  (values copied from earlier output: {text.splitlines()[0][:200]})")
            syntax = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True)
            if syntax.returncode != 0:
                failures.append(f"{c.page}:{c.line}: {c.text}\n  not a complete bash command: {syntax.stderr.strip()}\n")
                log("FAILED " + failures[-1])
                continue
            run = text
            if c.follow is not None:
                run = f"timeout -s INT -k 5 {c.follow:g} bash -c {shlex.quote(text)}"
            more = " ..." if "\n" in c.text else ""
            log(f"$ {c.text.splitlines()[0]}{more}   [{c.page}:{c.line}]")
            status, o, e, secs = shell.run(run, c.timeout + (c.follow or 0))
            ran += 1
            printed = o.read_text(errors="replace") if o.exists() else ""
            printed_err = e.read_text(errors="replace") if e.exists() else ""
            want = [(n, strip_comment(l)) for n, l in c.expected if strip_comment(l)]
            want_json, want_lines = [], []
            errors = []
            for n, l in want:
                if l.lstrip()[:1] in ("{", "["):
                    try:
                        want_json.append((n, ElidedParser(l.strip()).parse()))
                    except (ValueError, IndexError) as x:
                        errors.append(f"{c.page}:{n}: the page's JSON cannot be read: {x}")
                else:
                    want_lines.append((n, l))
            fails_on_purpose = c.fails or any(is_error_body(v) for _, v in want_json)
            if status is None:
                errors.append(f"still running after {c.timeout:g} s: stopped")
            elif c.follow is not None:
                if status not in (0, 124):
                    errors.append(f"exit status {status} (a following command: still running or 0 expected)")
            elif fails_on_purpose and status == 0:
                errors.append("exit status 0: the page shows it failing (non-zero expected)")
            elif not fails_on_purpose and status != 0:
                errors.append(f"exit status {status} (0 expected)")
            values = json_values(printed) + json_values(printed_err)
            for n, w in want_json:
                best, best_copied = None, {}
                for v in values:
                    scratch = {}
                    e_ = match_json(w, v, "$", scratch)
                    if best is None or len(e_) < len(best):
                        best, best_copied = e_, scratch
                    if not e_:
                        break
                # What the reader copies comes from what was printed, even
                # where it differs from the page.
                copied.update(best_copied)
                if best is None:
                    errors.append(f"{c.page}:{n}: the page shows JSON, nothing printed is JSON")
                else:
                    errors += [f"{c.page}:{n}: {x}" for x in best]
            errors += match_lines(want_lines, printed.splitlines() + printed_err.splitlines(), copied, c.page)
            m = re.search(r"quad-edge\s+run\b.*--report[ =](\S+)", text)
            if m and status is not None:
                errors += check_report(work / m.group(1), c)
            log(f"  exit {status if status is not None else 'none (stopped)'} in {secs:.1f} s"
                + ("" if not errors else f": FAILED"))
            if errors:
                report = (f"{c.page}:{c.line}: {c.text}\n  exit status: {status if status is not None else 'none: stopped after ' + format(c.timeout, 'g') + ' s'}\n"
                          + "".join(f"  {x}\n" for x in errors)
                          + f"  stdout (last lines):\n{tail(o)}\n  stderr (last lines):\n{tail(e)}\n")
                log("FAILED " + report)
                failures.append(report)
    finally:
        shell.close()
        down = subprocess.run([str(ROOT / "deploy/stack"), "down"], cwd=work, env=env, capture_output=True, text=True,
                              timeout=300)
        if down.returncode != 0:
            failures.append(f"(cleanup) deploy/stack down exited {down.returncode}:\n{down.stderr[-2000:]}")
        keep = failures or os.environ.get("QUAD_README_KEEP") == "1"
        if keep:
            log(f"kept {tmp} (work/: the working folder, home/: QUAD_HOME, out/: each command's output)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"{ran} commands run, {len(failures)} failed")
    if failures:
        pytest.fail(f"{len(failures)} of the {ran} commands run (README.md and docs/) failed:\n\n" + "\n".join(failures),
                    pytrace=False)


def test_readme_commands_name_no_port():
    """The commands of the README and docs/ take their ports from the stack they run on
    (`eval "$(deploy/stack env)"`: QUAD_PORT_BASE, QUAD_EDGE_CONTROL, ...),
    never a literal port of the default stack (7700-8200), which would reach
    another stack, or nothing, on any other port base."""
    literal = re.compile(r"(?<![\d.])(7[7-9]\d\d|8[01]\d\d|8200)(?!\d)")
    named = [f"{c.page}:{c.line}: {c.text.splitlines()[0]}" for c in parse_pages()
             if not c.skip and literal.search(c.text)]
    assert not named, "commands naming a literal port:\n" + "\n".join(named)
