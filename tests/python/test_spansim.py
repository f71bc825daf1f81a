"""`import spansim` against the spansim command: the same numbers, the same errors, and no leaks in a loop.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=BUILD/python, SPANSIM_BINARY and SPANSIM_SOURCE_DIR.
"""
import copy
import json
import math
import os
import subprocess

import pandas as pd
import pytest

import spansim

SRC = os.environ["SPANSIM_SOURCE_DIR"]
BIN = os.environ["SPANSIM_BINARY"]
SCENARIO = os.path.join(SRC, "examples/scenarios/llama3-8b-two-regions-dp.json")
BAD = os.path.join(SRC, "tests/data/bad")


def cli(*args, expect=0):
    r = subprocess.run([BIN, *[str(a) for a in args]], capture_output=True, text=True, cwd=SRC)
    assert r.returncode == expect, r.stderr
    return r


def cli_json(*args):
    return json.loads(cli(*args).stdout)


def differences(a, b, path="$"):
    """Every place two JSON documents differ (numbers compared exactly: the runs are deterministic)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                yield "%s.%s: only in %s" % (path, k, "the CLI" if k in a else "Python")
            else:
                yield from differences(a[k], b[k], "%s.%s" % (path, k))
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield "%s: %d against %d entries" % (path, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b)):
            yield from differences(x, y, "%s[%d]" % (path, i))
    elif a != b and not (isinstance(a, float) and math.isnan(a) and isinstance(b, float) and math.isnan(b)):
        yield "%s: CLI %r, Python %r" % (path, a, b)


def records(frame):
    """A DataFrame's rows as plain Python values (to_json would round floats to 10 digits)."""
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in row.items()}
            for row in frame.to_dict(orient="records")]


def tiny_scenario():
    """The tiny campaign's base scenario (32 GPUs over two regions): a fraction of a second per run."""
    with open(os.path.join(SRC, "tests/experiments/data/tiny-campaign.json")) as f:
        base = json.load(f)["scenario"]
    base["topology"] = os.path.join(SRC, base["topology"])
    return base


@pytest.mark.parametrize("fidelity", ["analytical", "flow"])
def test_run_equals_the_cli_summary_field_by_field(fidelity):
    expected = cli_json("run", SCENARIO, "--fidelity", fidelity, "--json", "--no-outputs")
    got = spansim.run(SCENARIO, fidelity=fidelity)
    diffs = list(differences(expected, got.summary))
    print("fields compared: step %.9f s (CLI) against %.9f s (Python)" % (expected["metrics"]["step_time_s"],
                                                                         got.step_time))
    assert not diffs, "\n".join(diffs[:20])


def test_a_dict_runs_as_its_file_does():
    with open(SCENARIO) as f:
        doc = json.load(f)
    from_dict = spansim.run(doc, fidelity="analytical").summary
    from_file = spansim.run(SCENARIO, fidelity="analytical").summary
    # Only where the spec came from differs: the dict's file is "<dict>".
    for doc in (from_dict, from_file):
        assert doc["scenario"]["file"] == doc["configuration"]["job"]["file"]
    assert from_dict["scenario"]["file"] == "<dict>"
    from_dict["scenario"]["file"] = from_dict["configuration"]["job"]["file"] = from_file["scenario"]["file"]
    diffs = list(differences(from_file, from_dict))
    assert not diffs, "\n".join(diffs[:20])


def test_result_tables_are_the_summary_as_data_frames():
    r = spansim.run(SCENARIO, fidelity="analytical")
    b = r.breakdown()
    parts = ["compute_s", "exposed_tp_s", "exposed_cp_s", "exposed_pp_s", "exposed_dp_s", "exposed_ep_s", "bubble_s",
             "idle_s"]
    # Every stage's parts add up to the step (the breakdown's own invariant), to 1e-9.
    for stage, row in b.iterrows():
        assert abs(sum(row[p] for p in parts) - r.step_time) <= 1e-9 * r.step_time, (stage, dict(row))
    layers = r.layers()
    assert list(layers.columns[:3]) == ["stage", "chunk", "layers"]
    assert layers["layers"].groupby(layers["stage"]).sum().sum() == 32  # Llama 3 8B's layers over the stages
    assert set(r.tiers().index) >= {"nvlink", "nic", "inter_region"}
    boundaries = r.boundaries()
    assert (boundaries["bytes_out"] >= 0).all() and len(boundaries) == len(r.summary["network"]["boundaries"])
    assert len(r.links()) == len(r.summary["network"]["busiest_links"])


BAD_RUNS = ["escape_scenario_name.json", "faults_unknown_link.json", "multipath_unknown_routing.json",
            "packet_unknown_transport.json", "compression_ratio_below_one.json", "hetero_unknown_building.json",
            "invalid_utf8_building.json", "control_newline_building.json"]


@pytest.mark.parametrize("name", BAD_RUNS)
def test_bad_specs_raise_the_cli_message(name):
    path = os.path.join(BAD, name)
    line = cli("run", path, "--fidelity", "analytical", "--no-outputs", expect=2).stderr.strip()
    with pytest.raises(spansim.SpecError) as caught:
        spansim.run(path, fidelity="analytical")
    assert "spansim: error: " + str(caught.value) == line
    assert caught.value.file == path


def test_a_bad_dict_names_the_json_path():
    doc = tiny_scenario()
    doc["placement"]["orderr"] = doc["placement"].pop("order")
    with pytest.raises(spansim.SpecError) as caught:
        spansim.run(doc)
    assert caught.value.file == "<dict>"
    assert caught.value.json_path == "$.placement"
    assert 'unknown key "orderr"' in caught.value.detail
    assert str(caught.value).endswith(caught.value.detail)
    assert isinstance(caught.value, spansim.Error)


@pytest.mark.parametrize("value, says", [
    (b"bytes", "not JSON serializable"),
    ({1, 2}, "not JSON serializable"),
    (float("nan"), "Out of range float"),
    ("deep", "too deeply nested"),
    ("circular", "Circular reference"),
])
def test_values_json_cannot_hold_raise_spansim_errors(value, says):
    doc = tiny_scenario()
    if value == "deep":
        deep = {}
        for _ in range(100000):
            deep = {"x": deep}
        doc["description"] = deep
    elif value == "circular":
        doc["job"]["self"] = doc
    else:
        doc["description"] = value
    with pytest.raises(spansim.UsageError) as caught:
        spansim.run(doc)
    assert "<dict>: the scenario cannot be written as JSON" in str(caught.value)
    assert says in str(caught.value)
    assert isinstance(caught.value, spansim.Error)


def test_paths_with_nul_and_missing_results_raise_spansim_errors(tmp_path):
    # A NUL would cut the path short in C++ and open its prefix: refused, the path named.
    with pytest.raises(spansim.UsageError) as caught:
        spansim.run(SCENARIO + "\0ignored")
    assert "cannot hold a NUL character" in str(caught.value)
    with pytest.raises(spansim.UsageError):
        spansim.collective("dgx-h100\0x", ranks=2)
    with pytest.raises(spansim.UsageError) as caught:
        spansim.run(42)
    assert "expected a path or a dict, got int" in str(caught.value)
    # A campaign result that is missing, or an HDF5 file of something else.
    with pytest.raises(spansim.Error) as caught:
        spansim.campaign.load(str(tmp_path / "missing.h5"))
    assert "cannot be read as a campaign result" in str(caught.value)
    import h5py
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["x"] = [1]
    with pytest.raises(spansim.Error) as caught:
        spansim.campaign.load(str(tmp_path / "other.h5"))
    assert "not a campaign result" in str(caught.value)


def test_conversion_fuzz_every_value_is_run_or_a_spansim_error():
    """A seeded fuzz of the API's conversion of values: 600 random Python values (bytes, sets, tuples, NaN,
    infinities, huge integers, NUL, control and hidden characters, deep and circular structures, objects) put at
    random places of a scenario dict, or passed as the scenario itself. Each call runs or raises a spansim.Error;
    nothing else escapes and the interpreter survives."""
    import random
    rng = random.Random(20261202)
    atoms = [None, True, 0, -1, 2**63, 10**400, 0.5, float("nan"), float("inf"), "", "x\0y", "\x1b[31m",
             "\u00a0", "\u202e", "1EiB", "5us", b"raw", bytearray(b"b"), {1, 2}, frozenset(), (1, 2), object(), 1j]
    keys = ["description", "fidelity", "topology", "name", "bogus", "job", "placement", "collectives", "diloco"]

    def value(depth):
        k = rng.random()
        if depth > 3 or k < 0.5:
            return rng.choice(atoms)
        if k < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {(rng.choice([1, None, (1,)]) if rng.random() < 0.2 else rng.choice(keys)): value(depth + 1)
                for _ in range(rng.randint(0, 3))}

    ran = errors = 0
    base = tiny_scenario()
    for i in range(600):
        doc = copy.deepcopy(base)
        where = rng.choice([doc, doc["job"], doc["placement"]])
        where[rng.choice(keys)] = value(0)
        if i % 97 == 0:
            doc["description"] = doc  # circular
        target = doc if i % 5 else rng.choice(atoms + ["/nonexistent\0/x.json", SCENARIO + "\0"])
        try:
            spansim.run(target, fidelity="analytical")
            ran += 1
        except spansim.Error:
            errors += 1
    print("conversion fuzz: %d ran, %d spansim errors" % (ran, errors))
    assert ran + errors == 600 and errors > 0 and ran > 0


def test_a_bad_trace_raises_trace_error_naming_its_file():
    doc = tiny_scenario()
    doc["job"] = {"name": "truncated", "kind": "chakra", "trace": os.path.join(BAD, "chakra_truncated")}
    with pytest.raises(spansim.TraceError) as caught:
        spansim.run(doc)
    print(caught.value)
    assert caught.value.file == os.path.join(BAD, "chakra_truncated.0.et")
    assert "record 6 (after node 4) is truncated or not a Chakra node" in str(caught.value)
    assert isinstance(caught.value, spansim.SpecError) and isinstance(caught.value, spansim.Error)


def test_a_bad_fidelity_is_refused_as_the_cli_does():
    with pytest.raises(spansim.Error) as caught:
        spansim.run(SCENARIO, fidelity="quantum")
    assert "quantum" in str(caught.value) and "analytical" in str(caught.value)


def test_collective_is_the_cli_table():
    expected = cli_json("collective", "--topology", "two-buildings", "--ranks", 16, "--sizes", "1MiB,64MiB",
                        "--fidelity", "analytical", "--json")
    got = spansim.collective("two-buildings", ranks=16, sizes="1MiB,64MiB", fidelity="analytical")
    assert len(got) == len(expected["results"]) == 2
    rows = records(got)
    diffs = list(differences(expected["results"], rows))
    assert not diffs, "\n".join(diffs)
    assert got.attrs["collective"]["ranks"] == 16


def test_optimize_ranks_as_the_cli(tmp_path):
    with open(os.path.join(SRC, "examples/optimize/llama3-8b-two-buildings.json")) as f:
        spec = json.load(f)
    spec["refine_fidelity"] = "analytical"
    spec["top_k"] = 2
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    expected = cli_json("optimize", path, "--json", "--out", tmp_path / "cli-out")
    got = spansim.optimize(spec)
    assert len(got.ranked) == len(expected["ranked"]) > 0
    ranked = records(got.ranked)
    # Each point's scenario file is written where each run was told: the same file name in two folders.
    for a, b in zip(expected["ranked"], ranked):
        assert os.path.basename(a.pop("scenario")) == os.path.basename(b.pop("scenario"))
    diffs = list(differences(expected["ranked"], ranked))
    assert not diffs, "\n".join(diffs[:20])
    assert "ranked" not in got.explanation and set(got.explanation) == set(expected) - {"ranked"}


def test_campaign_load_reads_the_cli_result(tmp_path):
    out = tmp_path / "tiny.h5"
    cli("campaign", "run", "tests/experiments/data/tiny-campaign.json", "--out", out)
    frame = spansim.campaign.load(out)
    csv = pd.read_csv(tmp_path / "tiny.csv")
    assert len(frame) == len(csv) == 12
    assert list(frame["index"]) == list(range(12))
    assert frame["step_time_s"].tolist() == pytest.approx(csv["step_time_s"].tolist(), rel=1e-12)
    assert set(frame["status"]) == {"ok"}


def children():
    """Processes this one started that still exist (zombies included)."""
    found = []
    for task in os.listdir("/proc/self/task"):
        with open("/proc/self/task/%s/children" % task) as f:
            found += f.read().split()
    return found


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def test_a_hundred_runs_in_a_loop_leak_no_processes_or_memory():
    doc = tiny_scenario()
    doc["fidelity"] = "analytical"
    steps = []
    for i in range(100):
        steps.append(spansim.run(doc).step_time)
        if i == 9:
            after_ten = rss_mib()
    grown = rss_mib() - after_ten
    print("RSS after 10 runs %.1f MiB, after 100 %.1f MiB (+%.1f)" % (after_ten, after_ten + grown, grown))
    assert len(set(steps)) == 1, "the same scenario gave different steps"
    assert children() == [], "child processes left behind"
    assert grown < 20, "RSS grew by %.1f MiB over 90 runs" % grown


def test_the_example_notebook_runs_headless_and_matches_the_cli(tmp_path):
    """Executes the code cells of examples/notebooks/inter-region-distance.ipynb in order, as a kernel would, then
    runs two of its points with `spansim run` and compares the step times."""
    with open(os.path.join(SRC, "examples/notebooks/inter-region-distance.ipynb")) as f:
        notebook = json.load(f)
    namespace = {"__name__": "__notebook__"}
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), "inter-region-distance.ipynb", "exec"), namespace)
    sweep = namespace["sweep"]
    assert list(sweep.index) == [10, 100, 500, 1000, 2000, 4000]
    assert sweep["step_time_s"].is_monotonic_increasing, "a longer haul gave a shorter step"
    for d in (10, 4000):
        path = tmp_path / ("at-%d.json" % d)
        path.write_text(json.dumps(namespace["scenario_at"](d)))
        expected = cli_json("run", path, "--fidelity", "analytical", "--json", "--no-outputs")
        print("%d km: CLI %.9f s, notebook %.9f s" % (d, expected["metrics"]["step_time_s"],
                                                      sweep.loc[d, "step_time_s"]))
        assert sweep.loc[d, "step_time_s"] == expected["metrics"]["step_time_s"]
        assert sweep.loc[d, "tokens_per_s"] == expected["metrics"]["tokens_per_s"]


def test_a_result_draws_its_page_as_spansim_report_does(tmp_path):
    scenario = os.path.join(SRC, "examples/scenarios/llama3-8b-two-regions-dp.json")
    r = spansim.run(scenario, fidelity="analytical")
    page = r.report(tmp_path / "page.html")
    # The same page `spansim report` draws from the summary the command writes (the run's own provenance aside).
    out = tmp_path / "cli"
    subprocess.run([BIN, "run", scenario, "--fidelity", "analytical", "--out", str(out), "--report"], check=True,
                   capture_output=True)
    with open(out / "summary.json") as f:
        cli = json.load(f)
    mine = open(page, encoding="utf-8").read()
    assert '"step_time_s":%s' % json.dumps(r.step_time) in mine.replace(" ", "")
    assert r.step_time == cli["metrics"]["step_time_s"]
    # A dict works as the Result does; what is not a summary is a spansim error, as the command gives it.
    assert spansim.report(r.summary, tmp_path / "again.html") == str(tmp_path / "again.html")
    with pytest.raises(spansim.SpecError):
        spansim.report({"metrics": {}}, tmp_path / "bad.html")
    with pytest.raises(spansim.UsageError):
        spansim.report([1, 2], tmp_path / "bad.html")
