#!/usr/bin/python3
"""`tandem generate --model HF_DIR --tokenizer tokenizer.json`: greedy sampling from the tiny Llama and
Qwen2 Hugging Face fixture directories, checked against the independent float64 reference of
scripts/fixtures/make_llama.py.

For each fixture the prompt is the text of the fixture's first reference sequence (byte-level ids
0-96 are the bytes themselves in tests/fixtures/tokenizers/bytelevel_tiny), so:
  - two runs with --temperature 0 print the same bytes (and --samples 2 gives two equal texts);
  - the first generated token is the argmax of the committed reference logits at the prompt's end;
  - the whole continuation is the reference forward's greedy continuation, decoded here with the
    tokenizer.json vocabulary and the byte-level alphabet (not with the C++ tokenizer).
Bad paths and a tokenizer that does not fit the model exit 2 with a one-line message.

  check_generate.py TANDEM SOURCE_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

import torch

tandem, root = sys.argv[1], Path(sys.argv[2])
sys.path.insert(0, str(root / "scripts" / "fixtures"))
from make_llama import forward_logits, read_hf_dir  # noqa: E402

TOKENIZER = root / "tests" / "fixtures" / "tokenizers" / "bytelevel_tiny" / "tokenizer.json"
NEW_TOKENS = 12
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def byte_decoder():
    """GPT-2's byte-level alphabet, inverted: printable bytes stand for themselves, the others
    (controls, space, 127-160, 173) map to 256 + n in order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def decode(ids):
    vocab = json.loads(TOKENIZER.read_text())["model"]["vocab"]
    by_id, bytes_of = {i: t for t, i in vocab.items()}, byte_decoder()
    return bytes(bytes_of[ch] for i in ids for ch in by_id[i])


def run(*args):
    return subprocess.run([tandem, "generate", *args], capture_output=True)


for name in ("tiny_llama", "tiny_qwen2"):
    model_dir = root / "tests" / "fixtures" / "llama" / name
    ref = json.loads((root / "tests" / "fixtures" / "llama" / f"{name}.logits.json").read_text())
    prompt_ids = ref["sequences"][0]
    prompt = bytes(prompt_ids)
    def at(temperature):
        return ["--model", str(model_dir), "--tokenizer", str(TOKENIZER), "--prompt", prompt, "--temperature",
                temperature, "--max-new-tokens", str(NEW_TOKENS)]
    args = at("0")
    first, second = run(*args), run(*args)
    check(first.returncode == 0, f"{name}: generate exits 0 ({first.stderr.decode(errors='replace').strip()})")
    check(first.stdout == second.stdout and first.stdout != b"", f"{name}: two greedy runs print the same text")
    # Decoded together the two samples' log-probs may round differently in float32; the text may not.
    text = first.stdout.split(b"    (logp ")[0]
    two = run(*args, "--samples", "2", "--seed", "5").stdout
    check(two.count(text + b"    (logp ") == 2, f"{name}: greedy ignores the seed (two samples, the same text)")

    cfg, tensors = read_hf_dir(model_dir)
    w64 = {k: t.to(torch.float64) for k, t in tensors.items()}
    ids = list(prompt_ids)
    for _ in range(NEW_TOKENS):
        ids.append(int(forward_logits(cfg, w64, ids)[-1].argmax()))
    greedy = ids[len(prompt_ids):]
    fixture_argmax = int(torch.tensor(ref["logits"][0][-1]).argmax())
    check(greedy[0] == fixture_argmax, f"{name}: the reference's first greedy token is the fixture logits' argmax")
    want = prompt + b" -> " + decode(greedy) + b"    (logp "
    check(first.stdout.startswith(want), f"{name}: greedy continuation equals the float64 reference "
                                         f"{greedy} (got {first.stdout[:80]!r})")
    # Control: sampling at temperature 1 does not reproduce the greedy text, so the check above can fail.
    hot = run(*at("1"), "--seed", "1").stdout
    check(hot != b"" and not hot.startswith(want), f"{name}: control: temperature 1 differs from greedy")


def expect_exit2(what, args, needle):
    r = run(*args)
    err = r.stderr.decode(errors="replace").strip()
    check(r.returncode == 2 and needle in err and "\n" not in err, f"{what}: exit 2 naming it ({r.returncode}: {err})")


fixture = str(root / "tests" / "fixtures" / "llama" / "tiny_llama")
tok = str(TOKENIZER)
expect_exit2("missing --model dir", ["--model", "/nonexistent/model", "--tokenizer", tok, "--prompt", "x"],
             "/nonexistent/model: no such directory")
expect_exit2("missing --tokenizer file", ["--model", fixture, "--tokenizer", "/nonexistent/tok.json", "--prompt", "x"],
             "/nonexistent/tok.json")
expect_exit2("--model without config.json", ["--model", str(TOKENIZER.parent), "--tokenizer", tok, "--prompt", "x"],
             "config.json")
expect_exit2("--model without tokenizer.json and no --tokenizer", ["--model", fixture, "--prompt", "x"],
             "give --tokenizer")
expect_exit2("a tokenizer with ids past the model's vocabulary", ["--model", fixture, "--tokenizer", tok,
                                                                  "--prompt", "hello"],
             "outside the model's vocabulary of 97")
expect_exit2("neither --model nor --checkpoint", ["--prompt", "x"], "give exactly one of --checkpoint")
expect_exit2("both --model and --checkpoint", ["--model", fixture, "--checkpoint", fixture, "--prompt", "x"],
             "--checkpoint")
sys.exit(1 if failures else 0)
