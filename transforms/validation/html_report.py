"""The validation report as one self-contained HTML page.

Verdict first, then what failed or warned, class histograms per split
(before and after rebalancing), the modality's own sections (its
`html_sections`: sample images per class, token count histograms, sample
windows), per-feature statistics with their drift from the training split,
a shard-size chart and every check. Charts are inline SVG and images are
embedded as data: URLs; the page loads nothing from anywhere, so it opens
offline and can be mailed or archived as one file.

The chart helpers, `escape` and `number` are public for the modalities'
sections.
"""

import html
import json
from typing import Dict, List, Optional, Sequence, Tuple

from transforms import modalities

_COLORS = ('#3465a4', '#f57900', '#4e9a06', '#cc0000', '#75507b', '#c4a000',
           '#06989a', '#8f5902')

_CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1100px;
       padding: 1em 2em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 1px solid #ccc;
     padding-bottom: 0.2em; margin-top: 1.6em; }
.verdict { font-size: 1.6em; font-weight: bold; padding: 0.5em 0.8em;
           border-radius: 6px; display: inline-block; }
.verdict.pass { background: #dff0d8; color: #2b572b; }
.verdict.fail { background: #f2dede; color: #8a1f1f; }
.meta { color: #666; margin: 0.5em 0 1em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left;
         vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.status-pass { color: #2b572b; } .status-warn { color: #8a6d1f; }
.status-info { color: #1f4e8a; }
.status-fail { color: #8a1f1f; font-weight: bold; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
.chart h3 { font-size: 1em; margin: 0.3em 0; }
.grid { display: flex; flex-wrap: wrap; gap: 0.3em; margin-bottom: 0.8em; }
.grid figure { margin: 0; text-align: center; font-size: 0.7em;
               max-width: 70px; overflow-wrap: anywhere; }
.legend span { margin-right: 1em; }
.small { font-size: 0.8em; color: #666; }
"""

# Runs when the page has loaded: records that it rendered, how many images
# decoded, and any script error, in attributes a headless browser can read.
_SCRIPT = """
(function () {
  var errors = [];
  window.addEventListener('error', function (e) {
    errors.push(String(e.message || e));
  });
  window.addEventListener('load', function () {
    var imgs = document.images, ok = 0;
    for (var i = 0; i < imgs.length; i++) {
      if (imgs[i].complete && imgs[i].naturalWidth > 0) { ok++; }
    }
    var body = document.body;
    body.setAttribute('data-images', imgs.length);
    body.setAttribute('data-images-decoded', ok);
    body.setAttribute('data-errors', errors.length);
    body.setAttribute('data-rendered', 'ok');
  });
})();
"""


def escape(text) -> str:
  """`text` (any value) as HTML text or attribute value."""
  return html.escape(str(text), quote=True)


_e = escape  # the short name the page code below uses


def number(x, digits: int = 4) -> str:
  """A number as the report shows it ('' for None)."""
  if x is None:
    return ''
  if isinstance(x, int):
    return f'{x:,}'
  return f'{x:.{digits}g}'


_num = number


def bar_chart(title: str, labels: Sequence[str],
              series: Sequence[Tuple[str, Sequence[float]]],
              width: int = 480, bar_height: int = 16) -> str:
  """A horizontal grouped bar chart as inline SVG.

  Args:
    title: Shown above the chart.
    labels: One row per label.
    series: (name, values per label) for each bar of a row.
  """
  if not labels:
    return ''
  top = max((v for _, vals in series for v in vals), default=0) or 1
  label_w = min(max(len(str(x)) for x in labels) * 7 + 12, 260)
  value_w = 70
  plot_w = width - label_w - value_w
  row_h = bar_height * len(series) + 6
  height = row_h * len(labels) + 4
  parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" role="img" aria-label="{_e(title)}">']
  for i, label in enumerate(labels):
    y0 = i * row_h + 2
    parts.append(f'<text x="{label_w - 6}" y="{y0 + row_h / 2 + 4}" '
                 'text-anchor="end" font-size="12">'
                 f'{_e(str(label)[:36])}</text>')
    for j, (_, vals) in enumerate(series):
      v = vals[i] if i < len(vals) else 0
      w = max(plot_w * v / top, 0)
      y = y0 + j * bar_height
      parts.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" '
                   f'height="{bar_height - 3}" '
                   f'fill="{_COLORS[j % len(_COLORS)]}"/>')
      parts.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar_height - 5}"'
                   f' font-size="11">{_num(v)}</text>')
  parts.append('</svg>')
  legend = ''
  if len(series) > 1:
    legend = '<div class="legend small">' + ''.join(
        f'<span style="color:{_COLORS[j % len(_COLORS)]}">&#9632; '
        f'{_e(name)}</span>' for j, (name, _) in enumerate(series)) + '</div>'
  return (f'<div class="chart"><h3>{_e(title)}</h3>{legend}'
          f'{"".join(parts)}</div>')


def line_chart(title: str, channels: Sequence[str],
               rows: Sequence[Sequence[float]], width: int = 320,
               height: int = 140) -> str:
  """One polyline per channel over the rows of a window, as inline SVG."""
  if not rows:
    return ''
  flat = [v for r in rows for v in r]
  lo, hi = min(flat), max(flat)
  span = (hi - lo) or 1.0
  n = max(len(rows) - 1, 1)
  parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" role="img" aria-label="{_e(title)}">',
           f'<rect width="{width}" height="{height}" fill="#fafafa" '
           'stroke="#ddd"/>']
  for c, _ in enumerate(channels):
    points = ' '.join(
        f'{i / n * (width - 8) + 4:.1f},'
        f'{height - 4 - (r[c] - lo) / span * (height - 8):.1f}'
        for i, r in enumerate(rows))
    parts.append(f'<polyline fill="none" stroke-width="1.2" '
                 f'stroke="{_COLORS[c % len(_COLORS)]}" points="{points}"/>')
  parts.append('</svg>')
  legend = '<div class="legend small">' + ''.join(
      f'<span style="color:{_COLORS[c % len(_COLORS)]}">&#9632; {_e(name)}'
      '</span>' for c, name in enumerate(channels)) + '</div>'
  return (f'<div class="chart"><h3>{_e(title)}</h3>{legend}'
          f'{"".join(parts)}</div>')


def _checks_table(checks: List[dict]) -> str:
  rows = ''.join(
      f'<tr><td class="status-{_e(c["status"])}">{_e(c["status"].upper())}'
      f'</td><td>{_e(c["check"])}</td><td>{_e(c["detail"])}</td></tr>'
      for c in checks)
  return ('<table><tr><th>status</th><th>check</th><th>detail</th></tr>'
          f'{rows}</table>')


def _class_section(report: dict) -> str:
  charts = []
  for split, s in report['splits'].items():
    labels = sorted(set(s['class_counts']) |
                    set(s.get('class_counts_before_rebalance') or {}))
    after = [s['class_counts'].get(k, 0) for k in labels]
    before = s.get('class_counts_before_rebalance')
    series = [('records', after)]
    if before and before != s['class_counts']:
      series = [('before rebalancing', [before.get(k, 0) for k in labels]),
                ('after rebalancing', after)]
    charts.append(bar_chart(f'{split}: {s["records"]:,} records', labels,
                            series))
  return ('<h2>Classes per split</h2><div class="charts">' + ''.join(charts)
          + '</div>')


def sample_split(report: dict) -> Tuple[Optional[str], Dict[str, list]]:
  """(the split whose samples the report shows, its samples by label):
  train, else the first split."""
  split = 'train' if 'train' in report['splits'] else next(
      iter(report['splits']), None)
  samples = report['splits'].get(split, {}).get('samples', {}) if split else {}
  return split, samples


def _modality_sections(report: dict, manifest: Optional[dict]) -> str:
  """The sections of the modality the report names, if it is one."""
  name = report.get('modality')
  if name not in modalities.names():
    return ''
  return modalities.get(name).html_sections(report, manifest)


def _stats_section(report: dict) -> str:
  parts = ['<h2>Feature statistics</h2>']
  for split, s in report['splits'].items():
    stats = s.get('statistics') or {}
    if not stats:
      continue
    drift = s.get('feature_drift') or {}
    rows = ''.join(
        f'<tr><td>{_e(name)}</td><td class="num">{_num(v["count"])}</td>'
        f'<td class="num">{_num(v["missing"])}</td>'
        f'<td class="num">{_num(v["min"])}</td>'
        f'<td class="num">{_num(v["max"])}</td>'
        f'<td class="num">{_num(v["mean"])}</td>'
        f'<td class="num">{_num(v["std"])}</td>'
        f'<td class="num">{_num(drift.get(name)) if name in drift else ""}'
        '</td></tr>' for name, v in stats.items())
    drift_note = (f' · class drift from train {s["class_drift"]:.3f}'
                  if s.get('class_drift') is not None else '')
    parts.append(
        f'<h3>{_e(split)}{_e(drift_note)}</h3><table><tr><th>feature</th>'
        '<th>count</th><th>missing</th><th>min</th><th>max</th><th>mean</th>'
        '<th>std</th><th>drift from train</th></tr>' + rows + '</table>')
  return ''.join(parts) if len(parts) > 1 else ''


def _shard_section(report: dict) -> str:
  shards = [s for s in report.get('shards', []) if s.get('bytes') is not None]
  if not shards:
    return ''
  shards.sort(key=lambda s: (s['split'], s['file']))
  labels = [s['file'].rsplit('.tfrecord', 1)[-1].lstrip('-') or s['file']
            for s in shards]
  labels = [f'{s["split"]} {lab}' for s, lab in zip(shards, labels)]
  chart = bar_chart('bytes per shard', labels,
                    [('bytes', [s['bytes'] for s in shards])], width=640,
                    bar_height=12)
  return f'<h2>Shards</h2>{chart}'


def render(report: dict, manifest: Optional[dict] = None) -> str:
  """The report as a self-contained HTML page."""
  verdict = report['verdict']
  failed = [c for c in report['checks'] if c['status'] == 'fail']
  warned = [c for c in report['checks'] if c['status'] == 'warn']
  head = (f'<span class="verdict {_e(verdict)}" id="verdict">'
          f'{"PASS" if verdict == "pass" else "FAIL"}</span>')
  noted = sum(c['status'] == 'info' for c in report['checks'])
  counts = (f'{len(report["checks"]) - len(failed) - len(warned)} passed'
            f'{f" ({noted} with information)" if noted else ""}, '
            f'{len(warned)} warned, {len(failed)} failed')
  meta = (f'<div class="meta">dataset <b>{_e(report.get("dataset"))}</b> '
          f'({_e(report.get("modality"))}) · run {_e(report.get("run_id"))}'
          f' · {_e(counts)}</div>')
  problems = ''
  if failed:
    problems += '<h2>Failed checks</h2>' + _checks_table(failed)
    errors = report.get('record_errors') or []
    if errors:
      problems += ('<h3>Record errors (first ones)</h3><ul>' + ''.join(
          f'<li>{_e(e)}</li>' for e in errors[:50]) + '</ul>')
  if warned:
    problems += '<h2>Warnings</h2>' + _checks_table(warned)
  body = ''.join([
      f'<h1>Validation of {_e(report.get("dataset"))}</h1>', head, meta,
      problems, _class_section(report), _modality_sections(report, manifest),
      _stats_section(report),
      _shard_section(report), '<h2>All checks</h2>',
      _checks_table(report['checks'])])
  title = f'{verdict.upper()}: validation of {report.get("dataset")}'
  # The report's JSON, for tools that scrape the page.
  data = json.dumps({'verdict': verdict, 'failed': len(failed),
                     'warned': len(warned)}).replace('</', '<\\/')
  return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
          f'<title>{_e(title)}</title><style>{_CSS}</style>'
          f'<script>{_SCRIPT}</script>'
          f'<script type="application/json" id="summary">{data}</script>'
          f'</head><body>{body}</body></html>')
