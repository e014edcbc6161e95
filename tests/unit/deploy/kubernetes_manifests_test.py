#!/usr/bin/python3
"""deploy/kubernetes: the shipped manifests pass the offline schema check, the checker rejects
broken ones (each mutation names the field), the DaemonSet keeps its hardening, its hosts.sh
turns EndpointSlices into the hosts file with the real `rankmap` (kubectl is a stand-in: no API
server here), and what `rankmap export --k8s-labels / --kueue-topology` renders from a fixture is
valid.

Usage: kubernetes_manifests_test.py RANKMAP_BINARY
"""
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
DEPLOY = os.path.join(ROOT, "deploy", "kubernetes")
BASE = os.path.join(DEPLOY, "base")
OVERLAY = os.path.join(DEPLOY, "overlays", "example")
sys.path.insert(0, DEPLOY)
import check_manifests  # noqa: E402

FIXTURE = os.path.join(ROOT, "tests", "data", "topologies", "links_sparse.json")
failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def load(name):
    with open(os.path.join(BASE, name), encoding="utf-8") as f:
        return f.read()


def problems(doc):
    return check_manifests.check_text(yaml.safe_dump(doc), "mutated")


def check_hosts_script(script, rankmap):
    """hosts.sh as the containers run it, with the real `rankmap` and a stand-in for kubectl
    (there is no API server here) that prints a recorded EndpointSlice list, or fails."""
    slices = os.path.join(ROOT, "tests", "data", "kubernetes", "endpointslices.json")
    with tempfile.TemporaryDirectory(prefix="hosts_sh.") as tmp:
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir)
        os.symlink(os.path.abspath(rankmap), os.path.join(bindir, "rankmap"))
        with open(os.path.join(bindir, "kubectl"), "w") as f:
            f.write('#!/bin/sh\n# Test stand-in for kubectl: the arguments hosts.sh must pass, '
                    'then the recorded list.\necho "$*" >>"$KUBECTL_LOG"\n'
                    '[ -n "$KUBECTL_FAIL" ] && exit 1\n'
                    f'exec cat {slices}\n')
        os.chmod(os.path.join(bindir, "kubectl"), 0o755)
        hosts = os.path.join(tmp, "hosts")
        env = dict(os.environ, PATH=bindir + ":" + os.environ["PATH"], HOSTS_FILE=hosts,
                   POD_NAMESPACE="rankmap", ONCE="1", KUBECTL_LOG=os.path.join(tmp, "log"),
                   INTERVAL="0")
        env.pop("KUBECTL_FAIL", None)

        def run(**more):
            return subprocess.run(["/bin/sh", "-c", script], env=dict(env, **more),
                                  capture_output=True, text=True, timeout=60)
        r = run()
        expect(r.returncode == 0, f"hosts.sh once: exit {r.returncode}: {r.stderr}")
        with open(hosts) as f:
            text = f.read()
        expect(text.endswith("cpu-node-c [fd00:10::13]\ngpu-node-a 10.0.1.11\n"
                             "gpu-node-b 10.0.1.12\n"), f"hosts.sh wrote the agents: {text!r}")
        with open(env["KUBECTL_LOG"]) as f:
            call = f.read().split()
        expect(call[:2] == ["get", "endpointslices"] and "rankmap" in call and
               "kubernetes.io/service-name=rankmapd" in call and "json" in call,
               f"hosts.sh asks for the agents' EndpointSlices as JSON: {call}")
        inode = os.stat(hosts).st_ino
        r = run()
        expect(r.returncode == 0 and os.stat(hosts).st_ino == inode,
               "an unchanged list leaves the file alone")
        r = run(KUBECTL_FAIL="1")
        expect(r.returncode == 1 and "no hosts file after 60 tries" in r.stderr and
               os.stat(hosts).st_ino == inode,
               f"a cluster that does not answer: the init gives up, the file stays: {r.stderr}")


def main():
    rankmap = sys.argv[1]
    # 1. The shipped manifests pass.
    manifests = {n: load(n) for n in ("namespace.yaml", "configmap.yaml", "daemonset.yaml",
                                      "service.yaml", "rbac.yaml")}
    with open(os.path.join(DEPLOY, "components", "podmonitor", "podmonitor.yaml"),
              encoding="utf-8") as f:
        manifests["podmonitor.yaml"] = f.read()
    with open(os.path.join(DEPLOY, "examples", "job-in-plan-order.yaml"), encoding="utf-8") as f:
        manifests["job-in-plan-order.yaml"] = f.read()
    for name, text in manifests.items():
        errs = check_manifests.check_text(text, name)
        expect(not errs, f"{name} passes: {errs}")
    svc = yaml.safe_load(manifests["service.yaml"])
    pm = yaml.safe_load(manifests["podmonitor.yaml"])
    ds = yaml.safe_load(manifests["daemonset.yaml"])
    ns, sa = list(yaml.safe_load_all(manifests["namespace.yaml"]))
    cm = yaml.safe_load(manifests["configmap.yaml"])
    role, binding = list(yaml.safe_load_all(manifests["rbac.yaml"]))
    job = list(yaml.safe_load_all(manifests["job-in-plan-order.yaml"]))[1]
    # The example Job is what `rankmap export --k8s-placement` places: Indexed, every pod at once,
    # held by the default gate (launch::kPlacementGate), its rank from the completion index.
    js = job["spec"]
    expect(js["completionMode"] == "Indexed" and js["completions"] == js["parallelism"] and
           js["template"]["spec"]["schedulingGates"] == [{"name": "rankmap.io/placement"}] and
           "--node-rank=$(JOB_COMPLETION_INDEX)" in js["template"]["spec"]["containers"][0][
               "command"], f"the example Job is one the placement script places: {js}")

    # 2. Broken manifests fail, each naming where.
    def mutate(doc, fn):
        d = copy.deepcopy(doc)
        fn(d)
        return d
    pod = lambda d: d["spec"]["template"]["spec"]  # noqa: E731
    ctr = lambda d: pod(d)["containers"][0]  # noqa: E731
    cases = [
        ("unknown field", ds, lambda d: ctr(d).update(imagePullPolicyy="Always"),
         "unknown field 'imagePullPolicyy'"),
        ("bad enum", ds, lambda d: ctr(d).update(imagePullPolicy="Sometimes"),
         "containers[0].imagePullPolicy"),
        ("restartPolicy of a DaemonSet", ds, lambda d: pod(d).update(restartPolicy="Never"),
         "restartPolicy: expected Always"),
        ("capability name", ds,
         lambda d: ctr(d)["securityContext"]["capabilities"].update(add=["CAP_NET_RAW"]),
         "capabilities.add[0]"),
        ("name not DNS-1123", ds, lambda d: d["metadata"].update(name="RankMapD"),
         "metadata.name"),
        ("container name", ds, lambda d: ctr(d).update(name="rank_mapd"), "containers[0].name"),
        ("label key", ds, lambda d: d["metadata"]["labels"].update({"bad key/x/y": "v"}),
         "metadata.labels.bad key/x/y"),
        ("label value", ds, lambda d: d["metadata"]["labels"].update(
            {"app.kubernetes.io/name": "-rankmap"}), "app.kubernetes.io/name"),
        ("label value too long", ds, lambda d: d["metadata"]["labels"].update(
            {"x": "a" * 64}), "metadata.labels.x"),
        ("missing required", ds, lambda d: d["spec"].pop("selector"),
         "required field 'selector'"),
        ("selector vs template", ds, lambda d: d["spec"]["selector"]["matchLabels"].update(
            {"app.kubernetes.io/component": "other"}), "spec.selector"),
        ("type", ds, lambda d: ctr(d)["readinessProbe"]["httpGet"].update(port=[7410]),
         "httpGet.port: expected intstr"),
        ("port range", ds, lambda d: ctr(d)["ports"][0].update(containerPort=70000),
         "containerPort"),
        ("two probe handlers", ds, lambda d: ctr(d)["readinessProbe"].update(
            tcpSocket={"port": 7410}), "exactly one handler"),
        ("mount of no volume", ds, lambda d: ctr(d)["volumeMounts"][0].update(name="nope"),
         "volumeMounts[0].name"),
        ("volume with two sources", ds, lambda d: pod(d)["volumes"][0].update(emptyDir={}),
         "exactly one volume source"),
        ("hostPath type", ds, lambda d: pod(d)["volumes"][4]["hostPath"].update(type="Dir"),
         "hostPath.type"),
        ("secret mode", ds, lambda d: pod(d)["volumes"][2]["secret"].update(defaultMode=0o1777),
         "defaultMode"),
        ("quantity", ds, lambda d: ctr(d)["resources"]["limits"].update(memory="1 GiB"),
         "limits.memory"),
        ("root with runAsNonRoot", ds, lambda d: ctr(d)["securityContext"].update(runAsUser=0),
         "runAsUser other than 0"),
        ("apiVersion", ds, lambda d: d.update(apiVersion="extensions/v1beta1"), "apiVersion"),
        ("namespace name", ns, lambda d: d["metadata"].update(name="rank.map"), "metadata.name"),
        ("service account field", sa, lambda d: d.update(automountToken=False),
         "unknown field 'automountToken'"),
        ("config key", cm, lambda d: d["data"].update({"bad key": "x"}), "data.bad key"),
        ("config value type", cm, lambda d: d["data"].update({"n": 3}), "data.n"),
        ("unknown kind", cm, lambda d: d.update(kind="Deployment"), "kind"),
        ("service port names", svc, lambda d: d["spec"]["ports"][1].update(name="metrics"),
         "spec.ports"),
        ("service port", svc, lambda d: d["spec"]["ports"][0].update(port=70000),
         "spec.ports[0].port"),
        ("pod monitor field", pm, lambda d: d["spec"].update(endpoints=[]),
         "unknown field 'endpoints'"),
        ("role verb", role, lambda d: d["rules"][0].update(verbs=["read"]),
         "rules[0].verbs[0]"),
        ("role binding subject", binding, lambda d: d["subjects"][0].pop("namespace"),
         "namespace for a ServiceAccount subject"),
        ("role binding kind", binding, lambda d: d["roleRef"].update(kind="Roles"),
         "roleRef.kind"),
        ("pod monitor endpoint", pm, lambda d: d["spec"]["podMetricsEndpoints"][0].pop("port"),
         "podMetricsEndpoints[0]"),
        ("job restart", job, lambda d: pod(d).update(restartPolicy="Always"),
         "Never or OnFailure"),
        ("indexed job", job, lambda d: d["spec"].pop("completions"), "spec.completions"),
        ("gate name", job, lambda d: pod(d)["schedulingGates"].append({"name": "a gate"}),
         "schedulingGates[1].name"),
        ("gate twice", job, lambda d: pod(d)["schedulingGates"].append(
            {"name": "rankmap.io/placement"}), "each gate once"),
    ]
    for what, doc, fn, needle in cases:
        errs = problems(mutate(doc, fn))
        expect(any(needle in e for e in errs), f"{what}: expected a problem naming {needle!r}, "
                                               f"got {errs}")
    expect(check_manifests.check_text("a: [b", "x")[0].startswith("x: not valid YAML"),
           "broken YAML is reported")

    # 3. The DaemonSet's hardening and wiring.
    p = ds["spec"]["template"]["spec"]
    c = p["containers"][0]
    sc = c["securityContext"]
    expect(p["hostNetwork"] is True, "host network")
    expect(p["securityContext"]["runAsNonRoot"] is True and sc["runAsNonRoot"] is True,
           "runAsNonRoot")
    expect(sc["runAsUser"] != 0 and sc["readOnlyRootFilesystem"] is True and
           sc["allowPrivilegeEscalation"] is False, "non-root, read-only root, no escalation")
    expect(sc["capabilities"] == {"drop": ["ALL"]}, "the agent drops every capability")
    init_caps = p["initContainers"][0]["securityContext"]["capabilities"]
    expect(init_caps == {"drop": ["ALL"], "add": ["CHOWN"]}, "the init container keeps CHOWN only")
    rp = c["readinessProbe"]["httpGet"]
    expect((rp["host"], rp["path"], rp["port"]) == ("127.0.0.1", "/v1/health", 7410),
           "readiness on the loopback API's /v1/health")
    expect(all(k in c["resources"]["requests"] for k in ("cpu", "memory")) and
           "memory" in c["resources"]["limits"], "requests, and a memory limit")
    expect("cpu" not in c["resources"]["limits"],
           "no CPU limit (its quota would throttle a measurement)")
    expect({"operator": "Exists"} in p.get("tolerations", []),
           "tolerates every taint (tainted GPU nodes get their agent)")
    secrets = {v["name"]: v["secret"] for v in p["volumes"] if "secret" in v}
    # rankmapd's secret-file check (common/files.h checkPrivateFile) accepts group read on a
    # kubelet-projected Secret only when the file's group is one of the agent's groups: the
    # kubelet gives the files the pod's fsGroup, which must then be the agent's group.
    expect(set(secrets) == {"probe-key", "token"} and
           all(s["defaultMode"] & 0o077 in (0, 0o040) for s in secrets.values()),
           "secrets mounted with no bits for others and at most group read")
    expect(p["securityContext"].get("fsGroup") in (sc.get("runAsGroup"),
                                                   p["securityContext"].get("runAsGroup")),
           "fsGroup (the group of the Secret files) is the agent's own group")
    expect(any("hostPath" in v and v["hostPath"]["path"] == "/var/lib/rankmapd"
               for v in p["volumes"]), "state on a hostPath")
    config = cm["data"]["rankmapd.json"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    for key, path in re.findall(r'"(hosts_file|token_file|key_file|state_dir)": "([^"]+)"',
                                config):
        expect(any(path == m or path.startswith(m + "/") for m in mounts),
               f"config {key} {path} lies in a mount")
    expect('"listen": "127.0.0.1:7410"' in config, "the API listens on loopback")

    # Metrics: the agent serves /metrics alone on the node's address (metrics_listen), a port
    # named for it, and every scraper finds it: pod annotations, the headless Service, the
    # PodMonitor, each naming that port and selecting the pods.
    ports = {x["name"]: x["containerPort"] for x in c["ports"]}
    args = c["args"]
    expect("--metrics-listen" in args and
           args[args.index("--metrics-listen") + 1] == f"$(POD_IP):{ports.get('metrics')}",
           f"--metrics-listen on the node's address at the metrics port: {args}")
    env = {e["name"]: e for e in c["env"]}
    expect(env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") ==
           "status.podIP", "POD_IP from status.podIP")
    notes = ds["spec"]["template"]["metadata"].get("annotations", {})
    expect(notes.get("prometheus.io/scrape") == "true" and
           notes.get("prometheus.io/port") == str(ports.get("metrics")),
           f"pod annotations for Prometheus' pod discovery: {notes}")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    expect(svc["spec"].get("clusterIP") == "None" and
           all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()),
           "a headless Service selecting the agents")
    expect({"name": "metrics", "port": ports.get("metrics"), "targetPort": "metrics",
            "protocol": "TCP"} in svc["spec"]["ports"], "the Service names the metrics port")
    expect(all(pod_labels.get(k) == v for k, v in pm["spec"]["selector"]["matchLabels"].items())
           and [e["port"] for e in pm["spec"]["podMetricsEndpoints"]] == ["metrics"],
           "the PodMonitor selects the agents and scrapes their metrics port")

    # Hosts from the cluster: the hosts containers (init: once; then every 30 s) run hosts.sh with
    # the service account's token mounted in them alone, into the volume where the agent's
    # hosts_file lies and that it mounts read-only; the agent watches the file; the Service lists
    # not-ready agents too; the account may list EndpointSlices and nothing else.
    conts = {x["name"]: x for x in p["initContainers"] + p["containers"]}
    hosts_path = re.search(r'"hosts_file": "([^"]+)"', config).group(1)
    for name in ("hosts-init", "hosts"):
        h = conts.get(name, {})
        env = {e["name"]: e.get("value") for e in h.get("env", [])}
        mounts = {m["mountPath"]: m["name"] for m in h.get("volumeMounts", [])}
        expect(h.get("command") == ["/bin/sh", "/etc/rankmap/hosts.sh"] and
               env.get("HOSTS_FILE") == hosts_path and
               mounts.get(os.path.dirname(hosts_path)) == "hosts" and
               mounts.get("/var/run/secrets/kubernetes.io/serviceaccount") == "kube-api",
               f"container {name} runs hosts.sh into {hosts_path} with the API token: {h}")
    expect(conts["hosts-init"]["env"][-1] == {"name": "ONCE", "value": "1"},
           "the init container writes the first list and ends")
    agent_mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    expect(agent_mounts.get(os.path.dirname(hosts_path), {}).get("readOnly") is True and
           "kube-api" not in {m["name"] for m in c["volumeMounts"]} and
           p.get("automountServiceAccountToken") is False,
           "the agent reads the hosts volume and gets no API token")
    expect('"hosts_watch": "10s"' in config, "the agent watches its hosts file")
    expect(svc["spec"].get("publishNotReadyAddresses") is True,
           "the Service lists agents that are not ready yet")
    expect(role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                              "verbs": ["get", "list"]}] and
           binding["roleRef"]["name"] == role["metadata"]["name"] and
           binding["subjects"] == [{"kind": "ServiceAccount", "name": p["serviceAccountName"],
                                    "namespace": ds["metadata"]["namespace"]}],
           "the agents' account may read EndpointSlices, nothing else")
    check_hosts_script(cm["data"]["hosts.sh"], rankmap)

    # 4. kustomize renders the base and the example overlay into valid manifests: one image
    # reference (the kustomization's) in every container.
    kubectl = shutil.which("kubectl")
    if not kubectl:
        print("skipped: the kustomize checks (kubectl not installed; Debian: kubernetes-client)")
    else:
        for where in (BASE, OVERLAY):
            r = subprocess.run([kubectl, "kustomize", where], capture_output=True, text=True,
                               timeout=60)
            expect(r.returncode == 0, f"kubectl kustomize {where}: {r.stderr.strip()}")
            if r.returncode != 0:
                continue
            errs = check_manifests.check_text(r.stdout, where)
            expect(not errs, f"{where} renders valid manifests: {errs}")
            docs = [d for d in yaml.safe_load_all(r.stdout) if d]
            dss = [d for d in docs if d["kind"] == "DaemonSet"]
            expect(len(dss) == 1, f"{where}: one DaemonSet")
            spec = dss[0]["spec"]["template"]["spec"]
            images = {x["image"] for x in spec["initContainers"] + spec["containers"]}
            want = ("registry.example.com/rankmap:0.1.0" if where == OVERLAY
                    else "rankmap:0.1.0")
            expect(images == {want}, f"{where}: every container runs {want}: {images}")
            kinds = sorted(d["kind"] for d in docs)
            expect(("PodMonitor" in kinds) == (where == OVERLAY) and "Service" in kinds,
                   f"{where}: a Service, and the PodMonitor in the overlay only: {kinds}")
    # 5. What `rankmap export` renders from a topology is valid.
    kueue = subprocess.run([rankmap, "export", "--kueue-topology", "--topology", FIXTURE],
                           capture_output=True, text=True, check=True).stdout
    errs = check_manifests.check_text(kueue, "kueue")
    expect(not errs, f"the exported Kueue Topology passes: {errs}")
    levels = [x["nodeLabel"] for x in yaml.safe_load(kueue)["spec"]["levels"]]
    expect(levels == ["rankmap.io/level-2", "rankmap.io/level-1", "kubernetes.io/hostname"],
           f"Kueue levels outermost first, the host last: {levels}")
    lines = subprocess.run([rankmap, "export", "--k8s-labels", "--topology", FIXTURE],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    label_lines = [x for x in lines if x.startswith("kubectl label nodes ")]
    expect(len(label_lines) == 24, f"one label line per host: {len(label_lines)}")
    for line in label_lines + [x for x in lines if x.startswith("kubectl annotate nodes ")]:
        words = line.split()
        expect(words[-1] == "--overwrite" and check_manifests.is_dns_subdomain(words[3]),
               f"node name and --overwrite: {line}")
        for kv in words[4:-1]:
            k, _, v = kv.partition("=")
            expect(check_manifests.is_qualified_name(k), f"key {k!r}")
            if words[1] == "label":
                expect(len(v) <= 63 and check_manifests.LABEL_VALUE.match(v), f"value {v!r}")
    # A broken Topology fails the same check.
    broken = kueue.replace("kubernetes.io/hostname", "rankmap.io/level-1")
    expect(any("each nodeLabel once" in e for e in check_manifests.check_text(broken, "k")),
           "repeated Kueue level is rejected")
    broken = re.sub(r"(    - nodeLabel: kubernetes.io/hostname\n)", "",
                    kueue).replace("  levels:\n", "  levels:\n    - nodeLabel: "
                                                  "kubernetes.io/hostname\n")
    expect(any("only as the last level" in e for e in check_manifests.check_text(broken, "k")),
           "hostname not last is rejected")

    print(f"{len(cases)} broken manifests rejected; {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
