#!/usr/bin/python3
"""`rankmap export --k8s-placement JOB`: the script it writes puts an Indexed Job's pods on the
plan's nodes in plan order, and leaves every pod to the scheduler when it cannot. kubectl is a
stand-in (there is no API server here): it keeps the job's pods in a JSON file, answers the one
listing the script asks for, and applies a patch as the API server does (strategic merge of the
node selector and of the scheduling gates; a node selector only while the pod is gated).

Usage: k8s_placement_test.py RANKMAP_BINARY
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
TOPOLOGY = os.path.join(ROOT, "tests", "data", "topologies", "testbed_8vm_2rack.json")
GATE = "rankmap.io/placement"
LISTING = ('jsonpath={range .items[*]}{.metadata.annotations.batch\\.kubernetes\\.io/'
           'job-completion-index}{"|"}{.metadata.name}{"|"}{.spec.nodeSelector.kubernetes\\.io/'
           'hostname}{"|"}{.spec.schedulingGates[*].name}{"|"}{.metadata.deletionTimestamp}'
           '{"\\n"}{end}')

# Test stand-in for kubectl (no API server here). State: {"pods": [{"name", "index", "selector",
# "gates", "deleting", "after", "deleting_after"}], "gets": n, "fail_patch": pod name or null,
# "complete_after": n, "gone_after": n, "calls": [...]}. A pod is listed from the `after`-th
# listing on (pods the Job controller creates late), terminating from the `deleting_after`-th;
# the Job reads Complete (is gone) once the pods were listed `complete_after` (`gone_after`) times.
STAND_IN = r'''#!/usr/bin/python3
import json, os, sys
path = os.environ["KUBECTL_STATE"]
st = json.load(open(path))
args = sys.argv[1:]
st["calls"].append(args)
def done(code, out=""):
    json.dump(st, open(path, "w"))
    sys.stdout.write(out)
    sys.exit(code)
if "--request-timeout=30s" not in args:
    sys.stderr.write("no --request-timeout\n"); done(2)
args = [a for a in args if a != "--request-timeout=30s"]
ns = None
if args[:1] == ["--namespace"]:
    ns, args = args[1], args[2:]
if ns != st.get("namespace"):
    sys.stderr.write(f"namespace {ns}\n"); done(2)
if args[:2] == ["get", "pods"]:
    want = ["get", "pods", "-l", "batch.kubernetes.io/job-name=" + st["job"], "-o", st["listing"]]
    if args != want:
        sys.stderr.write(f"unexpected listing {args}\n"); done(2)
    st["gets"] += 1
    out = ""
    for p in st["pods"]:
        if st["gets"] >= p.get("after", 0):
            out += "%s|%s|%s|%s|%s\n" % (p["index"], p["name"], p.get("selector", ""),
                                         " ".join(p["gates"]), "2026-01-01T00:00:00Z"
                                         if p.get("deleting") or
                                         st["gets"] >= p.get("deleting_after", 10**9) else "")
    done(0, out)
if args[:2] == ["get", "job"]:
    if args[2:] != [st["job"], "-o", 'jsonpath={.status.conditions[?(@.status=="True")].type}']:
        sys.stderr.write(f"unexpected job query {args}\n"); done(2)
    if st["gets"] >= st.get("gone_after", 10**9):
        sys.stderr.write(f'Error from server (NotFound): jobs.batch "{st["job"]}" not found\n')
        done(1)
    done(0, "Complete" if st["gets"] >= st.get("complete_after", 10**9) else "")
if args[:2] == ["patch", "pod"] and args[3:5] == ["--type=strategic", "-p"] and len(args) == 6:
    name, body = args[2], json.loads(args[5])
    pod = [p for p in st["pods"] if p["name"] == name]
    if not pod or name == st.get("fail_patch"):
        sys.stderr.write(f"Error from server: pods {name} refused\n"); done(1)
    pod, spec = pod[0], body["spec"]
    if "nodeSelector" in spec:
        if not pod["gates"]:
            sys.stderr.write("spec: Forbidden: pod updates may not change fields other than"
                             " ... (the pod is not gated)\n"); done(1)
        pod["selector"] = spec["nodeSelector"]["kubernetes.io/hostname"]
    for g in spec.get("schedulingGates", []):
        if g.get("$patch") == "delete":
            pod["gates"] = [x for x in pod["gates"] if x != g["name"]]
    done(0, f"pod/{name} patched\n")
sys.stderr.write(f"unexpected call {args}\n"); done(2)
'''

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run_script(tmp, script, state, timeout=60):
    path = os.path.join(tmp, "state.json")
    state = dict({"gets": 0, "calls": [], "listing": LISTING, "job": "train",
                  "namespace": None}, **state)
    with open(path, "w") as f:
        json.dump(state, f)
    env = dict(os.environ, KUBECTL=os.path.join(tmp, "kubectl"), KUBECTL_STATE=path)
    t0 = time.monotonic()
    r = subprocess.run(["/bin/sh", script], env=env, capture_output=True, text=True,
                       timeout=timeout)
    with open(path) as f:
        return r, json.load(f), time.monotonic() - t0


def pods(n, gated=True, after=None):
    return [{"name": f"train-{i}-x{i:02d}", "index": i, "gates": [GATE, "other.io/g"] if gated
             else ["other.io/g"] if gated is None else [], "after": (after or {}).get(i, 0)}
            for i in range(n)]


def main():
    rankmap = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="k8s_placement.") as tmp:
        with open(os.path.join(tmp, "kubectl"), "w") as f:
            f.write(STAND_IN)
        os.chmod(os.path.join(tmp, "kubectl"), 0o755)
        plan_path = os.path.join(tmp, "plan.json")
        subprocess.run([rankmap, "plan", "--topology", TOPOLOGY, "--out", plan_path],
                       check=True, capture_output=True)
        with open(plan_path) as f:
            order = json.load(f)["order"]
        expect(order != sorted(order), f"the fixture's plan reorders the hosts: {order}")

        def export(*more):
            return subprocess.run([rankmap, "export", "--plan", plan_path, *more],
                                  capture_output=True, text=True)

        def write(name, *more):
            r = export(*more)
            expect(r.returncode == 0, f"export {more}: exit {r.returncode}: {r.stderr}")
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(r.stdout)
            return path

        # 1. Every pod held (two created late): each gets its plan position's node, gate lifted,
        # the other gate kept; the namespace on every call.
        script = write("place.sh", "--k8s-placement", "train", "--namespace", "ml", "--wait", "30")
        r, st, _ = run_script(tmp, script, {"namespace": "ml",
                                            "pods": pods(8, after={3: 2, 7: 3})})
        expect(r.returncode == 0, f"placement: exit {r.returncode}: {r.stderr}")
        got = [p.get("selector") for p in sorted(st["pods"], key=lambda p: p["index"])]
        expect(got == order, f"pod of index i on the plan's node i: {got} against {order}")
        expect(all(p["gates"] == ["other.io/g"] for p in st["pods"]),
               f"only rankmap's gate lifted: {[p['gates'] for p in st['pods']]}")
        expect(st["gets"] == 3, f"listed until the late pods were there: {st['gets']} listings")
        expect("8 pod(s) of job train given their nodes" in r.stderr, f"says so: {r.stderr}")
        # 2. Run again: nothing to change, no patch.
        r, st2, _ = run_script(tmp, script, {"namespace": "ml", "pods": st["pods"]})
        expect(r.returncode == 0 and not any(c[2] == "patch" for c in st2["calls"]),
               f"a second run patches nothing: exit {r.returncode}, {st2['calls']}")
        # 2b. The Job controller replaced the pod of index 2 (the old one terminating): running
        # the script again gives the new, held pod the same node and leaves the others alone.
        pods2 = [dict(p) for p in st["pods"]]
        pods2[2]["deleting"] = True
        pods2.append({"name": "train-2-y02", "index": 2, "gates": [GATE]})
        r, st3, _ = run_script(tmp, script, {"namespace": "ml", "pods": pods2})
        patched = [c[c.index("patch") + 2] for c in st3["calls"] if "patch" in c]
        new = [p for p in st3["pods"] if p["name"] == "train-2-y02"][0]
        expect(r.returncode == 0 and patched == ["train-2-y02"] and
               new.get("selector") == order[2] and not new["gates"],
               f"a replaced pod placed again: exit {r.returncode}, patched {patched}, {new}")
        # 3. A pod that never comes: within the wait, nothing placed, every held pod released.
        script = write("short.sh", "--k8s-placement", "train", "--wait", "3")
        r, st, secs = run_script(tmp, script, {"pods": pods(8, after={5: 10**6})})
        expect(r.returncode == 1, f"a missing pod fails the placement: exit {r.returncode}")
        expect(secs < 15, f"within its wait of 3 s: {secs:.1f} s")
        expect("7 of 8 pods" in r.stderr and "scheduler's choice" in r.stderr,
               f"says how many and what happens: {r.stderr}")
        held = [p for p in st["pods"] if p["index"] != 5]
        expect(all(p.get("selector") is None and p["gates"] == ["other.io/g"] for p in held),
               f"every held pod released without a node: {held}")
        # 4. A template without the gate: refused at once, naming the gate.
        r, st, secs = run_script(tmp, script, {"pods": pods(8, gated=None)})
        expect(r.returncode == 1 and GATE in r.stderr and "schedulingGates" in r.stderr and
               secs < 10, f"no gate in the template: exit {r.returncode}, {secs:.1f} s, "
                          f"{r.stderr}")
        expect(all(p.get("selector") is None for p in st["pods"]), "and nothing placed")
        # 4b. A Job larger than the plan: refused, every pod released (index 8 included).
        r, st, _ = run_script(tmp, script, {"pods": pods(9)})
        expect(r.returncode == 1 and "beyond the plan's 8 pods" in r.stderr and
               all(p.get("selector") is None and p["gates"] == ["other.io/g"]
                   for p in st["pods"]), f"nine pods for eight nodes: {r.stderr} {st['pods']}")
        # 5. The API refuses one patch: the pods after it are left to the scheduler.
        failing = "train-3-x03"
        r, st, _ = run_script(tmp, script, {"pods": pods(8), "fail_patch": failing})
        expect(r.returncode == 1 and failing in r.stderr, f"a refused patch: {r.stderr}")
        expect(all(not p["gates"] or p["gates"] == ["other.io/g"] for p in st["pods"]
                   if p["name"] != failing), "every other pod released")
        placed = [p["index"] for p in st["pods"] if p.get("selector")]
        expect(placed == [0, 1, 2], f"the pods before it placed: {placed}")
        # 6. Two pods per node: indexes 2h and 2h + 1 on the plan's node h.
        script = write("two.sh", "--k8s-placement", "train", "--tasks-per-node", "2")
        r, st, _ = run_script(tmp, script, {"pods": pods(16)})
        got = [p.get("selector") for p in sorted(st["pods"], key=lambda p: p["index"])]
        expect(r.returncode == 0 and got == [h for h in order for _ in range(2)],
               f"two pods per node: exit {r.returncode}, {got}")
        # 6b. --follow: after placing, a pod the Job controller makes anew (index 5's replacement)
        # gets its index's node, a pod beyond the plan's indexes is left to the scheduler, and
        # the script ends with the Job.
        script = write("follow.sh", "--k8s-placement", "train", "--follow", "--wait", "30")
        following = pods(8)
        following[5]["deleting_after"] = 3
        following += [{"name": "train-5-y05", "index": 5, "gates": [GATE], "after": 3},
                      {"name": "train-8-z08", "index": 8, "gates": [GATE, "other.io/g"],
                       "after": 4}]
        r, st, secs = run_script(tmp, script, {"pods": following, "complete_after": 5})
        new = [p for p in st["pods"] if p["name"] == "train-5-y05"][0]
        extra = [p for p in st["pods"] if p["name"] == "train-8-z08"][0]
        expect(r.returncode == 0 and "ended (Complete): following ends" in r.stderr and
               "1 pod(s) made anew given their nodes" in r.stderr,
               f"followed until the Job ended: exit {r.returncode}, {secs:.1f} s, {r.stderr}")
        expect(new.get("selector") == order[5] and not new["gates"],
               f"the pod made anew on index 5's node: {new}")
        expect(extra.get("selector") is None and extra["gates"] == ["other.io/g"] and
               "beyond the plan's 8 pods" in r.stderr, f"a pod beyond the plan released: {extra}")
        r, st, _ = run_script(tmp, script, {"pods": pods(8), "gone_after": 2})
        expect(r.returncode == 0 and "job train is gone: following ends" in r.stderr,
               f"a deleted Job ends the following: exit {r.returncode}, {r.stderr}")
        # 6c. Stopped while following (TERM between two looks): the pod made since the last look
        # is released, not left held, and the script exits 130.
        late = pods(8) + [{"name": "train-9-w09", "index": 3, "gates": [GATE, "other.io/g"],
                           "after": 3}]
        late[3]["deleting_after"] = 3
        path = os.path.join(tmp, "state.json")
        with open(path, "w") as f:
            json.dump({"gets": 0, "calls": [], "listing": LISTING, "job": "train",
                       "namespace": None, "pods": late}, f)
        env = dict(os.environ, KUBECTL=os.path.join(tmp, "kubectl"), KUBECTL_STATE=path)
        proc = subprocess.Popen(["/bin/sh", script], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(path) as f:
                    if json.load(f)["gets"] >= 2:
                        break
            except (ValueError, OSError):
                pass
            time.sleep(0.05)
        proc.send_signal(15)
        _, err = proc.communicate(timeout=60)
        with open(path) as f:
            st = json.load(f)
        new = [p for p in st["pods"] if p["name"] == "train-9-w09"][0]
        expect(proc.returncode == 130 and new.get("selector") is None and
               new["gates"] == ["other.io/g"],
               f"stopped while following: exit {proc.returncode}, {new}, {err}")
        # 7. Bad input, each named.
        for more, words in [
                (["--k8s-placement", "Train_1"], ["--k8s-placement", "Train_1", "Job's name"]),
                (["--k8s-placement", "train", "--namespace", "ML"], ["--namespace", "ML"]),
                (["--k8s-placement", "train", "--gate", "no gate"], ["--gate", "no gate"]),
                (["--k8s-placement", "train", "--wait", "0"], ["--wait 0", "seconds"]),
                (["--k8s-labels", "--namespace", "ml"],
                 ["--namespace", "only with --k8s-placement"]),
                (["--k8s-labels", "--follow"], ["--follow", "only with --k8s-placement"])]:
            r = export(*more)
            expect(r.returncode != 0 and all(w in r.stderr for w in words) and not r.stdout,
                   f"{more}: exit {r.returncode}, {r.stderr!r}")
        r = subprocess.run([rankmap, "export", "--k8s-placement", "train", "--topology",
                            TOPOLOGY], capture_output=True, text=True)
        expect(r.returncode != 0 and "expected --plan P" in r.stderr,
               f"a topology is not an order: {r.stderr!r}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
