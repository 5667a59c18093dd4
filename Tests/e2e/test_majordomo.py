"""Quad's broker speaks the Majordomo Protocol MDP/0.2 (ZeroMQ RFC 18), proved
with a worker and a client no one here wrote: PyPI's majortomo 0.2.0
(deploy/lib.sh installs it).

A stack is started with deploy/stack as a user starts it. A majortomo Worker
registers the service `echo` on the broker's backend (the stack's ipc://
socket, plain, as the launcher makes it) and answers each request with a
proper Quad reply envelope; a majortomo Client calls it through the public
frontend, and calls a real Quad service (catalog.categories). majortomo has
no CURVE setting of its own: its sockets are made from a pyzmq Context whose
default socket options carry the broker's public key and a client key pair,
so the client speaks CURVE like any phone and no QUAD_CURVE=off is needed.

Environment: QUAD_MAJORDOMO_PORT_BASE (where the search for a free port base starts, default 19000), QUAD_STACK_TIMEOUT
(seconds for deploy/stack up, default 300). deploy/stack sees the rest of the
environment (QUAD_BUILD_DIR, QUAD_BIN_DIR).
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from majortomo import Client, Worker
from majortomo import error as mdp_error

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "deploy"))
import quadclient  # noqa: E402

# The first free port base from QUAD_MAJORDOMO_PORT_BASE (default 19000): every port
# of the stack free, so a stack of the machine on its own ports is left alone.
PORT_BASE = quadclient.free_port_base(int(os.environ.get("QUAD_MAJORDOMO_PORT_BASE", "19000")))
STACK_TIMEOUT = float(os.environ.get("QUAD_STACK_TIMEOUT", "300"))
PROTOS = ROOT / "protos"
SCHEMAS = {p.relative_to(PROTOS).as_posix(): json.loads(p.read_text())
           for p in PROTOS.rglob("*.json") if "examples" not in p.relative_to(PROTOS).parts}
REGISTRY = Registry().with_resources(
    (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012)) for s in SCHEMAS.values() if "$id" in s)


def envelope_errors(envelope):
    v = Draft202012Validator(SCHEMAS["envelope.schema.json"], registry=REGISTRY)
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in v.iter_errors(envelope)]
    service, _, op = envelope["type"].partition(".")
    body_schema = "error.schema.json" if envelope["kind"] == "error" else f"{service}/{op}.{envelope['kind']}.json"
    if body_schema in SCHEMAS:
        v = Draft202012Validator(SCHEMAS[body_schema], registry=REGISTRY)
        errors += [f"body/{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(envelope.get("body"))]
    return errors


class Stack:
    def __init__(self, home, frontend, backend):
        self.home, self.frontend, self.backend = home, frontend, backend
        self.key = quadclient.broker_key(home)

    def curve_context(self):
        """A context whose sockets speak CURVE to the broker with a fresh key
        pair: how a majortomo Client, which makes its own socket, gets CURVE."""
        ctx = zmq.Context()
        public, secret = zmq.curve_keypair()
        ctx.setsockopt(zmq.CURVE_SERVERKEY, self.key)
        ctx.setsockopt(zmq.CURVE_PUBLICKEY, public)
        ctx.setsockopt(zmq.CURVE_SECRETKEY, secret)
        return ctx

    def workers_of(self, service):
        # One connection for every look: fresh ones would spend the
        # address's handshake budget.
        if not hasattr(self, "watcher"):
            self.watcher = quadclient.Client(self.frontend, self.key, src="majortomo-watcher")
        answer = self.watcher.call("sys.services", timeout=3)
        if answer is None or answer.get("kind") != "reply":
            return -1
        for s in answer["body"].get("services", []):
            if s["name"] == service:
                return len(s.get("workers", []))
        return 0


@pytest.fixture(scope="module")
def stack():
    launched = quadclient.LaunchedStack("quad-majordomo-", PORT_BASE, timeout=STACK_TIMEOUT)
    try:
        launched.up()
    except quadclient.StackFailed as e:
        pytest.fail(str(e))
    # Broker 1 alone (a stack runs two): the majortomo worker registers there and its clients talk to it.
    s = Stack(launched.home, launched.frontend, launched.exported()["QUAD_BACKEND"].split(",")[0])
    try:
        yield s
    finally:
        if hasattr(s, "watcher"):
            s.watcher.close()
        launched.down()


class EchoWorker:
    """A majortomo Worker of service `echo` on its own thread. It answers each
    request with a Quad reply envelope (kind reply, corr the request's id)
    whose body is the request's body and what the broker set in the header;
    `echo.stop` ends it (majortomo's loop is not to be closed from another
    thread)."""

    def __init__(self, backend):
        self.worker = Worker(backend, b"echo", heartbeat_interval=0.5, heartbeat_timeout=10.0, zmq_context=zmq.Context())
        self.requests = []
        self.failure = None
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            with self.worker:
                while True:
                    client, frames = self.worker.wait_for_request()
                    self.requests.append(frames)
                    request = json.loads(frames[-1])
                    reply = {"v": 1, "id": quadclient.uuid7(), "type": request["type"], "kind": "reply", "corr": request["id"],
                             "ts": int(time.time() * 1000), "src": "echo/majortomo",
                             "body": {"said": request.get("body"), "caller": request.get("caller"), "frames": len(frames)}}
                    self.worker.send_reply_final(client, [json.dumps(reply).encode()])
                    if request["type"] == "echo.stop":
                        return
        except mdp_error.Disconnected:
            return
        except Exception as e:  # reported by the test, not lost in a thread
            self.failure = e


def mdp_call(ctx, frontend, type_, body=None, timeout=10.0):
    """One request through a majortomo Client; the answering envelope."""
    env = quadclient.envelope(type_, body, src="majortomo-test", deadline=int(timeout * 1000))
    with Client(frontend, zmq_context=ctx) as client:
        client.send(type_.split(".", 1)[0].encode(), json.dumps(env).encode())
        parts = client.recv_all_as_list(timeout=timeout)
    # majortomo hands over what follows the command: RFC 18's service frame, then the body.
    assert parts and parts[0] == type_.split(".", 1)[0].encode(), parts
    answer = json.loads(parts[-1])
    return env, answer


def wait_until(condition, timeout=30.0, what="condition"):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def test_a_majortomo_worker_serves_a_majortomo_client_through_quads_broker(stack):
    worker = EchoWorker(stack.backend)
    try:
        wait_until(lambda: stack.workers_of("echo") == 1, what="the majortomo worker to register as echo")
        ctx = stack.curve_context()
        try:
            request, answer = mdp_call(ctx, stack.frontend, "echo.say", {"s": "hello"})
        finally:
            ctx.destroy(linger=0)
        assert answer["kind"] == "reply" and answer["corr"] == request["id"], answer
        assert answer["body"]["said"] == {"s": "hello"}, answer
        # The broker set who called (the client's CURVE key), in the header only.
        assert answer["body"]["caller"].startswith("key:"), answer
        # The worker got one envelope frame (after RFC 18's client and empty frames).
        assert answer["body"]["frames"] == 1, answer
        assert not envelope_errors(answer), envelope_errors(answer)
    finally:
        ctx = stack.curve_context()
        try:
            mdp_call(ctx, stack.frontend, "echo.stop", timeout=5)
        except Exception:
            pass
        ctx.destroy(linger=0)
        worker.thread.join(10)
    assert worker.failure is None, worker.failure
    # majortomo's close() sent DISCONNECT: the broker dropped it.
    wait_until(lambda: stack.workers_of("echo") == 0, what="the worker's DISCONNECT to remove it")


def test_a_majortomo_client_calls_a_quad_service(stack):
    ctx = stack.curve_context()
    try:
        request, answer = mdp_call(ctx, stack.frontend, "catalog.categories", {})
        assert answer["kind"] == "reply" and answer["corr"] == request["id"], answer
        assert answer["type"] == "catalog.categories"
        assert not envelope_errors(answer), envelope_errors(answer)
        # The broker's own types go to service `sys`.
        request, answer = mdp_call(ctx, stack.frontend, "sys.health", {})
        assert answer["kind"] == "reply" and answer["body"]["service"] == "broker", answer
    finally:
        ctx.destroy(linger=0)


def test_a_type_of_another_service_is_refused_by_name(stack):
    ctx = stack.curve_context()
    try:
        env = quadclient.envelope("catalog.categories")
        with Client(stack.frontend, zmq_context=ctx) as client:
            client.send(b"orders", json.dumps(env).encode())
            parts = client.recv_all_as_list(timeout=10)
        answer = json.loads(parts[-1])
        assert parts[0] == b"orders"
        assert answer["kind"] == "error" and answer["body"]["status"] == 400, answer
        assert "service 'orders'" in answer["body"]["message"], answer
        assert answer["corr"] == env["id"]
    finally:
        ctx.destroy(linger=0)


def test_malformed_mdp_gets_an_error_and_the_broker_keeps_serving(stack):
    # Three body frames from majortomo (it allows any number): an envelope
    # is one frame, or two (its header, then its body).
    ctx = stack.curve_context()
    try:
        env = quadclient.envelope("catalog.categories")
        with Client(stack.frontend, zmq_context=ctx) as client:
            client.send(b"catalog", json.dumps(env).encode(), b"second", b"third")
            parts = client.recv_all_as_list(timeout=10)
        answer = json.loads(parts[-1])
        assert answer["kind"] == "error" and answer["body"]["code"] == "bad_request", answer
        assert "in one frame, or in two (header, body), got 3 frames" in answer["body"]["message"], answer
        assert "malformed_ban_ms" in answer["body"]["message"], answer
    finally:
        ctx.destroy(linger=0)
    # Two frames whose first is a whole envelope: its header carries a body.
    ctx = stack.curve_context()
    try:
        env = quadclient.envelope("catalog.categories")
        with Client(stack.frontend, zmq_context=ctx) as client:
            client.send(b"catalog", json.dumps(env).encode(), b"second")
            parts = client.recv_all_as_list(timeout=10)
        answer = json.loads(parts[-1])
        assert answer["kind"] == "error" and answer["body"]["status"] == 400, answer
        assert "the header frame carries 'body'" in answer["body"]["message"] and answer["corr"] == env["id"], answer
        # Split as Quad's own peers send it, the same request is answered,
        # in two frames: the header, then the body.
        header = {k: v for k, v in env.items() if k != "body"}
        header["id"] = env["id"] + "-2"
        with Client(stack.frontend, zmq_context=ctx) as client:
            client.send(b"catalog", json.dumps(header).encode(), json.dumps(env["body"]).encode())
            parts = client.recv_all_as_list(timeout=10)
        assert len(parts) == 3, parts
        head, body = json.loads(parts[1]), json.loads(parts[2])
        assert head["kind"] == "reply" and head["corr"] == header["id"] and "body" not in head, head
        assert isinstance(body.get("categories"), list) and body["categories"], body
    finally:
        ctx.destroy(linger=0)
    # Raw MDP gone wrong, each answered in the form it came in.
    for frames in ([b"", b"MDPC02", b"\x01", b"catalog"], [b"", b"MDPC01", b"\x01", b"catalog", b"{}"],
                   [b"", b"MDPC02", b"\x05", b"catalog", b"{}"], [b"", b"MDPC02", b"\x01", b"Not A Service", b"{}"],
                   [b"", b"MDPC02", b"\x01", b"catalog", b"not json"], [b"MDPC02", b"\x01", b"catalog", b"{}"]):
        ctx = stack.curve_context()
        sock = ctx.socket(zmq.DEALER)
        try:
            sock.connect(stack.frontend)
            sock.send_multipart(frames)
            assert sock.poll(10_000), f"no answer to {frames!r}"
            reply = sock.recv_multipart()
            head = [b""] if frames[0] == b"" else []
            assert reply[:len(head) + 2] == head + [b"MDPC02", b"\x04"], (frames, reply)
            answer = json.loads(reply[-1])
            assert answer["kind"] == "error" and answer["body"]["status"] == 400, (frames, answer)
            assert not envelope_errors(answer), envelope_errors(answer)
        finally:
            sock.close(0)
            ctx.destroy(linger=0)
    # A worker's malformed message is dropped; the broker still serves.
    raw = zmq.Context.instance().socket(zmq.DEALER)
    raw.connect(stack.backend)
    raw.send_multipart([b"", b"MDPW02", b"\x09", b"junk"])
    raw.send_multipart([b"", b"MDPW02", b"\x01", b"Bad.Name"])
    raw.close(0)
    ctx = stack.curve_context()
    try:
        request, answer = mdp_call(ctx, stack.frontend, "catalog.categories", {})
        assert answer["kind"] == "reply", answer
    finally:
        ctx.destroy(linger=0)
