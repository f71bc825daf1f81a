"""The pages (`spansim run --report`, `spansim report DIR`, `optimize --report`, `validate --report`, `campaign run
--report` and `campaign report`) opened in headless Chromium (Debian's `chromium`) with the network off: no console
error, every drawn element there, and the figures on the page equal to the result's JSON."""
import html.parser
import json
import os
import shutil
import subprocess
import tempfile

SOURCE = os.environ.get("SPANSIM_SOURCE_DIR", os.getcwd())
BINARY = os.environ.get("SPANSIM_BINARY", os.path.join(SOURCE, "build", "spansim"))
SHOTS = os.environ.get("SPANSIM_REPORT_SHOTS", "")


def chromium(args, page, hash=""):
    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is not installed (scripts/install-deps.sh installs it)"
    with tempfile.TemporaryDirectory() as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--user-data-dir=" + profile, "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
               "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0"] + args + ["file://" + page + hash]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    # Any console message (an error, a warning, a failed load): the pages write none.
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, "\n".join(console)
    return done.stdout


class Elements(html.parser.HTMLParser):
    """Every element's attributes, and the text of those with an id."""

    def __init__(self):
        super().__init__()
        self.elements, self.text, self._open = [], {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.elements.append((tag, a))
        self._open.append(a.get("id"))

    def handle_endtag(self, tag):
        if self._open:
            self._open.pop()

    def handle_data(self, data):
        for i in self._open:
            if i:
                self.text[i] = self.text.get(i, "") + data


def drawn(page, hash=""):
    """The page's elements once Chromium has run its script: nothing fetched, no script error, drawing finished."""
    text = open(page, encoding="utf-8").read()
    # Offline: nothing to fetch (the SVG namespace is a name, not a request).
    for fetch in ("src=", "href=", "url(", "@import", "fetch(", "XMLHttpRequest"):
        assert fetch not in text, f"the page asks for {fetch}"
    dom = Elements()
    dom.feed(chromium(["--dump-dom"], page, hash))
    assert dom.text.get("errors", "").strip() == "", dom.text["errors"]
    assert [a for t, a in dom.elements if t == "body"][0].get("data-drawn") == "1", "the drawing script did not finish"
    return dom


def run_with_report(out):
    scenario = os.path.join(SOURCE, "examples", "scenarios", "llama3-405b-two-buildings.json")
    done = subprocess.run([BINARY, "run", scenario, "--fidelity", "analytical", "--out", out, "--report", "--json"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert os.path.join(out, "report.html") in printed["outputs_written"]
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def test_run_page_draws_the_site_and_the_step_as_the_json_says():
    with tempfile.TemporaryDirectory() as out:
        summary = run_with_report(out)
        page = os.path.join(out, "report.html")
        dom = drawn(page)

        by_class = lambda c: [a for t, a in dom.elements if a.get("class") == c]  # noqa: E731
        step = [a for t, a in dom.elements if a.get("id") == "step"][0]
        print("step: page", step["data-value"], "json", summary["metrics"]["step_time_s"])
        assert float(step["data-value"]) == summary["metrics"]["step_time_s"]

        # The site: one box per building of the topology, coloured by its boundary's utilization.
        cfg = summary["configuration"]["topology"]
        names = [b for r in cfg["regions"] for b in r["buildings"]]
        boxes = {a["data-name"]: float(a["data-util"]) for a in by_class("building")}
        assert sorted(boxes) == sorted(names)
        for b in summary["network"]["boundaries"]:
            assert boxes[b["name"]] == b["mean_utilisation_out"], b["name"]
        assert len(by_class("pod")) == len(names) * cfg["building"]["pods"]

        # Tiers: one bar each, its utilization the JSON's.
        tiers = {a["data-tier"]: float(a["data-util"]) for a in by_class("tier")}
        assert tiers == {t["tier"]: t["mean_utilisation"] for t in summary["network"]["tiers"]}

        # The step: a segment per stage and non-zero part, its seconds the JSON's.
        parts = summary["breakdown"]["parts"]
        want = {(str(s["stage"]), p): s[p + "_s"] for s in summary["breakdown"]["stages"] for p in parts
                if s[p + "_s"] > 0}
        got = {(a["data-stage"], a["data-part"]): float(a["data-seconds"]) for a in by_class("part")}
        print(f"{len(got)} stage segments drawn, {len(want)} in the JSON")
        assert got == want

        # The timeline of stage 0: one box per op of the JSON's, at its times.
        tl = summary["timeline"]
        assert tl["stage"] == 0 and 0 < len(tl["ops"]) <= tl["ops_in_stage"]
        boxes = [(a["data-lane"], a["data-name"], int(a["data-micro-batch"]), float(a["data-start"]),
                  float(a["data-end"])) for a in by_class("op")]
        print(f"timeline: {len(boxes)} ops drawn, {len(tl['ops'])} in the JSON")
        assert boxes == [(tl["lanes"][o[0]], o[1], o[2], o[3], o[4]) for o in tl["ops"]]
        assert {b[1] for b in boxes} >= {"forward", "backward"}

        # A building's crossings (report.html#building=NAME, as a click lists them): each group whose members
        # there send out, with those bytes. Every crossing ring edge leaves exactly one building, so a group's
        # bytes out of each building sum to its bytes across buildings (to 1e-12).
        groups = summary["placement"]["groups"]
        for g in groups:
            out = sum(g["bytes_out_of_building_per_step"].values())
            assert abs(out - g["bytes_across_buildings_per_step"]) <= 1e-12 * max(1, out), g
        first = names[0]
        crossing = drawn(page, "#building=" + first)
        rows = {a["data-group"]: float(a["data-bytes"]) for t, a in crossing.elements if "data-group" in a}
        want = {g["group"]: g["bytes_out_of_building_per_step"][first] for g in groups
                if g["bytes_out_of_building_per_step"].get(first, 0) > 0}
        print("crossing", first, rows)
        assert rows == want and rows, (rows, want)
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            chromium(["--window-size=1250,1500", "--screenshot=" + os.path.join(SHOTS, "run-report.png")], page)


def test_report_refuses_a_folder_that_is_not_a_result():
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run([BINARY, "report", out], capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "not a run result" in done.stderr, done.stderr
        # A summary from before the timeline and the per-building crossings: drawn, and the page says so.
        summary = run_with_report(out)
        older = json.loads(json.dumps(summary))
        del older["timeline"]
        for g in older["placement"]["groups"]:
            del g["bytes_out_of_building_per_step"]
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(older, f)
        done = subprocess.run([BINARY, "report", out], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        dom = drawn(os.path.join(out, "report.html"), "#building=" + older["placement"]["buildings_used"][0])
        assert "older spansim" in dom.text["timeline-note"], dom.text["timeline-note"]
        assert any("data-group" in a for t, a in dom.elements), "the crossing groups are listed"
        # A summary of another version, without the breakdown this one draws: refused, naming the key.
        del summary["breakdown"]["stages"]
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f)
        done = subprocess.run([BINARY, "report", out], capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "$.breakdown.stages" in done.stderr, done.stderr
        # A DLRM scenario's search has no page: refused before it runs.
        dlrm = os.path.join(SOURCE, "examples", "scenarios", "dlrm-dcnv2-1024-two-buildings.json")
        done = subprocess.run([BINARY, "optimize", dlrm, "--report"], capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and "has no page yet" in done.stderr, done.stderr


def test_optimize_page_draws_the_winner_baselines_and_ranking_as_the_json_says():
    with tempfile.TemporaryDirectory() as out:
        spec = os.path.join(SOURCE, "examples", "optimize", "llama3-8b-two-regions.json")
        done = subprocess.run([BINARY, "optimize", spec, "--out", out, "--report", "--json", "--workers", "2"],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        page = os.path.join(out, "report.html")
        assert result["report"] == page
        dom = drawn(page)
        by_class = lambda c: [a for t, a in dom.elements if a.get("class") == c]  # noqa: E731

        def step(e):
            return e.get("effective_step_s", e["step_time_s"])

        winner = [a for t, a in dom.elements if a.get("id") == "winner"][0]
        print("winner: page", winner["data-value"], "json", step(result["ranked"][0]))
        assert float(winner["data-value"]) == step(result["ranked"][0])
        speedup = [a for t, a in dom.elements if a.get("id") == "speedup"][0]
        assert float(speedup["data-value"]) == result["speedup_over_baseline"]
        # The ranked table: one row per ranked configuration, in order, with its step.
        rows = by_class("rank")
        assert [float(a["data-step"]) for a in rows] == [step(e) for e in result["ranked"]]
        # Each configuration's scenario linked, relative to the page, and there.
        links = [a["href"] for a in by_class("scenario")]
        assert links == [os.path.basename(e["scenario"]) for e in result["ranked"]]
        for link in links:
            assert os.path.isfile(os.path.join(out, link)), link
        # The bars: the winner, the default, the best single change and the best change per dimension, each
        # split into parts that sum to its step.
        configs = by_class("config")
        want = 2 + ("best_single_change" in result) + len(result.get("best_change_by_dimension", []))
        assert len(configs) == want
        assert float(configs[0]["data-step"]) == result["ranked"][0]["metrics"]["step_time_s"]
        assert float(configs[1]["data-step"]) == result["baseline"]["metrics"]["step_time_s"]
        for c in configs:
            parts = [float(a["data-seconds"]) for a in by_class("part") if a["data-row"] == c["data-row"]]
            assert abs(sum(parts) - float(c["data-step"])) <= 1e-9 * float(c["data-step"]), c
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            chromium(["--window-size=1250,900", "--screenshot=" + os.path.join(SHOTS, "optimize-report.png")], page)


def test_validate_page_draws_the_rows_and_mapes_as_the_json_says():
    with tempfile.TemporaryDirectory() as out:
        page = os.path.join(out, "validate.html")
        # A few rows of each section: two dense step rows, one MoE, and nccl-tests points of both roles.
        done = subprocess.run([BINARY, "validate", "--no-loo", "--only", "llama3-8b", "--only", "mb2604-qwen3",
                               "--only", "mleng-8xh200", "--only", "nt309c", "--report", page, "--json"],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["report"] == page
        dom = drawn(page)
        by_class = lambda c: [a for t, a in dom.elements if a.get("class") == c]  # noqa: E731
        steps = [r for r in result["rows"] if r["role"] != "excluded"]
        net = [r for r in result["network"]["rows"] if r["role"] != "excluded"]
        assert steps and net
        got = {a["data-run"]: (float(a["data-error"]), a["data-section"]) for a in by_class("step-row")}
        print(f"{len(got)} step rows drawn, {len(steps)} in the JSON")
        assert got == {r["run"]: (r["throughput_error"], r["section"]) for r in steps}
        got = {a["data-run"]: (float(a["data-published"]), float(a["data-simulated"])) for a in by_class("network-row")}
        assert got == {r["run"]: (r["published_busbw"], r["simulated_busbw"]) for r in net}
        cells = {a["data-key"]: float(a["data-value"]) for t, a in dom.elements if "data-key" in a}
        if any(r["role"] == "check" for r in steps):
            assert cells["all.check"] == result["mape"]["check"]
        assert cells["network.check.all"] == result["network"]["mape"]["check"]["all"]
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            chromium(["--window-size=1250,1400", "--screenshot=" + os.path.join(SHOTS, "validate-report.png")], page)


def test_campaign_page_draws_the_sweep_as_the_results_say():
    with tempfile.TemporaryDirectory() as out:
        campaign = os.path.join(SOURCE, "tests", "experiments", "data", "tiny-campaign.json")
        results = os.path.join(out, "tiny.h5")
        done = subprocess.run([BINARY, "campaign", "run", campaign, "--out", results, "--report", "--json", "-j", "2"],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr
        printed = json.loads(done.stdout)
        page = os.path.join(out, "tiny.html")
        assert printed["report"] == page
        # The CSV beside the HDF5 file holds the same points: the figures drawn are its figures.
        import csv
        with open(printed["csv"]) as f:
            points = {int(r["index"]): r for r in csv.DictReader(f)}
        dom = drawn(page)
        by_class = lambda c: [a for t, a in dom.elements if a.get("class") == c]  # noqa: E731
        dots = {int(a["data-index"]): float(a["data-step"]) for a in by_class("point")}
        print(f"{len(dots)} points drawn, {len(points)} in the CSV")
        assert sorted(dots) == sorted(points)
        for i, step in dots.items():
            assert abs(step - float(points[i]["step_time_s"])) <= 1e-9 * step, (i, step)
        assert [a["data-axis"] for t, a in dom.elements if a.get("class") == "sweep"] == ["inter_region_bandwidth"]
        for a in by_class("part"):
            want = float(points[int(a["data-index"])][a["data-part"] + "_mean_s"])
            assert abs(float(a["data-seconds"]) - want) <= 1e-9 * want
        # `campaign report` draws the same page again; a file that is not a result is one line and exit 2.
        again = os.path.join(out, "again.html")
        done = subprocess.run([BINARY, "campaign", "report", results, "--out", again], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert open(again, encoding="utf-8").read() == open(page, encoding="utf-8").read()
        done = subprocess.run([BINARY, "campaign", "report", campaign], capture_output=True, text=True)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        if SHOTS:
            os.makedirs(SHOTS, exist_ok=True)
            chromium(["--window-size=1250,1100", "--screenshot=" + os.path.join(SHOTS, "campaign-report.png")], page)
