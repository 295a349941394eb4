#!/usr/bin/env python3
"""Writes configs/data/tool_calc_demos.jsonl: the demonstrations configs/tool_calc.yaml warm-starts
on. Each is one calculator episode played right: the question (tandem's multiply task, operands
of MIN_DIGITS to MAX_DIGITS digits), a hermes tool call of calc on exactly that product, the
tool's answer, and the answer repeated. Half of them have a product one digit shorter than
the longest (about one product in six of two 3-digit numbers is): with the usual mix a small model
learns to copy the tool's answer at the offset of the common length only, and fails every short
one. Stdlib only; the seed keeps the questions apart from the run's prompts.

    python3 scripts/make_tool_demos.py [N [MIN_DIGITS MAX_DIGITS]] > configs/data/tool_calc_demos.jsonl
"""
import json
import random
import sys


def operand(rng, lo, hi):
    digits = rng.randint(lo, hi)
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    lo, hi = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (3, 3)
    rng = random.Random(20261204)
    longest = 2 * hi
    for i in range(n):
        while True:
            a, b = operand(rng, lo, hi), operand(rng, lo, hi)
            if (len(str(a * b)) < longest) == (i % 2 == 0):
                break
        expression = f"{a} * {b}"
        call = json.dumps({"name": "calc", "arguments": {"expression": expression}})
        messages = [
            {"role": "user", "content": f"What is {expression}?"},
            {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
            {"role": "tool", "content": str(a * b)},
            {"role": "assistant", "content": str(a * b)},
        ]
        print(json.dumps({"messages": messages}))


if __name__ == "__main__":
    main()
