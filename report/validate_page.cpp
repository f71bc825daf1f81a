#include "common/error.hpp"
#include "report/html.hpp"
#include "report/page_parts.hpp"

#include <string_view>

namespace spansim::report {

namespace {

// Validation as a page: the MAPEs by section and role, each step row's throughput error by GPU and section, and
// the network section's measured bus bandwidth against the simulated one. Every drawn figure carries the JSON
// value it came from in a data attribute, so that a test can compare them.
constexpr std::string_view kBody = R"HTML(<h2>Mean absolute errors</h2>
<div class="note">Fit rows set the profiles' free parameters; check rows never do. Leave-one-out: each fit row
simulated with its profile fitted without it.</div>
<table id="mape"></table>
<h2>Step rows: throughput error by GPU and section</h2>
<div class="note">Each dot is a published run: simulated over published throughput, minus 1 (right of 0: the
simulation is faster). Filled: fit rows; hollow: check rows. The band is &plusmn;10%.</div>
<svg id="steps" width="1150" height="10"></svg>
<div id="step-legend"></div>
<h2>Network: nccl-tests as published against simulated</h2>
<div class="note">Bus bandwidth in GB/s, both axes logarithmic; the diagonal is agreement and the band &plusmn;10%.
Filled: fit rows; hollow: check rows.</div>
<svg id="network" width="620" height="620"></svg>
<div id="network-legend"></div>
<h2>Rows</h2>
<table id="rows"></table>
<h2>Network rows</h2>
<table id="network-rows"></table>
<script type="application/json" id="data">)HTML";

constexpr std::string_view kTail = R"HTML(</script>
<script>
(function () {
  var D = JSON.parse(document.getElementById('data').textContent);
  document.getElementById('title').textContent = 'spansim validate: ' + D.dataset + ' (' + D.fidelity + ' fidelity)';
  document.title = 'spansim validate';
  document.getElementById('provenance').textContent = D.spansim.tool + ' ' + D.spansim.version + ', git ' +
      D.spansim.git_hash;
  function pct(v) { return (v >= 0 ? '+' : '') + (100 * v).toFixed(1) + '%'; }
  var steps = (D.rows || []).filter(function (r) { return r.role !== 'excluded'; });
  var net = D.network ? D.network.rows.filter(function (r) { return r.role !== 'excluded'; }) : [];
  if (steps.length) {
    fig('step-fit', 'step rows, fit MAPE', D.mape.fit, (100 * D.mape.fit).toFixed(1) + '%');
    fig('step-check', 'step rows, check MAPE', D.mape.check, (100 * D.mape.check).toFixed(1) + '%');
  }
  if (net.length) {
    var nc = D.network.mape.check;
    fig('network-check', 'network check MAPE, 128 MiB and above', nc['128MiB_and_above'],
        (100 * nc['128MiB_and_above']).toFixed(1) + '%');
  }

  // The MAPE table: one row per section and role.
  var mt = document.getElementById('mape');
  var mh = html('tr', {}, mt);
  ['section', 'fit', 'rows', 'check', 'rows', 'left out'].forEach(function (c) { html('th', {}, mh, c); });
  function cell(tr, v, key) {
    html('td', v === undefined ? {} : {'data-key': key, 'data-value': String(v)}, tr,
         v === undefined ? '-' : (100 * v).toFixed(1) + '%');
  }
  if (steps.length) {
    [['all step rows', D.mape, 'all'], ['dense', D.mape.dense, 'dense'], ['MoE', D.mape.moe, 'moe'],
     ['cross-site', D.mape.cross_site, 'cross_site']].forEach(function (s) {
      var m = s[1], tr = html('tr', {}, mt), all = s[2] === 'all';
      html('td', {}, tr, s[0]);
      var fr = all ? steps.filter(function (r) { return r.role === 'fit'; }).length : m.fit_rows;
      var cr = all ? steps.filter(function (r) { return r.role === 'check'; }).length : m.check_rows;
      cell(tr, fr ? m.fit : undefined, s[2] + '.fit');
      html('td', {}, tr, String(fr));
      cell(tr, cr ? m.check : undefined, s[2] + '.check');
      html('td', {}, tr, String(cr));
      cell(tr, m.leave_one_out, s[2] + '.leave_one_out');
    });
  }
  if (net.length)
    ['fit', 'check'].forEach(function (role) {
      var m = D.network.mape[role];
      [['network, all sizes', 'all', 'rows'], ['network, 128 MiB and above', '128MiB_and_above', 'large_rows'],
       ['network, 16 MiB and below', '16MiB_and_below', 'small_rows']].forEach(function (s) {
        var tr = html('tr', {}, mt);
        html('td', {}, tr, s[0] + ' (' + role + ')');
        if (role === 'fit') {
          cell(tr, m[s[2]] ? m[s[1]] : undefined, 'network.fit.' + s[1]);
          html('td', {}, tr, String(m[s[2]]));
          html('td', {}, tr, ''); html('td', {}, tr, '');
        } else {
          html('td', {}, tr, ''); html('td', {}, tr, '');
          cell(tr, m[s[2]] ? m[s[1]] : undefined, 'network.check.' + s[1]);
          html('td', {}, tr, String(m[s[2]]));
        }
        html('td', {}, tr, '-');
      });
    });

  // Step rows: one lane per GPU, x the throughput error, colour the section.
  var sectionColour = {dense: '#4c78a8', moe: '#f58518', cross_site: '#54a24b'};
  var gpus = [];
  steps.forEach(function (r) { if (gpus.indexOf(r.gpu) < 0) gpus.push(r.gpu); });
  gpus.sort();
  var svg = document.getElementById('steps'), lane = 30, x0 = 120, width = 960;
  var lim = 0.5;
  steps.forEach(function (r) { lim = Math.max(lim, Math.min(2, Math.abs(r.throughput_error) * 1.1)); });
  function ex(e) { return x0 + width * (Math.max(-lim, Math.min(lim, e)) + lim) / (2 * lim); }
  var h = gpus.length * lane + 30;
  el('rect', {x: ex(-0.1), y: 0, width: ex(0.1) - ex(-0.1), height: gpus.length * lane, fill: '#eef3e8'}, svg);
  [-lim, -lim / 2, 0, lim / 2, lim].forEach(function (t) {
    el('line', {x1: ex(t), y1: 0, x2: ex(t), y2: gpus.length * lane, stroke: t === 0 ? '#333' : '#ccd'}, svg);
    el('text', {x: ex(t) - 14, y: gpus.length * lane + 14}, svg, pct(t));
  });
  gpus.forEach(function (g, i) {
    el('text', {x: 0, y: i * lane + lane / 2 + 4}, svg, g);
    el('line', {x1: x0, y1: (i + 1) * lane, x2: x0 + width, y2: (i + 1) * lane, stroke: '#f0f1f5'}, svg);
  });
  steps.forEach(function (r, k) {
    var i = gpus.indexOf(r.gpu), c = sectionColour[r.section] || '#888';
    var dot = el('circle', {'class': 'step-row', cx: ex(r.throughput_error), cy: i * lane + 8 + (k % 4) * 4.5, r: 5,
                            fill: r.role === 'fit' ? c : '#fff', stroke: c, 'stroke-width': 2, 'data-run': r.run,
                            'data-error': String(r.throughput_error), 'data-section': r.section || ''}, svg);
    el('title', {}, dot, r.run + ' (' + r.role + ', ' + r.section + '): ' + pct(r.throughput_error));
  });
  svg.setAttribute('height', steps.length ? h : 10);
  var sl = document.getElementById('step-legend');
  Object.keys(sectionColour).forEach(function (s) {
    var e = html('span', {style: 'margin-right:1em'}, sl);
    html('span', {style: 'display:inline-block;width:10px;height:10px;border-radius:5px;background:' +
                  sectionColour[s]}, e);
    html('span', {}, e, ' ' + s.replace('_', '-'));
  });

  // Network rows: published against simulated bus bandwidth, log-log.
  var ns = document.getElementById('network'), opColour = {allreduce: '#4c78a8', allgather: '#f58518',
      reducescatter: '#e45756', alltoall: '#eeca3b', sendrecv: '#54a24b'};
  if (net.length) {
    var lo = Infinity, hi = 0;
    function gb(v) { return v / 1e9; } // the JSON's bytes per second, drawn in GB/s as nccl-tests prints them
    net.forEach(function (r) {
      [gb(r.published_busbw), gb(r.simulated_busbw)].forEach(function (v) {
        if (v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      });
    });
    lo = Math.pow(10, Math.floor(Math.log10(lo))); hi = Math.pow(10, Math.ceil(Math.log10(hi)));
    var S = 540, o = 50;
    function px(v) { return o + S * (Math.log10(Math.max(v, lo)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo)); }
    function py(v) { return o + S - (px(v) - o); }
    el('polygon', {points: [[px(lo), py(lo * 1.1)], [px(hi / 1.1), py(hi)], [px(hi), py(hi)], [px(hi), py(hi * 0.9)],
                            [px(lo / 0.9), py(lo)], [px(lo), py(lo)]].map(function (p) { return p.join(','); }).join(' '),
                   fill: '#eef3e8'}, ns);
    el('line', {x1: px(lo), y1: py(lo), x2: px(hi), y2: py(hi), stroke: '#333'}, ns);
    for (var d = lo; d <= hi * 1.0001; d *= 10) {
      el('text', {x: px(d) - 8, y: o + S + 16}, ns, String(+d.toPrecision(3)));
      el('text', {x: 4, y: py(d) + 4}, ns, String(+d.toPrecision(3)));
    }
    el('text', {x: o + S / 2 - 60, y: o + S + 34}, ns, 'published bus bandwidth (GB/s)');
    el('text', {x: 4, y: o - 10}, ns, 'simulated (GB/s)');
    net.forEach(function (r) {
      var c = opColour[r.op] || '#888';
      var dot = el('circle', {'class': 'network-row', cx: px(gb(r.published_busbw)), cy: py(gb(r.simulated_busbw)), r: 5,
                              fill: r.role === 'fit' ? c : '#fff', stroke: c, 'stroke-width': 2, 'data-run': r.run,
                              'data-published': String(r.published_busbw),
                              'data-simulated': String(r.simulated_busbw)}, ns);
      el('title', {}, dot, r.run + ' (' + r.role + '): ' + gb(r.published_busbw).toFixed(1) + ' published, ' +
         gb(r.simulated_busbw).toFixed(1) + ' simulated GB/s (' + pct(r.busbw_error) + ')');
    });
    var nl = document.getElementById('network-legend');
    Object.keys(opColour).forEach(function (s) {
      var e = html('span', {style: 'margin-right:1em'}, nl);
      html('span', {style: 'display:inline-block;width:10px;height:10px;border-radius:5px;background:' +
                    opColour[s]}, e);
      html('span', {}, e, ' ' + s);
    });
  } else {
    ns.setAttribute('height', 10);
  }

  // The tables, as `spansim validate` prints them.
  var rt = document.getElementById('rows'), rh = html('tr', {}, rt);
  ['run', 'gpu', 'section', 'role', 'metric', 'published', 'simulated', 'error', 'left out'].forEach(function (c) {
    html('th', {}, rh, c);
  });
  (D.rows || []).forEach(function (r) {
    var tr = html('tr', {}, rt);
    if (r.role === 'excluded') {
      [r.run, '-', '-', 'excluded', r.metric, String(+r.published.toPrecision(4)), r.excluded_because, '', '']
          .forEach(function (c) { html('td', {}, tr, c); });
      return;
    }
    [r.run, r.gpu, r.section, r.role, r.metric, String(+r.published.toPrecision(4)),
     String(+r.simulated.toPrecision(4)), pct(r.throughput_error),
     r.leave_one_out_throughput_error === undefined ? '-' : pct(r.leave_one_out_throughput_error)]
        .forEach(function (c) { html('td', {}, tr, c); });
  });
  var nt = document.getElementById('network-rows'), nh = html('tr', {}, nt);
  ['run', 'role', 'op', 'GPUs', 'size', 'NCCL', 'published (GB/s)', 'simulated (GB/s)', 'error'].forEach(function (c) {
    html('th', {}, nh, c);
  });
  (D.network ? D.network.rows : []).forEach(function (r) {
    var tr = html('tr', {}, nt);
    if (r.role === 'excluded') {
      [r.run, 'excluded', r.excluded_because, '', '', '', '', '', ''].forEach(function (c) { html('td', {}, tr, c); });
      return;
    }
    [r.run, r.role, r.op, String(r.ranks), bytes(r.bytes), r.algorithm + '/' + r.protocol,
     (r.published_busbw / 1e9).toFixed(1), (r.simulated_busbw / 1e9).toFixed(1), pct(r.busbw_error)]
        .forEach(function (c) { html('td', {}, tr, c); });
  });
  finished();
})();
</script>
</body></html>
)HTML";

} // namespace

std::string validate_page(const nlohmann::json& result)
{
  if (!result.is_object() || !result.contains("spansim") || !result.contains("rows") || !result.contains("mape"))
    throw SpecError("validate", "$", "not what `spansim validate --json` prints (rows, mape and spansim expected)");
  return assemble_page("spansim validate", kBody, result, kTail);
}

} // namespace spansim::report
