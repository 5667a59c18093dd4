"""A small client of Quad's public frontend, for tools and tests in Python.

It speaks what a phone speaks: one DEALER socket per frontend with CURVE (the broker's
public key from QUAD_BROKER_KEY, QUAD_BROKER_KEY_FILE or
$QUAD_HOME/keys/broker.pub), MDP/0.2 framing (ZeroMQ RFC 18: a REQUEST is
["MDPC02", 0x01, service, envelope], the answer ["MDPC02", 0x04 FINAL,
service, envelope]), a UUIDv7 id per request. deploy/flood and Tests/e2e/test_hostile.py use it; it is not a
phone (no outbox; retries are a 429 waited out and, with several frontends,
the same request sent again through the next one).
"""

import json
import os
import secrets
import time

import zmq


def uuid7():
    """A time-ordered id, as Quad's MessageID makes them."""
    ms = int(time.time() * 1000)
    rand = secrets.token_bytes(10)
    b = ms.to_bytes(6, "big") + bytes([0x70 | (rand[0] & 0x0F), rand[1], 0x80 | (rand[2] & 0x3F)]) + rand[3:10]
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def broker_key(home=None):
    """The broker's CURVE public key (Z85 bytes), or None with CURVE off."""
    given = os.environ.get("QUAD_BROKER_KEY")
    if given == "off":
        return None
    if given:
        return given.encode()
    path = os.environ.get("QUAD_BROKER_KEY_FILE") or os.path.join(home or os.environ.get("QUAD_HOME", ".quad"), "keys", "broker.pub")
    with open(path, "rb") as f:
        return f.read().strip()


MDPC02, REQUEST, PARTIAL, FINAL = b"MDPC02", b"\x01", b"\x03", b"\x04"


def frames(env):
    """The MDP/0.2 REQUEST carrying `env` (a dict) to the service its type names."""
    return [MDPC02, REQUEST, env["type"].split(".", 1)[0].encode(), json.dumps(env, separators=(",", ":")).encode()]


def final_body(message):
    """The envelope bytes of a FINAL from the broker (an empty delimiter first
    or not), or None for anything else (a PARTIAL, a stray message)."""
    if message and message[0] == b"":
        message = message[1:]
    if len(message) == 4 and message[0] == MDPC02 and message[1] == FINAL:
        return message[3]
    return None


def envelope(type_, body=None, id_=None, token=None, src="py-client", deadline=5000, **header):
    env = {"v": 1, "id": id_ or uuid7(), "type": type_, "kind": "request", "ts": int(time.time() * 1000),
           "src": src, "deadline": deadline, "body": {} if body is None else body}
    if token:
        env["token"] = token
    env.update(header)
    return env


def endpoints_of(endpoint):
    """The list of frontends in `endpoint`: a comma-separated string (what
    QUAD_FRONTEND holds on a stack of several brokers) or a list."""
    items = endpoint.split(",") if isinstance(endpoint, str) else list(endpoint)
    items = [e.strip() for e in items if e and e.strip()]
    if not items:
        raise ValueError(f"no frontend in {endpoint!r}")
    return items


class Client:
    """One client (one CURVE key pair unless `keys` is given) of one frontend
    or of several (a comma-separated list, or a list).

    With several frontends it does what the Swift Client does: one DEALER
    per frontend, all with the same key pair (the broker's key is the same
    on every broker of a stack), a start on one picked at random, and a
    request that gets no answer within `failover_after` seconds sent again
    under the same id through the next frontend (the idempotency record
    makes that safe); it then stays on the one that answered. `sock` is the
    DEALER of the frontend in use; answers are read from all of them, so a
    late answer from the first is not lost.
    """

    def __init__(self, endpoint, server_key, context=None, keys=None, src="py-client", monitored=False,
                 failover_after=1.0):
        import random
        self.context = context or zmq.Context.instance()
        self.endpoints = endpoints_of(endpoint)
        self.public, self.secret = keys or zmq.curve_keypair()
        self.failover_after = float(failover_after)
        self.socks = []
        for e in self.endpoints:
            sock = self.context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if server_key is not None:
                sock.curve_serverkey = server_key
                sock.curve_publickey = self.public
                sock.curve_secretkey = self.secret
            self.socks.append(sock)
        self.current = random.randrange(len(self.socks)) if len(self.socks) > 1 else 0
        self.sock = self.socks[self.current]
        # Watched from before the connect, so that connected() sees the handshake.
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) if monitored else None
        for sock, e in zip(self.socks, self.endpoints):
            sock.connect(e)
        self.poller = zmq.Poller()
        for sock in self.socks:
            self.poller.register(sock, zmq.POLLIN)
        self.src = src
        self.token = None

    def connected(self, timeout=30.0):
        """Waits until the handshake with the broker in use succeeded (a
        client made with monitored=True); False at the timeout."""
        from zmq.utils.monitor import recv_monitor_message
        if self.monitor is None:
            raise ValueError("connected() needs Client(..., monitored=True)")
        if self.monitor.poll(int(timeout * 1000)):
            event = recv_monitor_message(self.monitor)
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.sock.disable_monitor()
                self.monitor.close()
                self.monitor = None
                return True
        return False

    def close(self):
        if self.monitor is not None:
            self.sock.disable_monitor()
            self.monitor.close(0)
            self.monitor = None
        for sock in self.socks:
            sock.close(0)

    def fail_over(self):
        """Moves to the next frontend (no-op with one)."""
        if len(self.socks) > 1:
            self.current = (self.current + 1) % len(self.socks)
            self.sock = self.socks[self.current]

    def send_raw(self, frames):
        self.sock.send_multipart(frames)

    def send(self, env, flags=0):
        """Sends the envelope `env` (a dict) as an MDP/0.2 REQUEST."""
        self.sock.send_multipart(frames(env), flags)

    def receive(self, corr=None, timeout=5.0):
        """The next envelope answering `corr` (any envelope when None), from
        any of the frontends, or None at the timeout."""
        until = time.monotonic() + timeout
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return None
            if len(self.socks) == 1:
                ready = [self.sock] if self.sock.poll(int(left * 1000) + 1) else []
            else:
                ready = [sock for sock, _ in self.poller.poll(int(left * 1000) + 1)]
            if not ready:
                return None
            for sock in ready:
                body = final_body(sock.recv_multipart())
                if body is None:
                    continue
                try:
                    env = json.loads(body)
                except ValueError:
                    continue
                if corr is None or env.get("corr") == corr:
                    if sock is not self.sock:
                        # The one that answered is the one to stay on.
                        self.current = self.socks.index(sock)
                        self.sock = sock
                    return env

    def call(self, type_, body=None, id_=None, timeout=5.0, token=None, retry_429=True, **header):
        """The answering envelope of one request (None at the timeout). A 429
        is waited out (retry_after_ms) and sent again under the same id, as a
        client should, unless retry_429 is False. With several frontends, an
        attempt unanswered after `failover_after` s is sent again, same id,
        through the next one."""
        id_ = id_ or uuid7()
        until = time.monotonic() + timeout
        deadline = header.pop("deadline", int(timeout * 1000))
        while True:
            env = envelope(type_, body, id_, token or self.token, self.src, deadline, **header)
            self.send(env)
            left = max(0.05, until - time.monotonic())
            if len(self.socks) > 1:
                answer = self.receive(id_, min(left, self.failover_after))
                if answer is None and time.monotonic() < until:
                    self.fail_over()
                    continue
            else:
                answer = self.receive(id_, left)
            if (retry_429 and answer and answer.get("kind") == "error"
                    and answer["body"].get("code") == "too_many_requests" and time.monotonic() < until):
                time.sleep(min(2.0, (answer["body"].get("details") or {}).get("retry_after_ms", 100) / 1000))
                continue
            return answer


def body_of(answer):
    assert answer is not None, "no answer before the timeout"
    return answer["body"]


def error_code(answer):
    if answer is None:
        return "no answer"
    return answer["body"].get("code") if answer.get("kind") == "error" else None


# The endpoints a launched stack must not inherit from the caller's shell:
# a test's stack is its own, on its own port base and QUAD_HOME.
STACK_ENDPOINT_VARIABLES = ("QUAD_FRONTEND", "QUAD_BACKEND", "QUAD_EVENTS_IN", "QUAD_EVENTS_OUT", "QUAD_INTERNAL",
                            "QUAD_CURVE", "QUAD_BROKER_KEY", "QUAD_BROKER_KEY_FILE", "QUAD_TOKEN", "QUAD_BROKERS",
                            # Ports another stack of this machine may have set: the table's
                            # defaults for the launched stack's base instead.
                            "QUAD_METRICS_BASE", "QUAD_PG_PORT", "QUAD_ANALYTICS_HTTP", "QUAD_CATALOG_IMAGES",
                            "QUAD_RESERVATIONS_IMAGES_HTTP", "QUAD_EDGE_CONTROL", "QUAD_UPDATES", "QUAD_HOSTS_NET")


def _ports():
    import sys
    deploy = os.path.dirname(os.path.abspath(__file__))
    if deploy not in sys.path:
        sys.path.insert(0, deploy)
    from quaddeploy import ports
    return ports


def free_port_base(start=17700, brokers=8):
    """The first port base from `start` (in steps of 100) at which every port
    of a stack is free on 127.0.0.1 now (the table of
    deploy/quaddeploy/ports.py: frontends, updates sockets, dashboard, image
    servers, the phones' control socket, PostgreSQL's and the /metrics
    range), for a test that starts a stack; never a default another stack
    of the machine may hold. Raises RuntimeError when none is free."""
    ports = _ports()
    base = ports.free_base(int(start), brokers)
    if base is None:
        raise RuntimeError(f"no port base from {start} (in steps of 100) has all its {ports.span()} ports free")
    return base


def free_hosts_net(start=0):
    """The first K from `start` whose net 10.77.K.0/24 no namespace (quadK-*),
    link (quadK) or address of this machine uses: QUAD_HOSTS_NET for a test
    that starts a stack with --hosts (as deploy/lib.sh's quad_free_hosts_net)."""
    import subprocess

    def out(*cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""
    namespaces = out("ip", "netns", "list")
    links = out("ip", "-o", "link", "show")
    addrs = out("ip", "-o", "-4", "addr", "show")
    for k in range(int(start), 256):
        if any(line.startswith(f"quad{k}-") for line in namespaces.splitlines()):
            continue
        if f": quad{k}:" in links or f": quad{k}@" in links or f"inet 10.77.{k}." in addrs:
            continue
        return k
    raise RuntimeError(f"no free net 10.77.K.0/24 from K={start}")


class StackFailed(Exception):
    """deploy/stack up did not bring the stack up; the message has its output's tail and where the logs are."""


class LaunchedStack:
    """A stack started with `deploy/stack up` as a user starts it, on a port
    base and a QUAD_HOME of its own, for the end-to-end tests.

    `with LaunchedStack("quad-hostile-", free_port_base(18800)) as s:` brings it up (or raises
    StackFailed, the stack brought down again), and brings it down at the end.
    `env` adds settings (QUAD_ADMIN_PASSWORD, limits); `keep` names variables
    of STACK_ENDPOINT_VARIABLES the caller's environment may pass on;
    `brokers` is the stack's number of brokers (deploy/stack's default, 2,
    when None). `frontend` is broker 1's frontend alone (a single endpoint
    for raw ZeroMQ sockets); `frontends` the comma-separated list of every
    broker's, as QUAD_FRONTEND holds it, which Client takes too.
    """

    def __init__(self, prefix, port_base, env=None, timeout=None, keep=(), brokers=None):
        import tempfile
        from pathlib import Path
        self.root = Path(__file__).resolve().parents[1]
        self.script = self.root / "deploy" / "stack"
        self.home = tempfile.mkdtemp(prefix=prefix)
        self.port_base = int(port_base)
        self.timeout = float(timeout if timeout is not None else os.environ.get("QUAD_STACK_TIMEOUT", "300"))
        self.env = dict(os.environ, QUAD_HOME=self.home, QUAD_PORT_BASE=str(self.port_base))
        for k in STACK_ENDPOINT_VARIABLES:
            if k not in keep:
                self.env.pop(k, None)
        self.env.update(env or {})
        if brokers is not None:
            self.env["QUAD_BROKERS"] = str(int(brokers))
        # The phones' control socket of this stack's table (quad-edge reads it).
        self.env.setdefault("QUAD_EDGE_CONTROL", f"tcp://127.0.0.1:{self.port_base + _ports().layout()['edge_control']}")
        self.frontend = f"tcp://127.0.0.1:{self.port_base}"
        self.frontends = self.frontend
        self.up_output = ""

    def run(self, *args, timeout=60):
        """`deploy/stack ARGS` in this stack's environment; a timeout is a result with returncode None."""
        import subprocess
        try:
            return subprocess.run([str(self.script), *args], cwd=self.root, env=self.env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            return subprocess.CompletedProcess(e.cmd, None, out, err)

    def up(self):
        up = self.run("up", timeout=self.timeout)
        self.up_output = up.stdout + up.stderr
        if up.returncode != 0:
            self.down()
            how = f"did not finish in {self.timeout:.0f} s" if up.returncode is None else f"exited {up.returncode}"
            raise StackFailed(f"deploy/stack up {how} (logs in {self.home}):\n{up.stdout[-3000:]}\n{up.stderr[-3000:]}")
        self.frontends = self.exported().get("QUAD_FRONTEND", self.frontend)
        return self

    def exported(self):
        """What `deploy/stack env` exports, as a dict. The values are shell
        words (printf %q: a list's commas come as '\\,'), read as a shell would."""
        import shlex
        out = self.run("env").stdout
        found = {}
        for line in out.splitlines():
            if not line.startswith("export ") or "=" not in line:
                continue
            k, v = line[len("export "):].split("=", 1)
            words = shlex.split(v)
            found[k] = words[0] if words else ""
        return found

    def broker_key(self):
        return broker_key(self.home)

    def down(self):
        return self.run("down", timeout=120)

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()
        return False
