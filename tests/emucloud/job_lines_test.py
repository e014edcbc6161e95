#!/usr/bin/python3
"""fw_job_lines: the frameworks proofs' torch jobs write each of rank 0's JSON lines in one
write(2), also under PYTHONUNBUFFERED=1.

Why: torchrun's --tee (which `rankmap run` adds for torch 1.13 on Python 3.11, and users add
themselves) copies the worker's output file to the console as it reads it, one readline() at a
time, and prefixes every piece it reads with "[default<i>]:". print(..., flush=True) under
PYTHONUNBUFFERED=1 writes the text and the newline in two writes; a read between them puts the
prefix inside the line, which then no longer parses, and the test counting rank 0's lines
(emucloud_fw_torchrun, twice in CI) failed with exit 0 everywhere (docs/reliability.md).

Runs fw_ddp_train.py and mesh_train.py as one Gloo process (world size 1, loopback) under
`strace -f -e trace=write` with PYTHONUNBUFFERED=1 and checks that every write to standard output
is whole lines. Needs /usr/bin/python3 with torch and strace; exits 77 (skipped) without them.

  job_lines_test.py
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

kHere = os.path.dirname(os.path.abspath(__file__))
kPython = "/usr/bin/python3"
kJobs = [("fw_ddp_train.py", ["--steps", "2", "--width", "64"]),
         ("mesh_train.py", ["--dp", "1", "--pp", "1", "--steps", "2", "--hidden", "16",
                            "--vocab", "64", "--tokens", "8"])]
# strace's line for a write: PID write(FD, "DATA"..., N) = N
kWrite = re.compile(r'^(?:\d+\s+)?write\((\d+), "((?:[^"\\]|\\.)*)"(\.\.\.)?, \d+\)\s+=\s+(-?\d+)')


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def skip(msg):
    print(f"skipped: {msg}", flush=True)
    sys.exit(77)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stdout_writes(trace):
    """The data of every write(2) to fd 1 in strace's output, unescaped."""
    out = []
    for line in trace.splitlines():
        m = kWrite.match(line)
        if m and m.group(1) == "1" and int(m.group(4)) > 0:
            if m.group(3):
                fail(f"strace cut a write short (raise -s): {line[:120]}")
            out.append(m.group(2).encode("latin-1").decode("unicode_escape"))
    return out


def main():
    probe = subprocess.run([kPython, "-c", "import torch.distributed"], capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0:
        skip(f"{kPython} has no torch.distributed ({probe.stderr.strip()[-200:]})")
    if shutil.which("strace") is None:
        skip("strace not found (scripts/setup-deps installs it)")
    work = tempfile.mkdtemp(prefix="job_lines_test.")
    try:
        for script, argv in kJobs:
            trace = os.path.join(work, script + ".strace")
            env = dict(os.environ, PYTHONUNBUFFERED="1", RANK="0", WORLD_SIZE="1",
                       LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                       GLOO_SOCKET_IFNAME="lo", TMPDIR=work)
            p = subprocess.run(["strace", "-f", "-qq", "-s", "4096", "-e", "trace=write", "-o",
                                trace, kPython, os.path.join(kHere, script)] + argv,
                               capture_output=True, text=True, env=env, timeout=240)
            if p.returncode != 0:
                fail(f"{script}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
            with open(trace, errors="replace") as f:
                writes = stdout_writes(f.read())
            lines = p.stdout.splitlines()
            json_lines = [l for l in lines if l.startswith("{")]
            if len(json_lines) != 4 or not json_lines[-1].startswith('{"summary"'):
                fail(f"{script}: expected 3 step lines and a summary, got:\n{p.stdout[-800:]}")
            if "".join(writes) != p.stdout:
                fail(f"{script}: the traced writes to stdout ({len(writes)}) are not what the job "
                     f"printed (strace's output format not understood?)")
            pieces = [w for w in writes if not w.endswith("\n")]
            if pieces:
                fail(f"{script}: {len(pieces)} of {len(writes)} writes to stdout are not whole "
                     f"lines under PYTHONUNBUFFERED=1 (first: {pieces[0][:80]!r}); torchrun's --tee "
                     f"can splice its prefix into such a line")
            print(f"ok: {script}: {len(writes)} writes to stdout, each whole lines "
                  f"({len(json_lines)} JSON lines)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
