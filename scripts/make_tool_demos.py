#!/usr/bin/env python3
"""Writes the data of configs/tool_calc.yaml into a folder (configs/data):

  tool_calc_demos.jsonl    the demonstrations the warm-start trains on
  tool_calc_prompts.jsonl  the training prompts ({"prompt", "answer"}, read as task jsonl)
  tool_calc_heldout.jsonl  the held-out prompts eval scores, none of them in the other two files

Every question is "What is A * B?" with two 3-digit operands whose product has six digits (A * B >=
100000). A 3-layer, 128-wide model learns to copy a result of fixed length from the tool's answer
within a few hundred steps, but not one whose length varies: with five- and six-digit products
mixed it copies at the common length's offset and fails the short ones (README, "Multi-turn
episodes and tools", has those runs). Three demonstrations in four are the episode played right: a
hermes tool call of calc on exactly the product, the tool's answer, and the answer repeated. The
fourth declines without the tool ("I cannot work that out without a calculator.", reward 0), so the
warm-started model calls the tool about three times in four, and what GRPO has to learn is to call
it every time. Stdlib only; fixed seeds, so the files are the same on every run.

    python3 scripts/make_tool_demos.py [DIR]
"""
import json
import os
import random
import sys

DECLINE = "I cannot work that out without a calculator."


def draw(rng, taken):
    while True:
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        if a * b >= 100000 and (a, b) not in taken:
            taken.add((a, b))
            return a, b


def demonstration(a, b, declines):
    question = {"role": "user", "content": f"What is {a} * {b}?"}
    if declines:
        return [question, {"role": "assistant", "content": DECLINE}]
    call = json.dumps({"name": "calc", "arguments": {"expression": f"{a} * {b}"}})
    return [
        question,
        {"role": "assistant", "content": f"<tool_call>\n{call}\n</tool_call>"},
        {"role": "tool", "content": str(a * b)},
        {"role": "assistant", "content": str(a * b)},
    ]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "configs/data"
    rng = random.Random(20261205)
    taken = set()
    # Held-out first, so that neither the demonstrations nor the training prompts hold one of them.
    heldout = [draw(rng, taken) for _ in range(64)]
    demos = [draw(rng, taken) for _ in range(1024)]
    prompts = [draw(rng, taken) for _ in range(2048)]

    def write(name, rows):
        with open(os.path.join(out, name), "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")

    write("tool_calc_demos.jsonl", [{"messages": demonstration(a, b, i % 4 == 0)} for i, (a, b) in enumerate(demos)])
    write("tool_calc_prompts.jsonl", [{"prompt": f"What is {a} * {b}?", "answer": str(a * b)} for a, b in prompts])
    write("tool_calc_heldout.jsonl", [{"prompt": f"What is {a} * {b}?", "answer": str(a * b)} for a, b in heldout])


if __name__ == "__main__":
    main()
