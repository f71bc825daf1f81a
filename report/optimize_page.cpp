#include "common/error.hpp"
#include "report/html.hpp"
#include "report/page_parts.hpp"

#include <string_view>

namespace spansim::report {

namespace {

// The search's page: what won and by how much, where the time of the winner and the baselines went, the ranked
// table with each configuration's scenario, and the capacity front when capacity was searched.
constexpr std::string_view kBody = R"HTML(<h2>Where the time went: the winner against the baselines</h2>
<div class="note">Each bar is one configuration's step: exposed communication by dimension, pipeline bubble, and
the rest (compute and what overlaps it). The production default is the best point of the space with rank order
[tp, cp, pp, dp] (data parallelism across the boundary), 1F1B and default collectives.</div>
<svg id="bars" width="1150" height="10"></svg>
<div id="legend"></div>
<h2>Ranked configurations</h2>
<table id="ranked"></table>
<div id="capacity-section"></div>
<h2>The search</h2>
<pre id="search"></pre>
<script type="application/json" id="data">)HTML";

constexpr std::string_view kTail = R"HTML(</script>
<script>
(function () {
  var D = JSON.parse(document.getElementById('data').textContent);
  var spec = D.spec, best = D.ranked[0];
  document.getElementById('title').textContent = 'optimize ' + spec.name + ': ' + spec.model + ' on ' + spec.gpus +
      ' ' + spec.gpu + ' GPUs of ' + spec.topology;
  document.title = 'spansim optimize: ' + spec.name;
  document.getElementById('provenance').textContent = D.spansim.tool + ' ' + D.spansim.version + ', git ' +
      D.spansim.git_hash + '; spec ' + spec.file;
  function step(e) { return e.effective_step_s !== undefined ? e.effective_step_s : e.step_time_s; }
  fig('winner', 'the winner\'s step', step(best), seconds(step(best)));
  fig('baseline', 'the production default\'s', step(D.baseline), seconds(step(D.baseline)));
  fig('speedup', 'speed-up over the default', D.speedup_over_baseline, D.speedup_over_baseline.toFixed(3) + 'x');
  fig('points', 'points (' + D.search.feasible + ' feasible)', D.search.points, String(D.search.points));

  var dims = ['tp', 'cp', 'pp', 'dp', 'ep'];
  var colours = {tp: '#f58518', cp: '#e45756', pp: '#72b7b2', dp: '#54a24b', ep: '#eeca3b', bubble: '#b279a2',
                 rest: '#4c78a8'};
  var rows = [{name: 'winner: ' + best.label, e: best}, {name: 'production default: ' + D.baseline.label, e: D.baseline}];
  if (D.best_single_change)
    rows.push({name: 'best single change (' + D.best_single_change.change + ')', e: D.best_single_change});
  (D.best_change_by_dimension || []).forEach(function (d) {
    rows.push({name: 'best ' + d.dimension + ' change (' + d.best.change + ')', e: d.best});
  });
  var longest = 0;
  rows.forEach(function (r) { longest = Math.max(longest, r.e.metrics.step_time_s); });
  var svg = document.getElementById('bars'), y = 0, scale = longest > 0 ? 620 / longest : 0;
  rows.forEach(function (r, i) {
    var m = r.e.metrics, x = 0, parts = [];
    dims.forEach(function (d) { parts.push([d, m.exposed_s[d] || 0]); });
    parts.push(['bubble', m.bubble_s || 0]);
    var used = 0;
    parts.forEach(function (p) { used += p[1]; });
    parts.unshift(['rest', Math.max(0, m.step_time_s - used)]);
    var g = el('g', {'class': 'config', 'data-row': String(i), 'data-step': String(m.step_time_s)}, svg);
    el('text', {x: 0, y: y + 12}, g, r.name.length > 70 ? r.name.slice(0, 67) + '...' : r.name);
    parts.forEach(function (p) {
      if (p[1] <= 0) return;
      var rect = el('rect', {'class': 'part', x: 430 + x, y: y, width: p[1] * scale, height: 16, fill: colours[p[0]],
                             'data-row': String(i), 'data-part': p[0], 'data-seconds': String(p[1])}, g);
      el('title', {}, rect, p[0] + ': ' + seconds(p[1]));
      x += p[1] * scale;
    });
    el('text', {x: 434 + x, y: y + 12}, g, seconds(m.step_time_s));
    y += 22;
  });
  svg.setAttribute('height', Math.max(10, y));
  var legend = document.getElementById('legend');
  Object.keys(colours).forEach(function (k) {
    var s = html('span', {style: 'margin-right:1em'}, legend);
    html('span', {style: 'display:inline-block;width:10px;height:10px;background:' + colours[k]}, s);
    html('span', {}, s, ' ' + (k === 'rest' ? 'compute and overlapped' : k === 'bubble' ? 'bubble' : 'exposed ' + k));
  });

  var t = document.getElementById('ranked'), h = html('tr', {}, t);
  ['#', 'configuration', 'step', 'analytical score', 'MFU', 'bubble', 'exposed tp', 'exposed pp', 'exposed dp',
   'exposed ep', 'scenario'].forEach(function (c) { html('th', {}, h, c); });
  D.ranked.forEach(function (e, i) {
    var tr = html('tr', {'class': 'rank', 'data-rank': String(i + 1), 'data-step': String(step(e))}, t);
    var m = e.metrics;
    [String(i + 1), e.label, seconds(step(e)), seconds(e.analytical_score_s), (100 * m.mfu).toFixed(1) + '%',
     seconds(m.bubble_s), seconds(m.exposed_s.tp), seconds(m.exposed_s.pp), seconds(m.exposed_s.dp),
     seconds(m.exposed_s.ep)].forEach(function (c) { html('td', {}, tr, c); });
    // The configuration's scenario file, written beside this page: a relative link that opens it offline.
    var file = e.scenario.split('/').pop();
    html('a', {'class': 'scenario', href: encodeURIComponent(file)}, html('td', {}, tr), file);
  });

  if (D.capacity) {
    var box = document.getElementById('capacity-section');
    html('h2', {}, box, 'Capacity front: step against the long-haul capacity bought');
    var cs = D.capacity.choices, cap = el('svg', {id: 'capacity', width: 700, height: 320}, box);
    var maxc = 0, maxs = 0;
    cs.forEach(function (c) { maxc = Math.max(maxc, c.cost); maxs = Math.max(maxs, step(c)); });
    el('line', {x1: 60, y1: 280, x2: 680, y2: 280, stroke: '#334'}, cap);
    el('line', {x1: 60, y1: 20, x2: 60, y2: 280, stroke: '#334'}, cap);
    el('text', {x: 300, y: 310}, cap, 'cost (' + D.capacity.cost.unit + ')');
    el('text', {x: 0, y: 14}, cap, 'step (s)');
    cs.forEach(function (c) {
      var px = 60 + (maxc > 0 ? 600 * c.cost / maxc : 0), py = 280 - (maxs > 0 ? 250 * step(c) / maxs : 0);
      var dot = el('circle', {'class': 'choice', cx: px, cy: py, r: c.on_front ? 6 : 4,
                              fill: c.on_front ? '#e45756' : '#99a', 'data-cost': String(c.cost),
                              'data-step': String(step(c))}, cap);
      el('title', {}, dot, c.label + ': ' + seconds(step(c)) + ', cost ' + c.cost);
    });
  }
  document.getElementById('search').textContent = JSON.stringify({search: D.search, spec: spec}, null, 1);
  finished();
})();
</script>
</body></html>
)HTML";

} // namespace

std::string optimize_page(const nlohmann::json& result)
{
  for (const char* key : {"spansim", "spec", "search", "ranked", "baseline", "speedup_over_baseline"})
    if (!result.contains(key))
      throw SpecError("optimize result", std::string("$.") + key, "missing: not what `spansim optimize --json` prints");
  if (!result.at("ranked").is_array() || result.at("ranked").empty())
    throw SpecError("optimize result", "$.ranked", "must list at least one configuration");
  return assemble_page("spansim optimize", kBody, result, kTail);
}

} // namespace spansim::report
