"""A CSV or TSV file read in byte ranges gives what it gives in one piece.

The fixture has what exported sensor tables have: a byte-order mark,
Windows line ends, empty lines, a row with a field too many, a cell that is
not a number, missing values, two devices interleaved, and (in the quoted
file) a label with a newline inside quotes in the middle of the file.
"""

import numpy as np
import pytest

from transforms.sources import tables

COLUMNS = tables.Columns(timestamp='t', entity='dev', label='lab',
                         channels=('a', 'b'))


def _rows(n, quoted_at=None):
  lines = ['t,dev,a,b,lab']
  for i in range(n):
    a = 'oops' if i == 37 else ('' if i % 50 == 3 else f'{i * 0.5:.1f}')
    label = 'walk' if i % 3 else 'sit'
    if i == quoted_at:
      label = '"sit\nstill"'
    lines.append(f'2024-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z,'
                 f'dev{i % 2},{a},{i % 7},{label}')
    if i % 97 == 5:
      lines.append('')  # an empty line: not a row
    if i == 211:
      lines.append('2024-01-01T00:00:00Z,dev0,1,2,sit,extra')
  return '\ufeff' + '\r\n'.join(lines) + '\r\n'


def _write(tmp_path, text, name='x.csv'):
  path = tmp_path / name
  path.write_bytes(text.encode('utf-8'))
  return str(path)


def _whole(path):
  return list(tables.iter_batches(path, 'csv', COLUMNS, 's',
                                  batch_rows=100))


def _in_ranges(path, range_bytes):
  """What the sensor reader does with the workers' results, in-line."""
  ranges = tables.csv_ranges(path, 'csv', range_bytes)
  assert ranges is not None and len(ranges.spans) > 3
  out, offset = [], 0
  for start, end in ranges.spans:
    found = tables.parse_range(path, 'csv', COLUMNS, 's', ranges.header,
                               start, end, batch_rows=100)
    if found.quoted:
      out += tables.iter_csv_from(path, 'csv', COLUMNS, 's', ranges.header,
                                  start, offset, batch_rows=100)
      return out, True
    out += [tables.shift_rows(rows, bad, offset)
            for rows, bad in found.batches]
    offset += found.records
  return out, False


def _joined(batches):
  rows = [r for r, _ in batches]
  bad = sorted(b for _, bs in batches for b in bs)
  return ({k: np.concatenate([getattr(r, k) for r in rows])
           for k in ('row', 'time', 'entity', 'label', 'values')}, bad)


def _assert_same(got, want):
  got_rows, got_bad = _joined(got)
  want_rows, want_bad = _joined(want)
  assert got_bad == want_bad
  for key, value in want_rows.items():
    np.testing.assert_array_equal(got_rows[key], value, err_msg=key)


def test_ranges_start_after_a_newline_and_cover_the_file(tmp_path):
  path = _write(tmp_path, _rows(600))
  data = open(path, 'rb').read()
  ranges = tables.csv_ranges(path, 'csv', 1000)
  assert ranges.header == data[:data.index(b'\n') + 1]
  assert ranges.spans[0][0] == len(ranges.header)
  assert ranges.spans[-1][1] == len(data)
  for (_, end), (start, _) in zip(ranges.spans, ranges.spans[1:]):
    assert end == start and data[start - 1:start] == b'\n'


def test_a_file_in_ranges_reads_as_in_one_piece(tmp_path):
  path = _write(tmp_path, _rows(600))
  want = _whole(path)
  got, quoted = _in_ranges(path, 1000)
  assert not quoted
  _assert_same(got, want)
  # What the fixture is about: bad rows numbered in the whole file.
  _, bad = _joined(want)
  reasons = dict(bad)
  assert 'fields' in reasons[212] and 'oops' in reasons[37], bad
  assert len(_joined(want)[0]['row']) == 600 - 1  # 'oops' is a dead letter


def test_a_quoted_newline_ends_the_ranges_and_the_rest_is_read_whole(
    tmp_path):
  path = _write(tmp_path, _rows(600, quoted_at=400))
  want = _whole(path)
  got, quoted = _in_ranges(path, 1000)
  assert quoted
  _assert_same(got, want)
  labels = _joined(want)[0]['label'].tolist()
  assert 'sit\nstill' in labels


@pytest.mark.parametrize('text, size', [
    ('t,dev,a,b,lab\n2024-01-01T00:00:00Z,d,1,2,x\n', None),  # small
    ('"t",dev,a,b,lab\n' + '2024-01-01T00:00:00Z,d,1,2,x\n' * 200, 100),
])
def test_files_read_in_one_piece(tmp_path, text, size):
  """Small files, and a header with a quote, are not cut."""
  path = _write(tmp_path, text)
  assert tables.csv_ranges(path, 'csv', size) is None
  assert tables.csv_ranges(path, 'jsonl', 10) is None
