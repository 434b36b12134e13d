#!/usr/bin/env python3
"""env_ab_test.py — scripts/gpu/env_ab.sh's settings on the CPU (ctest), with fake fast_perf and test_gpu scripts
that log how they were called (SKIP_BUILD=1, nothing built): the settings run in alternation after BASE, a setting's
variables reach its runs and tests, a TREE=DIR setting runs DIR's binaries (its tests too) and gets --split only
where DIR's fast_perf.cpp has the flag; a TREE that is missing, named twice, or without its test_gpu under TESTS=1
fails at once (exit 2, naming it) before any run.
Usage: env_ab_test.py PATH/TO/env_ab.sh"""
import os
import stat
import subprocess
import sys
import tempfile

FAKE = """#!/usr/bin/env bash
echo "{name} $* FOO=${{FOO:-}}" >>"$CALLS"
echo "verify (16 tokens) 1.000 ms {name}"
"""


def fake(path, name):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(FAKE.format(name=name))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def tree(root, name, flags, test_gpu=True):
    """An exported revision as ab_prepare.sh leaves it, with its binaries already built."""
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "bench"), exist_ok=True)
    open(os.path.join(d, "CMakeLists.txt"), "w").close()
    with open(os.path.join(d, "bench", "fast_perf.cpp"), "w") as f:
        f.write("".join(f'{{"{flag}", ...}},\n' for flag in flags))
    fake(os.path.join(d, "build-gpu", "bin", "fast_perf"), f"fast_perf:{name}")
    if test_gpu:
        fake(os.path.join(d, "build-gpu", "bin", "test_gpu"), f"test_gpu:{name}")


def run(script, root, **env):
    calls = os.path.join(root, "calls.log")
    if os.path.exists(calls):
        os.remove(calls)
    e = dict(os.environ, SKIP_BUILD="1", FAST_PERF=os.path.join(root, "main_fast_perf"),
             TEST_GPU=os.path.join(root, "main_test_gpu"), CALLS=calls, OUT=os.path.join(root, "out"), **env)
    r = subprocess.run(["bash", script], cwd=root, env=e, capture_output=True, text=True)
    lines = open(calls).read().splitlines() if os.path.exists(calls) else []
    return r, lines


def main():
    script = os.path.abspath(sys.argv[1])
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as root:
        fake(os.path.join(root, "main_fast_perf"), "fast_perf:main")
        fake(os.path.join(root, "main_test_gpu"), "test_gpu:main")
        fake(os.path.join(root, "head_fast_perf"), "fast_perf:head")
        tree(root, ".ab-new", ["--modes", "--split"])
        tree(root, ".ab-old", ["--modes"])
        tree(root, ".ab-notest", ["--modes", "--split"], test_gpu=False)

        r, calls = run(script, root, SETTINGS="main;x:FOO=1;t:TREE=.ab-new,FOO=2;o:TREE=.ab-old", BASE="head",
                       BASE_FAST_PERF=os.path.join(root, "head_fast_perf"), ROUNDS="2", SPLIT="1", TESTS="1")
        expect(r.returncode == 0, f"a valid run: exit {r.returncode}: {r.stderr}")
        tests = [c for c in calls if c.startswith("test_gpu")]
        expect([t.split()[0] for t in tests] == ["test_gpu:main", "test_gpu:.ab-new", "test_gpu:.ab-old"],
               f"tests for x (this tree's) and the two trees (their own), not main or BASE: {tests}")
        expect(tests and tests[0].endswith("FOO=1") and tests[1].endswith("FOO=2"), f"tests' variables: {tests}")
        runs = [c for c in calls if c.startswith("fast_perf")]
        order = ["fast_perf:head", "fast_perf:main", "fast_perf:main", "fast_perf:.ab-new", "fast_perf:.ab-old"]
        expect([c.split()[0] for c in runs] == order * 2, f"BASE first, then the settings, two rounds: {runs}")
        first = {}
        for c in runs[:5]:
            first.setdefault(c.split()[0], c)
        expect("--split 1" in first.get("fast_perf:.ab-new", ""), f"the new tree gets --split: {runs}")
        expect("fast_perf:.ab-old" in first and "--split" not in first["fast_perf:.ab-old"], f"a tree without the flag runs without it: {runs}")
        expect("fast_perf:head" in first and "--split" not in first["fast_perf:head"], f"BASE without .ab-base's source: no --split: {runs}")
        expect(len(runs) > 3 and runs[1].endswith("FOO=") and runs[2].endswith("FOO=1") and runs[3].endswith("FOO=2"),
               f"each setting's variables, and no TREE= among them: {runs}")
        expect("== t (.ab-new, FOO=2), round 1" in r.stdout, f"the run's heading names the tree: {r.stdout}")
        expect(r.stdout.count("verify (16 tokens)") == 10, f"every run's rows printed: {r.stdout}")

        bad = [("main;t:TREE=.ab-missing", "TREE=.ab-missing", "a missing tree"),
               ("main;t:TREE=.ab-new,TREE=.ab-old", "names TREE twice", "TREE twice"),
               ("main;t:TREE=.ab-notest", "no test_gpu for 't'", "a tree without test_gpu under TESTS=1")]
        for settings, message, what in bad:
            r, calls = run(script, root, SETTINGS=settings, TESTS="1")
            expect(r.returncode == 2 and message in r.stderr, f"{what}: exit {r.returncode}, stderr {r.stderr!r}")
            expect(calls == [], f"{what}: nothing ran before the error: {calls}")
        r, calls = run(script, root, SETTINGS="main;t:TREE=.ab-notest", TESTS="0", ROUNDS="1")
        expect(r.returncode == 0 and [c.split()[0] for c in calls] == ["fast_perf:main", "fast_perf:.ab-notest"],
               f"a tree without test_gpu under TESTS=0 runs: exit {r.returncode}, {calls}, {r.stderr}")

    for f in failures:
        print("FAIL:", f)
    print("env_ab_test:", "FAILED" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
