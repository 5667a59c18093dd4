"""The telemetry event rules, twice: as JSON Schemas in protos/telemetry/ and
by hand in Swift (Sources/QuadTelemetry/PhoneEvent.swift). This test holds
them together: the examples and the invalid cases get the same verdict from
jsonschema and from `quad-telemetry validate`, and so do a few thousand
seeded random mutations of valid events.

The executable is taken from QUAD_BIN_DIR, else the debug or release folder
of QUAD_BUILD_DIR (default .build); a missing one fails the test (build
first: swift build --product quad-telemetry).
"""

import copy
import json
import os
import random
import subprocess
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "protos"
EXAMPLES = PROTOS / "examples" / "telemetry"

SCHEMAS = [json.loads(p.read_text()) for p in PROTOS.rglob("*.json") if "examples" not in p.parts]
REGISTRY = Registry().with_resources(
    (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012)) for s in SCHEMAS if "$id" in s)
EVENT = json.loads((PROTOS / "telemetry" / "event.schema.json").read_text())
VALIDATOR = Draft202012Validator(EVENT, registry=REGISTRY)

GOOD = [json.loads(p.read_text()) for p in sorted(EXAMPLES.glob("event.schema+*.json"))]
BAD = json.loads((EXAMPLES / "_invalid-events.json").read_text())["cases"]


def executable():
    candidates = []
    if os.environ.get("QUAD_BIN_DIR"):
        candidates.append(Path(os.environ["QUAD_BIN_DIR"]))
    build = Path(os.environ.get("QUAD_BUILD_DIR") or ROOT / ".build")
    candidates += [build / "debug", build / "release"]
    for d in candidates:
        exe = d / "quad-telemetry"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    pytest.fail(f"quad-telemetry is not built in any of {[str(c) for c in candidates]}: swift build --product quad-telemetry")


def swift_verdicts(events):
    """One (valid, reason) per event from `quad-telemetry validate`."""
    run = subprocess.run([str(executable()), "validate"], input=json.dumps(events).encode(), capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode(errors="replace")
    lines = [json.loads(line) for line in run.stdout.decode().splitlines()]
    assert [line["index"] for line in lines] == list(range(len(events)))
    return [(line["valid"], line.get("reason")) for line in lines]


def schema_valid(event):
    return not any(True for _ in VALIDATOR.iter_errors(event))


def test_every_event_name_has_an_example_and_a_props_schema():
    names = set(EVENT["properties"]["name"]["enum"])
    assert {e["name"] for e in GOOD} == names
    assert {p.name[: -len(".schema.json")] for p in (PROTOS / "telemetry" / "events").glob("*.schema.json")} == names


@pytest.mark.parametrize("event", GOOD, ids=[e["name"] for e in GOOD])
def test_examples_are_valid_for_jsonschema(event):
    errors = [e.message for e in VALIDATOR.iter_errors(event)]
    assert not errors, errors


@pytest.mark.parametrize("case", BAD, ids=[c["why"] for c in BAD])
def test_invalid_cases_fail_jsonschema(case):
    assert not schema_valid(case["event"]), case["why"]


def test_swift_agrees_on_the_examples_and_the_invalid_cases():
    verdicts = swift_verdicts(GOOD + [c["event"] for c in BAD])
    for event, (valid, reason) in zip(GOOD, verdicts[: len(GOOD)]):
        assert valid, f"{event['name']}: quad-telemetry refused a valid example: {reason}"
    for case, (valid, reason) in zip(BAD, verdicts[len(GOOD):]):
        assert not valid, f"quad-telemetry accepted an invalid event: {case['why']}"
        assert reason, case["why"]


# Values a mutation may put anywhere.
POOL = [
    None, True, False, 0, 1, -1, 7, 1000, 1001, 1_000_000, 1_000_001, 2**62, 2**70, 0.5, 3.0, -0.0,
    946684800000, 946684799999, 4102444800000, 4102444800001, 1764583200000, 1764583200000.0, 1764583200000.25,
    31536000000, 31536000001, "", "x", "home", "Home", "favorites", "search", "cart", "explore", "buy", "rent", "lease",
    "x" * 64, "x" * 65, "é" * 64, "😀" * 64, "😀" * 65, "view.opened", "cart.added",
    "019AD9A2-0000-7000-8000-000000000000", "019ad9a2-0000-7000-8000-00000000000", "019ad9a2_0000_7000_8000_000000000000",
    "g19ad9a2-0000-7000-8000-000000000000", [], [1], {}, {"a": 1},
]


def mutate(rng, event):
    e = copy.deepcopy(event)
    for _ in range(rng.choice([1, 1, 1, 2])):
        target = e["props"] if (rng.random() < 0.5 and isinstance(e.get("props"), dict)) else e
        keys = list(target.keys())
        op = rng.random()
        if op < 0.6 and keys:
            target[rng.choice(keys)] = rng.choice(POOL)
        elif op < 0.8 and keys:
            del target[rng.choice(keys)]
        elif op < 0.9:
            target[rng.choice(["extra", "lot", "view", "seq", "queued_ms", "flow", "offline"])] = rng.choice(POOL)
        else:
            e["name"] = rng.choice(EVENT["properties"]["name"]["enum"])  # props of another name
    return e


def test_swift_agrees_with_jsonschema_on_random_mutations():
    rng = random.Random(20251201)
    events = [mutate(rng, rng.choice(GOOD)) for _ in range(4000)]
    events += GOOD
    verdicts = swift_verdicts(events)
    disagreements = []
    for event, (valid, reason) in zip(events, verdicts):
        expected = schema_valid(event)
        if expected != valid:
            disagreements.append(f"jsonschema {'accepts' if expected else 'refuses'}, Swift {'accepts' if valid else 'refuses'} "
                                 f"({reason}): {json.dumps(event)[:300]}")
    valid_count = sum(1 for v, _ in verdicts if v)
    assert not disagreements, f"{len(disagreements)} disagreements, first ones:\n" + "\n".join(disagreements[:10])
    assert 200 < valid_count < len(events) - 200, f"the mutations should give both verdicts often: {valid_count} valid of {len(events)}"
