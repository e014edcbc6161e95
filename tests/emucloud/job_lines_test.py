#!/usr/bin/python3
"""fw_job_lines: the frameworks proofs' torch jobs write each of rank 0's JSON lines in one
write(2), also under PYTHONUNBUFFERED=1.

Why: torchrun's --tee (which `rankmap run` adds for torch 1.13 on Python 3.11, and users add
themselves) copies the worker's output file to the console as it reads it, one readline() at a
time, and prefixes every piece it reads with "[default<i>]:". print(..., flush=True) under
PYTHONUNBUFFERED=1 writes the text and the newline in two writes; a read between them puts the
prefix inside the line, which then no longer parses, and the test counting rank 0's lines
(emucloud_fw_torchrun, in CI at 92eb21f) failed with exit 0 everywhere (docs/reliability.md).

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402
import fw_lib  # noqa: E402

kHere = os.path.dirname(os.path.abspath(__file__))
kPython = "/usr/bin/python3"
kJobs = [("fw_ddp_train.py", ["--steps", "2", "--width", "64"]),
         ("mesh_train.py", ["--dp", "1", "--pp", "1", "--steps", "2", "--hidden", "16",
                            "--vocab", "64", "--tokens", "8"])]
# strace's line for a write: PID write(FD, "DATA"..., N) = N
kWrite = re.compile(r'^(?:\d+\s+)?write\((\d+), "((?:[^"\\]|\\.)*)"(\.\.\.)?, \d+\)\s+=\s+(-?\d+)')


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
                lib.fail(f"strace cut a write short (raise -s): {line[:120]}")
            out.append(m.group(2).encode("latin-1").decode("unicode_escape"))
    return out


def main():
    fw_lib.require_python_module("torch")
    if shutil.which("strace") is None:
        lib.skip("strace not found (scripts/setup-deps installs it)")
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
                lib.fail(f"{script}: exit {p.returncode}: {p.stderr.strip()[-800:]}")
            with open(trace, errors="replace") as f:
                writes = stdout_writes(f.read())
            steps = fw_lib.json_lines(p.stdout, "step")
            summary = fw_lib.json_lines(p.stdout, "summary")
            if len(steps) != 3 or len(summary) != 1:
                lib.fail(f"{script}: expected 3 step lines and a summary, got:\n{p.stdout[-800:]}")
            lib.check("".join(writes) == p.stdout, f"{script}: the {len(writes)} traced writes "
                      f"to stdout are what the job printed")
            pieces = [w for w in writes if not w.endswith("\n")]
            lib.check(not pieces, f"{script}: each write to stdout is whole lines under "
                      f"PYTHONUNBUFFERED=1" + (f" ({len(pieces)} are not: {pieces[0][:80]!r}; "
                                               f"torchrun's --tee can splice its prefix into "
                                               f"such a line)" if pieces else ""))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
