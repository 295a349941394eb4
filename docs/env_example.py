#!/usr/bin/env python3
"""An example environment for tandem's environment protocol (docs/env_protocol.md), standard
library only: "unit", a unit-conversion task with a convert(value, from_unit, to_unit) tool.

Run by tandem as `tracks.ar.env.command: python3 docs/env_example.py`, one process per rank.
It reads one JSON request per line on stdin and writes one JSON answer per line on stdout, each
answer echoing its request's "id". Requests are handled by a small thread pool, so answers may
come out of order (tandem matches them by id); anything it wants to log goes to stderr.
"""
import json
import random
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

FACTORS = {"m": 1.0, "km": 1000.0, "cm": 0.01, "mm": 0.001, "mi": 1609.344, "ft": 0.3048, "in": 0.0254}
TOOLS = [{"type": "function", "function": {
    "name": "convert", "description": "Convert a length from one unit to another (m, km, cm, mm, mi, ft, in).",
    "parameters": {"type": "object", "properties": {
        "value": {"type": "number"}, "from_unit": {"type": "string"}, "to_unit": {"type": "string"}},
        "required": ["value", "from_unit", "to_unit"]}}}]

out_lock = threading.Lock()
episodes = {}  # episode id -> the expected answer (a string)
episodes_lock = threading.Lock()


def answer(obj):
    with out_lock:  # one whole line at a time: answers from several threads never interleave
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def convert(args):
    try:
        value = float(args["value"])
        return f"{value * FACTORS[args['from_unit']] / FACTORS[args['to_unit']]:.4g}"
    except (KeyError, TypeError, ValueError) as e:
        return f"error: {e!r} (units: {', '.join(FACTORS)})"


def handle(req):
    kind, rid = req["type"], req["id"]
    if kind == "hello":
        return {"id": rid, "name": "unit", "tools": TOOLS, "max_turns": 3, "stop": ["</tool_call>"]}
    episode = req["episode"]
    if kind == "reset":
        # Every member of a GRPO group gets the same row and seed, hence the same question.
        rng = random.Random(req["seed"])
        value, a, b = rng.randint(2, 90), *rng.sample(sorted(FACTORS), 2)
        expected = f"{value * FACTORS[a] / FACTORS[b]:.4g}"
        with episodes_lock:
            episodes[episode] = expected
        question = f"How many {b} are {value} {a}? Use the convert tool."
        return {"id": rid, "messages": [{"role": "user", "content": question}]}
    if kind == "close":
        with episodes_lock:
            episodes.pop(episode, None)
        return {"id": rid}
    with episodes_lock:  # step
        expected = episodes.get(episode)
    if expected is None:
        return {"id": rid, "error": f"unknown episode {episode}"}
    if req["tool_calls"] or req["parse_error"]:
        msgs = [{"role": "tool", "content": convert(c["arguments"]) if c["name"] == "convert"
                 else f"error: unknown tool {c['name']}"} for c in req["tool_calls"]]
        if req["parse_error"]:
            msgs.append({"role": "tool", "content": "error: " + req["parse_error"]})
        return {"id": rid, "messages": msgs, "reward": 0.0, "done": False}
    reward = 1.0 if expected in req["text"] else 0.0
    return {"id": rid, "messages": [], "reward": reward, "done": True}


def serve(req):
    # A pool swallows a task's exception: print it and fail that episode, rather than leave the
    # request unanswered until tandem's timeout restarts the process.
    try:
        answer(handle(req))
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        answer({"id": req.get("id"), "error": f"the environment failed: {e!r}"})


def main():
    with ThreadPoolExecutor(max_workers=4) as pool:
        for line in sys.stdin:
            if line.strip():
                pool.submit(serve, json.loads(line))


if __name__ == "__main__":
    main()
