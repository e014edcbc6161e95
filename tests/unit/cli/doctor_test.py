#!/usr/bin/env python3
"""`rankmap doctor` on programs built here (label unit).

  doctor_test.py RANKMAP DYNAMIC_PROGRAM STATIC_PROGRAM MODULE

DYNAMIC_PROGRAM needs libnccl.so.2 (nccl_test_double) dynamically, STATIC_PROGRAM has it linked
in; MODULE (needs libnccl.so.2, with a RUNPATH to it) plays PyTorch's libtorch_cuda.so in a fake
torch package for --python. Exit 0 = pass.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

rankmap, dynamic_prog, static_prog, module = sys.argv[1:5]
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

print("PASS" if not failures else f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
