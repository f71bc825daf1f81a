#!/usr/bin/python3
"""ctest's seconds per label and its slowest tests, from the JUnit file `ctest --output-junit` wrote.

    ctest_times.py BUILD [--top N]

Labels come from `ctest --show-only=json-v1` (a test with two labels counts in both). Seconds are each test's own
wall time summed (process-seconds: with -j 2 the phase's wall time is about half of their sum).
"""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET


def main(argv):
    if not argv or argv[0].startswith("-"):
        sys.exit("usage: ctest_times.py BUILD [--top N]")
    build = argv[0]
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 8
    junit = os.path.join(build, "ctest-junit.xml")
    if not os.path.exists(junit):
        sys.exit("ctest_times: %s does not exist (run ctest --output-junit ctest-junit.xml first)" % junit)
    listing = json.loads(subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                                        stdout=subprocess.PIPE, text=True).stdout)
    labels = {}
    for t in listing["tests"]:
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels[t["name"]] = p["value"]
    times = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        times[case.get("name")] = float(case.get("time") or 0)
    per_label = {}
    for name, seconds in times.items():
        for label in labels.get(name, ["(none)"]):
            n, s = per_label.get(label, (0, 0.0))
            per_label[label] = (n + 1, s + seconds)
    print("ctest: process-seconds per label (a test counts under each of its labels)")
    for label, (n, s) in sorted(per_label.items(), key=lambda kv: -kv[1][1]):
        print("  %-12s %4d tests %8.0f s" % (label, n, s))
    print("  %-12s %4d tests %8.0f s" % ("all", len(times), sum(times.values())))
    print("ctest: the %d slowest tests" % top)
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:top]:
        print("  %7.1f s  %s" % (seconds, name[:100]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
