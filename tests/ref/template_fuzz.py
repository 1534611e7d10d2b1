#!/usr/bin/env python3
"""template_fuzz.py: random conversations (system / developer / user / assistant turns, tool calls and results, content
parts, reasoning_content, empty and None contents, markup and unicode, enable_thinking / reasoning_effort) rendered by
every tests/data/templates/*.jinja with python's jinja2 in render_templates.py's environment (the clock: now) and by
`tessera template --json`, compared byte for byte (an error on one side only is a mismatch). Each mismatch is written
to OUT/fail_<template>_<seed>_<i>.json. Not a test: a differential search for the C++ engine's gaps.
    python3 tests/ref/template_fuzz.py SEED COUNT [TEMPLATE-SUBSTRING]
env: TESSERA (build/cli/tessera), MODEL (models/SmolLM2-135M-Instruct.Q4_1.gguf: its bos / eos tokens), OUT (/tmp)
Session 37: seeds 2 and 3, 70 conversations x 70 templates, no mismatch."""
import datetime
import importlib.util
import json
import os
import pathlib
import random
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rt", REPO / "tests" / "ref" / "render_templates.py")
rt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rt)
rt.NOW = datetime.datetime.now()  # tessera's strftime_now reads the real clock
env = rt.environment()
ROOT = REPO / "tests" / "data" / "templates"
T = os.environ.get("TESSERA", str(REPO / "build" / "cli" / "tessera"))
M = os.environ.get("MODEL", str(REPO / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
OUT = pathlib.Path(os.environ.get("OUT", "/tmp"))
BOS, EOS = "<|im_start|>", "<|im_end|>"  # the default model's
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
N = int(sys.argv[2]) if len(sys.argv) > 2 else 10
only = sys.argv[3] if len(sys.argv) > 3 else None
TEXTS = ["Hello", "What is 2+2?", "", " ", "Line one\nLine two\n", "Grüße 👋 ΑΣ ß", "<tag> & 'quote' \"dq\"",
         "{{ not a var }} {% raw %}", "  leading and trailing  ", "tab\tsep", "\\n backslash", "x" * 50,
         "<think>inner</think>answer", "Sure. Here it is:\n```python\nprint('hi')\n```"]
def text(): return rng.choice(TEXTS)
def content():
    r = rng.random()
    if r < 0.12: return [{"type": "text", "text": text()} for _ in range(rng.randint(1, 2))]
    return text()
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "search", "description": "Web search",
          "parameters": {"type": "object", "properties": {"q": {"type": "string", "description": "query"}}}}}]
def call(i):
    name = rng.choice(["get_weather", "search"])
    args = {"city": "Paris", "n": 2} if name == "get_weather" else {"q": text()}
    if rng.random() < 0.2: args = json.dumps(args)
    c = {"id": f"call{i}x9", "type": "function", "function": {"name": name, "arguments": args}}
    return c
def conversation():
    msgs = []
    if rng.random() < 0.5: msgs.append({"role": "system", "content": content()})
    turns = rng.randint(1, 3)
    use_tools = rng.random() < 0.3
    for t in range(turns):
        msgs.append({"role": "user", "content": content()})
        last = t == turns - 1
        if last and rng.random() < 0.6: break
        if use_tools and rng.random() < 0.6:
            calls = [call(k) for k in range(rng.randint(1, 2))]
            m = {"role": "assistant", "content": rng.choice(["", None, text()]), "tool_calls": calls}
            msgs.append(m)
            for c in calls:
                msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": '{"ok": true}'})
        a = {"role": "assistant", "content": content()}
        if rng.random() < 0.15: a["reasoning_content"] = text()
        msgs.append(a)
    if rng.random() < 0.15: msgs.insert(rng.randint(0, len(msgs)), {"role": rng.choice(["system", "developer"]), "content": text()})
    if rng.random() < 0.1: msgs.append({"role": "user", "content": text()})
    gen = rng.random() < (0.9 if msgs[-1]["role"] != "assistant" else 0.2)
    kw = {}
    r = rng.random()
    if r < 0.25: kw["enable_thinking"] = rng.random() < 0.5
    elif r < 0.35: kw["reasoning_effort"] = rng.choice(["low", "high"])
    return {"messages": msgs, "tools": TOOLS if use_tools else None, "add_generation_prompt": gen, "kwargs": kw}
def py(src, c):
    try:
        return env.from_string(src).render(messages=c["messages"], tools=c["tools"], documents=None,
                                           add_generation_prompt=c["add_generation_prompt"], bos_token=BOS, eos_token=EOS, **c["kwargs"]), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"
def ts(path, c):
    pathlib.Path(str(OUT / 'fz_m.json')).write_text(json.dumps(c["messages"]))
    cmd = [T, "template", "-m", M, "--chat-template-file", str(path), "--messages", str(OUT / 'fz_m.json'), "--json"]
    if c["tools"]:
        pathlib.Path(str(OUT / 'fz_t.json')).write_text(json.dumps(c["tools"])); cmd += ["--tools", str(OUT / 'fz_t.json')]
    if c["kwargs"]: cmd += ["--chat-template-kwargs", json.dumps(c["kwargs"])]
    if not c["add_generation_prompt"]: cmd.append("--no-add-generation-prompt")
    p = subprocess.run(cmd, capture_output=True, timeout=30)
    if p.returncode != 0: return None, p.stderr.decode(errors='replace').strip()
    return json.loads(p.stdout)["text"], None
convs = [conversation() for _ in range(N)]
bad = 0; total = 0
for path in sorted(ROOT.glob("*.jinja")):
    if only and only not in path.name: continue
    src = path.read_text()
    for i, c in enumerate(convs):
        total += 1
        a, ea = py(src, c)
        b, eb = ts(path, c)
        if (a is None) != (b is None) or (a is not None and a != b):
            bad += 1
            d = (OUT / f'fail_{path.stem}_{sys.argv[1] if len(sys.argv)>1 else 1}_{i}.json')
            d.write_text(json.dumps({"conv": c, "py": a, "py_err": ea, "ts": b, "ts_err": eb}, ensure_ascii=False, indent=1))
            print(f"MISMATCH {path.stem} conv {i}: py_err={ea and ea[:100]} ts_err={eb and eb[:100]}", flush=True)
print(f"{bad} mismatches of {total}")
for f in ("fz_m.json", "fz_t.json"):
    (OUT / f).unlink(missing_ok=True)
