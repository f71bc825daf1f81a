#include "common/error.hpp"
#include "report/html.hpp"
#include "report/page_parts.hpp"

#include <string_view>

namespace spansim::report {

namespace {

// A campaign's result as a page: step time against each numeric axis (one series per value of another axis),
// where each point's time went, and the points as a table. The data is the HDF5 file's /points table.
constexpr std::string_view kBody = R"HTML(<h2>Step time against each axis</h2>
<div class="note">One line per value of the series axis; the other axes at every value (points that share the
horizontal and series values are drawn side by side). Failed points are left out and listed below.</div>
<div id="sweeps"></div>
<h2>Where each point's time went</h2>
<div class="note">The mean over pipeline stages: compute, communication left exposed by dimension, pipeline bubble
and idle.</div>
<svg id="breakdown" width="1150" height="10"></svg>
<div id="legend"></div>
<h2>Points</h2>
<table id="points"></table>
<script type="application/json" id="data">)HTML";

constexpr std::string_view kTail = R"HTML(</script>
<script>
(function () {
  var D = JSON.parse(document.getElementById('data').textContent);
  var A = D.attributes, N = D.numbers, T = D.texts, n = D.rows;
  document.getElementById('title').textContent = 'campaign ' + A.campaign + ': ' + A.points_done + ' of ' +
      A.points_total + ' points';
  document.title = 'spansim campaign: ' + A.campaign;
  document.getElementById('provenance').textContent = 'spansim ' + A.spansim_version + ', git ' + A.git_hash +
      '; campaign ' + A.campaign_file + '; results ' + D.file;
  var ok = [];
  for (var i = 0; i < n; ++i)
    if (T.status[i] === 'ok') ok.push(i);
  var steps = ok.map(function (i) { return N.step_time_s[i]; });
  fig('points-done', 'points with a result', ok.length, String(ok.length));
  if (steps.length) {
    fig('fastest', 'fastest step', Math.min.apply(null, steps), seconds(Math.min.apply(null, steps)));
    fig('slowest', 'slowest step', Math.max.apply(null, steps), seconds(Math.max.apply(null, steps)));
  }

  // The axes, in the file's order: numeric ones have a number column, the others text; every axis has labels.
  var axes = [];
  Object.keys(N).concat(Object.keys(T)).forEach(function (c) {
    if (c.indexOf('axis.') === 0 && axes.indexOf(c.slice(5)) < 0) axes.push(c.slice(5));
  });
  axes.sort();
  function label(a, i) { return T['label.' + a] ? T['label.' + a][i] : String(N['axis.' + a] ? N['axis.' + a][i] : T['axis.' + a][i]); }
  function pointName(i) { return axes.map(function (a) { return a + '=' + label(a, i); }).join(', '); }
  var palette = ['#4c78a8', '#f58518', '#e45756', '#72b7b2', '#54a24b', '#eeca3b', '#b279a2', '#9d755d'];
  var sweeps = document.getElementById('sweeps');
  axes.forEach(function (a) {
    if (!N['axis.' + a]) return; // a text axis is a series, not a horizontal axis
    var others = axes.filter(function (b) { return b !== a; });
    var series = others.length ? others[0] : null;
    html('h3', {}, sweeps, 'step time against ' + a + (series ? ', one line per ' + series : ''));
    var svg = el('svg', {'class': 'sweep', 'data-axis': a, width: 760, height: 320}, sweeps);
    var xs = ok.map(function (i) { return N['axis.' + a][i]; }), ys = ok.map(function (i) { return N.step_time_s[i]; });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs), y1 = Math.max.apply(null, ys) * 1.05;
    if (x1 === x0) x1 = x0 + 1;
    function px(v) { return 70 + 520 * (v - x0) / (x1 - x0); }
    function py(v) { return 280 - 260 * v / y1; }
    el('line', {x1: 70, y1: 280, x2: 590, y2: 280, stroke: '#333'}, svg);
    el('line', {x1: 70, y1: 20, x2: 70, y2: 280, stroke: '#333'}, svg);
    for (var t = 0; t <= 4; ++t) {
      el('text', {x: 2, y: py(y1 * t / 4) + 4}, svg, seconds(y1 * t / 4));
      el('text', {x: px(x0 + (x1 - x0) * t / 4) - 10, y: 296}, svg, String(+(x0 + (x1 - x0) * t / 4).toPrecision(4)));
    }
    el('text', {x: 260, y: 314}, svg, a + (D.units['axis.' + a] ? ' (' + D.units['axis.' + a] + ')' : ''));
    var keys = [];
    ok.forEach(function (i) { var k = series ? label(series, i) : ''; if (keys.indexOf(k) < 0) keys.push(k); });
    keys.forEach(function (k, s) {
      var c = palette[s % palette.length];
      var pts = ok.filter(function (i) { return (series ? label(series, i) : '') === k; })
                  .sort(function (p, q) { return N['axis.' + a][p] - N['axis.' + a][q]; });
      el('polyline', {points: pts.map(function (i) { return px(N['axis.' + a][i]) + ',' + py(N.step_time_s[i]); }).join(' '),
                      fill: 'none', stroke: c, 'stroke-width': 1.5}, svg);
      pts.forEach(function (i) {
        var dot = el('circle', {'class': 'point', cx: px(N['axis.' + a][i]), cy: py(N.step_time_s[i]), r: 4, fill: c,
                                'data-index': String(N.index[i]), 'data-step': String(N.step_time_s[i])}, svg);
        el('title', {}, dot, pointName(i) + ': ' + seconds(N.step_time_s[i]));
      });
      if (series) {
        el('rect', {x: 605, y: 24 + s * 18, width: 10, height: 10, fill: c}, svg);
        el('text', {x: 620, y: 33 + s * 18}, svg, series + ' ' + k);
      }
    });
  });
  if (!sweeps.childNodes.length)
    html('p', {'class': 'note'}, sweeps, 'No numeric axis: the points are compared in the breakdown below.');

  // The breakdown: a stacked bar per point with a result (thin and unlabelled past 64 points).
  var parts = ['compute', 'exposed_tp', 'exposed_cp', 'exposed_pp', 'exposed_dp', 'exposed_ep', 'bubble', 'idle'];
  var colours = ['#4c78a8', '#f58518', '#e45756', '#72b7b2', '#54a24b', '#eeca3b', '#b279a2', '#bab0ac'];
  var svg = document.getElementById('breakdown'), longest = 0;
  ok.forEach(function (i) {
    var t = 0;
    parts.forEach(function (p) { t += (N[p + '_mean_s'] || [])[i] || 0; });
    longest = Math.max(longest, t);
  });
  var scale = longest > 0 ? 700 / longest : 0, row = ok.length > 64 ? 4 : 16;
  ok.forEach(function (i, k) {
    var x = 420, y = k * (row + 2);
    if (row > 8) el('text', {x: 0, y: y + row - 4}, svg, pointName(i).slice(0, 70));
    parts.forEach(function (p, c) {
      var v = (N[p + '_mean_s'] || [])[i] || 0;
      if (v <= 0) return;
      var r = el('rect', {'class': 'part', x: x, y: y, width: v * scale, height: row, fill: colours[c],
                          'data-index': String(N.index[i]), 'data-part': p, 'data-seconds': String(v)}, svg);
      el('title', {}, r, pointName(i) + ' ' + p + ': ' + seconds(v));
      x += v * scale;
    });
  });
  svg.setAttribute('height', Math.max(10, ok.length * (row + 2)));
  var legend = document.getElementById('legend');
  parts.forEach(function (p, k) {
    var s = html('span', {style: 'margin-right:1em'}, legend);
    html('span', {style: 'display:inline-block;width:10px;height:10px;background:' + colours[k]}, s);
    html('span', {}, s, ' ' + p.replace('_', ' '));
  });

  var table = document.getElementById('points'), th = html('tr', {}, table);
  ['point'].concat(axes, ['status', 'step', 'tokens/s', 'MFU']).forEach(function (c) { html('th', {}, th, c); });
  for (var j = 0; j < n; ++j) {
    var tr = html('tr', {}, table);
    html('td', {}, tr, String(N.index[j]));
    axes.forEach(function (a) { html('td', {}, tr, label(a, j)); });
    var good = T.status[j] === 'ok';
    html('td', {}, tr, good ? 'ok' : T.status[j] + ': ' + T.error[j]);
    html('td', {}, tr, good ? seconds(N.step_time_s[j]) : '-');
    html('td', {}, tr, good ? Math.round(N.tokens_per_s[j]).toLocaleString('en-US') : '-');
    html('td', {}, tr, good ? (100 * N.mfu[j]).toFixed(1) + '%' : '-');
  }
  finished();
})();
</script>
</body></html>
)HTML";

} // namespace

std::string campaign_page(const nlohmann::json& table)
{
  for (const char* key : {"attributes", "numbers", "texts", "rows", "units", "file"})
    if (!table.is_object() || !table.contains(key))
      throw SpecError("campaign", std::string("$.") + key, "missing: not a campaign result table");
  return assemble_page("spansim campaign", kBody, table, kTail);
}

} // namespace spansim::report
