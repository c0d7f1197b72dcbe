"""The sensor modality's parts of the validation report: what the JSON
report repeats of the manifest's time shape (`report_summary`), the samples
it keeps (`report_sample`) and the HTML sections (`html_sections`: the time
shape, then sample windows as line charts or sample rows as a table). The
plug-in reaches them through checks.py.
"""

import heapq
from typing import List, Tuple

import numpy as np

from transforms.modalities.sensor import check_wording
from transforms.validation import html_report

# Sample windows in the report are cut to this many rows and channels.
MAX_ROWS = 400
MAX_CHANNELS = 8


# The report's table of the entities with the most gaps: this many rows,
# these fields of their sensor.time.entities entry.
MAX_GAP_ROWS = 10
GAP_COLUMNS = ('median_interval_ns', 'max_gap_ns', 'gaps', 'longest_gap_ns',
               'segments', 'duplicates_dropped', 'conflicting_rows')


def report_summary(manifest: dict) -> dict:
  """What the JSON report repeats of the manifest: {'time': None when it
  does not record the time shape, else {'total': sensor.time.total,
  'entities': how many, 'most_gaps': the MAX_GAP_ROWS entities with the
  most gaps (then the longest), each {'entity', and its GAP_COLUMNS}}}."""
  time = check_wording.time_section(manifest)
  if time is None:
    return {'time': None}
  entities = time.get('entities') or {}
  most = heapq.nsmallest(MAX_GAP_ROWS, entities.items(), key=lambda kv: (
      -(kv[1].get('gaps') or 0), -(kv[1].get('longest_gap_ns') or 0),
      kv[0]))
  return {'time': {
      'total': time.get('total'), 'entities': len(entities),
      'most_gaps': [dict({'entity': entity},
                         **{key: shape.get(key) for key in GAP_COLUMNS})
                    for entity, shape in most]}}


# ------------------------------------------------------------- report --


def report_sample(info: dict, manifest: dict) -> dict:
  """A sample of the record `info` summarizes: its id, channels and
  values (rounded, cut to MAX_ROWS rows and MAX_CHANNELS channels)."""
  if info.get('values') is None:
    return {'id': info['id']}
  channels = manifest['sensor']['channels']
  arr = np.asarray(info['values'], np.float64).reshape(-1, len(channels))
  return {'id': info['id'], 'channels': channels[:MAX_CHANNELS],
          'values': np.round(arr[:MAX_ROWS, :MAX_CHANNELS], 4).tolist()}


def html_sections(report: dict, manifest) -> str:
  """The time shape the manifest records (see report_summary), then the
  report's samples."""
  return _time_shape_section(report) + _samples_section(report, manifest)


# The time shape's totals as the report shows them: (heading, key of
# sensor.time.total, whether it is a duration); windows come after.
_TOTAL_COLUMNS = (('rows', 'rows', False),
                  ('observations', 'observations', False),
                  ('gaps', 'gaps', False),
                  ('longest gap', 'longest_gap_ns', True),
                  ('segments', 'segments', False),
                  ('duplicates dropped', 'duplicates_dropped', False),
                  ('conflicting rows', 'conflicting_rows', False),
                  ('rows out of order', 'out_of_order_rows', False))
_WINDOW_COLUMNS = (('windows without gaps', 'without_gaps'),
                   ('in segments', 'in_segments'), ('too long', 'too_long'),
                   ('formed', 'formed'))
# The entity table's headings, for GAP_COLUMNS.
_GAP_HEADINGS = ('median interval', 'max gap', 'gaps', 'longest gap',
                 'segments', 'duplicates dropped', 'conflicting rows')


def _time_shape_section(report: dict) -> str:
  """The totals of sensor.time and the entities with the most gaps, or a
  line saying the manifest does not record them ('' for a report written
  before report_summary)."""
  e = html_report.escape
  if 'time' not in report:
    return ''
  time = report['time']
  if time is None:
    return (f'<h2>Time shape</h2><p class="small">'
            f'{e(check_wording.NOT_RECORDED.capitalize())}.</p>')
  total = time.get('total') or {}
  windows = total.get('windows') or {}
  heads = [h for h, _, _ in _TOTAL_COLUMNS] + (
      [h for h, _ in _WINDOW_COLUMNS] if windows else [])
  cells = [_cell(total.get(key), duration)
           for _, key, duration in _TOTAL_COLUMNS] + (
               [_cell(windows.get(key), False) for _, key in _WINDOW_COLUMNS]
               if windows else [])
  most = time.get('most_gaps') or []
  rows = ''.join(
      f'<tr><td>{e(check_wording.entity_name(x["entity"]))}</td>' + ''.join(
          _cell(x.get(key), key.endswith('_ns')) for key in GAP_COLUMNS) +
      '</tr>' for x in most)
  entities = e(html_report.number(time.get('entities')))
  return (
      f'<h2>Time shape ({entities} entities, from the manifest)</h2>'
      '<table><tr>' + ''.join(f'<th>{e(h)}</th>' for h in heads) +
      f'</tr><tr>{"".join(cells)}</tr></table>'
      f'<h3>Entities with the most gaps ({len(most)} of {entities})</h3>'
      '<table><tr><th>entity</th>' +
      ''.join(f'<th>{e(h)}</th>' for h in _GAP_HEADINGS) +
      f'</tr>{rows}</table>')


def _cell(value, duration: bool) -> str:
  """A number (or a duration in ns) as a table cell."""
  text = (check_wording.duration(value) if duration
          else html_report.number(value))
  return f'<td class="num">{html_report.escape(text)}</td>'


def _samples_section(report: dict, manifest) -> str:
  """The report's samples (of the train split, or of the first split
  without one): windows as line charts, two per class; rows (one example
  per row) as a table of their channel values."""
  split, samples = html_report.sample_split(report)
  shown = [(label, x) for label, items in samples.items() for x in items
           if 'values' in x]
  if not shown:
    return ''
  if manifest is not None:
    rows = manifest['sensor'].get('mode') == 'row'
  else:  # a row's sample holds one row of values
    rows = all(len(x['values']) == 1 for _, x in shown)
  if rows:
    return _sample_rows(split, shown, manifest)
  charts = [html_report.line_chart(f'{label}: {x["id"]}', x['channels'],
                                   x['values'])
            for label, items in samples.items() for x in items[:2]
            if 'values' in x]
  return (f'<h2>Sample windows ({html_report.escape(split)}, normalized '
          f'values)</h2><div class="charts">{"".join(charts)}</div>')


def _sample_rows(split: str, shown: List[Tuple[str, dict]],
                 manifest) -> str:
  """The sample rows as one table: class, id and each channel's value."""
  e = html_report.escape
  channels = shown[0][1]['channels']
  total = len(manifest['sensor']['channels']) if manifest else len(channels)
  cut = (f'; the first {len(channels)} of {total} channels'
         if total > len(channels) else '')
  head = ''.join(f'<th>{e(c)}</th>' for c in channels)
  body = ''.join(
      f'<tr><td>{e(label)}</td><td>{e(x["id"])}</td>' + ''.join(
          f'<td class="num">{e(html_report.number(v))}</td>'
          for v in x['values'][0]) + '</tr>' for label, x in shown)
  return (f'<h2>Sample rows ({e(split)}, normalized values{e(cut)})</h2>'
          f'<table class="sample-rows"><tr><th>class</th><th>id</th>{head}'
          f'</tr>{body}</table>')
