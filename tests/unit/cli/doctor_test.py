#!/usr/bin/env python3
"""`rankmap doctor` on programs built here (label unit).

  doctor_test.py RANKMAP DYNAMIC_PROGRAM STATIC_PROGRAM MODULE TUNER

DYNAMIC_PROGRAM needs libnccl.so.2 (nccl_test_double) dynamically, STATIC_PROGRAM has it linked
in; MODULE (needs libnccl.so.2, with a RUNPATH to it) plays PyTorch's libtorch_cuda.so in a fake
torch package for --python; TUNER is the built librankmap_nccl_tuner.so (the one beside RANKMAP
in the build tree). Exit 0 = pass.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

rankmap, dynamic_prog, static_prog, module, tuner = sys.argv[1:6]
failures = []


def doctor(*args, env=None):
    p = subprocess.run([rankmap, "doctor", *args, "--json"], capture_output=True, text=True,
                       timeout=120, env=env)
    try:
        out = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        out = None
    return p.returncode, out, p.stderr


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


rc, j, err = doctor(dynamic_prog)
expect(rc == 0 and j and j["shimmable"], f"dynamic program is shimmable (rc {rc}, {err})")
expect(j and j["nccl"]["linkage"] == "dynamic", "dynamic linkage")
expect(j and (j["nccl"]["library"] or "").endswith("libnccl.so.2"), "library path found")
expect(j and j["nccl"]["version"] == "2.28.9", f"version from the embedded string: {j and j['nccl']}")

rc, j, err = doctor(static_prog)
expect(rc == 1 and j and not j["shimmable"], f"static program is not shimmable (rc {rc})")
expect(j and j["nccl"]["linkage"] == "static", "static linkage")
expect(j and "launch-time" in j["rankmap_run"], "suggests launch-time reordering")

rc, j, err = doctor("/bin/ls")
expect(rc == 1 and j and j["nccl"]["linkage"] == "none", f"/bin/ls has no NCCL (rc {rc})")

rc, j, err = doctor("/nonexistent/program")
expect(rc == 2, f"a missing program is bad input (rc {rc})")

with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "torch", "lib"))
    open(os.path.join(tmp, "torch", "__init__.py"), "w").close()
    shutil.copy(module, os.path.join(tmp, "torch", "lib", "libtorch_cuda.so"))
    env = dict(os.environ, PYTHONPATH=tmp)
    rc, j, err = doctor("--python", sys.executable, env=env)
    expect(rc == 0 and j and j["shimmable"], f"fake torch with dynamic NCCL is shimmable (rc {rc}, {err})")
    expect(j and j["python"]["torch_dir"] == os.path.join(tmp, "torch"), "torch found without import")

with tempfile.TemporaryDirectory() as tmp:
    os.makedirs(os.path.join(tmp, "torch", "lib"))
    open(os.path.join(tmp, "torch", "__init__.py"), "w").close()
    env = dict(os.environ, PYTHONPATH=tmp)
    rc, j, err = doctor("--python", sys.executable, env=env)
    expect(rc == 1 and j and "CPU-only" in j["reason"], f"CPU-only torch (rc {rc}): {j and j['reason']}")

# An interpreter without torch at all (isolated mode ignores site-packages? not reliably: use -S).
rc, j, err = doctor("--python", "/nonexistent/python")
expect(rc == 2, f"a missing interpreter is bad input (rc {rc})")

# The tuner plugin: does NCCL_TUNER_PLUGIN name ours (NCCL's naming rule), what does it chain to?
base = {k: v for k, v in os.environ.items()
        if k not in ("NCCL_TUNER_PLUGIN", "RANKMAP_NCCL_TUNER_CHAIN", "RANKMAP_NCCL_TUNER")}
rc, j, err = doctor(dynamic_prog, env=base)
t = j and j["tuner"]
expect(t and not t["active"] and "NCCL_TUNER_PLUGIN is not set" in t["note"],
       f"tuner not active without NCCL_TUNER_PLUGIN: {t}")
expect(t and t["library"] == os.path.realpath(tuner), f"tuner library found beside rankmap: {t}")

rc, j, err = doctor(dynamic_prog, env=dict(base, NCCL_TUNER_PLUGIN=tuner,
                                           RANKMAP_NCCL_TUNER_CHAIN="aws"))
t = j and j["tuner"]
expect(rc == 0 and t and t["active"] and t["chain"] == "aws" and "calls aws first" in t["note"],
       f"tuner active by path, chained: {t}")

rc, j, err = doctor(dynamic_prog, env=dict(base, NCCL_TUNER_PLUGIN="librankmap_nccl_tuner.so",
                                           RANKMAP_NCCL_TUNER="0"))
t = j and j["tuner"]
expect(t and t["active"] and not t["adjusts"] and "no tuner chained" in t["note"]
       and "RANKMAP_NCCL_TUNER=0" in t["note"], f"tuner active by name, adjusting off: {t}")

rc, j, err = doctor(dynamic_prog, env=dict(base, NCCL_TUNER_PLUGIN="aws"))
t = j and j["tuner"]
expect(t and not t["active"] and "RANKMAP_NCCL_TUNER_CHAIN=aws" in t["note"],
       f"another tuner configured: how to combine: {t}")

rc, j, err = doctor(dynamic_prog, env=dict(base, NCCL_TUNER_PLUGIN=tuner,
                                           RANKMAP_NCCL_TUNER_CHAIN=tuner))
t = j and j["tuner"]
expect(t and t["active"] and "names rankmap's tuner itself" in t["note"], f"self chain: {t}")

# Through a link: a path to it, and a bare name NCCL expands to libnccl-tuner-<name>.so beside it.
with tempfile.TemporaryDirectory() as tmp:
    link = os.path.join(tmp, "libnccl-tuner-rankmap.so")
    os.symlink(os.path.realpath(tuner), link)
    rc, j, err = doctor(dynamic_prog, env=dict(base, NCCL_TUNER_PLUGIN=link))
    expect(j and j["tuner"]["active"], f"tuner through a linked path: {j and j['tuner']}")
beside = os.path.join(os.path.dirname(os.path.realpath(tuner)), "libnccl-tuner-rankmapdoctortest.so")
try:
    os.symlink(os.path.realpath(tuner), beside)
    rc, j, err = doctor(dynamic_prog, env=dict(base, NCCL_TUNER_PLUGIN="rankmapdoctortest"))
    expect(j and j["tuner"]["active"], f"tuner through NCCL's name rule: {j and j['tuner']}")
finally:
    if os.path.lexists(beside):
        os.unlink(beside)

# The text form says it too.
p = subprocess.run([rankmap, "doctor", dynamic_prog], capture_output=True, text=True, timeout=120,
                   env=dict(base, NCCL_TUNER_PLUGIN=tuner))
expect("NCCL tuner: active:" in p.stdout and "librankmap_nccl_tuner.so: " in p.stdout,
       f"text output names the tuner: {p.stdout}")

print("PASS" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
