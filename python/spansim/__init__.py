"""spansim from Python: scenarios run by the same C++ libraries as the ``spansim`` command, results as dicts and
pandas DataFrames.

Specs are plain dicts in the format of the JSON files, or paths to them. Bad specs raise :class:`SpecError` with
the line ``spansim`` prints (file, JSON path, allowed values); ``exc.file``, ``exc.json_path`` and ``exc.detail``
(what is wrong) hold the parts.
Simulations run in child processes (SimGrid allows one engine per process), so calls are safe in a loop.

>>> import spansim
>>> r = spansim.run("examples/scenarios/llama3-8b-two-regions-dp.json", fidelity="analytical")
>>> r.summary["metrics"]["step_time_s"]
>>> r.breakdown()          # one row per pipeline stage
"""
import io
import json
import os
import shutil
import tempfile

import pandas as pd

from . import _spansim
from . import campaign
from ._spansim import Error, SpecError, TraceError, UsageError

__all__ = ["run", "report", "collective", "optimize", "campaign", "Result", "OptimizeResult", "Error", "SpecError",
           "TraceError", "UsageError", "version"]

#: The name errors give a spec passed as a dict (it has no file).
DICT_FILE = "<dict>"


def version():
    """spansim's version and git hash, as ``spansim --version`` prints them."""
    return _spansim.version()


def _is_path(spec):
    return isinstance(spec, (str, os.PathLike))


def _path(value, what):
    """A path as the C++ side reads it: text without NUL (a NUL would cut the path short and open its prefix)."""
    try:
        path = os.fspath(value)
    except TypeError:
        raise UsageError("%s: expected a path or a dict, got %s" % (what, type(value).__name__)) from None
    if isinstance(path, bytes):
        try:
            path = os.fsdecode(path)
        except UnicodeDecodeError:
            raise UsageError("%s: the path is not text in the file system's encoding" % what) from None
    if "\0" in path:
        raise UsageError("%s %r: a path cannot hold a NUL character" % (what, path[:200]))
    return _text(path, what)


def _text(text, what):
    """``text`` as the C++ side takes it: UTF-8, so no lone surrogate (a file name's undecodable bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("%s %r: not valid UTF-8 text (it holds a lone surrogate)" % (what, text[:200])) from None
    return text


def _json_text(spec, what):
    """A dict spec as JSON text; what JSON cannot hold (bytes, sets, a dict that holds itself, nesting past
    Python's recursion limit, NaN) is a spansim UsageError naming it, as a bad file is."""
    try:
        return json.dumps(spec, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        kind = "too deeply nested" if isinstance(e, RecursionError) else str(e)[:200]
        raise UsageError("%s: the %s cannot be written as JSON (%s)" % (DICT_FILE, what, kind)) from None


class Result:
    """One simulated training step: ``summary`` is the dict ``spansim run --json`` prints."""

    def __init__(self, summary, layers_csv):
        self.summary = summary
        self._layers_csv = layers_csv

    @property
    def step_time(self):
        """Seconds per training step."""
        return self.summary["metrics"]["step_time_s"]

    def breakdown(self):
        """Where each pipeline stage's step goes (compute, exposed communication per dimension, bubble, idle), in
        seconds: one row per stage."""
        return pd.DataFrame(self.summary["breakdown"]["stages"]).set_index("stage")

    def layers(self):
        """The breakdown per model chunk (layers.csv): one row per stage and chunk."""
        return pd.read_csv(io.StringIO(self._layers_csv))

    def links(self):
        """The busiest links of the step (bytes, utilisation), one row per link."""
        return pd.DataFrame(self.summary["network"]["busiest_links"])

    def tiers(self):
        """Bytes and utilisation per link tier (NVLink, NIC, ..., inter-region)."""
        return pd.DataFrame(self.summary["network"]["tiers"]).set_index("tier")

    def boundaries(self):
        """Bytes in and out of each building and region, one row per boundary."""
        return pd.DataFrame(self.summary["network"]["boundaries"])

    def report(self, path):
        """Writes this step's page (``spansim run --report``'s report.html) to ``path``; returns ``path``."""
        return report(self, path)

    def __repr__(self):
        s = self.summary
        return "<spansim.Result %s: step %.6g s>" % (s["scenario"]["name"], self.step_time)


def run(scenario, fidelity=None):
    """Simulates one training step of ``scenario`` (a dict or a path) at ``fidelity`` ("analytical", "flow",
    "packet", "hybrid"; default: the scenario's own). Returns a :class:`Result`."""
    if _is_path(scenario):
        summary, layers = _spansim.run(_path(scenario, "scenario"), False, "", fidelity or "")
    elif isinstance(scenario, dict):
        summary, layers = _spansim.run(_json_text(scenario, "scenario"), True, DICT_FILE, fidelity or "")
    else:
        raise UsageError("scenario: expected a path or a dict, got %s" % type(scenario).__name__)
    return Result(json.loads(summary), layers)


def report(result, path):
    """Writes the page of a run to ``path``, as ``spansim report`` draws it: ``result`` is a :class:`Result` or the
    dict ``spansim run --json`` prints (a summary.json read back). Returns ``path``."""
    summary = result.summary if isinstance(result, Result) else result
    if not isinstance(summary, dict):
        raise UsageError("result: expected a spansim.Result or a summary dict, got %s" % type(summary).__name__)
    path = _path(path, "path")
    with tempfile.TemporaryDirectory(prefix="spansim-report-") as folder:
        with open(os.path.join(folder, "summary.json"), "w") as f:
            f.write(_json_text(summary, "summary"))
        _command(["report", folder, "--json"])
        try:
            shutil.copyfile(os.path.join(folder, "report.html"), path)
        except OSError as e:
            raise UsageError("cannot write %r: %s" % (path[:200], e.strerror or e)) from None
    return path


class _SpecFile:
    """A dict spec written to a temporary file for a command that reads files (errors then name that file)."""

    def __init__(self, spec, name):
        self.spec, self.name, self.dir = spec, name, None

    def __enter__(self):
        if _is_path(self.spec):
            return _path(self.spec, self.name)
        if not isinstance(self.spec, dict):
            raise UsageError("%s: expected a path or a dict, got %s" % (self.name, type(self.spec).__name__))
        text = _json_text(self.spec, self.name)
        self.dir = tempfile.TemporaryDirectory(prefix="spansim-")
        path = os.path.join(self.dir.name, self.name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def __exit__(self, *exc):
        if self.dir is not None:
            self.dir.cleanup()


def _argument(value):
    """A command-line argument from a caller's value: text, a number or a path; anything else is a UsageError (a
    list or a dict would pass as its repr, and a deep one would not even have one)."""
    if isinstance(value, os.PathLike):
        return _path(value, "argument")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UsageError("argument of type %s: expected text, a number or a path" % type(value).__name__)
    try:
        text = str(value)
    except ValueError:  # an integer past Python's 4,300-digit limit on conversion to text
        raise UsageError("argument: an integer of more than 4,300 digits") from None
    if "\0" in text:
        raise UsageError("argument %r: a NUL character cannot pass to a command" % text[:200])
    return _text(text, "argument")


def _command(args):
    args = [_argument(a) for a in args]
    out = _spansim.command(args)
    try:
        return json.loads(out)
    except ValueError:
        # A value the command read as an option of its own ("--help" as a size prints the help): no document.
        raise UsageError("spansim %s printed no JSON document (is a value read as an option?): %r"
                         % (" ".join(a[:200] for a in args[:2]), out[:200])) from None


def collective(topology, op="allreduce", ranks=None, gpus=None, sizes="1MiB:1GiB", factor=None, algo="auto",
               fidelity="flow", stride=1, first=0, root=None, flows_per_pair=1, compare=False):
    """An nccl-tests-style sweep of one collective (``spansim collective``): one row per message size, with time,
    algorithm and bus bandwidths. ``topology`` is a preset name, a path or a dict; ``ranks`` the first R GPUs (every
    ``stride``-th from ``first``), or ``gpus`` a list ("0-7,64")."""
    # A preset name or a path goes through as given (the command tries a file first, then a preset).
    with _SpecFile(topology, "topology.json") as t:
        args = ["collective", "--topology", t, "--op", op, "--algo", algo, "--fidelity", fidelity, "--sizes",
                sizes, "--flows-per-pair", flows_per_pair, "--json"]
        # Given only where they apply (the command refuses them elsewhere): a range's factor, a rooted op's root.
        if factor is not None:
            args += ["--factor", factor]
        if root is not None:
            args += ["--root", root]
        if ranks is not None:
            args += ["--ranks", ranks, "--stride", stride, "--first", first]
        if gpus is not None:
            args += ["--gpus", gpus if isinstance(gpus, str) else ",".join(str(g) for g in gpus)]
        if compare:
            args.append("--compare")
        doc = _command(args)
    rows = doc.pop("results")
    frame = pd.DataFrame(rows)
    frame.attrs.update(doc)
    return frame


class OptimizeResult:
    """What ``spansim optimize --json`` prints: ``ranked`` (a DataFrame, best first), ``explanation`` (the best
    point against the baselines, the best change per dimension, pruning) and ``document`` (all of it)."""

    def __init__(self, document):
        self.document = document
        self.ranked = pd.DataFrame(document.get("ranked", []))
        self.explanation = {k: v for k, v in document.items() if k != "ranked"}

    def __repr__(self):
        return "<spansim.OptimizeResult: %d points ranked>" % len(self.ranked)


def optimize(spec, top_k=None, workers=None, out=None):
    """Runs the optimizer on ``spec`` (a dict or a path) as ``spansim optimize SPEC --json`` does. The scenario
    files of the best points go to ``out`` when given (else to a temporary folder, removed). Returns an
    :class:`OptimizeResult`."""
    with _SpecFile(spec, "spec.json") as path, tempfile.TemporaryDirectory(prefix="spansim-optimize-") as scratch:
        args = ["optimize", path, "--json", "--out", out if out is not None else scratch]
        if top_k is not None:
            args += ["--top-k", top_k]
        if workers is not None:
            args += ["--workers", workers]
        return OptimizeResult(_command(args))
