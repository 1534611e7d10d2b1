#!/usr/bin/env python3
"""differential_templates.py: renders every tests/data/templates/*.jinja for N seeded random conversations (tool
calls with dict or JSON-string arguments, content parts and images, reasoning_content, odd role orders, developer
and tool roles, extra message fields, tools with nested schemas, kwargs such as enable_thinking, reasoning_effort,
builtin_tools) with python's jinja2 configured as transformers' apply_chat_template (render_templates.py's
environment, today's date) and with `tessera template`, and prints every difference (text, or one side failing).
    python3 tests/ref/differential_templates.py [SEED] [N] [TESSERA] [MODEL]
TESSERA defaults to build/cli/tessera, MODEL to models/SmolLM2-135M-Instruct.Q4_1.gguf (its bos / eos are used).
Session 31: seeds 1-3, 61 conversations, 4270 renders, 0 differences."""

import json, random, subprocess, sys, pathlib, tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "ref"))
import render_templates as rt
import datetime

rt.NOW = datetime.datetime.now()
env = rt.environment()
TES = sys.argv[3] if len(sys.argv) > 3 else str(ROOT / "build" / "cli" / "tessera")
MODEL = sys.argv[4] if len(sys.argv) > 4 else str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
TMP = tempfile.TemporaryDirectory()
with open(pathlib.Path(TMP.name) / "be.jinja", "w") as f:
    f.write("{{ bos_token }}\n{{ eos_token }}")
BOS, EOS = json.loads(
    subprocess.run(
        [
            TES,
            "template",
            "-m",
            MODEL,
            "--chat-template-file",
            str(pathlib.Path(TMP.name) / "be.jinja"),
            "-p",
            "x",
            "--json",
        ],
        capture_output=True,
        check=True,
    ).stdout
)["text"].split("\n")
R = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
TEXTS = [
    "Hello!",
    "  padded  ",
    "line1\nline2\n\nline4",
    "{{ not jinja }} {% raw %}",
    "<|im_end|> <s> </s> [INST]",
    "Grüße 👋 ΑΣ ß 中文",
    "tab\there \"quotes\" 'single' \\backslash",
    "",
    " ",
    "a" * 3,
    "trailing newline\n",
    "<think>hidden</think>visible",
    "1 < 2 && 3 > 2",
    "émoji 😀 and \u200d zwj",
]
ARGS = [
    {"city": "Paris", "days": 3},
    {"x": 0.1, "y": 1e-7, "z": 1e20, "n": -5, "b": False, "nul": None},
    {"nested": {"a": [1, 2, {"b": "c"}], "é": "ü"}, "empty": {}, "list": []},
    {"q": 'say "hi"\n'},
    {},
]


def content():
    c = R.choice(TEXTS)
    if R.random() < 0.15:
        return [{"type": "text", "text": c}] + ([{"type": "image"}] if R.random() < 0.3 else [])
    return c


def tool_call(i):
    a = R.choice(ARGS)
    tc = {
        "id": f"call_{i}abcdef",
        "type": "function",
        "function": {
            "name": R.choice(["get_weather", "search", "calc"]),
            "arguments": json.dumps(a) if R.random() < 0.3 else a,
        },
    }
    return tc


def conversation():
    msgs = []
    if R.random() < 0.6:
        msgs.append({"role": "system", "content": R.choice(TEXTS + ["You are helpful."])})
    turns = R.randint(1, 5)
    for t in range(turns):
        msgs.append({"role": "user", "content": content()})
        if t == turns - 1 and R.random() < 0.7:
            break
        m = {"role": "assistant", "content": content()}
        if R.random() < 0.25:
            calls = [tool_call(j) for j in range(R.randint(1, 2))]
            m["tool_calls"] = calls
            if R.random() < 0.4:
                m["content"] = None if R.random() < 0.5 else ""
            msgs.append(m)
            for c in calls:
                msgs.append(
                    {
                        "role": "tool",
                        "tool_call_id": c["id"],
                        "name": c["function"]["name"],
                        "content": R.choice(['{"ok": true}', "42", "plain text result"]),
                    }
                )
            msgs.append({"role": "assistant", "content": content()})
            continue
        if R.random() < 0.2:
            m["reasoning_content"] = "Let me think.\nStep 1."
        msgs.append(m)
    if R.random() < 0.5:  # adversarial structure
        k = R.randint(0, 7)
        if k == 0:
            msgs.insert(R.randint(0, len(msgs)), {"role": "system", "content": "mid system"})
        elif k == 1:
            msgs.insert(0, {"role": "assistant", "content": "assistant first"})
        elif k == 2:
            msgs.append({"role": "user", "content": "again"})
            msgs.append({"role": "user", "content": [{"type": "text", "text": "parts"}]})
        elif k == 3:
            msgs.insert(0, {"role": "developer", "content": "dev rules"})
        elif k == 4:
            msgs.append({"role": "tool", "content": [{"type": "text", "text": "tool parts"}]})
        elif k == 5:
            for m in msgs:
                m["extra_field"] = {"x": 1}
        elif k == 6:
            msgs.append(
                {
                    "role": "assistant",
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
                }
            )
        else:
            msgs = [{"role": "user", "content": "only"}]
    gen = msgs[-1]["role"] != "assistant"
    tools = None
    if R.random() < 0.3:
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": 'Weather. "Quoted" é',
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "city": {"type": "string", "enum": ["Paris", "Oslo"]},
                            "days": {"type": "integer", "minimum": 1},
                            "opts": {"type": "array", "items": {"type": "number"}},
                        },
                        "required": ["city"],
                    },
                },
            }
        ]
    kw = {}
    r = R.random()
    if r < 0.2:
        kw["enable_thinking"] = R.random() < 0.5
    elif r < 0.3:
        kw["reasoning_effort"] = R.choice(["low", "high"])
    elif r < 0.4:
        kw["builtin_tools"] = ["code_interpreter", "brave_search"]
        kw["tools_in_user_message"] = R.random() < 0.5
    elif r < 0.45:
        kw["date_string"] = "01 Feb 2025"
        kw["custom_key"] = [1, {"a": None}]
    return {
        "messages": msgs,
        "tools": tools,
        "add_generation_prompt": gen if R.random() < 0.9 else not gen,
        "kwargs": kw,
    }


tdir = ROOT / "tests" / "data" / "templates"
temps = sorted(tdir.glob("*.jinja"))
n_conv = int(sys.argv[2]) if len(sys.argv) > 2 else 10
bad = 0
total = 0
for ci in range(n_conv):
    conv = conversation()
    mf = f"{TMP.name}/m{ci}.json"
    json.dump(conv["messages"], open(mf, "w"))
    tf = None
    if conv["tools"] is not None:
        tf = f"{TMP.name}/t{ci}.json"
        json.dump(conv["tools"], open(tf, "w"))
    for path in temps:
        src = path.read_text()
        total += 1
        try:
            want = env.from_string(src).render(
                messages=conv["messages"],
                tools=conv["tools"],
                documents=None,
                add_generation_prompt=conv["add_generation_prompt"],
                bos_token=BOS,
                eos_token=EOS,
                **conv["kwargs"],
            )
            werr = None
        except Exception as e:
            want = None
            werr = f"{type(e).__name__}: {e}"
        cmd = [TES, "template", "-m", MODEL, "--chat-template-file", str(path), "--messages", mf, "--json"]
        if tf:
            cmd += ["--tools", tf]
        if conv["kwargs"]:
            cmd += ["--chat-template-kwargs", json.dumps(conv["kwargs"])]
        if not conv["add_generation_prompt"]:
            cmd += ["--no-add-generation-prompt"]
        p = subprocess.run(cmd, capture_output=True)
        got = json.loads(p.stdout)["text"] if p.returncode == 0 else None
        if (want is None) != (got is None) or (want is not None and want != got):
            bad += 1
            if bad <= 12:
                py_side = "ERR " + werr if werr else "ok"
                ts_side = "ERR " + p.stderr.decode().strip()[:200] if got is None else "ok"
                print(f"MISMATCH conv {ci} template {path.stem}: py {py_side} / tessera {ts_side}")
                if want is not None and got is not None:
                    i = next(
                        (k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got))
                    )
                    print("   want:", repr(want[max(0, i - 60) : i + 80]))
                    print("   got: ", repr(got[max(0, i - 60) : i + 80]))
print(f"{bad} mismatches of {total}")
