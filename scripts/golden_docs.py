#!/usr/bin/python3
"""Worked examples in the Markdown files are generated, not pasted: SimGrid's .tesh files for documentation.

A fenced block preceded by one or more comments

    <!-- output: build/spansim topology describe two-buildings [lines 4-5,15-28] [mask REGEX] -->

holds, for each comment in order, "$ COMMAND" and the lines of its output (all, or the ranges given, with "..."
where lines are left out). `golden_docs.py --update FILE...` regenerates the blocks; `golden_docs.py FILE...`
checks them and prints the difference (a ctest runs it). `--match REGEX` checks only the blocks one of whose
commands the expression finds, `--skip REGEX` all but those: the README's check is three ctests side by side. A
mask is a regular expression whose matches are not compared (wall times). The source tree's absolute path is
printed relative, so the output is the same anywhere.
"""
import difflib
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- output: (?P<cmd>.*?)(?: \[lines (?P<lines>[0-9,\- ]+)\])?(?: \[mask (?P<mask>.+?)\])? -->$")


def parse_ranges(text):
    ranges = []
    for part in text.split(","):
        a, _, b = part.strip().partition("-")
        ranges.append((int(a), int(b or a)))
    return ranges


def render(cmd, lines, binary):
    shell = cmd.replace("build/spansim", binary, 1) if binary else cmd
    env = dict(os.environ, COLUMNS="120")
    out = subprocess.run(shell, shell=True, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    if out.returncode != 0:
        raise SystemExit("golden_docs: `%s` failed (exit %d):\n%s" % (cmd, out.returncode, out.stdout))
    text = out.stdout.replace(ROOT + "/", "")
    got = text.rstrip("\n").split("\n")
    shown = ["$ " + cmd]
    if not lines:
        return shown + got
    last = 0
    for a, b in parse_ranges(lines):
        if a > last + 1:
            shown.append("...")
        shown.extend(got[a - 1:b])
        last = b
    if last < len(got):
        shown.append("...")
    return shown


def blocks(text):
    """Yields (first line index of the block's content, end index, [(cmd, lines, mask)])."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        specs = []
        while i < len(lines) and MARKER.match(lines[i]):
            m = MARKER.match(lines[i])
            specs.append((m.group("cmd"), m.group("lines"), m.group("mask")))
            i += 1
        if specs:
            if i >= len(lines) or not lines[i].startswith("```"):
                raise SystemExit("golden_docs: an output comment must come right before a fenced block (line %d)" % i)
            start = i + 1
            end = start
            while end < len(lines) and not lines[end].startswith("```"):
                end += 1
            yield start, end, specs
            i = end
        i += 1


def main(argv):
    update = "--update" in argv
    match = skip = None
    files = []
    args = iter(argv)
    for a in args:
        if a in ("--match", "--skip"):
            expression = re.compile(next(args, None) or sys.exit("golden_docs: %s needs a regular expression" % a))
            match, skip = (expression, skip) if a == "--match" else (match, expression)
        elif a.startswith("--") and a != "--update":
            sys.exit("golden_docs: unknown option %s (allowed: --update, --match REGEX, --skip REGEX)" % a)
        elif not a.startswith("--"):
            files.append(a)
    binary = os.environ.get("SPANSIM_BINARY", "")
    failures = 0
    for name in files:
        path = os.path.join(ROOT, name)
        text = open(path).read()
        lines = text.split("\n")
        replacements, checked = [], 0
        for start, end, specs in blocks(text):
            commands = [cmd for cmd, _, _ in specs]
            if match and not any(match.search(c) for c in commands):
                continue
            if skip and any(skip.search(c) for c in commands):
                continue
            checked += 1
            generated, masks = [], []
            began = time.monotonic()
            for k, (cmd, ranges, mask) in enumerate(specs):
                if k > 0:
                    generated.append("")
                generated.extend(render(cmd, ranges, binary))
                if mask:
                    masks.append(re.compile(mask))
            current = lines[start:end]
            def masked(seq):
                out = []
                for line in seq:
                    for m in masks:
                        line = m.sub("<masked>", line)
                    out.append(line)
                return out
            if masked(current) != masked(generated):
                if update:
                    replacements.append((start, end, generated))
                else:
                    failures += 1
                    print("%s: the block at line %d is out of date (run `make golden`):" % (name, start + 1))
                    sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(
                        current, generated, "in " + name, "generated", lineterm="", n=1))
            else:
                print("%s: block at line %d matches in %.1f s (%s)" % (name, start + 1, time.monotonic() - began,
                                                                   "; ".join(s[0] for s in specs)))
        if not checked:
            raise SystemExit("golden_docs: %s has no output block%s" % (
                name, " that --match/--skip select" if match or skip else ""))
        for start, end, generated in reversed(replacements):
            lines[start:end] = generated
        if replacements:
            open(path, "w").write("\n".join(lines))
            print("%s: %d block(s) regenerated" % (name, len(replacements)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
