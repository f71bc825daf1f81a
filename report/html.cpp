#include "report/html.hpp"
#include "report/page_parts.hpp"

#include "common/error.hpp"
#include "common/json_reader.hpp"
#include "common/paths.hpp"

#include <string_view>

namespace spansim::report {

namespace {

using nlohmann::json;

// The page: styles, the drawing script and a slot for the data. The script reads only the inline JSON; every
// figure it prints carries the JSON value it came from in a data attribute, so that a test can compare them.
constexpr std::string_view kBody = R"HTML(<h2>The site</h2>
<div class="note">Regions, buildings and pods as the topology builds them; each building is coloured by the mean
utilization of its boundary (bytes leaving it over the step, against its uplink capacity). Pods are drawn as blocks
and their racks counted, not drawn one by one. Click a building for the groups that cross its boundary.</div>
<svg id="site" width="1150" height="10"></svg>
<div class="note" id="site-note"></div>
<div id="crossing"></div>
<h2>Network tiers</h2>
<div class="note">Mean utilization of the links of each tier that the step used: bytes over (capacity x step time).</div>
<svg id="tiers" width="1150" height="10"></svg>
<h2>Busiest links</h2>
<table id="busiest"></table>
<h2>The step, per pipeline stage</h2>
<div class="note">Where each stage's step time goes: compute, communication left exposed by dimension, pipeline
bubble and idle. The Perfetto trace (trace.json) holds every op.</div>
<svg id="stages" width="1150" height="10"></svg>
<div id="legend"></div>
<h2 id="timeline-title">One stage's micro-batches</h2>
<div class="note" id="timeline-note"></div>
<svg id="timeline" width="1150" height="10"></svg>
<h2>Configuration</h2>
<pre id="configuration"></pre>
<script type="application/json" id="data">)HTML";

constexpr std::string_view kTail = R"HTML(</script>
<script>
(function () {
  var D = JSON.parse(document.getElementById('data').textContent);
  var m = D.metrics, cfg = D.configuration, job = cfg.job;
  document.getElementById('title').textContent = D.scenario.name + ': ' + job.model + ' on ' + job.gpus + ' ' +
      job.gpu + ' GPUs of ' + cfg.topology.name + ' (' + cfg.fidelity + ' fidelity)';
  document.title = 'spansim: ' + D.scenario.name;
  document.getElementById('provenance').textContent = D.spansim.tool + ' ' + D.spansim.version + ', git ' +
      D.spansim.git_hash + '; scenario ' + D.scenario.file;
  fig('step', 'step time', m.step_time_s, seconds(m.step_time_s));
  fig('tokens', 'tokens per second', m.tokens_per_s, Math.round(m.tokens_per_s).toLocaleString('en-US'));
  fig('mfu', 'MFU (model FLOPs, causal)', m.mfu, (100 * m.mfu).toFixed(1) + '%');
  fig('parallelism', 'TP / CP / PP / DP / EP', '', [job.tp, job.cp, job.pp, job.dp, job.ep].join(' / '));
  fig('microbatches', 'micro-batches per step', job.micro_batches, String(job.micro_batches));

  // The site: regions side by side, their buildings inside, each building's pods as blocks.
  var bounds = {};
  (D.network.boundaries || []).forEach(function (b) { bounds[b.name] = b; });
  var regions = cfg.topology.regions;
  if (!regions || !regions.length) {
    var names = Object.keys(bounds);
    regions = [{name: cfg.topology.name, buildings: names.length ? names : [cfg.topology.name]}];
  }
  var used = {};
  (D.placement.buildings_used || []).forEach(function (b) { used[b] = true; });
  var pods = (cfg.topology.building && cfg.topology.building.pods) || 1;
  var racks = (cfg.topology.pod && cfg.topology.pod.nodes) || 0;
  var gpn = (cfg.topology.node && cfg.topology.node.gpus) || 0;
  var site = document.getElementById('site');
  var tierUse = {};
  (D.network.tiers || []).forEach(function (t) { tierUse[t.tier] = t.mean_utilisation; });
  var total = 0;
  regions.forEach(function (r) { total += r.buildings.length; });
  var bw = Math.min(170, Math.floor((1150 - 20 * regions.length) / Math.max(1, total)) - 10), x = 0;
  var podRows = Math.ceil(pods / 4), bh = 60 + podRows * 26;
  regions.forEach(function (r) {
    var w = r.buildings.length * (bw + 10) + 10;
    var g = el('g', {'class': 'region', 'data-name': r.name}, site);
    el('rect', {x: x, y: 0, width: w, height: bh + 40, rx: 8, fill: '#f7f8fb', stroke: '#99a'}, g);
    el('text', {x: x + 8, y: 16}, g, 'region ' + r.name);
    if (x > 0) { // the long haul from the region before: the inter-region tier's mean utilization
      var ur = tierUse.inter_region || 0;
      var haul = el('line', {'class': 'haul', x1: x - 20, y1: 26 + bh / 2, x2: x, y2: 26 + bh / 2, stroke: colour(ur),
                             'stroke-width': 8, 'data-tier': 'inter_region', 'data-util': String(ur)}, site);
      el('title', {}, haul, 'inter-region links: ' + (100 * ur).toFixed(2) + '% mean utilization');
    }
    r.buildings.forEach(function (b, i) {
      var bx = x + 10 + i * (bw + 10), u = bounds[b] ? bounds[b].mean_utilisation_out : 0;
      var rect = el('rect', {'class': 'building', x: bx, y: 26, width: bw, height: bh, rx: 5, fill: colour(u),
                             'data-name': b, 'data-util': String(u), 'data-used': used[b] ? '1' : '0'}, g);
      el('title', {}, rect, b + ': boundary ' + (100 * u).toFixed(1) + '% utilized' +
         (bounds[b] ? ', ' + bytes(bounds[b].bytes_out) + ' out, ' + bytes(bounds[b].bytes_in) + ' in' : ''));
      if (i > 0) {
        var ub = tierUse.inter_building || 0;
        el('line', {'class': 'haul', x1: bx - 10, y1: 26 + bh / 2, x2: bx, y2: 26 + bh / 2, stroke: colour(ub),
                    'stroke-width': 6, 'data-tier': 'inter_building', 'data-util': String(ub)}, g);
      }
      el('text', {x: bx + 6, y: 42}, g, b + (used[b] ? '' : ' (idle)'));
      el('text', {x: bx + 6, y: 56}, g, 'boundary ' + (100 * u).toFixed(1) + '%');
      for (var p = 0; p < pods; ++p) {
        var px = bx + 6 + (p % 4) * ((bw - 12) / 4), py = 64 + Math.floor(p / 4) * 26;
        el('rect', {'class': 'pod', x: px, y: py, width: (bw - 12) / 4 - 3, height: 22, fill: used[b] ? '#8fa8d8' : '#d5dbe8'}, g);
      }
      el('text', {x: bx + 6, y: 26 + bh - 6}, g, pods + ' pods x ' + racks + ' racks');
      rect.addEventListener('click', function () { showCrossing(b); });
    });
    x += w + 20;
  });
  site.setAttribute('height', bh + 50);
  document.getElementById('site-note').textContent = 'Each pod: ' + racks + ' racks (NVLink domains) of ' + gpn +
      ' GPUs, aggregated. Lines between buildings and regions: the mean utilization of the inter-building and ' +
      'inter-region tiers.';

  // The groups whose members in building b send to members elsewhere, with those bytes (a result written before
  // spansim kept them per building lists every group that crosses any building boundary, and says so).
  function showCrossing(b) {
    var box = document.getElementById('crossing');
    box.textContent = '';
    var perBuilding = (D.placement.groups || []).some(function (g) {
      return g.bytes_out_of_building_per_step !== undefined;
    });
    html('h3', {}, box, perBuilding ? 'Groups crossing the boundary of ' + b + ' (bytes its members send out)'
                                    : 'Groups crossing building boundaries (this result does not split them by ' +
                                      'building: written by an older spansim)');
    var t = html('table', {id: 'crossing-table', 'data-building': b}, box);
    var h = html('tr', {}, t);
    ['group', 'traffic', 'size', 'groups', 'across buildings', 'across regions',
     perBuilding ? 'bytes out of ' + b + ' per step' : 'bytes across buildings per step']
        .forEach(function (c) { html('th', {}, h, c); });
    (D.placement.groups || []).forEach(function (g) {
      var out = perBuilding ? (g.bytes_out_of_building_per_step || {})[b] : g.bytes_across_buildings_per_step;
      if (!(g.across_buildings > 0) || !(out > 0)) return;
      var tr = html('tr', {'data-group': g.group, 'data-bytes': String(out)}, t);
      [g.group, g.traffic, g.size, g.groups, g.across_buildings, g.across_regions, bytes(out)]
          .forEach(function (c) { html('td', {}, tr, String(c)); });
    });
    if (t.rows.length === 1) html('p', {'class': 'note'}, box, 'No group crosses this boundary.');
  }

  // A link to one building's crossings: report.html#building=NAME opens with them listed.
  if (location.hash.indexOf('#building=') === 0) showCrossing(decodeURIComponent(location.hash.slice(10)));

  // Tiers: one bar per tier, its length and colour the mean utilization.
  var tiers = document.getElementById('tiers'), ty = 0;
  (D.network.tiers || []).forEach(function (t) {
    el('text', {x: 0, y: ty + 14}, tiers, t.tier);
    el('rect', {x: 110, y: ty + 2, width: 600, height: 16, fill: '#eef0f5'}, tiers);
    el('rect', {'class': 'tier', x: 110, y: ty + 2, width: Math.max(1, 600 * Math.min(1, t.mean_utilisation)),
                height: 16, fill: colour(t.mean_utilisation), 'data-tier': t.tier,
                'data-util': String(t.mean_utilisation)}, tiers);
    el('text', {x: 720, y: ty + 14}, tiers, (100 * t.mean_utilisation).toFixed(2) + '% of ' + t.links_used +
       ' links, ' + bytes(t.bytes));
    ty += 22;
  });
  tiers.setAttribute('height', Math.max(ty, 10));

  var busiest = document.getElementById('busiest');
  var bh2 = html('tr', {}, busiest);
  ['link', 'tier', 'bytes', 'utilization'].forEach(function (c) { html('th', {}, bh2, c); });
  (D.network.busiest_links || []).concat(D.network.busiest_nvlinks || []).forEach(function (l) {
    var tr = html('tr', {}, busiest);
    [l.link, l.tier, bytes(l.bytes), (100 * l.utilisation).toFixed(2) + '%'].forEach(function (c) {
      html('td', {}, tr, c);
    });
  });

  // The step: a stacked bar per stage.
  var parts = ['compute', 'exposed_tp', 'exposed_cp', 'exposed_pp', 'exposed_dp', 'exposed_ep', 'bubble', 'idle'];
  var colours = ['#4c78a8', '#f58518', '#e45756', '#72b7b2', '#54a24b', '#eeca3b', '#b279a2', '#bab0ac'];
  var stages = D.breakdown.stages || [], svg = document.getElementById('stages');
  var longest = 0;
  stages.forEach(function (s) {
    var t = 0;
    parts.forEach(function (p) { t += s[p + '_s'] || 0; });
    longest = Math.max(longest, t);
  });
  var scale = longest > 0 ? 900 / longest : 0, row = stages.length > 64 ? 4 : 18;
  stages.forEach(function (s, i) {
    var x0 = 110, y = i * (row + 2);
    if (row > 8) el('text', {x: 0, y: y + row - 5}, svg, 'stage ' + s.stage);
    parts.forEach(function (p, k) {
      var v = s[p + '_s'] || 0;
      if (v <= 0) return;
      var r = el('rect', {'class': 'part', x: x0, y: y, width: v * scale, height: row, fill: colours[k],
                          'data-stage': String(s.stage), 'data-part': p, 'data-seconds': String(v)}, svg);
      el('title', {}, r, 'stage ' + s.stage + ' ' + p + ': ' + seconds(v));
      x0 += v * scale;
    });
  });
  svg.setAttribute('height', Math.max(10, stages.length * (row + 2)));
  var legend = document.getElementById('legend');
  parts.forEach(function (p, k) {
    var s = html('span', {style: 'margin-right:1em'}, legend);
    html('span', {style: 'display:inline-block;width:10px;height:10px;background:' + colours[k]}, s);
    html('span', {}, s, ' ' + p.replace('_', ' ') + ' (mean ' +
         seconds((D.breakdown.over_stages[p + '_s'] || {mean: 0}).mean) + ')');
  });
  if (stages.length > 64)
    html('p', {'class': 'note'}, legend, stages.length + ' stages drawn as thin bars, unlabelled');

  // The timeline of one stage: a lane per stream (compute, then each dimension's communication), each op a box
  // from its start to its end, compute coloured by kind and numbered by micro-batch where there is room.
  var tl = D.timeline, tsvg = document.getElementById('timeline'), note = document.getElementById('timeline-note');
  if (!tl) {
    note.textContent = 'This result has no timeline (written by an older spansim): run it again, or open trace.json.';
  } else {
    var kinds = {forward: '#4c78a8', backward: '#e45756', 'weight-grad': '#f58518', recompute: '#72b7b2',
                 optimizer: '#54a24b'};
    var used = [], end = 0;
    tl.ops.forEach(function (o) {
      if (used.indexOf(o[0]) < 0) used.push(o[0]);
      end = Math.max(end, o[4]);
    });
    used.sort(function (a, b) { return a - b; });
    var lh = 22, tx0 = 90, tw = 1040, tscale = end > 0 ? tw / end : 0;
    used.forEach(function (lane, k) { el('text', {x: 0, y: k * (lh + 4) + 15}, tsvg, tl.lanes[lane]); });
    tl.ops.forEach(function (o) {
      var k = used.indexOf(o[0]), w = Math.max(0.5, (o[4] - o[3]) * tscale);
      var r = el('rect', {'class': 'op', x: tx0 + o[3] * tscale, y: k * (lh + 4), width: w, height: lh,
                          fill: o[0] === 0 ? (kinds[o[1]] || '#9d755d') : '#bab0ac', stroke: w > 3 ? '#fff' : 'none',
                          'stroke-width': 0.5, 'data-lane': tl.lanes[o[0]], 'data-name': o[1],
                          'data-micro-batch': String(o[2]), 'data-start': String(o[3]), 'data-end': String(o[4])},
                 tsvg);
      el('title', {}, r, o[1] + (o[2] >= 0 ? ' of micro-batch ' + o[2] : '') + ': ' + seconds(o[3]) + ' to ' +
         seconds(o[4]));
      if (o[0] === 0 && o[2] >= 0 && w > 14)
        el('text', {x: tx0 + o[3] * tscale + 2, y: k * (lh + 4) + 15, fill: '#fff'}, tsvg, String(o[2]));
    });
    tsvg.setAttribute('height', Math.max(10, used.length * (lh + 4) + 4));
    document.getElementById('timeline-title').textContent = 'Stage ' + tl.stage + '\'s micro-batches';
    note.textContent = 'Compute: forward (blue), backward (red), weight gradients (orange), recompute (teal), ' +
        'optimizer (green), numbered by micro-batch; below, each dimension\'s communication (grey). ' +
        (tl.ops.length < tl.ops_in_stage ? 'The first ' + tl.ops.length + ' of its ' + tl.ops_in_stage +
         ' ops are drawn; ' : '') + 'trace.json holds every stage\'s.';
  }

  document.getElementById('configuration').textContent = JSON.stringify(cfg, null, 1);
  finished();
})();
</script>
</body></html>
)HTML";

const json& member(const json& j, const char* key, json::value_t type, const std::string& file, const std::string& path)
{
  if (!j.is_object() || !j.contains(key))
    throw SpecError(file, path + "." + key,
                    "missing: not a run result of this spansim (`spansim run --out DIR` "
                    "writes DIR/summary.json)");
  const auto& v = j.at(key);
  const bool number =
      type == json::value_t::number_float && (v.is_number_float() || v.is_number_integer() || v.is_number_unsigned());
  if (v.type() != type && !number)
    throw SpecError(file, path + "." + key,
                    std::string("must be ") + json(type).type_name() + ", not " + v.type_name());
  return v;
}

} // namespace

void check_run_summary(const nlohmann::json& summary, const std::string& file)
{
  using T             = json::value_t;
  const auto& spansim = member(summary, "spansim", T::object, file, "$");
  member(spansim, "version", T::string, file, "$.spansim");
  member(spansim, "git_hash", T::string, file, "$.spansim");
  const auto& scenario = member(summary, "scenario", T::object, file, "$");
  member(scenario, "name", T::string, file, "$.scenario");
  const auto& metrics = member(summary, "metrics", T::object, file, "$");
  for (const char* k : {"step_time_s", "tokens_per_s", "mfu"})
    member(metrics, k, T::number_float, file, "$.metrics");
  const auto& cfg = member(summary, "configuration", T::object, file, "$");
  member(member(cfg, "job", T::object, file, "$.configuration"), "gpus", T::number_float, file, "$.configuration.job");
  member(member(cfg, "topology", T::object, file, "$.configuration"), "name", T::string, file,
         "$.configuration.topology");
  const auto& breakdown = member(summary, "breakdown", T::object, file, "$");
  member(breakdown, "stages", T::array, file, "$.breakdown");
  member(breakdown, "over_stages", T::object, file, "$.breakdown");
  const auto& network = member(summary, "network", T::object, file, "$");
  member(network, "tiers", T::array, file, "$.network");
  member(member(summary, "placement", T::object, file, "$"), "groups", T::array, file, "$.placement");
  if (!(metrics.at("step_time_s").get<double>() > 0))
    throw SpecError(file, "$.metrics.step_time_s", "must be above 0 s: a result with no step cannot be drawn");
}

std::string run_page(const nlohmann::json& summary, const std::string& file)
{
  check_run_summary(summary, file);
  return assemble_page("spansim run", kBody, summary, kTail);
}

std::string write_report(const std::string& directory)
{
  const std::string summary_path = directory + "/summary.json";
  if (!path_exists(summary_path))
    throw SpecError(directory, "$", "not a run result: no summary.json (`spansim run --out DIR` writes one)");
  const auto summary    = spec::load_json_file(summary_path);
  const std::string out = directory + "/report.html";
  write_file_replacing(out, run_page(summary, summary_path));
  return out;
}

} // namespace spansim::report
