#!/usr/bin/env python3
"""transformers' apply_chat_template as the oracle for the chat-template fixtures that
tests/test_chat_template.cpp checks tandem's Jinja interpreter against byte for byte: every case of
every real template (system prompt, multi-turn, add_generation_prompt, tools, Qwen3's enable_thinking)
renders to the fixture's expected text under transformers, and every case the template rejects raises.

For qwen2_5, qwen3, llama3 and llama3_1 the tokenizer is the real one (its bos/eos) with the fixture's
template (the same text as its tokenizer_config.json's, except llama3_1's, which embeds Meta's Llama-3.1
template where the packaged file has an older one); gemma's template is embedded in its fixture and rendered through the
GPT-2 tokenizer with that template and gemma's bos/eos passed explicitly. Then the layout tandem's
`auto` reads: save_pretrained puts the template in chat_template.jinja alone, and that file wins over
a template in tokenizer_config.json.

  check_chat_templates_transformers.py FIXTURE_DIR TOKENIZER_CACHE      (exit 77: no tokenizer files)
"""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
fixtures, tok_root = Path(sys.argv[1]), Path(sys.argv[2])
if not (tok_root / "gpt2" / "tokenizer.json").exists():
    print(f"SKIP: the real tokenizer files are not in {tok_root} (scripts/fixtures/fetch_tokenizers.sh)")
    sys.exit(77)

from transformers import AutoTokenizer  # noqa: E402

failures, checked, skipped = [], 0, 0
for path in sorted(fixtures.glob("*.json")):
    fixture = json.loads(path.read_text())
    if "template" not in fixture:
        continue  # constructs.json: hand-written templates, not a model's
    name = fixture["name"]
    own = tok_root / name
    if (own / "tokenizer_config.json").exists():
        tok = AutoTokenizer.from_pretrained(str(own))
        # llama3_1's fixture embeds Meta's template; the packaged tokenizer_config.json has an older one.
        tok.chat_template = fixture["template"]
        specials = {}
    else:
        tok = AutoTokenizer.from_pretrained(str(tok_root / "gpt2"))
        tok.chat_template = fixture["template"]
        specials = {"bos_token": fixture["bos_token"], "eos_token": fixture["eos_token"]}
    for case in fixture["cases"]:
        if not case["messages"]:
            skipped += 1  # transformers 5 refuses an empty conversation; tandem renders it (never used)
            continue
        kwargs = {**specials, **case.get("extra", {})}
        try:
            text = tok.apply_chat_template(case["messages"], tokenize=False,
                                           add_generation_prompt=case["add_generation_prompt"], **kwargs)
        except Exception as e:  # noqa: BLE001 - any failure is a finding
            failures.append(f"{name}/{case['name']}: transformers raised {e}")
            continue
        checked += 1
        if text != case["expected"]:
            failures.append(f"{name}/{case['name']}: transformers renders {text!r}, fixture says {case['expected']!r}")
    for case in fixture.get("errors", []):
        kwargs = {**specials, **case.get("extra", {})}
        try:
            tok.apply_chat_template(case["messages"], tokenize=False,
                                    add_generation_prompt=case.get("add_generation_prompt", False), **kwargs)
            failures.append(f"{name}/{case['name']}: transformers rendered a conversation the fixture says is rejected")
        except Exception as e:  # noqa: BLE001
            checked += 1
            if case["error"] not in str(e):
                failures.append(f"{name}/{case['name']}: transformers raised {e!r}, fixture says {case['error']!r}")
# The layout test_prompt_format.cpp reads with `auto`: transformers' save_pretrained writes the
# template to chat_template.jinja and leaves it out of tokenizer_config.json, and reads it back.
import tempfile  # noqa: E402
if (tok_root / "qwen2_5" / "tokenizer_config.json").exists():
    original = AutoTokenizer.from_pretrained(str(tok_root / "qwen2_5"))
    with tempfile.TemporaryDirectory() as saved:
        original.save_pretrained(saved)
        config = json.loads((Path(saved) / "tokenizer_config.json").read_text())
        jinja = Path(saved) / "chat_template.jinja"
        checked += 1
        if "chat_template" in config or not jinja.exists() or jinja.read_text() != original.chat_template:
            failures.append("save_pretrained: the template is not in chat_template.jinja alone")
        jinja.write_text("X{{ messages[0].content }}")
        config["chat_template"] = original.chat_template
        (Path(saved) / "tokenizer_config.json").write_text(json.dumps(config))
        text = AutoTokenizer.from_pretrained(saved).apply_chat_template([{"role": "user", "content": "Hi"}],
                                                                       tokenize=False)
        checked += 1
        if text != "XHi":
            failures.append(f"chat_template.jinja does not win over tokenizer_config.json's template: {text!r}")
for f in failures:
    print("FAIL", f)
print(f"chat templates: {checked} cases rendered by transformers' apply_chat_template, {len(failures)} differ"
      f" ({skipped} empty conversations skipped: transformers refuses them)")
sys.exit(1 if failures or checked == 0 else 0)
