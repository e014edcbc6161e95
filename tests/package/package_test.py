#!/usr/bin/python3
"""The Debian packages, built from the current build tree and installed into a scratch root.

cpack builds one .deb per role (packaging/CMakeLists.txt); each one's file list must be its
section of tests/package/expected_files.txt (plus the docs, in `rankmap`); each one's Depends
must name the Debian package of every library its own ELF files link (found here independently:
readelf, ldd, dpkg -S), and rankmapd's must not pull an MPI or libibverbs. lintian must report
exactly the tags packaging/lintian.md justifies. `dpkg --root R --force-script-chrootless`
installs them (the empty database has none of the dependencies, hence --force-depends; the
maintainer scripts run on the host with DPKG_ROOT=R, the mode dpkg provides for this), twice, so
postinst must create the rankmapd system user exactly once; the config must be a registered
conffile. An upgrade to the same packages at a later version keeps the operator's edited config and the user. Then,
from R: `rankmap --version`, `rankmapd --help`, `rankmap run --mode shim` finding
the installed MPI shim, `systemd-analyze verify --root R` on the installed unit (its ExecStart
must resolve in R) and its `security` exposure (at most 2.0), every man page rendering, rankmapd serving /v1/health with the installed config, librankmap exporting
only rankmap* symbols, and tests/package/consumer built with find_package(rankmap) and with
pkg-config against R/usr, each running one allreduce of 3 processes over loopback, checked
exactly. Then remove (conffile and the agent's state stay) and purge (both go; the rankmapd
user stays).

Needs root (dpkg installs root-owned files and useradd writes R/etc/passwd) and the Debian tools;
without them it prints the reason and exits 77 (skipped)."""

import argparse
import glob
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

kRanks = 3
kStepTimeoutS = 60


class Failure(Exception):
    pass


def run(cmd, env=None, check=True, timeout=kStepTimeoutS):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise Failure(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def checkTools(args):
    if os.geteuid() != 0:
        skip("needs root: dpkg --root installs root-owned files and useradd writes R/etc/passwd")
    for tool in ["dpkg", "dpkg-deb", "dpkg-query", "dpkg-shlibdeps", "useradd", "readelf", "nm",
                 "man", "lintian", "ldd", "systemd-analyze", "pkg-config", args.cc]:
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed")
    if "--prefix" not in run(["useradd", "--help"], check=False).stdout:
        skip("this useradd has no --prefix (shadow < 4.6): postinst cannot write into a root")


def buildDebs(args, tmp):
    """package name -> .deb, from cpack; each at the project's version."""
    out = os.path.join(tmp, "out-current")
    run([args.cpack, "--config", os.path.join(args.build_dir, "CPackConfig.cmake"), "-B", out],
        timeout=180)
    debs = {}
    for deb in glob.glob(os.path.join(out, "*.deb")):
        package, version = run(["dpkg-deb", "-f", deb, "Package", "Version"]).stdout.splitlines()
        package, version = package.split(": ", 1)[1], version.split(": ", 1)[1]
        if version != args.version:
            raise Failure(f"cpack made {package} at version {version}, expected {args.version}")
        debs[package] = deb
    expected = set(expectedFiles(args))
    if set(debs) != expected:
        raise Failure(f"cpack made packages {sorted(debs)}, expected {sorted(expected)}")
    return debs


def laterDebs(debs, tmp, version):
    """The same packages at `version`: each unpacked, its control file's Version changed and packed
    again, which is what a rebuild at that version changes (cpack ran once: a second run took 17 s
    of the test)."""
    out = os.path.join(tmp, "out-" + version)
    os.makedirs(out)
    later = {}
    for package, deb in debs.items():
        tree = os.path.join(out, package)
        run(["dpkg-deb", "-R", deb, tree])
        control = os.path.join(tree, "DEBIAN", "control")
        with open(control) as f:
            text = f.read()
        text, changed = re.subn(r"^Version: .*$", f"Version: {version}", text, flags=re.M)
        if changed != 1:
            raise Failure(f"{deb}: control file without one Version field")
        with open(control, "w") as f:
            f.write(text)
        later[package] = os.path.join(out, f"{package}_{version}.deb")
        run(["dpkg-deb", "-Znone", "-b", tree, later[package]])
    return later


def expectedFiles(args):
    """package -> its expected files (expected_files.txt; the docs go with `rankmap`)."""
    version = args.version
    fields = {"libdir": args.libdir, "version": version,
              "soversion": ".".join(version.split(".")[:2]), "config": args.config.lower()}
    expected, current = {}, None
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected_files.txt")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("["):
                name = line.strip("[]")
                wanted = {"mpi": args.mpi, "mpich": args.mpich}.get(name.split(":")[0], True) \
                    if ":" in name else True
                current = name.split(":")[-1].format(**fields) if wanted else None
                if current:
                    expected[current] = set()
            elif current:
                expected[current].add(line.format(**fields))
    docs = ["README.md"] + [os.path.basename(p)
                            for p in glob.glob(os.path.join(args.source_dir, "docs", "*.md"))]
    expected["rankmap"].update(f"usr/share/doc/rankmap/{d}" for d in docs)
    return expected


def debFiles(deb):
    files = set()
    for line in run(["dpkg-deb", "-c", deb]).stdout.splitlines():
        mode, path = line.split()[0], line.split()[5]
        if not mode.startswith("d"):
            files.add(path[2:] if path.startswith("./") else path)
    return files


def checkFileLists(args, debs):
    expected = expectedFiles(args)
    for package, deb in sorted(debs.items()):
        files = debFiles(deb)
        missing = sorted(expected[package] - files)
        extra = sorted(files - expected[package])
        if missing or extra:
            raise Failure(f"{deb}: file list differs; missing {missing}, unexpected {extra}")
        print(f"file list: {package}: {len(files)} files as expected")


def checkLintian(args, debs):
    """lintian reports exactly the (package, tag) pairs that packaging/lintian.md justifies."""
    justified = set()
    with open(os.path.join(args.source_dir, "packaging", "lintian.md")) as f:
        for m in re.finditer(r"^\| ([*a-z0-9.+-]+) \| ([a-z0-9.+-]+) \|", f.read(), re.M):
            if m.group(1) == "package":  # the table's head
                continue
            for package in (debs if m.group(1) == "*" else [m.group(1)]):
                justified.add((package, m.group(2)))
    proc = run(["lintian", "--tag-display-limit", "0", *sorted(debs.values())], check=False,
               timeout=300)
    reported = set(re.findall(r"^[EWI]: ([a-z0-9.+-]+): ([a-z0-9.+-]+)", proc.stdout, re.M))
    if reported - justified or justified - reported:
        raise Failure(f"lintian: not justified in packaging/lintian.md: "
                      f"{sorted(reported - justified)}; justified but no longer reported: "
                      f"{sorted(justified - reported)}\n{proc.stdout}")
    print(f"lintian: {len(reported)} reports, each justified in packaging/lintian.md")


kOwners = {}  # library path -> owning package, filled by ownerPackages


def ownerPackages(paths):
    """The host's Debian package that owns each library path (merged /usr: both spellings tried),
    from one dpkg -S over all of them (each call reads every package's file list: a call per
    library took 21 of the test's 76 s)."""
    candidates = {}
    for path in paths:
        real = os.path.realpath(path)
        tries = [path, real]
        for p in list(tries):
            if p.startswith("/usr/lib/"):
                tries.append(p[len("/usr"):])
            elif p.startswith("/lib/"):
                tries.append("/usr" + p)
        candidates[path] = tries
    asked = sorted({p for path, tries in candidates.items() if path not in kOwners for p in tries})
    found = {}
    if asked:
        for line in run(["dpkg", "-S", *asked], check=False).stdout.splitlines():
            if line.startswith("diversion ") or ": " not in line:
                continue
            owner, _, where = line.rpartition(": ")
            found.setdefault(where.strip(), owner.split(":")[0].split(",")[0].strip())
    for path, tries in candidates.items():
        if path in kOwners:
            continue
        owner = next((found[p] for p in tries if p in found), None)
        if owner is None:
            raise Failure(f"no Debian package owns {path} (tried {tries})")
        kOwners[path] = owner
    return {path: kOwners[path] for path in paths}


kNotOnAgentNodes = ("libopenmpi3", "libmpich12", "libibverbs1")


def checkDepends(package, deb, root):
    depends = run(["dpkg-deb", "-f", deb, "Depends"]).stdout
    declared = {re.split(r"[\s(]", d.strip())[0] for d in depends.split(",") if d.strip()}
    if package == "rankmapd" and declared & set(kNotOnAgentNodes):
        raise Failure(f"rankmapd Depends on {sorted(declared & set(kNotOnAgentNodes))}: an "
                      f"agent-only node should not need them")
    needed = {}  # soname -> (the host library ldd resolves it to, the first file needing it)
    for rel in sorted(debFiles(deb)):
        path = os.path.join(root, rel)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                continue
        ldd = run(["ldd", path]).stdout
        resolved = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
        # The dynamic loader is listed by its path alone.
        resolved.update((os.path.basename(p), p)
                        for p in re.findall(r"^\s*(/\S+) \(0x", ldd, re.M))
        for soname in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                                 run(["readelf", "-d", path]).stdout):
            if soname.startswith("librankmap"):
                continue
            if soname not in resolved:
                raise Failure(f"{path} needs {soname}, which ldd does not resolve")
            needed.setdefault(soname, (resolved[soname], path))
    missing = []
    owners = ownerPackages([library for library, _ in needed.values()])
    for soname, (library, user) in sorted(needed.items()):
        owner = owners[library]
        # A shlibs file may name a virtual package the owner provides (libspdlog1.10 provides
        # libspdlog1.10-fmt9: the fmt ABI it was built with).
        provides = run(["dpkg-query", "-W", "-f=${Provides}", owner]).stdout
        names = {owner} | {re.split(r"[\s(]", p.strip())[0]
                           for p in provides.split(",") if p.strip()}
        if not names & declared:
            missing.append(f"{owner} (for {soname} of {os.path.relpath(user, root)})")
    if missing:
        raise Failure(f"{package}: Depends: {depends.strip()}\nlacks {missing}")
    print(f"Depends of {package}: {depends.strip()}")


def prepareRoot(root):
    """A root with an empty dpkg database and the account files useradd edits."""
    for d in ["var/lib/dpkg/info", "var/lib/dpkg/updates", "etc"]:
        os.makedirs(os.path.join(root, d))
    for name, text in [("var/lib/dpkg/status", ""), ("var/lib/dpkg/available", ""),
                       ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"),
                       ("etc/group", "root:x:0:\n"),
                       ("etc/shadow", "root:*:19000:0:99999:7:::\n"),
                       ("etc/gshadow", "root:*::\n")]:
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    os.chmod(os.path.join(root, "etc/shadow"), 0o640)
    os.chmod(os.path.join(root, "etc/gshadow"), 0o640)


def install(debs, root):
    run(["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends",
         "--force-confold", "-i", *sorted(debs.values())])


def checkInstalled(args, debs, root):
    with open(os.path.join(root, "etc/passwd")) as f:
        users = [line.split(":") for line in f if line.startswith("rankmapd:")]
    if len(users) != 1:
        raise Failure(f"R/etc/passwd has {len(users)} rankmapd entries, expected 1")
    uid, shell = int(users[0][2]), users[0][6].strip()
    if uid >= 1000 or not shell.endswith("nologin"):
        raise Failure(f"rankmapd user {users[0]}: expected a system uid < 1000 and nologin")
    with open(os.path.join(root, "etc/group")) as f:
        if sum(line.startswith("rankmapd:") for line in f) != 1:
            raise Failure("R/etc/group lacks exactly one rankmapd group")
    print(f"user: rankmapd uid {uid}, created once over two installs")

    query = run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W",
                 "-f=${Status}\n${Conffiles}\n", "rankmapd"]).stdout
    if "install ok installed" not in query or not re.search(
            r"^ /etc/rankmap/rankmapd\.json [0-9a-f]{32}$", query, re.M):
        raise Failure(f"dpkg-query: expected installed with conffile /etc/rankmap/rankmapd.json, "
                      f"got\n{query}")
    print("conffile: /etc/rankmap/rankmapd.json registered")

    version = run([os.path.join(root, "usr/bin/rankmap"), "--version"]).stdout
    if args.version not in version:
        raise Failure(f"R/usr/bin/rankmap --version printed {version!r}, expected {args.version}")
    helptext = run([os.path.join(root, "usr/sbin/rankmapd"), "--help"]).stdout
    if "--config" not in helptext:
        raise Failure(f"R/usr/sbin/rankmapd --help does not mention --config:\n{helptext}")
    print(f"binaries: rankmap --version: {version.strip()}; rankmapd --help ok")

    if args.mpi:
        # The installed rankmap finds the installed MPI shim beside it (no RANKMAP_MPI_SHIM).
        shim = os.path.join(root, "usr", args.libdir, "rankmap", "librankmap_mpi.so")
        topology = os.path.join(args.source_dir, "tests/data/topologies/noisy.json")
        hostfile = os.path.join(os.path.dirname(root), "hostfile")
        with open(hostfile, "w") as f:
            f.writelines(f"h{i} slots=1\n" for i in range(8))  # the topology's hosts
        env = {k: v for k, v in os.environ.items() if not k.startswith("RANKMAP_")}
        dry = run([os.path.join(root, "usr/bin/rankmap"), "run", "--topology", topology,
                   "--mode", "shim", "--dry-run", "--", "mpirun", "-np", "8", "--hostfile",
                   hostfile, "./job"], env=env)
        if f"LD_PRELOAD={shim} " not in dry.stdout:
            raise Failure(f"rankmap run --mode shim --dry-run does not preload {shim}:\n"
                          f"{dry.stdout}{dry.stderr}")
        print("rankmap run --mode shim: preloads the installed librankmap_mpi.so")

    unit = os.path.join(root, "usr/lib/systemd/system/rankmapd.service")
    with open(unit) as f:
        text = f.read()
    if "ExecStart=/usr/sbin/rankmapd --config /etc/rankmap/rankmapd.json\n" not in text:
        raise Failure(f"{unit}: ExecStart does not run /usr/sbin/rankmapd with /etc's config")
    # ExecReload runs /bin/kill, which the package's procps dependency provides: R has none of
    # the dependencies installed, so the host's copy stands in for it there.
    depends = run(["dpkg-deb", "-f", debs["rankmapd"], "Depends"]).stdout
    if not re.search(r"(^|,\s*)procps(\s|,|$)", depends):
        raise Failure(f"Depends lacks procps (the unit's ExecReload runs /bin/kill): {depends}")
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    shutil.copy2("/bin/kill", os.path.join(root, "bin", "kill"))
    # --recursive-errors=no: R has no systemd of its own (sysinit.target and the like); the unit
    # itself is parsed and its ExecStart resolved inside R.
    proc = run(["systemd-analyze", "verify", f"--root={root}", "--recursive-errors=no",
                "rankmapd.service"], check=False)
    if proc.returncode != 0 or proc.stderr.strip():
        raise Failure(f"systemd-analyze verify: exit {proc.returncode}\n{proc.stderr}")
    print("unit: systemd-analyze verify --root clean")
    proc = run(["systemd-analyze", "security", "--offline=true", f"--root={root}",
                "rankmapd.service"], check=False)
    m = re.search(r"Overall exposure level for rankmapd.service: ([0-9.]+)", proc.stdout)
    if not m or float(m.group(1)) > 2.0:
        raise Failure(f"systemd-analyze security: expected an exposure of at most 2.0\n"
                      f"{proc.stdout}{proc.stderr}")
    print(f"unit: systemd-analyze security --offline=true: exposure {m.group(1)}")

    # Every man page renders without a warning and names its program.
    pages = sorted(glob.glob(os.path.join(root, "usr/share/man/man*/*.gz")))
    for page in pages:
        proc = run(["man", "--warnings", "-l", page], env=dict(os.environ, MANWIDTH="80"),
                   check=False)
        name = os.path.basename(page).rsplit(".", 2)[0]
        if proc.returncode != 0 or proc.stderr.strip() or \
                not re.search(rf"^NAME\n\s+{re.escape(name)} ", proc.stdout, re.M):
            raise Failure(f"man {page}: exit {proc.returncode}, no NAME line for {name}\n"
                          f"{proc.stderr}{proc.stdout[:400]}")
    print(f"man pages: {len(pages)} render without warnings")

    lib = os.path.join(root, "usr", args.libdir, f"librankmap.so.{args.version}")
    symbols = run(["nm", "-D", "--defined-only", lib]).stdout.split("\n")
    names = [line.split()[-1] for line in symbols if line.strip()]
    foreign = [n for n in names if not n.startswith("rankmap")]
    if foreign or "rankmapAllReduce" not in names:
        raise Failure(f"{lib} exports {foreign[:10]} besides rankmap* (or lacks rankmapAllReduce)")
    print(f"librankmap: exports {len(names)} rankmap* symbols only")


def freePort():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def runRanks(binary, what, env):
    """One allreduce of kRanks processes over loopback; every rank must report exact results."""
    port = freePort()
    env = {k: v for k, v in env.items() if not k.startswith("RANKMAP_")}
    env["RANKMAP_TIMEOUT"] = "30s"
    procs = [subprocess.Popen([binary, str(r), str(kRanks), f"127.0.0.1:{port}"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(kRanks)]
    failures = []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=kStepTimeoutS)
            if p.returncode != 0 or "exact" not in out:
                failures.append(f"rank {r}: exit {p.returncode}\n{out}{err}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if failures:
        raise Failure(f"{what}: " + "\n".join(failures))
    print(f"{what}: {kRanks} ranks, allreduce exact")


def checkAgent(root, tmp):
    """The installed rankmapd with the installed config and the files README's systemd steps make
    (hosts, probe key, token; here in tmp, on loopback ports): GET /v1/health answers ok, SIGTERM
    stops it with exit 0."""
    agent = os.path.join(tmp, "agent")
    os.makedirs(os.path.join(agent, "state"), mode=0o700)
    http_port, probe_port = freePort(), freePort()
    files = {"hosts": f"a 127.0.0.1:{probe_port}\n", "probe.key": secrets.token_hex(32) + "\n",
             "token": secrets.token_hex(16) + "\n"}
    for name, text in files.items():
        with open(os.open(os.path.join(agent, name), os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKMAP_")}
    cmd = [os.path.join(root, "usr/sbin/rankmapd"),
           "--config", os.path.join(root, "etc/rankmap/rankmapd.json"),
           "--hosts", os.path.join(agent, "hosts"), "--key-file", os.path.join(agent, "probe.key"),
           "--token-file", os.path.join(agent, "token"),
           "--state-dir", os.path.join(agent, "state"),
           "--listen", f"127.0.0.1:{http_port}", "--probe-listen", f"127.0.0.1:{probe_port}",
           "--name", "a"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
    try:
        deadline = time.monotonic() + 20
        health = None
        while health is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                with opener.open(f"http://127.0.0.1:{http_port}/v1/health", timeout=2) as r:
                    health = json.load(r)
            except OSError:
                time.sleep(0.2)
        if not health or health.get("status") != "ok" or health.get("name") != "a":
            proc.kill()
            raise Failure(f"rankmapd with the installed config: /v1/health gave {health}\n"
                          f"{proc.communicate(timeout=kStepTimeoutS)[0]}")
        proc.terminate()
        out = proc.communicate(timeout=kStepTimeoutS)[0]
        if proc.returncode != 0:
            raise Failure(f"rankmapd: exit {proc.returncode} after SIGTERM\n{out}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    print("agent: the installed rankmapd with the installed config serves /v1/health, stops on "
          "SIGTERM")


def checkConsumer(args, root, tmp):
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "consumer")
    usr = os.path.join(root, "usr")
    env = dict(os.environ)

    # find_package(rankmap) from R/usr only.
    build = os.path.join(tmp, "consumer-cmake")
    run([args.cmake, "-S", source, "-B", build, f"-DCMAKE_PREFIX_PATH={usr}",
         f"-DCMAKE_C_COMPILER={args.cc}", "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"], env=env,
        timeout=120)
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        found = re.search(r"^rankmap_DIR:PATH=(.*)$", f.read(), re.M)
    expected_dir = os.path.join(usr, args.libdir, "cmake", "rankmap")
    if not found or os.path.realpath(found.group(1)) != os.path.realpath(expected_dir):
        raise Failure(f"find_package(rankmap) found {found and found.group(1)}, "
                      f"expected {expected_dir}")
    run([args.cmake, "--build", build], env=env, timeout=120)
    runRanks(os.path.join(build, "allreduce_consumer"), "consumer (find_package)", env)

    # pkg-config: only R's rankmap.pc; paths come from ${pcfiledir}, so no sysroot is needed.
    pc_env = dict(env, PKG_CONFIG_LIBDIR=os.path.join(usr, args.libdir, "pkgconfig"))
    pc_env.pop("PKG_CONFIG_PATH", None)
    cflags = run(["pkg-config", "--cflags", "rankmap"], env=pc_env).stdout.split()
    libs = run(["pkg-config", "--libs", "rankmap"], env=pc_env).stdout.split()
    libdir = run(["pkg-config", "--variable=libdir", "rankmap"], env=pc_env).stdout.strip()
    if os.path.realpath(libdir) != os.path.realpath(os.path.join(usr, args.libdir)):
        raise Failure(f"rankmap.pc: libdir {libdir}, expected {os.path.join(usr, args.libdir)}")
    binary = os.path.join(tmp, "allreduce_pkgconfig")
    run([args.cc, "-std=c11", *cflags, os.path.join(source, "allreduce.c"), "-o", binary, *libs,
         f"-Wl,-rpath,{libdir}"], env=env)
    runRanks(binary, "consumer (pkg-config)", env)


def checkUpgrade(args, debs, tmp, root):
    """The same packages at a later version install over the first: the operator's edited config
    stays (a conffile), the user is not added again, dpkg records the new version."""
    config = os.path.join(root, "etc/rankmap/rankmapd.json")
    with open(config, "a") as f:
        f.write("// edited by the operator\n")
    newer = args.version + "+upgrade1"
    install(laterDebs(debs, tmp, newer), root)
    with open(config) as f:
        if "// edited by the operator" not in f.read():
            raise Failure("upgrade replaced the operator's edited R/etc/rankmap/rankmapd.json")
    with open(os.path.join(root, "etc/passwd")) as f:
        if sum(line.startswith("rankmapd:") for line in f) != 1:
            raise Failure("upgrade: R/etc/passwd lacks exactly one rankmapd user")
    for package in expectedFiles(args):
        got = run(["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Version}",
                   package]).stdout
        if got != newer:
            raise Failure(f"upgrade: {package} is at {got}, expected {newer}")
    print(f"upgrade: every package at {newer}, edited conffile kept, one rankmapd user")


def checkRemoveAndPurge(args, root):
    """Remove keeps the conffile and the agent's state; purge removes both; the user stays."""
    state = os.path.join(root, "var/lib/rankmapd")
    os.makedirs(state, exist_ok=True)
    with open(os.path.join(state, "rankmapd.db"), "w") as f:
        f.write("state")
    dpkg = ["dpkg", f"--root={root}", "--force-script-chrootless", "--force-depends"]
    run(dpkg + ["--remove", *sorted(expectedFiles(args))])
    for gone in ["usr/bin/rankmap", "usr/sbin/rankmapd"]:
        if os.path.exists(os.path.join(root, gone)):
            raise Failure(f"remove left R/{gone}")
    for kept in ["etc/rankmap/rankmapd.json", "var/lib/rankmapd/rankmapd.db"]:
        if not os.path.exists(os.path.join(root, kept)):
            raise Failure(f"remove took R/{kept}, which only a purge removes")
    run(dpkg + ["--purge", *sorted(expectedFiles(args))])
    for gone in ["etc/rankmap/rankmapd.json", "var/lib/rankmapd"]:
        if os.path.exists(os.path.join(root, gone)):
            raise Failure(f"purge left R/{gone}")
    with open(os.path.join(root, "etc/passwd")) as f:
        if not any(line.startswith("rankmapd:") for line in f):
            raise Failure("purge removed the rankmapd user (Debian keeps system users)")
    print("remove: binaries gone, conffile and state kept; purge: both gone, the user kept")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--cpack", required=True)
    parser.add_argument("--cmake", required=True)
    parser.add_argument("--cc", required=True)
    parser.add_argument("--version", required=True)
    parser.add_argument("--libdir", required=True, help="CMAKE_INSTALL_LIBDIR (relative)")
    parser.add_argument("--config", required=True, help="the build type")
    parser.add_argument("--mpi", type=int, required=True, help="1 when the MPI shim is built")
    parser.add_argument("--mpich", type=int, default=0,
                        help="1 when the MPICH shim (librankmap_mpich.so) is built")
    args = parser.parse_args()
    checkTools(args)

    tmp = tempfile.mkdtemp(prefix="rankmap-package-")
    try:
        debs = buildDebs(args, tmp)
        checkFileLists(args, debs)
        checkLintian(args, debs)
        root = os.path.join(tmp, "root")
        prepareRoot(root)
        install(debs, root)
        install(debs, root)  # again: postinst must not add a second user
        for package, deb in sorted(debs.items()):
            checkDepends(package, deb, root)
        checkInstalled(args, debs, root)
        checkAgent(root, tmp)
        checkConsumer(args, root, tmp)
        checkUpgrade(args, debs, tmp, root)
        checkRemoveAndPurge(args, root)
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
