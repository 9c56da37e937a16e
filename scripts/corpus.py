#!/usr/bin/env python3
"""The validation corpus of real programs (issue 13): record each program
with only 4 KiB anonymous folios, measure it live under other folio and PCP
configurations, predict those from the 4 KiB recording with `mmlab replay`,
and print predicted vs live for every (program, configuration).

    scripts/corpus.py measure [--runs 3] [--programs a,b] [--configs 4k,64k]
        (root) runs every program under every configuration with
        `mmlab record`, `--runs` times each, and stores the workload's own
        counts in scripts/corpus/live.json (with the spread, date, kernel);
        the first 4k run of each program is kept as its recording in
        scripts/corpus/traces/ (not in git: regenerate with this command).
        With --append the runs are added to those stored (a program whose
        own runs spread, measured again on another day) and the recording
        is kept.
    scripts/corpus.py predict
        replays each recording under examples/replay-folio-configs.toml and
        stores the model's counts in scripts/corpus/predictions.json.
    scripts/corpus.py table [--markdown]
        prints predicted vs live from the two JSON files (no root needed).

With --no-aslr each command runs under `setarch -R` (no address-space
randomization, inherited by every child), in the recording and in the live
runs alike, so that every run has the recorded layout; the data go to
live-noaslr.json, predictions-noaslr.json and traces-noaslr/. With ASLR (the
default) the layout, and with it how many large folios fit each mapping,
changes from run to run.

Live counts are per process, not system-wide: page faults are the workload's
`ru_minflt + ru_majflt` (`wait4()`, as `mmlab record` reaps it), and the
per-size `anon_fault_alloc` is the workload's own large-folio fault
allocations in its trace (see crates/trace/examples/fault_counts.rs): this
host is shared, and the `/proc/vmstat` and `hugepages-*/stats` deltas count
everyone.

The prediction of a configuration is the model's `pgfault` for it plus the
faults of the recorded run that are outside its trace (`ru_minflt` of the
4 KiB recording less the model's 4 KiB `pgfault`: mostly the recorder's own
child between fork and exec), which no folio setting changes. Nothing is
fitted to a live result of the configuration predicted.

Every knob change holds /tmp/mmlab-live-kernel.lock and is undone on every
way out (and, after a SIGKILL, by the next run: see JOURNAL).
"""
import argparse
import datetime
import fcntl
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "scripts", "corpus")
LOCK = "/tmp/mmlab-live-kernel.lock"
JOURNAL = "/tmp/mmlab-corpus-knobs.journal"
THP = "/sys/kernel/mm/transparent_hugepage"
FRACTION = "/proc/sys/vm/percpu_pagelist_high_fraction"
SIZES_KB = [16, 32, 64, 128, 256, 512, 1024, 2048]

# name, kind, held out (not looked at while the model was built), argv,
# the command run before each run (in the inputs directory), if any.
PROGRAMS = [
    ("build", "make -j2 of a 41-file C project (~125 execs)", False,
     ["make", "-C", "cproj", "-j2", "-s"], ["make", "-C", "cproj", "-s", "clean"]),
    ("python", "CPython interpreter: dicts, sort, JSON", False, ["{python}", "workload.py"], None),
    # --single-threaded (a documented V8 option: no background tasks, so
    # GC marking/sweeping and JIT compilation run in the main thread) makes
    # the fault count repeat: 4k runs 10,551..10,556 against 10,827..11,433
    # by default, whose level moves with the host's state within minutes
    # (2026-11-25 07:13: 11,226..11,433; 07:15: 10,927..10,948), so that
    # the default's recordings predicted 64k -3.9 % at 05:20 and +3.4 % at
    # 07:13 against live runs of the same minutes (setarch -R, ru_minflt).
    ("node", "Node.js (V8 JIT, background tasks off): Map, sort, JSON", False,
     ["node", "--single-threaded", "workload.js"], None),
    ("sqlite", "SQLite engine: 400k-row table, index, queries", False,
     ["sqlite3", ":memory:", ".read workload.sql"], None),
    ("server", "HTTP server (forked) under 400 loopback requests", False, ["{python}", "server.py"], None),
    ("xz", "xz -3 compressor, 2 MB of text", False, ["xz", "-3", "-T1", "-c", "small.txt"], None),
    ("zstd", "zstd -12 with 2 threads, 12 MB of text", False,
     ["zstd", "-q", "-T2", "-12", "-c", "text.txt"], None),
    ("sort", "GNU sort, 2 threads, 1.5 M numbers", False,
     ["sort", "--parallel=2", "-S", "64M", "-n", "numbers.txt"], None),
    ("perl", "Perl interpreter: hash, sort, regex", True, ["perl", "workload.pl"], None),
    # -XX:+UseSerialGC -Xbatch (the java launcher's documented options: one
    # stop-the-world collector instead of G1's concurrent threads, and JIT
    # compilation in the calling thread instead of the background compiler
    # threads) make the fault count repeat: 4 runs 34,705..34,725 against
    # 21,701..29,836 without them (2026-11-25, THP madvise).
    # java was held out until 2026-11-25 07:50 UTC, when the model's
    # MAP_STACK -> VM_NOHUGEPAGE was found on its results (its thread
    # stacks): a program the model was changed for is no longer held out.
    ("java", "JVM (javac in-process, JIT; serial GC, foreground compilation)", False,
     ["java", "-XX:+UseSerialGC", "-Xbatch", "Workload.java"], None),
    ("gzip", "gzip -6 compressor, 12 MB of text", True, ["gzip", "-6", "-c", "text.txt"], None),
    # Added 2026-11-25 08:25 UTC, held out: in place of java (no longer held
    # out), before any of their results were seen; no model change since.
    ("tcl", "Tcl 8.6 interpreter: dict, lsort, string match", True, ["tclsh", "workload.tcl"], None),
    ("bzip2", "bzip2 -9 compressor, 12 MB of text", True, ["bzip2", "-9", "-c", "text.txt"], None),
    ("exec_folios", "micro-test: .bss, .data, brk heap and stack of scripts/corpus/exec_folios.c", False,
     ["sh", "-c", "for m in bss bssr data brk; do ./exec_folios $m; done; ./exec_folios stack 256"], None),
]

# Configuration name -> (transparent_hugepage/enabled, {size KiB: enabled},
# percpu_pagelist_high_fraction). Sizes not named are "never", except
# 2048 kB which is "inherit" when not named.
CONFIGS = {
    "4k": ("never", {2048: "never"}, 0),
    "16k": ("never", {2048: "never", 16: "always"}, 0),
    "64k": ("never", {2048: "never", 64: "always"}, 0),
    "2m": ("always", {}, 0),
    "all": ("always", {kb: "always" for kb in SIZES_KB}, 0),
    "hf8": ("never", {2048: "never"}, 8),
    "hf100": ("never", {2048: "never"}, 100),
}


def write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def restore_defaults():
    """The host's defaults (TEAM.md)."""
    write(os.path.join(THP, "enabled"), "madvise")
    for kb in SIZES_KB:
        write(os.path.join(THP, f"hugepages-{kb}kB", "enabled"), "inherit" if kb == 2048 else "never")
    write(FRACTION, 0)


def apply_config(name):
    top, sizes, fraction = CONFIGS[name]
    with open(JOURNAL, "w") as f:
        f.write(f"{os.getpid()}\n")
    restore_defaults()
    write(os.path.join(THP, "enabled"), top)
    for kb in SIZES_KB:
        v = sizes.get(kb, "inherit" if kb == 2048 else "never")
        write(os.path.join(THP, f"hugepages-{kb}kB", "enabled"), v)
    write(FRACTION, fraction)


class LiveKernel:
    """Holds the lock, undoes a journal left by a killed run, and puts the
    defaults back on every way out of the block."""

    # The descriptor of the held lock, lent to the `mmlab record` children
    # (which take the lock themselves): see host::lock::LEND_ENV.
    held_fd = None

    def __enter__(self):
        self.fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        os.set_inheritable(self.fd, True)
        LiveKernel.held_fd = self.fd
        if os.path.exists(JOURNAL):
            restore_defaults()
            os.unlink(JOURNAL)
        self.old = {s: signal.signal(s, self.on_signal) for s in (signal.SIGTERM, signal.SIGHUP)}
        return self

    @staticmethod
    def on_signal(sig, _frame):
        raise KeyboardInterrupt(f"signal {sig}")

    def __exit__(self, *exc):
        try:
            restore_defaults()
            if os.path.exists(JOURNAL):
                os.unlink(JOURNAL)
        finally:
            for s, h in self.old.items():
                signal.signal(s, h)
            LiveKernel.held_fd = None
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
        return False


def mmlab():
    # MMLAB=path runs another build (e.g. main's, for before/after figures).
    return os.environ.get("MMLAB") or os.path.join(ROOT, "target", "release", "mmlab")


def fault_counts():
    # FAULT_COUNTS=path likewise (a copy that a rebuild cannot replace mid-run).
    return os.environ.get("FAULT_COUNTS") or os.path.join(ROOT, "target", "release", "examples", "fault_counts")


def build():
    subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "trace", "--example", "fault_counts"],
                   cwd=ROOT, check=True)


def argv_of(p, python, no_aslr):
    argv = [a.replace("{python}", python) for a in p[3]]
    return (["setarch", "-R"] if no_aslr else []) + argv


def suffix(args):
    return "-noaslr" if getattr(args, "no_aslr", False) else ""


def lend_lock(env):
    """`env` and the descriptors to pass so that an `mmlab` child started
    while this process holds the live-kernel lock finds it lent
    (host::lock::LEND_ENV) instead of waiting for it: `mmlab record` takes
    the lock, and every mmlab command takes it when it finds state a killed
    mmlab left (`recover_stale_state()`), which under the held lock would
    wait forever (2026-11-25 07:21: `mmlab import` in `perf-record`, after
    another engineer's test left a journal in /run/mmlab)."""
    if LiveKernel.held_fd is None:
        return env, ()
    return dict(env, MMLAB_LIVE_LOCK_FD=str(LiveKernel.held_fd)), (LiveKernel.held_fd,)


def run_once(p, inputs, python, trace, no_aslr):
    if p[4]:
        subprocess.run(p[4], cwd=inputs, check=True, stdout=subprocess.DEVNULL)
    cmd = [mmlab(), "record", "-o", trace, "--"] + argv_of(p, python, no_aslr)
    # Python randomizes its string hashes per run, which moves its dicts'
    # memory from run to run; a fixed seed makes the runs comparable.
    env, fds = lend_lock(dict(os.environ, PYTHONHASHSEED="0"))
    r = subprocess.run(cmd, cwd=inputs, env=env, pass_fds=fds, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{p[0]}: mmlab record failed: {r.stderr.strip()[-400:]}")
    out = subprocess.run([fault_counts(), trace], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def load(name, default):
    path = os.path.join(DATA, name)
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def store(name, doc):
    os.makedirs(DATA, exist_ok=True)
    path = os.path.join(DATA, name)
    fd, tmp = tempfile.mkstemp(dir=DATA, prefix="." + name)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


def spread(values):
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values), "n": len(values)}


def measure(args):
    if os.geteuid() != 0:
        sys.exit("SKIPPED (cannot run here): measure needs root (knobs, tracefs, perf)")
    if not args.no_build:
        build()
    python = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    inputs = tempfile.mkdtemp(prefix="mmlab-corpus-")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "corpus_inputs.py"), inputs], check=True)
    sfx = suffix(args)
    os.makedirs(os.path.join(DATA, "traces" + sfx), exist_ok=True)
    live = load(f"live{sfx}.json", {"programs": {}})
    progs = [p for p in PROGRAMS if not args.programs or p[0] in args.programs.split(",")]
    configs = args.configs.split(",") if args.configs else list(CONFIGS)
    kernel = os.uname().release
    staged = []
    try:
        for cfg in configs:
            with LiveKernel():
                apply_config(cfg)
                for p in progs:
                    old = live["programs"].get(p[0], {}).get(cfg) if args.append else None
                    if old and old.get("kernel") != kernel:
                        sys.exit(f"{p[0]} {cfg}: --append to runs of kernel {old.get('kernel')}, "
                                 f"this is {kernel}")
                    runs = []
                    # The kept traces replace the old ones only once the
                    # runs they belong to are stored in live.json, so that
                    # an interrupted measure leaves the two matching.
                    staged.clear()
                    stale = []
                    if cfg == "4k" and not old:
                        # A new measurement: the last one's other runs go.
                        stale = [s for _, s in more_recordings(p[0], sfx)]
                    for i in range(args.runs):
                        t = os.path.join(inputs, "run.mmtrace")
                        runs.append(run_once(p, inputs, python, t, args.no_aslr))
                        # The first 4k run is the recording, unless runs
                        # are added to a configuration that has one; every
                        # other 4k run is kept beside it (`predict` replays
                        # each and prints their mean and spread).
                        if cfg == "4k" and i == 0 and not (old and recording(p[0], sfx)):
                            keep_recording(p[0], t, sfx, staged, stale)
                        elif cfg == "4k":
                            keep_run(p[0], t, sfx, len(old["runs"]) + i if old else i, staged)
                        os.unlink(t)
                    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
                    entry = summarize((old["runs"] if old else []) + runs)
                    entry["date"] = f"{old['date']} + {now}" if old else now
                    entry["kernel"] = kernel
                    live["programs"].setdefault(p[0], {})[cfg] = entry
                    store(f"live{sfx}.json", live)
                    commit_staged(staged, stale)
                    print(f"{cfg:6} {p[0]:8} faults {entry['faults']['mean']:.0f} "
                          f"[{entry['faults']['min']}..{entry['faults']['max']}]", flush=True)
    finally:
        drop_staged(staged)
        shutil.rmtree(inputs, ignore_errors=True)


# Recordings up to this size are also kept in scripts/corpus/recordings/,
# which is in git: the CI test replays them (crates/cli/tests/corpus.rs).
MAX_COMMITTED_BYTES = 512 << 10


def stage_copy(src, dst, staged):
    """Copies `src` beside `dst` under an unpredictable name, to be moved
    to `dst` whole by `commit_staged()`."""
    d = os.path.dirname(dst)
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix="." + os.path.basename(dst))
    staged.append((tmp, dst))
    with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
        shutil.copyfileobj(inp, out)


def commit_staged(staged, stale):
    """Removes the `stale` files, then moves each staged copy to its place."""
    for path in stale:
        if os.path.exists(path):
            os.unlink(path)
    for tmp, dst in staged:
        os.replace(tmp, dst)
    staged.clear()


def drop_staged(staged):
    """Removes staged copies that were never committed."""
    for tmp, _ in staged:
        if os.path.exists(tmp):
            os.unlink(tmp)
    staged.clear()


def keep_recording(name, trace, sfx, staged, stale):
    stage_copy(trace, os.path.join(DATA, "traces" + sfx, name + ".mmtrace"), staged)
    small = os.path.join(DATA, "recordings" + sfx, name + ".mmtrace")
    if os.path.getsize(trace) <= MAX_COMMITTED_BYTES:
        stage_copy(trace, small, staged)
    else:
        stale.append(small)


def keep_run(name, trace, sfx, i, staged):
    """Keeps the 4k run `i` (counted from 0 over the stored runs) as
    traces{sfx}/NAME.run{i}.mmtrace (not in git)."""
    stage_copy(trace, os.path.join(DATA, "traces" + sfx, f"{name}.run{i}.mmtrace"), staged)


def more_recordings(name, sfx):
    """The other 4k runs kept by `keep_run()`: [(run index, path)], by index."""
    d = os.path.join(DATA, "traces" + sfx)
    if not os.path.isdir(d):
        return []
    runs = []
    for f in os.listdir(d):
        if f.startswith(name + ".run") and f.endswith(".mmtrace"):
            i = f[len(name) + 4:-len(".mmtrace")]
            if i.isdigit():
                runs.append((int(i), os.path.join(d, f)))
    return sorted(runs)


def recording(name, sfx):
    for d in ("traces" + sfx, "recordings" + sfx):
        t = os.path.join(DATA, d, name + ".mmtrace")
        if os.path.exists(t):
            return t
    return None


def summarize(runs):
    faults = [r["ru_minflt"] + r["ru_majflt"] for r in runs]
    sizes = sorted({int(k) for r in runs for k in r["anon_fault_alloc"]})
    return {
        "faults": spread(faults),
        "trace_faults": spread([r["page_fault_user"] + r["page_fault_kernel"] for r in runs]),
        "anon_fault_alloc": {str(kb): spread([r["anon_fault_alloc"].get(str(kb), 0) for r in runs])
                             for kb in sizes},
        "execs": runs[0]["execs"],
        "exec_layouts": runs[0]["exec_layouts"],
        "lost_events": sum(r["lost_events"] for r in runs),
        "runs": runs,
    }


def replay(trace, ignore=()):
    """The model's counts for `trace` under every configuration: per kernel
    its pgfault (with the estimate of the kernel's faults on user memory
    where the recording lacks exceptions:page_fault_kernel, and that
    estimate's band), and its per-size anon_fault_alloc."""
    exp = os.path.join(ROOT, "examples", "replay-folio-configs.toml")
    r = subprocess.run([mmlab(), "replay", trace, "--experiment", exp, "--mode", "aspace",
                        "--format", "json", "--quiet"], capture_output=True, text=True, check=True)
    doc = json.loads(r.stdout)
    # The results document (docs/results-schema.md): one experiment.
    aspace = doc["experiments"][0]["aspace"] if "experiments" in doc else doc["aspace"]
    # Each kernel's pgfault with what the recording cannot show (the kernel
    # faults it lacks, the faults a missing mremap leaves outside every
    # mapping) and its band; older builds give the kernel faults' alone.
    est = (aspace.get("pgfault_band") or {}).get("kernels") \
        or aspace["recorded"].get("page_fault_kernel_estimate", {}).get("pgfault_with_estimate") or {}
    kernels = {}
    for k in aspace["kernels"]:
        e = est.get(k["kernel"])
        kernels[k["kernel"]] = {
            "pgfault": e.get("pgfault", e.get("estimate")) if e else k["pgfault"],
            "pgfault_band": e["band"] if e else None,
            "pgfault_replayed": k["pgfault"],
            "faults_passthrough": k["faults_passthrough"],
            "faults_passthrough_file": k["faults_passthrough_file"],
            "faults_sigsegv": k["faults_sigsegv"],
            "anon_fault_alloc": {kb[:-2]: v for kb, v in k["anon_fault_alloc"].items() if v},
        }
    return kernels, aspace["recorded"]


def predict(args):
    sfx = suffix(args)
    if args.source != "mmlab":
        return predict_perf(args, sfx)
    preds = {"experiment": "examples/replay-folio-configs.toml", "programs": {}}
    live = load(f"live{sfx}.json", {"programs": {}})
    for p in PROGRAMS:
        t = recording(p[0], sfx)
        if t is None:
            print(f"{p[0]}: no recording; run `corpus.py measure` first", file=sys.stderr)
            continue
        runs = live["programs"].get(p[0], {}).get("4k", {}).get("runs", [{}])
        pr = predict_one(t, runs[0])
        # Every other 4k run kept (`keep_run()`), each replayed the same way:
        # the prediction is their mean, printed with its spread.
        others = [predict_one(o, runs[i]) for i, o in more_recordings(p[0], sfx) if i < len(runs)]
        if others:
            pr["recordings"] = [totals(x) for x in [pr] + others]
        preds["programs"][p[0]] = pr
    store(f"predictions{sfx}.json", preds)


def predict_one(t, rec):
    """The prediction from one mmlab recording `t` whose live counts are
    `rec` (that run's entry in live*.json)."""
    kernels, recorded = replay(t)
    for k in kernels.values():
        # The mmlab recordings hold every fault: no estimate, no band.
        for key in ("pgfault_band", "pgfault_replayed", "faults_sigsegv"):
            del k[key]
    recorded_faults = rec.get("ru_minflt", 0) + rec.get("ru_majflt", 0)
    counts = json.loads(subprocess.run([fault_counts(), t], check=True, capture_output=True,
                                       text=True).stdout)
    return {
        "kernels": kernels,
        "recorded_faults": recorded_faults,
        "outside_trace": recorded_faults - kernels["4k"]["pgfault"],
        # The recorder's child before its exec, in the trace (see
        # fault_counts.rs); a perf import leaves perf's out.
        "harness_in_trace": counts.get("harness_faults", 0),
        "recorded": recorded,
    }


def totals(pr):
    """One recording's predicted faults and per-size allocations per kernel."""
    return {k: {"pgfault": v["pgfault"] + pr["outside_trace"], "anon_fault_alloc": v["anon_fault_alloc"]}
            for k, v in pr["kernels"].items()}


def predict_perf(args, sfx):
    """Predictions from the plain `perf record` recordings of one line
    (`--source perf-full|perf-typical|perf-minimal`). A perf recording has no
    `ru_minflt`: the faults of the live runs' harness are taken from the
    mmlab recording of the same program, so that both kinds of recording
    are compared with the same live counts: the recorder's own child
    between its fork and its exec (~9 faults), outside that trace
    (`outside_trace` of predictions{sfx}.json) or inside it
    (`harness_in_trace`: the importer leaves perf's own child out, so the
    perf trace has no counterpart of those)."""
    kind = args.source.removeprefix("perf-")
    mm = load(f"predictions{sfx}.json", {"programs": {}})["programs"]
    preds = {"experiment": "examples/replay-folio-configs.toml", "programs": {},
             "perf_record": " ".join(perf_argv(kind, "perf.data")) + " CMD"}
    for p in PROGRAMS:
        t = os.path.join(DATA, "perf-traces" + sfx, kind, p[0] + ".mmtrace")
        if not os.path.exists(t):
            print(f"{p[0]}: no {kind} perf recording; run `corpus.py perf-record` first", file=sys.stderr)
            continue
        kernels, recorded = replay(t)
        preds["programs"][p[0]] = {
            "kernels": kernels,
            "outside_trace": mm.get(p[0], {}).get("outside_trace", 0)
            + mm.get(p[0], {}).get("harness_in_trace", 0),
            "recorded": recorded,
        }
    store(f"predictions-perf-{kind}{sfx}.json", preds)


def pct(model, live):
    return 100.0 * (model - live) / live if live else 0.0


def predictions_file(sfx, source="mmlab"):
    if source == "mmlab":
        return f"predictions{sfx}.json"
    return f"predictions-{source}{sfx}.json"


def rows(sfx="", source="mmlab", preds=None):
    """(program, held out, config, live faults, predicted, error %, per-size
    [(kb, live, model)], the prediction's band or None) for every pair that
    has both. The band is that of what the recording cannot show: the
    kernel's faults (without exceptions:page_fault_kernel), the faults
    outside every recorded mapping (without sys_enter_mremap)."""
    live = load(f"live{sfx}.json", {"programs": {}})["programs"]
    if preds is None:
        preds = load(predictions_file(sfx, source), {"programs": {}})["programs"]
    out = []
    for p in PROGRAMS:
        name = p[0]
        if name not in live or name not in preds:
            continue
        pr = preds[name]
        for cfg in CONFIGS:
            if cfg not in live[name]:
                continue
            lv = live[name][cfg]
            kernel = cfg if cfg in pr["kernels"] else "4k"
            model = pr["kernels"][kernel]["pgfault"] + pr["outside_trace"]
            msz = pr["kernels"][kernel]["anon_fault_alloc"]
            spread_n = None
            if pr.get("recordings"):
                # Several recordings: their mean, and their min..max.
                model, msz, spread_n = recordings_mean(pr["recordings"], kernel)
            sizes = []
            lsz = lv.get("anon_fault_alloc", {})
            for kb in sorted({int(k) for k in lsz} | {int(k) for k in msz}):
                sizes.append((kb, lsz.get(str(kb), {}).get("mean", 0.0), msz.get(str(kb), 0)))
            band = pr["kernels"][kernel].get("pgfault_band")
            if band:
                band = (band[0] + pr["outside_trace"], band[1] + pr["outside_trace"])
            # The run-to-run band: the recorded configuration's own live
            # runs (4k: min..max around their mean) applied to the
            # prediction, for programs whose runs differ (JIT runtimes).
            f4 = live[name].get("4k", {}).get("faults")
            runs = (model * f4["min"] / f4["mean"], model * f4["max"] / f4["mean"]) if f4 else None
            out.append((name, p[2], cfg, lv["faults"], model, pct(model, lv["faults"]["mean"]), sizes, band,
                        runs, spread_n))
    return out


def recordings_mean(recs, kernel):
    """The mean predicted faults and per-size allocations of several
    recordings under `kernel`, and (min, max, n) of their faults."""
    faults = [r[kernel]["pgfault"] for r in recs]
    kbs = {kb for r in recs for kb in r[kernel]["anon_fault_alloc"]}
    sizes = {kb: statistics.fmean(r[kernel]["anon_fault_alloc"].get(kb, 0) for r in recs) for kb in kbs}
    return statistics.fmean(faults), sizes, (min(faults), max(faults), len(faults))


def matrix(rs):
    """One row per program, one column per configuration: the live mean,
    and the prediction's error."""
    cfgs = list(CONFIGS)
    print("| program | " + " | ".join(cfgs) + " |")
    print("| --- |" + " ---: |" * len(cfgs))
    by = {}
    for name, held, cfg, f, model, err, *_ in rs:
        by.setdefault((name, held), {})[cfg] = f"{f['mean']:.0f} ({err:+.1f} %)"
    for (name, held), cells in by.items():
        label = name + (" (held out)" if held else "")
        print(f"| {label} | " + " | ".join(cells.get(c, "-") for c in cfgs) + " |")


def table(args):
    rs = rows(suffix(args), args.source)
    if not rs:
        sys.exit(f"no data: scripts/corpus/live{suffix(args)}.json and "
                 f"{predictions_file(suffix(args), args.source)} are missing")
    if args.matrix:
        matrix(rs)
        summary(rs)
        return
    md = args.markdown
    if md:
        print("| program | config | live faults (mean [min..max], n) | predicted | error | anon_fault_alloc by size: live / predicted |")
        print("| --- | --- | ---: | ---: | ---: | --- |")
    else:
        print(f"{'program':10} {'config':6} {'live faults':>28} {'predicted':>10} {'error':>8}  anon_fault_alloc live/predicted")
    for name, held, cfg, f, model, err, sizes, _, _, n in rs:
        live_s = f"{f['mean']:.0f} [{f['min']}..{f['max']}], {f['n']}"
        # Several recordings: the mean of their predictions [min..max], n.
        model = f"{model:.0f} [{n[0]}..{n[1]}], {n[2]}" if n else model
        sz = ", ".join(f"{kb}K {lv:.0f}/{m:.0f}" for kb, lv, m in sizes) or "-"
        label = name + (" (held out)" if held else "")
        if md:
            print(f"| {label} | {cfg} | {live_s} | {model} | {err:+.1f} % | {sz} |")
        else:
            print(f"{label:10} {cfg:6} {live_s:>28} {model:>10} {err:>+7.1f}%  {sz}")
    summary(rs)


def summary(rs):
    others = [r for r in rs if r[2] != "4k"]
    ok = [r for r in others if abs(r[5]) <= 2.0]
    size_pairs = [(kb, lv, m) for r in others for kb, lv, m in r[6] if lv >= 20]
    size_ok = [s for s in size_pairs if abs(pct(s[2], s[1])) <= 5.0]
    print()
    print(f"page faults within 2 %: {len(ok)} of {len(others)} (program, config) pairs other than 4k "
          f"(goal: 95 %); held out: "
          f"{sum(1 for r in ok if r[1])} of {sum(1 for r in others if r[1])}")
    print(f"per-size anon_fault_alloc within 5 %: {len(size_ok)} of {len(size_pairs)} "
          f"(sizes with at least 20 live allocations)")
    banded = [r for r in others if r[7]]
    if banded:
        inside = [r for r in banded if r[7][0] <= r[3]["mean"] <= r[7][1]]
        print(f"live inside the band of a prediction with what the recording cannot show "
              f"(the kernel's faults, faults a missing mremap leaves outside every mapping): "
              f"{len(inside)} of {len(banded)}")
    # Pairs whose own live runs differ by more than the goal: their
    # min..max half-range about the mean is over 2 %, so no prediction can
    # be judged against the mean to 2 % there (JIT runtimes).
    def live_spread(r):
        f = r[3]
        return 100.0 * (f["max"] - f["min"]) / 2 / f["mean"] if f["mean"] else 0.0
    wide = [r for r in others if live_spread(r) > 2.0]
    judged = [r for r in others if live_spread(r) <= 2.0]
    print(f"pairs whose own live runs spread over +-2 % (not judgeable to 2 %): {len(wide)}"
          + (" (" + ", ".join(f"{r[0]} {r[2]} +-{live_spread(r):.1f} %" for r in wide) + ")" if wide else ""))
    print(f"page faults within 2 % of the pairs whose live runs agree to +-2 %: "
          f"{sum(1 for r in judged if abs(r[5]) <= 2.0)} of {len(judged)}; held out: "
          f"{sum(1 for r in judged if r[1] and abs(r[5]) <= 2.0)} of {sum(1 for r in judged if r[1])}")
    # The per-size counts likewise, on the pairs whose own live fault
    # counts agree to +-2 %, with every miss named (issue 13's 5 % goal).
    judged_sizes = [(r, kb, lv, m) for r in judged for kb, lv, m in r[6] if lv >= 20]
    print(f"per-size anon_fault_alloc within 5 % on the pairs whose live runs agree to +-2 %: "
          f"{sum(1 for s in judged_sizes if abs(pct(s[3], s[2])) <= 5.0)} of {len(judged_sizes)}")
    for r in others:
        for kb, lv, m in r[6]:
            if lv >= 20 and abs(pct(m, lv)) > 5.0:
                why = "" if live_spread(r) <= 2.0 else f" (its live faults spread +-{live_spread(r):.1f} %)"
                print(f"  per-size miss: {r[0]} {r[2]} {kb}K: live {lv:.1f}, predicted {m:g} "
                      f"({pct(m, lv):+.1f} %){why}")
    misses = [r for r in others if abs(r[5]) > 2.0]
    # Widened by the run-to-run spread of the recorded configuration.
    def in_runs(r):
        lo, hi = r[8] or (r[4], r[4])
        return lo * 0.98 <= r[3]["mean"] <= hi * 1.02
    print(f"within 2 % of the prediction widened by the recorded configuration's run-to-run spread "
          f"(its live 4k runs' min..max): {sum(1 for r in others if in_runs(r))} of {len(others)}")
    for r in misses:
        band = f" [band {pct(r[7][0], r[3]['mean']):+.1f} %..{pct(r[7][1], r[3]['mean']):+.1f} %]" if r[7] else ""
        print(f"  miss: {r[0]} {r[2]}: {r[5]:+.1f} %{band}")


# The `perf record` lines a user would have run (issue 13): what
# `mmlab import --help` asks for; the set the issue found in users' hands
# (kmem, user faults, syscall entries with some exits, sched; no kernel
# faults, no -d); and a minimal per-process one (faults and the mapping
# calls, no allocator events).
KMEM = ["kmem:mm_page_alloc", "kmem:mm_page_free", "kmem:mm_page_alloc_zone_locked", "kmem:mm_page_pcpu_drain"]
SCHED = ["sched:sched_process_fork", "sched:sched_process_exec", "sched:sched_process_exit"]
CALLS = ["mmap", "munmap", "brk", "mremap", "mprotect", "madvise"]
# The per-CPU vmstat work's runs (the phase of decay_pcp_high()'s drains),
# filtered in the kernel to vmstat_update (see `mmlab import --help`).
VMSTAT_WORK = ("workqueue:workqueue_execute_start", "function.function == vmstat_update")

PERF_SETS = {
    "full": (["-a", "-d"], KMEM + ["exceptions:page_fault_user", "exceptions:page_fault_kernel"]
             + [f"syscalls:sys_{d}_{c}" for c in CALLS for d in ("enter", "exit")] + SCHED
             + [VMSTAT_WORK]),
    "typical": (["-a"], KMEM + ["exceptions:page_fault_user", "syscalls:sys_enter_mmap", "syscalls:sys_exit_mmap",
                                "syscalls:sys_enter_munmap", "syscalls:sys_enter_brk", "syscalls:sys_exit_brk",
                                "syscalls:sys_enter_mremap", "syscalls:sys_exit_mremap", "syscalls:sys_enter_mprotect",
                                "syscalls:sys_enter_madvise"] + SCHED),
    "minimal": ([], ["exceptions:page_fault_user", "syscalls:sys_enter_mmap", "syscalls:sys_exit_mmap",
                     "syscalls:sys_enter_munmap", "syscalls:sys_enter_brk", "syscalls:sys_enter_mprotect"]),
}


# Extra `perf record` options for every line (MMLAB_PERF_EXTRA, split on
# spaces), e.g. "-m 64M" for larger ring buffers.
PERF_EXTRA = os.environ.get("MMLAB_PERF_EXTRA", "").split()
# The comm of perf's child while it waits to exec the command.
PERF_EXEC = "perf-exec"


def perf_argv(kind, out):
    flags, events = PERF_SETS[kind]
    args = []
    for e in events:
        # (event, filter): perf's --filter applies to the -e before it.
        args += ["-e", e[0], "--filter", e[1]] if isinstance(e, tuple) else ["-e", e]
    return ["perf", "record", "-q"] + PERF_EXTRA + flags + args + ["-o", out, "--"]


def read_copy(src, dst):
    """Copies a /proc or sysfs file with read() and write(). Not
    shutil.copy(): it copies with sendfile(), which reads such a file
    through copy_splice_read(), and that takes its pipe's pages with
    alloc_pages_bulk() -- from this CPU's PCP list, with no
    kmem:mm_page_alloc event -- and frees the unused ones, which are
    traced. A snapshot of the THP tree (~180 files) copied that way put
    ~4,400 untraced allocations and ~4,400 traced frees into every
    recording, at the exec and again at the exit (2026-11-25: `sleep 0.5`
    under the `full` line, pgalloc 9,363 against 377 traced, the harness
    freeing 8,832 pages it was never seen to allocate; read() and write():
    421 against 291)."""
    with open(src, "rb") as f:
        data = f.read()
    with open(dst, "wb") as f:
        f.write(data)


def read_copytree(src, dst):
    """`read_copy()` of every file under `src` into `dst`, keeping the tree."""
    for root, _dirs, files in os.walk(src):
        to = os.path.join(dst, os.path.relpath(root, src))
        os.makedirs(to, exist_ok=True)
        for name in files:
            read_copy(os.path.join(root, name), os.path.join(to, name))


def snapshot(d, after=False):
    """What `mmlab import --snapshot` reads: zoneinfo, vmstat and the THP
    knobs before, vmstat and THP statistics after (copied with read() and
    write(), `read_copy()`, so that taking it allocates no untraced pages)."""
    os.makedirs(d, exist_ok=True)
    if after:
        read_copy("/proc/vmstat", os.path.join(d, "vmstat-after"))
        read_copytree(THP, os.path.join(d, "thp-after"))
        return
    read_copy("/proc/zoneinfo", os.path.join(d, "zoneinfo"))
    read_copy("/proc/vmstat", os.path.join(d, "vmstat"))
    read_copytree(THP, os.path.join(d, "thp"))
    read_copy(FRACTION, os.path.join(d, "percpu_pagelist_high_fraction"))


def perf_buffer_bytes():
    """The ring-buffer size `-m` asks for in PERF_EXTRA, in bytes (None
    when not given)."""
    for i, a in enumerate(PERF_EXTRA):
        v = a[2:] if a.startswith("-m") and len(a) > 2 else \
            PERF_EXTRA[i + 1] if a in ("-m", "--mmap-pages") and i + 1 < len(PERF_EXTRA) else None
        if v:
            unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(v[-1].upper())
            return int(v[:-1]) * unit if unit else int(v) * 4096
    return None


def perf_buffers_mapped(pid, size):
    """How many of perf's ring buffers of at least `size` bytes process
    `pid` has mapped (`anon_inode:[perf_event]` in its maps; the pages are
    allocated in perf_mmap(), before the mapping shows)."""
    n = 0
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            if "perf_event" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                n += hi - lo >= size
    return n


def snapshot_at_exec(perf, snap, timeout=30.0):
    """Takes the snapshot (zoneinfo, vmstat, THP knobs) when the command
    execs. perf forks the command's process (comm `perf-exec`), which waits
    on a pipe while perf maps one ring buffer per CPU (`-m 128M`: 32 768
    pages each, through the PCP lists, whose refills raise `high` under
    auto-tuning), synthesizes the running tasks into perf.data and enables
    its events; then it lets the command exec. A snapshot taken while the
    command still waited (after the buffers, as before 2026-11-25) missed
    the synthesis, 25-112 ms here, in which the lists moved by up to 21 800
    pages (sort CPU 1: 34 800 -> 56 601) and the first recorded events met
    other lists than the snapshot's. At the exec the events are on: what
    the trace holds from their start to the snapshot (a poll of 0.2 ms and
    the read) is counted twice, far less. Returns where the snapshot was
    taken (perf-recordings*.json keeps it) and the command's pid: "late"
    when the command was first seen already past its exec (or perf ended,
    or 30 s passed)."""
    deadline = time.monotonic() + timeout
    pid, seen_waiting, size = None, False, perf_buffer_bytes()
    buffers = os.path.join(snap, "zoneinfo-buffers")
    os.makedirs(snap, exist_ok=True)
    while perf.poll() is None and time.monotonic() < deadline:
        try:
            kids = open(f"/proc/{perf.pid}/task/{perf.pid}/children").read().split()
            if kids:
                pid = int(kids[0])
                comm = open(f"/proc/{pid}/comm").read().strip()
                if comm == PERF_EXEC:
                    seen_waiting = True
                    # The old moment, kept to compare (`pcp --zoneinfo buffers`).
                    if size and not os.path.exists(buffers) and \
                            perf_buffers_mapped(perf.pid, size) >= os.cpu_count():
                        read_copy("/proc/zoneinfo", buffers)
                elif seen_waiting:
                    snapshot(snap)
                    # `mmlab import --snapshot` reads it: the allocator
                    # events before the exec are already in this zoneinfo.
                    with open(os.path.join(snap, "taken-at"), "w") as f:
                        f.write("exec\n")
                    return "at the command's exec (perf's buffers mapped, its events on)", pid
                elif comm != "perf":  # forked, not yet named perf-exec
                    break
        except OSError:
            pass
        time.sleep(0.0002)
    snapshot(snap)
    return "late: the command had started (the snapshot is not the recording's start)", pid


def exited(pid):
    """Whether process `pid` has ended (gone, or a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def snapshot_after_command(perf, pid, snap):
    """The "after" counters (vmstat, THP statistics) once the command `pid`
    has ended, before perf stops its events and writes out what its ring
    buffers hold: read after perf has ended, they count perf's own page
    cache for perf.data, which is not in the trace (`validate` then showed
    22 % of the machine's pgalloc in a trace of every process's events).
    Polled every 5 ms; returns whether it was taken (not when the command's
    pid is unknown or perf ended first)."""
    if pid is None:
        return False
    while perf.poll() is None:
        if exited(pid):
            snapshot(snap, after=True)
            return True
        time.sleep(0.005)
    return False


def perf_once(p, kind, inputs, python, no_aslr, trace, keep=None):
    """Records `p` with the plain `perf record` line of `kind` under 4 KiB
    folios and imports it into `trace`; returns import's summary. With
    `keep`, the perf.data and its snapshot are moved into that directory
    (`costs` imports them again without one event at a time)."""
    if p[4]:
        subprocess.run(p[4], cwd=inputs, check=True, stdout=subprocess.DEVNULL)
    work = tempfile.mkdtemp(prefix="mmlab-perf-")
    try:
        data, snap = os.path.join(work, "perf.data"), os.path.join(work, "snap")
        env = dict(os.environ, PYTHONHASHSEED="0")
        with tempfile.TemporaryFile(mode="w+") as err:
            perf = subprocess.Popen(perf_argv(kind, data) + argv_of(p, python, no_aslr), cwd=inputs,
                                    env=env, stdout=subprocess.DEVNULL, stderr=err, text=True)
            try:
                when, pid = snapshot_at_exec(perf, snap)
                after = snapshot_after_command(perf, pid, snap)
            finally:
                rc = perf.wait()
            err.seek(0)
            if rc != 0:
                raise RuntimeError(f"{p[0]}: perf record failed: {err.read().strip()[-400:]}")
        if not after:
            snapshot(snap, after=True)
        ienv, fds = lend_lock(dict(os.environ))
        imp = subprocess.run([mmlab(), "import", data, "-o", trace, "--snapshot", snap],
                             capture_output=True, text=True, env=ienv, pass_fds=fds)
        if imp.returncode != 0:
            raise RuntimeError(f"{p[0]}: mmlab import failed: {imp.stderr.strip()[-400:]}")
        res = {"perf_data_bytes": os.path.getsize(data), "import": imp.stderr.strip().splitlines(),
               "snapshot": when, "after": "at the command's exit" if after else "after perf ended"}
        if keep:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.move(work, keep)
        return res
    finally:
        shutil.rmtree(work, ignore_errors=True)


def perf_record(args):
    """(root) Records every program once per `perf record` line under 4 KiB
    folios and imports it: scripts/corpus/perf-traces{sfx}/KIND/NAME.mmtrace."""
    if os.geteuid() != 0:
        sys.exit("SKIPPED (cannot run here): perf-record needs root (knobs, perf tracepoints)")
    if not args.no_build:
        build()
    python = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"],
                            capture_output=True, text=True, check=True).stdout.strip()
    inputs = tempfile.mkdtemp(prefix="mmlab-corpus-")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "corpus_inputs.py"), inputs], check=True)
    sfx = suffix(args)
    kinds = args.sets.split(",") if args.sets else list(PERF_SETS)
    progs = [p for p in PROGRAMS if not args.programs or p[0] in args.programs.split(",")]
    info = load(f"perf-recordings{sfx}.json", {"sets": {}, "programs": {}})
    # perf mounts tracefs for its tracepoints' formats when it is not
    # mounted, and leaves it mounted: unmounted again at the end.
    tracefs_was_mounted = tracefs_mounted()
    try:
        with LiveKernel():
            apply_config("4k")
            for kind in kinds:
                info["sets"][kind] = " ".join(perf_argv(kind, "perf.data")) + " CMD"
                d = os.path.join(DATA, "perf-traces" + sfx, kind)
                os.makedirs(d, exist_ok=True)
                for p in progs:
                    t = os.path.join(d, p[0] + ".mmtrace")
                    keep = os.path.join(DATA, "perf-data" + sfx, p[0]) if kind == "full" else None
                    res = perf_once(p, kind, inputs, python, args.no_aslr, t, keep)
                    res["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")
                    res["trace_bytes"] = os.path.getsize(t)
                    info["programs"].setdefault(p[0], {})[kind] = res
                    store(f"perf-recordings{sfx}.json", info)
                    print(f"{kind:8} {p[0]:12} perf.data {res['perf_data_bytes'] >> 10} KiB, "
                          f"trace {res['trace_bytes'] >> 10} KiB", flush=True)
    finally:
        shutil.rmtree(inputs, ignore_errors=True)
        if not tracefs_was_mounted and tracefs_mounted():
            subprocess.run(["umount", TRACEFS], check=False)


TRACEFS = "/sys/kernel/tracing"


def tracefs_mounted():
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == TRACEFS and line.split()[2] == "tracefs" for line in f)


def pcp(args):
    """The PCP counters of the `full` perf recordings (every process's
    allocator events: `-a`): `mmlab validate --mode alloc` (the recorded
    configuration, lists warm from the snapshot) with the vmstat work where
    the recording says it ran (`--vmstat-work recorded`) and on the model's
    one-second timer (`timer`), into pcp{sfx}.json, and the table."""
    sfx = suffix(args)
    if args.zoneinfo == "buffers":
        return pcp_buffers(args, sfx)
    out = {"source": "perf-traces" + sfx + "/full", "programs": {}}
    # Where each recording's snapshot was taken, its date and import summary
    # (perf-record writes them to perf-recordings{sfx}.json).
    recs = load(f"perf-recordings{sfx}.json", {"programs": {}})["programs"]
    # Without that file (the committed one is another host's: host-zen3/),
    # the recording's details stored with the last table.
    before = load(f"pcp{sfx}.json", {"programs": {}})["programs"]
    for p in PROGRAMS:
        t = os.path.join(DATA, "perf-traces" + sfx, "full", p[0] + ".mmtrace")
        if not os.path.exists(t):
            print(f"{p[0]}: no full perf recording; run `corpus.py perf-record --sets full`", file=sys.stderr)
            continue
        row = pcp_row(t)
        row["recording"] = max((r for r in (recs.get(p[0], {}).get("full"), before.get(p[0], {}).get("recording"))
                                if r), key=lambda r: r.get("date", ""), default=None)
        out["programs"][p[0]] = row
    store(f"pcp{sfx}.json", out)
    pcp_table(out)


def pcp_row(trace):
    """`validate --mode alloc` of `trace` with the vmstat work where it was
    recorded and on the model's timer: zone-locked allocations and drains,
    recorded and modelled."""
    row = {}
    for how in ("recorded", "timer"):
        r = subprocess.run([mmlab(), "validate", trace, "--mode", "alloc", "--vmstat-work", how,
                            "--format", "json"], capture_output=True, text=True, check=True)
        doc = json.loads(r.stdout)["alloc"]
        counters = {c["counter"].split("(")[1].rstrip(")"): (c["recorded"], c["model"])
                    for c in doc["counters"]}
        row[how] = {"zone_locked": counters["mm_page_alloc_zone_locked"],
                    "drains": counters["mm_page_pcpu_drain"],
                    "vmstat_update_runs": doc["recorded"].get("vmstat_update_runs", 0)}
    return row


def pcp_buffers(args, sfx):
    """`pcp` with the zoneinfo taken at the old moment (perf's buffers
    mapped, the command still waiting: `zoneinfo-buffers` in each kept
    snapshot) instead of at the command's exec: each kept `full` perf.data
    imported again with `--zoneinfo` (into a temporary file), into
    pcp{sfx}-buffers.json, to compare the two moments on the same
    recordings."""
    out = {"source": "perf-data" + sfx + " with snap/zoneinfo-buffers", "programs": {}}
    with tempfile.TemporaryDirectory(prefix="mmlab-pcp-") as tmp:
        for p in PROGRAMS:
            d = os.path.join(DATA, "perf-data" + sfx, p[0])
            z = os.path.join(d, "snap", "zoneinfo-buffers")
            if not os.path.exists(z):
                print(f"{p[0]}: no {z}; run `corpus.py perf-record --sets full`", file=sys.stderr)
                continue
            t = os.path.join(tmp, p[0] + ".mmtrace")
            subprocess.run([mmlab(), "import", os.path.join(d, "perf.data"), "-o", t, "--snapshot",
                            os.path.join(d, "snap"), "--zoneinfo", z], capture_output=True, check=True)
            out["programs"][p[0]] = pcp_row(t)
    store(f"pcp{sfx}-buffers.json", out)
    pcp_table(out)


def pcp_within(rec, model, pct_ok):
    return (rec == 0 and model == 0) or (rec > 0 and abs(pct(model, rec)) <= pct_ok)


def pcp_table(out):
    print("| program | vmstat_update runs | zone-locked recorded / model (recorded phase) | error "
          "| drains recorded / model (recorded phase) | error | drains model (1 s timer) | error |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ok = {"zl": 0, "dr": 0, "dr_timer": 0}
    for name, row in out["programs"].items():
        held = next((" (held out)" for p in PROGRAMS if p[0] == name and p[2]), "")
        (zr, zm), (dr, dm) = row["recorded"]["zone_locked"], row["recorded"]["drains"]
        dt = row["timer"]["drains"][1]
        e = lambda m, r: f"{pct(m, r):+.1f} %" if r else ""
        ok["zl"] += pcp_within(zr, zm, 15)
        ok["dr"] += pcp_within(dr, dm, 25)
        ok["dr_timer"] += pcp_within(dr, dt, 25)
        print(f"| {name}{held} | {row['recorded']['vmstat_update_runs']} | {zr} / {zm} | {e(zm, zr)} "
              f"| {dr} / {dm} | {e(dm, dr)} | {dt} | {e(dt, dr)} |")
    n = len(out["programs"])
    print(f"\nzone-locked within 15 %: {ok['zl']} of {n}; drains within 25 %: {ok['dr']} of {n} "
          f"(vmstat work at the recorded runs), {ok['dr_timer']} of {n} (the model's 1 s timer)")


# What `costs` leaves out of the `full` recordings, one at a time (groups
# that go together, such as a call's entry and exit, are one row).
COST_EVENTS = {
    "exceptions:page_fault_kernel": ["exceptions:page_fault_kernel"],
    "-d (perf:mmap-data)": ["perf:mmap-data"],
    "sys_exit_mmap": ["syscalls:sys_exit_mmap"],
    "sys_exit_brk": ["syscalls:sys_exit_brk"],
    "sys_exit_munmap/mprotect/madvise/mremap": [
        "syscalls:sys_exit_munmap", "syscalls:sys_exit_mprotect",
        "syscalls:sys_exit_madvise", "syscalls:sys_exit_mremap"],
    "munmap": ["syscalls:sys_enter_munmap", "syscalls:sys_exit_munmap"],
    "mprotect": ["syscalls:sys_enter_mprotect", "syscalls:sys_exit_mprotect"],
    "madvise": ["syscalls:sys_enter_madvise", "syscalls:sys_exit_madvise"],
    "mremap": ["syscalls:sys_enter_mremap", "syscalls:sys_exit_mremap"],
    "sched:* (perf's task records instead)": SCHED,
    "kmem:* (no kernel-fault estimate)": KMEM,
}


def costs(args):
    """Imports each kept `full` perf.data again without one event (group)
    at a time, replays it, and prints what that costs: the (program,
    config) pairs within 2 % of live, and the largest error."""
    sfx = suffix(args)
    mm = load(f"predictions{sfx}.json", {"programs": {}})["programs"]
    progs = [p for p in PROGRAMS if not args.programs or p[0] in args.programs.split(",")]
    rows_out = load(f"perf-costs{sfx}.json", {"rows": {}})["rows"]
    names = [n for n in COST_EVENTS if not args.events or n in args.events.split(";")]
    for name in ["(nothing left out)"] + names:
        preds = {}
        for p in progs:
            d = os.path.join(DATA, "perf-data" + sfx, p[0])
            if not os.path.exists(os.path.join(d, "perf.data")):
                continue
            fd, t = tempfile.mkstemp(prefix="mmlab-cost-", suffix=".mmtrace")
            os.close(fd)
            try:
                ign = [a for e in COST_EVENTS.get(name, []) for a in ("--ignore-event", e)]
                subprocess.run([mmlab(), "import", os.path.join(d, "perf.data"), "-o", t, "--quiet",
                                "--snapshot", os.path.join(d, "snap")] + ign, check=True,
                               capture_output=True)
                kernels, recorded = replay(t)
            finally:
                os.unlink(t)
            preds[p[0]] = {"kernels": kernels, "recorded": recorded,
                           "outside_trace": mm.get(p[0], {}).get("outside_trace", 0)
                           + mm.get(p[0], {}).get("harness_in_trace", 0)}
        rs = [r for r in rows(sfx, preds=preds) if r[2] != "4k"]
        ok = sum(1 for r in rs if abs(r[5]) <= 2.0)
        worst = max(rs, key=lambda r: abs(r[5])) if rs else None
        rows_out[name] = {"within_2pct": ok, "pairs": len(rs),
                          "worst": [worst[0], worst[2], round(worst[5], 1)] if worst else None,
                          "errors": {f"{r[0]} {r[2]}": round(r[5], 2) for r in rs}}
        print(f"{name:45} within 2 %: {ok:3} of {len(rs):3}; worst "
              f"{worst[0] + ' ' + worst[2] + f' {worst[5]:+.1f} %' if worst else '-'}", flush=True)
        store(f"perf-costs{sfx}.json", {"programs": [p[0] for p in progs], "rows": rows_out})


SOURCES = ["mmlab"] + [f"perf-{k}" for k in PERF_SETS]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="live runs under every configuration (root)")
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--programs", default="")
    m.add_argument("--configs", default="")
    m.add_argument("--no-aslr", action="store_true")
    m.add_argument("--no-build", action="store_true")
    m.add_argument("--append", action="store_true",
                   help="add the runs to those stored (same kernel) and keep the recording")
    pr = sub.add_parser("predict", help="replay the 4k recordings under every configuration")
    pr.add_argument("--no-aslr", action="store_true")
    pr.add_argument("--source", default="mmlab", choices=SOURCES,
                    help="which recordings: mmlab record's (default) or a plain perf record line's")
    pf = sub.add_parser("perf-record", help="record with plain `perf record` lines and import (root)")
    pf.add_argument("--programs", default="")
    pf.add_argument("--sets", default="", help=f"perf record lines: {','.join(PERF_SETS)} (default all)")
    pf.add_argument("--no-aslr", action="store_true")
    pf.add_argument("--no-build", action="store_true")
    c = sub.add_parser("costs", help="what each missing event costs (from the kept full perf.data files)")
    c.add_argument("--programs", default="")
    c.add_argument("--events", default="", help="names of COST_EVENTS, separated by ';'")
    c.add_argument("--no-aslr", action="store_true")
    pc = sub.add_parser("pcp", help="PCP counters of the full perf recordings: validate --mode alloc")
    pc.add_argument("--no-aslr", action="store_true")
    pc.add_argument("--zoneinfo", default="exec", choices=["exec", "buffers"],
                    help="the snapshot's zoneinfo (exec) or the one taken when perf's buffers were mapped")
    t = sub.add_parser("table", help="predicted vs live")
    t.add_argument("--source", default="mmlab", choices=SOURCES)
    t.add_argument("--markdown", action="store_true")
    t.add_argument("--matrix", action="store_true", help="one row per program (markdown)")
    t.add_argument("--no-aslr", action="store_true")
    t.add_argument("--data", default="",
                   help="another directory of the JSON files, e.g. scripts/corpus/host-zen3 (the first host's)")
    args = ap.parse_args()
    if getattr(args, "data", ""):
        global DATA
        DATA = os.path.abspath(args.data)
    {"measure": measure, "predict": predict, "table": table, "perf-record": perf_record,
     "costs": costs, "pcp": pcp}[args.cmd](args)


if __name__ == "__main__":
    main()
