#!/usr/bin/python3
"""The malformed-input corpus ([15], [16]): every command on inputs a new user or a damaged disk
produces (recipes, --set, model directories, checkpoints, rollout dumps, reward processes, training
data, CLI values, run directories). Each case must end within its timeout with exit 2, a message
naming the input, no 'internal error' and no stack trace, and (for train) nothing written to the
run directory; a reward process the run started must not outlive it. Static inputs live in
tests/fixtures/bad/; the rest (FIFOs, damaged copies of real files) are made here.

  check_bad_inputs.py TANDEM MPIRUN SOURCE_DIR
"""
import json
import os
import shutil
import signal
import struct
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

tandem, mpirun, root = sys.argv[1], sys.argv[2], Path(sys.argv[3])
bad = root / "tests" / "fixtures" / "bad"
llama = root / "tests" / "fixtures" / "llama"
tiny = root / "tests" / "e2e" / "tiny.yaml"
work = Path(tempfile.mkdtemp(prefix="tandem_bad_"))
runs = work / "runs"
failures = []
count = 0


def run(args, timeout=60, env=None, mpi=0):
    cmd = ([mpirun, "--oversubscribe", "--allow-run-as-root", "--bind-to", "none", "-np", str(mpi)] if mpi else [])
    cmd += [tandem] + [str(a) for a in args]
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, env={**os.environ, **(env or {})})
        return p.returncode, p.stderr.decode(errors="replace") + p.stdout.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"(no exit within {timeout} s: a hang)"


def expect(name, args, needle, timeout=60, env=None, mpi=0, run_dir=None):
    global count
    count += 1
    rc, out = run(args, timeout, env, mpi)
    errors = [l for l in out.splitlines() if "tandem: error" in l]
    problems = []
    if rc != 2:
        problems.append(f"exit {rc}")
    if needle not in out:
        problems.append(f"no '{needle}'")
    if "internal error" in out or "Exception raised from" in out or "terminate called" in out:
        problems.append("an internal error or a stack trace")
    if run_dir is not None and Path(run_dir).exists():
        problems.append(f"{run_dir} was written before validation passed")
    if problems:
        failures.append(name)
        print(f"FAIL {name}: {'; '.join(problems)}\n     {out.strip()[-600:]}")
    else:
        print(f"ok   {name}: {errors[0] if errors else out.strip().splitlines()[-1]}"[:230])


def fifo(path):
    os.mkfifo(path)
    return path


def train_args(*extra):
    return ["train", "--config", tiny, "--set", f"run.out_dir={runs}", *extra]


# --- recipes and --set ---
expect("a section written twice", ["check-config", "--config", bad / "dup_section.yaml"],
       "run is given twice (first at line 2)")
expect("a nested key written twice", ["check-config", "--config", bad / "dup_nested.yaml"],
       "tracks.ar.rollout.group_size is given twice (first at line 4)")
expect("a complex (list) key", ["check-config", "--config", bad / "complex_key.yaml"], "must be a plain name, not a list")
expect("a list where a section goes", ["check-config", "--config", bad / "wrong_nesting.yaml"], "tracks.ar.rollout")
expect("an unclosed flow mapping", ["check-config", "--config", bad / "unclosed_flow.yaml"], "unclosed_flow.yaml:")
expect("a recipe that is not UTF-8", ["check-config", "--config", bad / "not_utf8.yaml"], "not_utf8.yaml")
expect("--set with a trailing '.'", ["check-config", "--set", "run.steps.=3"], "empty component")
expect("--set with an empty middle component", ["check-config", "--set", "run..steps=3"], "empty component")
expect("--set a duplicate key in its value", ["check-config", "--set", "run={steps: 1, steps: 2}"], "given twice")
expect("a recipe that is a FIFO", ["check-config", "--config", fifo(work / "recipe.fifo")], "not a regular file",
       timeout=20)
expect("a recipe that is a directory", ["check-config", "--config", work], "is a directory")
expect("a recipe that does not exist", ["check-config", "--config", work / "nope.yaml"], "does not exist")
expect("train on a duplicated key writes nothing", ["train", "--config", bad / "dup_section.yaml", "--set",
                                                   f"run.out_dir={runs}", "--set", "run.name=dup"], "given twice",
       run_dir=runs / "dup")

# --- Hugging Face directories ---
def hf_copy(name, edit=None):
    d = work / name
    shutil.copytree(llama / "tiny_qwen2", d)
    if edit:
        cfg = json.loads((d / "config.json").read_text())
        edit(cfg)
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def with_hf(d, *extra):
    return ["check-config", "--config", bad / "minimal.yaml", "--set", f"tracks.ar.model.hf_dir={d}",
            "--set", "tracks.ar.model.max_seq_len=64",
            "--set", "tracks.ar.tokenizer.kind=char", *extra]


expect("config.json vocabulary of 2^40", with_hf(hf_copy("vocab", lambda c: c.update(vocab_size=2 ** 40))),
       "vocab_size 1099511627776 is out of range")
expect("config.json hidden size of 2^40", with_hf(hf_copy("hidden", lambda c: c.update(hidden_size=2 ** 40))),
       "hidden_size 1099511627776 is out of range")
expect("config.json MLP size of 2^40", with_hf(hf_copy("mlp", lambda c: c.update(intermediate_size=2 ** 40))),
       "intermediate_size 1099511627776 is out of range")
expect("config.json 10^6 layers against 2-layer weights",
       with_hf(hf_copy("layers", lambda c: c.update(num_hidden_layers=10 ** 6))),
       "num_hidden_layers 1000000 but the weights hold 2 layers", timeout=20)
expect("config.json hidden size that does not match the weights",
       with_hf(hf_copy("shape", lambda c: c.update(hidden_size=96, num_attention_heads=12))), "expected shape")
d = hf_copy("notjson")
(d / "config.json").write_text("{ not json")
expect("config.json that is not JSON", with_hf(d), "config.json: invalid JSON")
d = hf_copy("cfgfifo")
(d / "config.json").unlink()
fifo(d / "config.json")
expect("config.json that is a FIFO", with_hf(d), "not a regular file", timeout=20)
d = hf_copy("stfifo")
for f in d.glob("*.safetensors"):
    f.unlink()
(d / "model.safetensors.index.json").unlink()
fifo(d / "model.safetensors")
expect("model.safetensors that is a FIFO", with_hf(d), "not a regular file", timeout=20)
d = hf_copy("truncated")
shard = sorted(d.glob("*.safetensors"))[0]
shard.write_bytes(shard.read_bytes()[:-7])
expect("a truncated weight shard", with_hf(d), shard.name)
expect("hf_dir that does not exist", with_hf(work / "no_model"), "no such directory")
expect("a Gemma 3 image + text config.json", with_hf(hf_copy("gemma3mm", lambda c: c.update(model_type="gemma3"))),
       "Gemma3ForConditionalGeneration")
expect("block gemma3 without a window", ["check-config", "--set", "tracks.ar.model.block=gemma3",
                                         "--set", "tracks.ar.model.qk_norm=true"],
       "tracks.ar.model.sliding_window: must be set")
expect("full_attention_layers past the last layer", ["check-config", "--set", "tracks.ar.model.sliding_window=8",
                                                     "--set", "tracks.ar.model.full_attention_layers=[1,3]"],
       "tracks.ar.model.full_attention_layers: names layer 3 but the model has 3")

# NaN in a weight: only loading reads data, so generate --model meets it.
d = hf_copy("nan")
shard = sorted(d.glob("*.safetensors"))[0]
raw = bytearray(shard.read_bytes())
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
name, entry = next((k, v) for k, v in sorted(header.items()) if k != "__metadata__" and v["dtype"] == "F32")
at = 8 + n + entry["data_offsets"][0]
raw[at:at + 4] = struct.pack("<f", float("nan"))
shard.write_bytes(bytes(raw))
expect("a NaN weight", ["generate", "--model", d, "--tokenizer", root / "tests/fixtures/tokenizers/bytelevel_tiny",
                        "--prompt", "x"], f"tensor {name} holds NaN or Inf")

# --- training data ---
for f, needle in [("data_not_object.jsonl", "data_not_object.jsonl:2: expected a JSON object"),
                  ("data_number_prompt.jsonl", "data_number_prompt.jsonl:2: key 'prompt' must be a string"),
                  ("data_bad_utf8.jsonl", "data_bad_utf8.jsonl:2"),
                  ("data_deep.jsonl", None),
                  ("data_missing_answer.jsonl", "data_missing_answer.jsonl:2: missing key 'answer'"),
                  ("data_truncated.jsonl", "data_truncated.jsonl:2: not valid JSON")]:
    args = ["check-config", "--set", "tracks.ar.data.task=jsonl", "--set", f"tracks.ar.data.path={bad / f}",
            "--set", "tracks.ar.tokenizer.alphabet=0123456789+=x"]
    if needle is None:  # deep nesting of an unused key is fine JSON: it must load, not crash
        rc, out = run(args)
        count += 1
        ok = rc == 0 or (rc == 2 and "internal error" not in out)
        print(("ok   " if ok else "FAIL ") + f"{f}: exit {rc}")
        if not ok:
            failures.append(f)
        continue
    expect(f, args, needle)
expect("a reference answer without a number",
       ["check-config", "--set", "tracks.ar.data.task=jsonl", "--set", f"tracks.ar.data.path={bad / 'data_no_number.jsonl'}",
        "--set", "tracks.ar.data.prompt_key=question", "--set", "tracks.ar.reward.kind=math_answer",
        "--set", "tracks.ar.tokenizer.alphabet=0123456789 Howmanyre?"],
       "data_no_number.jsonl:2: the reference answer has no number")
expect("a reference answer of two numbers (a fraction)",
       ["check-config", "--set", "tracks.ar.data.task=jsonl", "--set",
        f"tracks.ar.data.path={bad / 'data_fraction_answer.jsonl'}",
        "--set", "tracks.ar.data.prompt_key=question", "--set", "tracks.ar.reward.kind=math_answer",
        "--set", "tracks.ar.tokenizer.alphabet=0123456789 Howmanyreuchfit?"],
       "data_fraction_answer.jsonl:2: the reference answer holds 2 numbers")
# (A tokenizer without BOS and no chat template: the char tokenizer's BOS would open it.)
expect("an empty prompt", ["check-config", "--set", "tracks.ar.data.task=jsonl", "--set",
                           f"tracks.ar.data.path={bad / 'data_empty_prompt.jsonl'}",
                           "--set", "tracks.ar.tokenizer.kind=hf", "--set",
                           f"tracks.ar.tokenizer.path={root / 'tests/fixtures/tokenizers/bytelevel_tiny'}",
                           "--set", "tracks.ar.data.chat_template=none", "--set", "tracks.ar.model.vocab_size=512"],
       "data_empty_prompt.jsonl:2: the prompt encodes to no tokens")
expect("a data file that is a FIFO", ["check-config", "--set", "tracks.ar.data.task=jsonl",
                                      "--set", f"tracks.ar.data.path={fifo(work / 'data.fifo')}"],
       "not a regular file", timeout=20)

# --- run directories ---
(work / "a_file").write_text("x")
expect("a pretrained-flow directory under a file", ["check-config", "--set", "tracks.image.enabled=true",
                                                  "--set", "tracks.image.pretrain.steps=5",
                                                  "--set", f"tracks.image.pretrain.path={work / 'a_file' / 'flow'}"],
       "tracks.image.pretrain.path: ")
expect("run.out_dir under a regular file", train_args("--set", f"run.out_dir={work / 'a_file' / 'runs'}"),
       "is not a directory")
expect("run.out_dir that cannot be created (under /proc)", train_args("--set", "run.out_dir=/proc/tandem_runs"),
       "/proc/tandem_runs")
expect("a run name longer than a file name may be", train_args("--set", "run.name=" + "n" * 300),
       "a file name may have at most 255")
expect("a replay_dir that does not exist", train_args("--set", f"tracks.ar.rollout.replay_dir={work / 'none'}",
                                                      "--set", "run.name=replay"), "is not a directory",
       run_dir=runs / "replay")
expect("a replay_dir that is a file", train_args("--set", f"tracks.ar.rollout.replay_dir={work / 'a_file'}",
                                                 "--set", "run.name=replay2"), "is not a directory")
expect("run.device cuda without a GPU", train_args("--set", "run.device=cuda", "--set", "run.name=cuda"),
       "no usable GPU", run_dir=runs / "cuda")

# --- checkpoints and rollout dumps: real ones, then damaged ---
rc, out = run(train_args("--set", "run.name=src", "--set", "run.steps=2", "--set", "run.save_every=1",
                         "--set", "tracks.ar.rollout.dump=true", "--set", "tracks.ar.warmstart.steps=0"), mpi=2)
if rc != 0:
    print("FAIL: the source run for the checkpoint cases failed\n" + out[-800:])
    failures.append("source run")
else:
    def damaged(name, edit):
        d = runs / name
        shutil.copytree(runs / "src", d)
        ck = d / "checkpoints" / "step_000002"
        (ck / "MANIFEST.json").unlink()  # written by an older build: nothing to verify against
        edit(ck)
        return d

    def resume(d, needle, what):
        expect(what, train_args("--set", f"run.name={d.name}", "--set", "run.steps=3", "--resume", "auto"), needle, mpi=2)

    resume(damaged("state_type", lambda ck: (ck / "trainer_state.json").write_text('{"completed_steps": "two"}')),
           "trainer_state.json: completed_steps", "trainer_state.json with a string step")
    resume(damaged("state_text", lambda ck: (ck / "trainer_state.json").write_text("{ truncated")),
           "trainer_state.json: not a JSON object", "trainer_state.json that is not JSON")
    resume(damaged("state_tracks", lambda ck: (ck / "trainer_state.json").write_text('{"completed_steps": 2, "tracks": []}')),
           "trainer_state.json: tracks", "trainer_state.json without its tracks")
    resume(damaged("cursor", lambda ck: (ck / "trainer_state.json").write_text(
        '{"completed_steps": 2, "tracks": {"ar": {"data_cursor": {"epoch": -1}}}}')),
        "trainer_state.json", "a damaged data cursor")
    resume(damaged("optim", lambda ck: (ck / "optimizer_tp0.pt").write_bytes(b"not a torch file")),
           "optimizer_tp0.pt: cannot be read", "a damaged optimizer file")

    def before_the_move(ck):  # trainer_state.json as the LibTorch 1.13 build wrote it: no "libtorch"
        state = json.loads((ck / "trainer_state.json").read_text())
        assert state.pop("libtorch", None) is not None, "trainer_state.json records no libtorch"
        (ck / "trainer_state.json").write_text(json.dumps(state))
        (ck / "optimizer_tp0.pt").write_bytes(b"an archive this LibTorch cannot read")

    resume(damaged("old_optim", before_the_move), "written before tandem moved to PyTorch 2.x",
           "a pre-2.x checkpoint whose optimizer state does not read")

    def cut(ck):
        f = ck / "ar_model" / "model.safetensors"
        f.write_bytes(f.read_bytes()[:-100])

    resume(damaged("weights", cut), "model.safetensors", "truncated checkpoint weights")
    expect("ckpt info on a manifest-less damaged checkpoint", ["ckpt", "info", runs / "weights"], "model.safetensors")
    # An export folder that cannot be written is the user's to fix (exit 2 naming it), not an internal error.
    expect("ckpt export-hf into a folder that cannot be written", ["ckpt", "export-hf", runs / "src", "/proc/tandem_out"],
           "/proc/tandem_out: the export could not be written")
    # A field of the wrong JSON type, read by ckpt info (no manifest to catch it first): the file is named.
    for field, value in [("completed_steps", '"two"'), ("tracks", "[]"), ("libtorch", "7")]:
        def wrong_type(ck, field=field, value=value):
            state = json.loads((ck / "trainer_state.json").read_text())
            state[field] = json.loads(value)
            (ck / "trainer_state.json").write_text(json.dumps(state))
        expect(f"ckpt info: trainer_state.json {field} of the wrong type",
               ["ckpt", "info", damaged(f"info_{field}", wrong_type)], "trainer_state.json")

    dumps = runs / "src" / "rollouts"
    for name, edit, needle in [
        ("truncated", lambda b: b[:-5], "damaged rollout dump"),
        ("token", lambda b: b[:5 * 8 + 8] + struct.pack("<q", 10 ** 6) + b[5 * 8 + 16:], "outside the model's vocabulary"),
    ]:
        d = work / f"dumps_{name}"
        shutil.copytree(dumps, d)
        f = sorted(d.glob("step_000001.dp0.bin"))[0]
        f.write_bytes(edit(f.read_bytes()))
        expect(f"a rollout dump: {name}", train_args("--set", f"run.name=rp_{name}", "--set", "run.steps=1",
                                                     "--set", f"tracks.ar.rollout.replay_dir={d}"), needle)

# --- reward processes ---
ANSWER = 'idx=$(printf "%s\\n" "$line" | sed -n "s/.*\\"index\\":\\([0-9]*\\).*/\\1/p"); echo "{\\"index\\": $idx, \\"reward\\": 0}"'


def script(name, text):
    f = work / f"{name}.sh"
    f.write_text(text + "\n")
    return f"sh {f}"


for name, text, needle in [
    ("prints garbage", "while read l; do echo garbage; done", "not JSON"),
    ("exits at once", "exit 3", "exited with status 3"),
    ("answers without the index", "while read l; do echo '{\"reward\": 1}'; done", 'no integer \"index\" key'),
    ("answers twice", f"while IFS= read -r line; do {ANSWER}; {ANSWER}; done", "a line printed out of turn"),
]:
    expect(f"a reward command that {name}", train_args("--set", f"run.name=rw_{name.replace(' ', '_')}",
                                                        "--set", "run.steps=1", "--set", "tracks.ar.warmstart.steps=0",
                                                        "--set", "tracks.ar.reward.kind=command",
                                                        "--set", f"tracks.ar.reward.command={script(name.replace(' ', '_'), text)}"),
           needle, mpi=2)

# A reward command that hangs on rank 1 while rank 0 goes on: rank 0's collective times out, the
# job ends, and nothing of rank 1's command (its shell, its sleep) may outlive it.
# The marker is in both processes' command lines: the script's name (sh runs it) and a link to
# sleep under a name that holds it.
marker = f"tandem_reward_marker_{os.getpid()}"
sleeper = work / f"sleep_{marker}"
sleeper.symlink_to(shutil.which("sleep"))
hang = script(f"hang_{marker}", f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then {sleeper} 300\n'
                                f"else while IFS= read -r line; do {ANSWER}; done; fi")
t0 = time.time()
rc, out = run(train_args("--set", "run.name=orphan", "--set", "run.steps=1", "--set", "parallel.timeout_s=5",
                         "--set", "tracks.ar.warmstart.steps=0", "--set", "tracks.ar.reward.kind=command",
                         "--set", f"tracks.ar.reward.command={hang}", "--set", "tracks.ar.reward.timeout_s=600"),
              timeout=120, mpi=2)
time.sleep(1.0)
left = subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout.decode().split()
count += 1
if left or rc in (0, None):
    failures.append("orphaned reward process")
    print(f"FAIL a hanging reward command: exit {rc}, processes left {left}")
    for p in left:
        os.kill(int(p), signal.SIGKILL)
else:
    print(f"ok   a reward command hanging on one rank ends with its job (exit {rc} after {time.time() - t0:.1f} s, "
          "no process left)")

# --- CLI values ---
fixture = llama / "tiny_qwen2"
tok = root / "tests/fixtures/tokenizers/bytelevel_tiny"
expect("generate --samples 10^9", ["generate", "--model", fixture, "--tokenizer", tok, "--prompt", "x",
                                   "--samples", "1000000000"], "--samples: Value 1000000000 not in range 1 to 4096",
       timeout=20)
expect("generate --temperature nan", ["generate", "--model", fixture, "--tokenizer", tok, "--prompt", "x",
                                      "--temperature", "nan"], "must be a finite number")
expect("bench rollout --tail-sigma inf", ["bench", "rollout", "--tail-sigma", "inf"], "must be a finite number")
expect("generate --max-new-tokens past the context", ["generate", "--model", fixture, "--tokenizer", tok, "--prompt",
                                                      "x", "--max-new-tokens", "100000"], "exceed the model's context")
expect("generate --max-new-tokens with 20 digits", ["generate", "--model", fixture, "--tokenizer", tok, "--prompt", "x",
                                                   "--max-new-tokens", "99999999999999999999"], "--max-new-tokens")
expect("generate --max-new-tokens 2^63-1", ["generate", "--model", fixture, "--tokenizer", tok, "--prompt", "x",
                                           "--max-new-tokens", "9223372036854775807"], "--max-new-tokens")
# A document of nested aliases that expands to 10^20 nodes (the "billion laughs") is refused, not walked.
laughs = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + \
    [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 20)]
(work / "laughs.yaml").write_text("\n".join(laughs) + "\n")
expect("a recipe of nested YAML aliases", ["check-config", "--config", work / "laughs.yaml"],
       "expands to more than 100000 YAML nodes", timeout=20)

# Every numeric flag of every subcommand, found in its --help (so a new flag is covered): 2^62 for an
# integer (every count and size has a bound far below it; seeds take any value) and NaN for a
# float must be a parse error naming the flag, exit 2, at once.
subcommands = ["check-config", "train", "eval", "pretrain-flow", "generate", "ckpt info", "ckpt export-hf",
               "bench schedule", "bench rollout", "bench comm", "bench step", "bench train", "bench ablate"]
numeric = 0
for sub in subcommands:
    rc, text = run(sub.split() + ["--help"], timeout=20)
    for flag, kind in re.findall(r"^\s+(--[a-z0-9-]+)(?:,\s*-\w)?\s+(INT|UINT|FLOAT)\b", text, re.M):
        if kind == "UINT" or flag == "--seed":  # any non-negative seed is a seed
            continue
        numeric += 1
        value = "nan" if kind == "FLOAT" else str(2 ** 62)
        expect(f"{sub} {flag} {value}", sub.split() + [flag, value], flag, timeout=20)
if numeric < 40:
    failures.append("numeric flags")
    print(f"FAIL numeric flags: only {numeric} found in the subcommands' --help")

shutil.rmtree(work, ignore_errors=True)
print(f"{count - len(failures)} of {count} malformed inputs handled")
sys.exit(1 if failures else 0)
