#!/usr/bin/python3
"""Offline schema check of Kubernetes manifests: the kinds rankmap ships or writes.

Usage: check_manifests.py FILE.yaml... ("-" = stdin). Exit 0 when every document passes, 1 with
one line per problem ("FILE: doc N (Kind name): at spec.x: expected ...") otherwise.

Written against the published field rules (Kubernetes API reference for core/v1 Namespace,
ServiceAccount, ConfigMap, Secret, Service, apps/v1 DaemonSet, batch/v1 Job and
rbac.authorization.k8s.io/v1 Role and RoleBinding; Kueue's Topology in
kueue.x-k8s.io v1alpha1/v1beta1/v1beta2; the Prometheus Operator's PodMonitor in
monitoring.coreos.com/v1), for exactly these kinds: unknown fields are rejected at every level,
required fields, types, enums, DNS-1123 names, label keys and values, quantities, and a few
cross-field rules the API server enforces (the selector matches the template's labels, volume
mounts name declared volumes, a volume has exactly one source, a probe exactly one handler, a
DaemonSet's pods restart Always, a Job's pods restart Never or OnFailure, an Indexed Job states
its completions, scheduling gates are named once with label keys, a RoleBinding's roleRef and subjects name their kinds, Kueue's levels are unique with kubernetes.io/hostname last, a
Service's ports have distinct names).
Fields that rankmap's manifests do not use are known by name (so they are not "unknown") but
their contents are only type-checked as objects or lists. Needs python3-yaml only.
"""
import re
import sys

import yaml

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)"
                      r"(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$")
CAPABILITIES = {
    "ALL", "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
    "CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID",
    "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN", "MAC_OVERRIDE",
    "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "PERFMON", "SETFCAP",
    "SETGID", "SETPCAP", "SETUID", "SYSLOG", "SYS_ADMIN", "SYS_BOOT", "SYS_CHROOT",
    "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO", "SYS_RESOURCE",
    "SYS_TIME", "SYS_TTY_CONFIG", "WAKE_ALARM"}
KUEUE_VERSIONS = ("kueue.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")


def is_dns_subdomain(s):
    return 0 < len(s) <= 253 and all(DNS_LABEL.match(p) for p in s.split("."))


def is_qualified_name(s):
    prefix, _, name = s.rpartition("/")
    if "/" in s and not is_dns_subdomain(prefix):
        return False
    return 0 < len(name) <= 63 and bool(LABEL_VALUE.match(name))


class Checker:
    def __init__(self, where):
        self.where = where
        self.errors = []

    def err(self, path, what):
        self.errors.append(f"{self.where}: at {path or '(top)'}: {what}")

    # --- scalar types -------------------------------------------------------------------------
    def typed(self, v, path, ty):
        ok = {"str": isinstance(v, str),
              "int": isinstance(v, int) and not isinstance(v, bool),
              "bool": isinstance(v, bool),
              "obj": isinstance(v, dict),
              "list": isinstance(v, list),
              "intstr": (isinstance(v, int) and not isinstance(v, bool)) or isinstance(v, str)}[ty]
        if not ok:
            self.err(path, f"expected {ty}, got {type(v).__name__} {v!r}")
        return ok

    def obj(self, v, path, fields, required=()):
        """Checks a mapping: every key known (fields: name -> checker(value, path)), required
        keys present. A checker may be a type name."""
        if not self.typed(v, path, "obj"):
            return False
        for k in required:
            if k not in v:
                self.err(path, f"expected required field {k!r}")
        for k, val in v.items():
            p = f"{path}.{k}" if path else str(k)
            if k not in fields:
                self.err(p, f"unknown field {k!r} (expected one of {', '.join(sorted(fields))})")
                continue
            f = fields[k]
            if isinstance(f, str):
                self.typed(val, p, f)
            else:
                f(val, p)
        return True

    def list_of(self, item):
        def check(v, path):
            if self.typed(v, path, "list"):
                for i, x in enumerate(v):
                    (self.typed(x, f"{path}[{i}]", item) if isinstance(item, str)
                     else item(x, f"{path}[{i}]"))
        return check

    def enum(self, *values):
        def check(v, path):
            if v not in values:
                self.err(path, f"expected one of {', '.join(map(repr, values))}, got {v!r}")
        return check

    def int_range(self, lo, hi):
        def check(v, path):
            if self.typed(v, path, "int") and not lo <= v <= hi:
                self.err(path, f"expected an integer in [{lo}, {hi}], got {v}")
        return check

    def dns_subdomain(self, v, path):
        if self.typed(v, path, "str") and not is_dns_subdomain(v):
            self.err(path, f"expected a DNS-1123 subdomain (lower-case alphanumerics, '-', '.', "
                           f"at most 253), got {v!r}")

    def dns_label(self, v, path):
        if self.typed(v, path, "str") and (not DNS_LABEL.match(v) or len(v) > 63):
            self.err(path, f"expected a DNS-1123 label (lower-case alphanumerics and '-', at "
                           f"most 63), got {v!r}")

    def quantity(self, v, path):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return
        if self.typed(v, path, "str") and not QUANTITY.match(v):
            self.err(path, f"expected a quantity such as 100m, 64Mi or 2, got {v!r}")

    def labels(self, v, path):
        if not self.typed(v, path, "obj"):
            return
        for k, val in v.items():
            if not isinstance(k, str) or not is_qualified_name(k):
                self.err(f"{path}.{k}", "expected a label key: [prefix/]name, prefix a DNS "
                                        "subdomain, name at most 63 of [A-Za-z0-9-_.] with "
                                        "alphanumerics at both ends")
            if not isinstance(val, str) or len(val) > 63 or not LABEL_VALUE.match(val):
                self.err(f"{path}.{k}", f"expected a label value (at most 63 of [A-Za-z0-9-_.], "
                                        f"alphanumerics at both ends), got {val!r}")

    def annotations(self, v, path):
        if not self.typed(v, path, "obj"):
            return
        for k, val in v.items():
            if not isinstance(k, str) or not is_qualified_name(k):
                self.err(f"{path}.{k}", "expected an annotation key: [prefix/]name")
            self.typed(val, f"{path}.{k}", "str")

    def string_map(self, key_re, what):
        def check(v, path):
            if not self.typed(v, path, "obj"):
                return
            for k, val in v.items():
                if not isinstance(k, str) or not key_re.match(k) or len(k) > 253:
                    self.err(f"{path}.{k}", f"expected {what}")
                self.typed(val, f"{path}.{k}", "str")
        return check

    # --- metadata -----------------------------------------------------------------------------
    def metadata(self, namespaced, name_rule=None):
        def check(v, path):
            fields = {"name": name_rule or self.dns_subdomain, "labels": self.labels,
                      "annotations": self.annotations, "generateName": "str"}
            if namespaced:
                fields["namespace"] = self.dns_label
            self.obj(v, path, fields, required=("name",))
        return check

    def label_selector(self, v, path):
        req = lambda x, p: self.obj(x, p, {  # noqa: E731
            "key": "str", "operator": self.enum("In", "NotIn", "Exists", "DoesNotExist"),
            "values": self.list_of("str")}, required=("key", "operator"))
        self.obj(v, path, {"matchLabels": self.labels, "matchExpressions": self.list_of(req)})

    # --- pods ---------------------------------------------------------------------------------
    def capabilities(self, v, path):
        def cap(x, p):
            if self.typed(x, p, "str") and x not in CAPABILITIES:
                self.err(p, f"expected a Linux capability without CAP_ (CHOWN, NET_ADMIN, ...) "
                            f"or ALL, got {x!r}")
        self.obj(v, path, {"add": self.list_of(cap), "drop": self.list_of(cap)})

    def seccomp(self, v, path):
        self.obj(v, path, {"type": self.enum("RuntimeDefault", "Unconfined", "Localhost"),
                           "localhostProfile": "str"}, required=("type",))

    def container_security(self, v, path):
        self.obj(v, path, {
            "runAsUser": self.int_range(0, 2**31 - 1), "runAsGroup": self.int_range(0, 2**31 - 1),
            "runAsNonRoot": "bool", "readOnlyRootFilesystem": "bool",
            "allowPrivilegeEscalation": "bool", "privileged": "bool",
            "capabilities": self.capabilities, "seccompProfile": self.seccomp,
            "procMount": self.enum("Default", "Unmasked"), "seLinuxOptions": "obj",
            "windowsOptions": "obj", "appArmorProfile": "obj"})
        if isinstance(v, dict) and v.get("runAsNonRoot") is True and v.get("runAsUser") == 0:
            self.err(path, "expected runAsUser other than 0 with runAsNonRoot: true")

    def pod_security(self, v, path):
        self.obj(v, path, {
            "runAsUser": self.int_range(0, 2**31 - 1), "runAsGroup": self.int_range(0, 2**31 - 1),
            "runAsNonRoot": "bool", "fsGroup": self.int_range(0, 2**31 - 1),
            "fsGroupChangePolicy": self.enum("OnRootMismatch", "Always"),
            "supplementalGroups": self.list_of("int"),
            "supplementalGroupsPolicy": self.enum("Merge", "Strict"),
            "seccompProfile": self.seccomp, "sysctls": self.list_of("obj"),
            "seLinuxOptions": "obj", "seLinuxChangePolicy": "str", "windowsOptions": "obj",
            "appArmorProfile": "obj"})

    def probe(self, v, path):
        def http(x, p):
            self.obj(x, p, {"path": "str", "port": "intstr", "host": "str",
                            "scheme": self.enum("HTTP", "HTTPS"),
                            "httpHeaders": self.list_of("obj")}, required=("port",))
            if isinstance(x, dict) and isinstance(x.get("port"), int):
                self.int_range(1, 65535)(x["port"], f"{p}.port")
        handlers = {"httpGet": http, "tcpSocket": "obj", "exec": "obj", "grpc": "obj"}
        fields = dict(handlers)
        for k in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "successThreshold",
                  "failureThreshold", "terminationGracePeriodSeconds"):
            fields[k] = self.int_range(0 if k == "initialDelaySeconds" else 1, 2**31 - 1)
        if self.obj(v, path, fields):
            n = sum(1 for h in handlers if h in v)
            if n != 1:
                self.err(path, f"expected exactly one handler of {', '.join(handlers)}, got {n}")

    def env_var(self, v, path):
        def value_from(x, p):
            self.obj(x, p, {
                "fieldRef": lambda y, q: self.obj(y, q, {"fieldPath": "str", "apiVersion": "str"},
                                                  required=("fieldPath",)),
                "secretKeyRef": "obj", "configMapKeyRef": "obj", "resourceFieldRef": "obj",
                "fileKeyRef": "obj"})
        if self.obj(v, path, {"name": "str", "value": "str", "valueFrom": value_from},
                    required=("name",)):
            if "value" in v and "valueFrom" in v:
                self.err(path, "expected value or valueFrom, not both")

    def container(self, v, path, init=False):
        def port(x, p):
            self.obj(x, p, {"name": self.dns_label, "containerPort": self.int_range(1, 65535),
                            "hostPort": self.int_range(1, 65535), "hostIP": "str",
                            "protocol": self.enum("TCP", "UDP", "SCTP")},
                     required=("containerPort",))

        def mount(x, p):
            self.obj(x, p, {"name": "str", "mountPath": "str", "readOnly": "bool",
                            "subPath": "str", "subPathExpr": "str",
                            "mountPropagation": self.enum("None", "HostToContainer",
                                                          "Bidirectional"),
                            "recursiveReadOnly": self.enum("Disabled", "IfPossible", "Enabled")},
                     required=("name", "mountPath"))

        def resources(x, p):
            rmap = lambda y, q: [self.quantity(val, f"{q}.{k}")  # noqa: E731
                                 for k, val in y.items()] if self.typed(y, q, "obj") else None
            self.obj(x, p, {"limits": rmap, "requests": rmap, "claims": self.list_of("obj")})

        fields = {"name": self.dns_label, "image": "str", "command": self.list_of("str"),
                  "args": self.list_of("str"), "workingDir": "str", "ports": self.list_of(port),
                  "env": self.list_of(self.env_var), "envFrom": self.list_of("obj"),
                  "resources": resources, "volumeMounts": self.list_of(mount),
                  "volumeDevices": self.list_of("obj"), "livenessProbe": self.probe,
                  "readinessProbe": self.probe, "startupProbe": self.probe, "lifecycle": "obj",
                  "terminationMessagePath": "str",
                  "terminationMessagePolicy": self.enum("File", "FallbackToLogsOnError"),
                  "imagePullPolicy": self.enum("Always", "Never", "IfNotPresent"),
                  "securityContext": self.container_security, "stdin": "bool",
                  "stdinOnce": "bool", "tty": "bool", "resizePolicy": self.list_of("obj")}
        if init:
            fields["restartPolicy"] = self.enum("Always")
        self.obj(v, path, fields, required=("name",))
        if isinstance(v, dict) and not init:
            for probe in ("livenessProbe", "startupProbe"):
                if isinstance(v.get(probe), dict) and v[probe].get("successThreshold", 1) != 1:
                    self.err(f"{path}.{probe}.successThreshold", "expected 1 for this probe")

    def volume(self, v, path):
        mode = self.int_range(0, 0o777)
        item = lambda x, p: self.obj(x, p, {"key": "str", "path": "str", "mode": mode},  # noqa
                                     required=("key", "path"))
        sources = {
            "hostPath": lambda x, p: self.obj(x, p, {"path": "str", "type": self.enum(
                "", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                "CharDevice", "BlockDevice")}, required=("path",)),
            "configMap": lambda x, p: self.obj(x, p, {"name": "str", "items": self.list_of(item),
                                                      "defaultMode": mode, "optional": "bool"}),
            "secret": lambda x, p: self.obj(x, p, {"secretName": "str",
                                                   "items": self.list_of(item),
                                                   "defaultMode": mode, "optional": "bool"}),
            "emptyDir": lambda x, p: self.obj(x, p, {"medium": self.enum("", "Memory"),
                                                     "sizeLimit": self.quantity}),
            "projected": "obj", "downwardAPI": "obj", "persistentVolumeClaim": "obj",
            "ephemeral": "obj", "csi": "obj", "image": "obj", "nfs": "obj"}
        fields = dict(sources, name=self.dns_label)
        if self.obj(v, path, fields, required=("name",)):
            n = sum(1 for s in sources if s in v)
            if n != 1:
                self.err(path, f"expected exactly one volume source, got {n}")

    def scheduling_gate(self, v, path):
        if self.obj(v, path, {"name": "str"}, required=("name",)):
            if isinstance(v.get("name"), str) and not is_qualified_name(v["name"]):
                self.err(f"{path}.name", f"expected a qualified name, got {v['name']!r}")

    def pod_spec(self, v, path, restart_always=False):
        fields = {
            "containers": self.list_of(lambda x, p: self.container(x, p)),
            "initContainers": self.list_of(lambda x, p: self.container(x, p, init=True)),
            "volumes": self.list_of(self.volume),
            "restartPolicy": self.enum("Always", "OnFailure", "Never"),
            "terminationGracePeriodSeconds": self.int_range(0, 2**31 - 1),
            "activeDeadlineSeconds": self.int_range(1, 2**63 - 1),
            "dnsPolicy": self.enum("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"),
            "nodeSelector": self.labels, "serviceAccountName": self.dns_subdomain,
            "automountServiceAccountToken": "bool", "nodeName": "str", "hostNetwork": "bool",
            "hostPID": "bool", "hostIPC": "bool", "hostUsers": "bool",
            "shareProcessNamespace": "bool", "securityContext": self.pod_security,
            "imagePullSecrets": self.list_of("obj"), "hostname": "str", "subdomain": "str",
            "affinity": "obj", "schedulerName": "str", "tolerations": self.list_of("obj"),
            "hostAliases": self.list_of("obj"), "priorityClassName": "str", "priority": "int",
            "dnsConfig": "obj", "readinessGates": self.list_of("obj"),
            "runtimeClassName": "str", "enableServiceLinks": "bool",
            "preemptionPolicy": self.enum("PreemptLowerPriority", "Never"), "overhead": "obj",
            "topologySpreadConstraints": self.list_of("obj"), "setHostnameAsFQDN": "bool",
            "os": "obj", "schedulingGates": self.list_of(self.scheduling_gate),
            "resourceClaims": self.list_of("obj"), "resources": "obj"}
        if not self.obj(v, path, fields, required=("containers",)):
            return
        if restart_always and v.get("restartPolicy", "Always") != "Always":
            self.err(f"{path}.restartPolicy", "expected Always (a DaemonSet's pods)")
        gates = [g.get("name") for g in v.get("schedulingGates") or [] if isinstance(g, dict)]
        if len(set(gates)) != len(gates):
            self.err(f"{path}.schedulingGates", "expected each gate once")
        names = [c.get("name") for c in v.get("initContainers", []) + v.get("containers", [])
                 if isinstance(c, dict)]
        for n in set(names):
            if names.count(n) > 1:
                self.err(path, f"container name {n!r} used twice")
        volumes = {x.get("name") for x in v.get("volumes", []) if isinstance(x, dict)}
        for kind in ("initContainers", "containers"):
            for i, c in enumerate(v.get(kind, [])):
                for j, m in enumerate(c.get("volumeMounts", []) if isinstance(c, dict) else []):
                    if isinstance(m, dict) and m.get("name") not in volumes:
                        self.err(f"{path}.{kind}[{i}].volumeMounts[{j}].name",
                                 f"expected a volume of this pod, got {m.get('name')!r}")

    # --- kinds --------------------------------------------------------------------------------
    def daemonset(self, doc):
        def template(v, path):
            self.obj(v, path, {"metadata": lambda x, p: self.obj(
                x, p, {"labels": self.labels, "annotations": self.annotations, "name": "str"}),
                "spec": lambda x, p: self.pod_spec(x, p, restart_always=True)},
                required=("spec",))

        def rolling(v, path):
            self.obj(v, path, {"maxUnavailable": "intstr", "maxSurge": "intstr"})

        def spec(v, path):
            self.obj(v, path, {
                "selector": self.label_selector, "template": template,
                "updateStrategy": lambda x, p: self.obj(x, p, {
                    "type": self.enum("RollingUpdate", "OnDelete"), "rollingUpdate": rolling}),
                "minReadySeconds": self.int_range(0, 2**31 - 1),
                "revisionHistoryLimit": self.int_range(0, 2**31 - 1)},
                required=("selector", "template"))
            try:
                want = v["selector"]["matchLabels"]
                have = v["template"]["metadata"]["labels"]
                for k, val in want.items():
                    if have.get(k) != val:
                        self.err(f"{path}.selector", f"expected the template's labels to match "
                                                     f"{k}={val}")
            except (KeyError, TypeError, AttributeError):
                self.err(f"{path}.selector", "expected matchLabels that the template's labels "
                                             "match")
        self.obj(doc, "", {"apiVersion": self.enum("apps/v1"), "kind": "str",
                           "metadata": self.metadata(True), "spec": spec},
                 required=("apiVersion", "kind", "metadata", "spec"))

    def job(self, doc):
        def template(v, path):
            if not self.obj(v, path, {"metadata": lambda x, p: self.obj(
                    x, p, {"labels": self.labels, "annotations": self.annotations, "name": "str"}),
                    "spec": self.pod_spec}, required=("spec",)):
                return
            spec = v.get("spec")
            if isinstance(spec, dict) and spec.get("restartPolicy") not in ("Never", "OnFailure"):
                self.err(f"{path}.spec.restartPolicy",
                         f"expected Never or OnFailure (a Job's pods), got "
                         f"{spec.get('restartPolicy')!r}")

        count = self.int_range(0, 2**31 - 1)

        def spec(v, path):
            if not self.obj(v, path, {
                    "template": template, "parallelism": count, "completions": count,
                    "completionMode": self.enum("NonIndexed", "Indexed"), "backoffLimit": count,
                    "backoffLimitPerIndex": count, "maxFailedIndexes": count,
                    "activeDeadlineSeconds": self.int_range(1, 2**63 - 1),
                    "ttlSecondsAfterFinished": count, "suspend": "bool",
                    "manualSelector": "bool", "selector": self.label_selector,
                    "podFailurePolicy": "obj", "successPolicy": "obj",
                    "podReplacementPolicy": self.enum("TerminatingOrFailed", "Failed"),
                    "managedBy": "str"}, required=("template",)):
                return
            if v.get("completionMode") == "Indexed" and not isinstance(v.get("completions"), int):
                self.err(f"{path}.completions", "expected a number for an Indexed Job")
        self.obj(doc, "", {"apiVersion": self.enum("batch/v1"), "kind": "str",
                           "metadata": self.metadata(True), "spec": spec},
                 required=("apiVersion", "kind", "metadata", "spec"))

    def namespace(self, doc):
        self.obj(doc, "", {"apiVersion": self.enum("v1"), "kind": "str",
                           "metadata": self.metadata(False, self.dns_label), "spec": "obj"},
                 required=("apiVersion", "kind", "metadata"))

    def service_account(self, doc):
        self.obj(doc, "", {"apiVersion": self.enum("v1"), "kind": "str",
                           "metadata": self.metadata(True),
                           "automountServiceAccountToken": "bool",
                           "secrets": self.list_of("obj"), "imagePullSecrets": self.list_of("obj")},
                 required=("apiVersion", "kind", "metadata"))

    def config_map(self, doc):
        key = self.string_map(CONFIG_KEY, "a key of [-._a-zA-Z0-9]")
        self.obj(doc, "", {"apiVersion": self.enum("v1"), "kind": "str",
                           "metadata": self.metadata(True), "data": key, "binaryData": key,
                           "immutable": "bool"},
                 required=("apiVersion", "kind", "metadata"))

    def secret(self, doc):
        key = self.string_map(CONFIG_KEY, "a key of [-._a-zA-Z0-9]")
        self.obj(doc, "", {"apiVersion": self.enum("v1"), "kind": "str",
                           "metadata": self.metadata(True), "data": key, "stringData": key,
                           "type": "str", "immutable": "bool"},
                 required=("apiVersion", "kind", "metadata"))

    def kueue_topology(self, doc):
        def level(v, path):
            self.obj(v, path, {"nodeLabel": "str"}, required=("nodeLabel",))
            label = v.get("nodeLabel") if isinstance(v, dict) else None
            if isinstance(label, str) and (len(label) > 316 or not is_qualified_name(label)):
                self.err(f"{path}.nodeLabel", f"expected a label key, got {label!r}")

        def spec(v, path):
            if not self.obj(v, path, {"levels": self.list_of(level)}, required=("levels",)):
                return
            levels = v.get("levels")
            if not isinstance(levels, list):
                return
            if not 1 <= len(levels) <= 16:
                self.err(f"{path}.levels", f"expected 1 to 16 levels, got {len(levels)}")
            labels = [x.get("nodeLabel") for x in levels if isinstance(x, dict)]
            if len(set(labels)) != len(labels):
                self.err(f"{path}.levels", "expected each nodeLabel once")
            if "kubernetes.io/hostname" in labels[:-1]:
                self.err(f"{path}.levels", "expected kubernetes.io/hostname only as the last level")
        self.obj(doc, "", {"apiVersion": self.enum(*KUEUE_VERSIONS), "kind": "str",
                           "metadata": self.metadata(False), "spec": spec},
                 required=("apiVersion", "kind", "metadata", "spec"))

    def service(self, doc):
        def port(x, p):
            self.obj(x, p, {"name": self.dns_label, "port": self.int_range(1, 65535),
                            "targetPort": "intstr", "protocol": self.enum("TCP", "UDP", "SCTP"),
                            "appProtocol": "str", "nodePort": self.int_range(1, 65535)},
                     required=("port",))

        def spec(v, path):
            self.obj(v, path, {
                "selector": self.labels, "ports": self.list_of(port),
                "clusterIP": "str", "clusterIPs": self.list_of("str"),
                "type": self.enum("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"),
                "publishNotReadyAddresses": "bool", "sessionAffinity": self.enum("None",
                                                                                 "ClientIP"),
                "internalTrafficPolicy": self.enum("Cluster", "Local"),
                "ipFamilyPolicy": "str", "ipFamilies": self.list_of("str")})
            ports = v.get("ports") if isinstance(v, dict) else None
            names = [x.get("name") for x in ports or [] if isinstance(x, dict)]
            if len(names) > 1 and (None in names or len(set(names)) != len(names)):
                self.err(f"{path}.ports", "expected a distinct name on every port")
        self.obj(doc, "", {"apiVersion": self.enum("v1"), "kind": "str",
                           "metadata": self.metadata(True, self.dns_label), "spec": spec},
                 required=("apiVersion", "kind", "metadata", "spec"))

    def pod_monitor(self, doc):
        def endpoint(x, p):
            self.obj(x, p, {"port": self.dns_label, "path": "str", "interval": "str",
                            "scrapeTimeout": "str", "scheme": self.enum("http", "https"),
                            "honorLabels": "bool", "relabelings": self.list_of("obj"),
                            "metricRelabelings": self.list_of("obj")},
                     required=("port",))

        def spec(v, path):
            self.obj(v, path, {
                "selector": self.label_selector, "podMetricsEndpoints": self.list_of(endpoint),
                "namespaceSelector": lambda x, p: self.obj(x, p, {
                    "any": "bool", "matchNames": self.list_of("str")}),
                "jobLabel": "str", "podTargetLabels": self.list_of("str")},
                required=("selector", "podMetricsEndpoints"))
        self.obj(doc, "", {"apiVersion": self.enum("monitoring.coreos.com/v1"), "kind": "str",
                           "metadata": self.metadata(True), "spec": spec},
                 required=("apiVersion", "kind", "metadata", "spec"))

    def role(self, doc):
        def rule(x, p):
            self.obj(x, p, {"apiGroups": self.list_of("str"), "resources": self.list_of("str"),
                            "resourceNames": self.list_of("str"),
                            "nonResourceURLs": self.list_of("str"),
                            "verbs": self.list_of(self.enum(
                                "get", "list", "watch", "create", "update", "patch", "delete",
                                "deletecollection", "*"))},
                     required=("verbs",))
        self.obj(doc, "", {"apiVersion": self.enum("rbac.authorization.k8s.io/v1"), "kind": "str",
                           "metadata": self.metadata(True), "rules": self.list_of(rule)},
                 required=("apiVersion", "kind", "metadata"))

    def role_binding(self, doc):
        def role_ref(x, p):
            self.obj(x, p, {"apiGroup": self.enum("rbac.authorization.k8s.io"),
                            "kind": self.enum("Role", "ClusterRole"), "name": "str"},
                     required=("apiGroup", "kind", "name"))

        def subject(x, p):
            self.obj(x, p, {"kind": self.enum("ServiceAccount", "User", "Group"),
                            "name": "str", "namespace": "str", "apiGroup": "str"},
                     required=("kind", "name"))
            if isinstance(x, dict) and x.get("kind") == "ServiceAccount" and "namespace" not in x:
                self.err(p, "expected a namespace for a ServiceAccount subject")
        self.obj(doc, "", {"apiVersion": self.enum("rbac.authorization.k8s.io/v1"), "kind": "str",
                           "metadata": self.metadata(True), "roleRef": role_ref,
                           "subjects": self.list_of(subject)},
                 required=("apiVersion", "kind", "metadata", "roleRef"))

    KINDS = {"DaemonSet": daemonset, "Job": job, "Namespace": namespace, "ServiceAccount": service_account,
             "ConfigMap": config_map, "Secret": secret, "Service": service,
             "PodMonitor": pod_monitor, "Topology": kueue_topology, "Role": role,
             "RoleBinding": role_binding}

    def document(self, doc):
        if not isinstance(doc, dict):
            self.err("", f"expected an object, got {type(doc).__name__}")
            return
        kind = doc.get("kind")
        if kind not in self.KINDS:
            self.err("kind", f"expected one of {', '.join(self.KINDS)}, got {kind!r}")
            return
        self.KINDS[kind](self, doc)


def check_text(text, source):
    """Returns the problems of every document in `text` (YAML, possibly several documents)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        return [f"{source}: not valid YAML: {e}".replace("\n", " ")]
    if not docs:
        return [f"{source}: expected at least one document"]
    errors = []
    for i, doc in enumerate(docs):
        name = doc.get("metadata", {}).get("name") if isinstance(doc, dict) and isinstance(
            doc.get("metadata"), dict) else None
        kind = doc.get("kind") if isinstance(doc, dict) else None
        c = Checker(f"{source}: doc {i + 1} ({kind} {name})")
        c.document(doc)
        errors += c.errors
    return errors


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    errors = []
    for path in argv[1:]:
        try:
            text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
        except OSError as e:
            errors.append(f"{path}: cannot read: {e.strerror}")
            continue
        errors += check_text(text, path)
    for e in errors:
        print(e)
    if not errors:
        print(f"{len(argv) - 1} file(s): every document passes")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
