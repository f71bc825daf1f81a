#include "report/page_parts.hpp"

namespace spansim::report {

const std::string_view kPageStyle = R"HTML(<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1d2433;background:#fff;max-width:1200px}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #ccd}
.figs{display:flex;flex-wrap:wrap;gap:1.2em;margin:.6em 0}.fig{background:#f3f5f9;padding:.5em .8em;border-radius:6px}
.fig b{display:block;font-size:1.3em}.note{color:#556;font-size:.9em}
table{border-collapse:collapse;font-size:.9em}td,th{padding:2px 8px;border-bottom:1px solid #e3e6ee;text-align:right}
td:first-child,th:first-child{text-align:left}svg text{font-size:11px;fill:#1d2433}
.building{cursor:pointer;stroke:#334;stroke-width:1}.building:hover{stroke-width:3}
pre{background:#f3f5f9;padding:.6em;overflow:auto;max-height:24em;font-size:.8em}
#errors{color:#b00020;white-space:pre-wrap}
</style>
<script>
window.spansimErrors = [];
window.onerror = function (m, s, l) {
  window.spansimErrors.push(m + ' (line ' + l + ')');
  var e = document.getElementById('errors');
  if (e) e.textContent = window.spansimErrors.join('\n');
};
var NS = 'http://www.w3.org/2000/svg';
function el(tag, attrs, parent, text) {
  var e = document.createElementNS(NS, tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function html(tag, attrs, parent, text) {
  var e = document.createElement(tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function seconds(s) {
  if (s >= 1) return s.toFixed(3) + ' s';
  if (s >= 1e-3) return (s * 1e3).toFixed(3) + ' ms';
  return (s * 1e6).toFixed(2) + ' us';
}
function bytes(b) {
  var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'], i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; ++i; }
  return b.toFixed(i ? 2 : 0) + ' ' + u[i];
}
// A headline figure in #headline: its value in data-value, for the tests.
function fig(id, label, value, text) {
  var f = html('div', {'class': 'fig'}, document.getElementById('headline'));
  html('b', {id: id, 'data-value': String(value)}, f, text);
  html('span', {}, f, label);
}
// The drawing ended: data-drawn for the tests, data-draw-ms (from navigation start) for bench/report_page.sh.
function finished() {
  document.body.setAttribute('data-drawn', '1');
  document.body.setAttribute('data-draw-ms', String(Math.round(performance.now())));
}
function colour(u) { // utilization 0..1, on a square-root scale so that a few per cent shows: pale to deep red
  u = Math.sqrt(Math.max(0, Math.min(1, u || 0)));
  var r = Math.round(240 - 40 * u), g = Math.round(244 - 200 * u), b = Math.round(250 - 210 * u);
  return 'rgb(' + r + ',' + g + ',' + b + ')';
}
</script>
)HTML";

namespace {

// `data` as the text of a <script type="application/json">: "</" written as "<\/", which JSON reads as the same
// string, so that no value ends the element.
std::string inline_json(const nlohmann::json& data)
{
  const std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string safe;
  safe.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    safe += text[i];
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/')
      safe += '\\';
  }
  return safe;
}

} // namespace

std::string assemble_page(std::string_view title, std::string_view body, const nlohmann::json& data,
                          std::string_view script)
{
  std::string page = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                     "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>";
  page += title;
  page += "</title>\n";
  page += kPageStyle;
  // Every page opens with its errors, title, provenance and headline figures.
  page +=
      "</head><body>\n<div id=\"errors\"></div>\n<h1 id=\"title\"></h1><div class=\"note\" id=\"provenance\"></div>\n"
      "<div class=\"figs\" id=\"headline\"></div>\n";
  page += body;
  page += inline_json(data);
  page += script;
  return page;
}

} // namespace spansim::report
