"""Reading and row parsing of tabular sensor files (transforms/sources/tables.py)."""

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.sources import table_csv
from transforms.sources import table_formats
from transforms.sources import table_jsonl
from transforms.sources import table_timestamps
from transforms.sources import tables

S = 10**9  # ns per second
T0 = 1_700_000_000  # 2023-11-14T22:13:20Z


def _ns(iso):
  """Expected ns since the epoch of a UTC ISO string, computed by numpy."""
  return int(np.datetime64(iso, 'ns').astype(np.int64))


def _write(tmp_path, name, content):
  path = tmp_path / name
  if isinstance(content, str):
    content = content.encode('utf-8')
  path.write_bytes(content)
  return str(path)


def _read_all(path, columns, unit='s', batch_rows=65536, fmt=None):
  """Runs iter_batches; returns (concatenated good rows, all bad, batches)."""
  fmt = fmt or tables.format_of(path)
  batches = list(tables.iter_batches(path, fmt, columns, unit, batch_rows))
  good = [b for b, _ in batches]
  merged = tables.RowBatch(
      row=np.concatenate([b.row for b in good]),
      time=np.concatenate([b.time for b in good]),
      entity=np.concatenate([b.entity for b in good]),
      label=np.concatenate([b.label for b in good]),
      values=np.concatenate([b.values for b in good]))
  bad = [item for _, items in batches for item in items]
  return merged, bad, batches


def _cols(channels=('a', 'b'), entity='dev', timestamp='t', label='lab'):
  return tables.Columns(timestamp, entity, label, tuple(channels))


def _check_types(batch, n_channels):
  n = len(batch.row)
  assert batch.row.dtype == np.int64 and batch.time.dtype == np.int64
  assert batch.entity.dtype == object and batch.label.dtype == object
  assert batch.values.dtype == np.float64
  assert batch.values.shape == (n, n_channels)
  assert len(batch.time) == len(batch.entity) == len(batch.label) == n
  assert all(isinstance(x, str) for x in batch.entity)
  assert all(isinstance(x, str) for x in batch.label)


# --- format_of ------------------------------------------------------------


@pytest.mark.parametrize('path,fmt', [
    ('a.csv', 'csv'), ('gs://b/x/A.CSV', 'csv'), ('a.tsv', 'tsv'),
    ('a.Tab', 'tsv'), ('a.jsonl', 'jsonl'), ('a.ndjson', 'jsonl'),
    ('a.json', 'jsonl'), ('a.parquet', 'parquet'), ('a.PQ', 'parquet'),
    ('a.txt', None), ('csv', None), ('a.csv.gz', None), ('dir.csv/a', None),
])
def test_format_of(path, fmt):
  assert tables.format_of(path) == fmt


# --- round trips ----------------------------------------------------------

CSV = ('t,dev,a,other,b,lab\n'
       '2024-01-01T00:00:00Z,d1,1.5,x,-2,walk\n'
       '2024-01-01T00:00:01Z,d2,2.25,y,3e2,run\n'
       '2024-01-01T00:00:02Z,007,-0.5,z,0,walk\n')


def _check_round_trip(batch):
  _check_types(batch, 2)
  assert batch.row.tolist() == [0, 1, 2]
  assert batch.time.tolist() == [_ns('2024-01-01T00:00:00'),
                                 _ns('2024-01-01T00:00:01'),
                                 _ns('2024-01-01T00:00:02')]
  assert batch.entity.tolist() == ['d1', 'd2', '007']
  assert batch.label.tolist() == ['walk', 'run', 'walk']
  np.testing.assert_array_equal(batch.values,
                                [[1.5, -2.0], [2.25, 300.0], [-0.5, 0.0]])


def test_csv_round_trip(tmp_path):
  path = _write(tmp_path, 'x.csv', CSV)
  names, numeric = tables.read_header(path, 'csv')
  assert names == ['t', 'dev', 'a', 'other', 'b', 'lab']
  assert numeric == ['a', 'b']
  cols = tables.resolve_columns(names, numeric, 't', 'dev', 'lab', None)
  assert cols == _cols()
  batch, bad, _ = _read_all(path, cols)
  assert bad == []
  _check_round_trip(batch)


def test_tsv_round_trip(tmp_path):
  path = _write(tmp_path, 'x.tsv', CSV.replace(',', '\t'))
  names, numeric = tables.read_header(path, 'tsv')
  assert names == ['t', 'dev', 'a', 'other', 'b', 'lab']
  assert numeric == ['a', 'b']
  batch, bad, _ = _read_all(path, _cols())
  assert bad == []
  _check_round_trip(batch)


def test_tsv_keeps_commas_inside_cells(tmp_path):
  path = _write(tmp_path, 'x.tab', 't\tlab\ta\n1\tslow, then fast\t1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  assert batch.label.tolist() == ['slow, then fast']


def test_jsonl_round_trip(tmp_path):
  records = [
      {'t': '2024-01-01T00:00:00Z', 'dev': 'd1', 'a': 1.5, 'b': -2,
       'lab': 'walk', 'other': [1]},
      {'t': '2024-01-01T00:00:01Z', 'dev': 'd2', 'a': 2.25, 'b': 300,
       'lab': 'run'},
      {'lab': 'walk', 'b': 0, 'a': -0.5, 'dev': '007',
       't': '2024-01-01T00:00:02Z'},
  ]
  path = _write(tmp_path, 'x.jsonl',
                ''.join(json.dumps(r) + '\n' for r in records))
  names, numeric = tables.read_header(path, 'jsonl')
  assert names == ['t', 'dev', 'a', 'b', 'lab', 'other']
  assert numeric == ['a', 'b']
  batch, bad, _ = _read_all(path, _cols())
  assert bad == []
  _check_round_trip(batch)


def _parquet(tmp_path, table, name='x.parquet'):
  path = str(tmp_path / name)
  pq.write_table(table, path)
  return path


def _parquet_table():
  times = np.array(['2024-01-01T00:00:00', '2024-01-01T00:00:01',
                    '2024-01-01T00:00:02'], dtype='datetime64[ms]')
  return pa.table({
      't': pa.array(times, pa.timestamp('ms', tz='UTC')),
      'dev': ['d1', 'd2', '007'],
      'a': pa.array([1.5, 2.25, -0.5], pa.float32()),
      'other': ['x', 'y', 'z'],
      'b': pa.array([-2, 300, 0], pa.int16()),
      'lab': ['walk', 'run', 'walk'],
  })


def test_parquet_round_trip(tmp_path):
  path = _parquet(tmp_path, _parquet_table())
  names, numeric = tables.read_header(path, 'parquet')
  assert names == ['t', 'dev', 'a', 'other', 'b', 'lab']
  assert numeric == ['a', 'b']  # the timestamp column is not numeric
  batch, bad, _ = _read_all(path, _cols())
  assert bad == []
  _check_round_trip(batch)


def test_parquet_from_a_non_seekable_stream(tmp_path, monkeypatch):
  path = _parquet(tmp_path, _parquet_table())
  real_open = table_formats.open_file

  class Stream(io.RawIOBase):
    """A read-only stream that cannot seek, like some remote readers."""

    def __init__(self, f):
      super().__init__()
      self._f = f

    def readable(self):
      return True

    def readinto(self, buffer):
      data = self._f.read(len(buffer))
      buffer[:len(data)] = data
      return len(data)

    def close(self):
      self._f.close()
      super().close()

  monkeypatch.setattr(table_formats, 'open_file', lambda p: Stream(real_open(p)))
  assert not table_formats.open_file(path).seekable()
  assert tables.read_header(path, 'parquet')[1] == ['a', 'b']
  batch, bad, _ = _read_all(path, _cols())
  assert bad == []
  _check_round_trip(batch)


def test_parquet_timestamp_types_and_numeric_labels(tmp_path):
  naive = np.array(['2024-01-01T00:00:00.123456789', '1969-12-31T23:59:59'],
                   dtype='datetime64[ns]')
  path = _parquet(tmp_path, pa.table({
      't': pa.array(naive, pa.timestamp('ns')),
      'lab': pa.array([3, 4], pa.int64()),
      'a': pa.array([1, None], pa.int32()),
  }))
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  assert batch.time.tolist() == [_ns('2024-01-01T00:00:00.123456789'), -S]
  assert batch.label.tolist() == ['3', '4']
  assert batch.entity.tolist() == ['', '']
  np.testing.assert_array_equal(batch.values[:, 0], [1.0, np.nan])


def test_parquet_date_and_epoch_columns(tmp_path):
  path = _parquet(tmp_path, pa.table({
      'day': pa.array([19724], pa.date32()),  # 2024-01-02
      'secs': pa.array([T0 + 0.25], pa.float64()),
      'ms': pa.array([T0 * 1000 + 7], pa.int64()),
      'lab': ['x'],
      'a': [1.0],
  }))
  for column, unit, expected in (('day', 's', _ns('2024-01-02')),
                                 ('secs', 's', T0 * S + S // 4),
                                 ('ms', 'ms', T0 * S + 7 * 10**6)):
    batch, bad, _ = _read_all(path, _cols(('a',), entity=None,
                                          timestamp=column), unit=unit)
    assert bad == [] and batch.time.tolist() == [expected], column


# --- CSV structure: quoting, BOM, empty lines -----------------------------


def test_embedded_newline_is_one_row_and_later_indices_are_right(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,lab,a\n'
                '1,x,1\n'
                '2,"two\nlines",2\n'
                '3,"three\n\nlines, with a comma",3\n'
                '4,oops,abc\n'
                '5,y,5\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 1, 2, 4]
  assert batch.label.tolist() == ['x', 'two\nlines',
                                  'three\n\nlines, with a comma', 'y']
  assert batch.time.tolist() == [S, 2 * S, 3 * S, 5 * S]
  assert bad == [(3, "channel 'a' value 'abc' is not a number")]


@pytest.mark.parametrize('header', ['t,lab,a', '"t","lab","a"'])
def test_bom_is_not_part_of_the_first_column_name(tmp_path, header):
  path = _write(tmp_path, 'x.csv',
                b'\xef\xbb\xbf' + f'{header}\n1,x,1\n2,y,2\n'.encode())
  names, numeric = tables.read_header(path, 'csv')
  assert names == ['t', 'lab', 'a']
  assert numeric == ['t', 'a']
  cols = tables.resolve_columns(names, numeric, 't', None, 'lab', None)
  assert cols.channels == ('a',)
  batch, bad, _ = _read_all(path, cols)
  assert bad == [] and batch.time.tolist() == [S, 2 * S]


def test_bom_in_jsonl(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                b'\xef\xbb\xbf{"t": 1, "lab": "x", "a": 1}\n')
  assert tables.read_header(path, 'jsonl')[0] == ['t', 'lab', 'a']
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == [] and batch.row.tolist() == [0]


def test_empty_lines_are_skipped_and_not_counted_in_csv(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,lab,a\r\n\r\n1,x,1\r\n\r\n\r\n2,y,2\r\n3,,3\r\n\r\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 1]
  assert batch.label.tolist() == ['x', 'y']
  assert bad == [(2, 'missing label')]


def test_empty_lines_are_skipped_and_not_counted_in_jsonl(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                '\n{"t": 1, "lab": "x", "a": 1}\r\n\r\n   \n'
                '{"t": 2, "lab": "y", "a": 2}\n\n'
                '{"t": 3, "lab": "", "a": 3}')  # no final newline
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 1]
  assert bad == [(2, 'missing label')]


# --- timestamps -----------------------------------------------------------


def test_iso_timestamps(tmp_path):
  stamps = [
      ('2024-03-01T12:00:00Z', '2024-03-01T12:00:00'),
      ('2024-03-01T12:00:00+02:00', '2024-03-01T10:00:00'),
      ('2024-03-01T12:00:00-05:30', '2024-03-01T17:30:00'),
      ('2024-03-01T12:00:00', '2024-03-01T12:00:00'),  # naive = UTC
      ('2024-03-01 12:00:00', '2024-03-01T12:00:00'),
      ('2024-03-01T12:00:00.250Z', '2024-03-01T12:00:00.250'),
      ('2024-03-01T12:00:00.123456789', '2024-03-01T12:00:00.123456789'),
      ('2024-03-01T12:00:00.5+01:00', '2024-03-01T11:00:00.5'),
      ('2024-03-01', '2024-03-01T00:00:00'),
      ('  2024-03-01T12:00:00Z  ', '2024-03-01T12:00:00'),
  ]
  text = 't,lab,a\n' + ''.join(f'"{s}",x,1\n' for s, _ in stamps)
  path = _write(tmp_path, 'x.csv', text)
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  assert batch.time.tolist() == [_ns(e) for _, e in stamps]


# Spellings of a time: those Arrow's ISO-8601 cast reads, and those it
# refuses (pandas then reads or rejects them).
_SPELLINGS = [
    '2026-01-01T00:00:00.003Z', '2026-01-01T00:00:00Z', '2026-01-01T00:00Z',
    '2026-01-01T00Z', '2026-01-01T00:00:00.123456789Z',
    '2026-01-01T00:00:00+02:00', '2026-01-01T00:00:00+0200',
    '2026-01-01T00:00:00+02', '2026-01-01T00:00:00-05:30',
    '2026-06-01T12:30:00-00:00', '2262-04-11T23:47:16.854775807Z',
    '1970-01-01T00:00:00Z', '2024-02-29T12:00:00.000000000+00:00',
    '2026-01-01T00:00:00', '2026-01-01 00:00:00', '2026-01-01',
    '2026-01-01T00', '2026-01-01T00:00', '2026-01-01 00:00:00.5',
    '2026-01-01T00:00:00.123456789', '2262-04-11 23:47:16.854775807',
    '2024-02-29 12:00',
    # refused by Arrow
    '2026-01-01T00:00:00.1234567891Z', '2026-01-01T23:59:60Z',
    '2026-01-01T24:00:00Z', '2026-02-30T00:00:00Z', '2026-13-01',
    '1500-01-01T00:00:00Z', '2300-01-01T00:00:00Z', '2026-01-01t00:00:00z',
    '20260101T000000Z', '2026-W01-1', '2026-001', '2026-01-01T00:00:00.Z',
    '2026-01-01T00:00:00,5Z', '+2026-01-01T00:00:00Z', '2026-1-1',
    '2026-01-01T0:00:00Z', '2026-01-01T00:00:00 Z', '0001-01-01',
    '1677-09-21T00:12:43.145224192Z', '1677-09-21 00:12:43.145224193',
    '2262-04-11T23:47:16.854775808Z', 'NaT', 'now', 'today', 'yesterday',
    '',
    '1767225600', '20260101', '2026', '-1.5e9', '  2026-01-01T00:00:00Z ',
]


@pytest.mark.parametrize('column', [
    [s] for s in _SPELLINGS] + [
        _SPELLINGS[:13], _SPELLINGS[13:22], _SPELLINGS,
        ['2026-01-01T00:00:00Z', '2026-01-01T00:00:00'],
        ['2026-01-01T00:00:00Z', None], ['1767225600'] * 3])
def test_iso_timestamps_read_by_arrow_are_those_pandas_reads(column,
                                                             monkeypatch):
  # A column Arrow's cast reads whole takes that path (about 7 times
  # faster); any other goes to pandas. Both must give every cell the same
  # nanoseconds and the same dead letters.
  array = pa.array(column, pa.string())
  fast = table_timestamps.column_to_ns(array, 't', 's')
  monkeypatch.setattr(table_timestamps, '_iso_by_arrow', lambda texts: None)
  slow = table_timestamps.column_to_ns(array, 't', 's')
  assert fast[0].tolist() == slow[0].tolist()
  assert fast[1][0].tolist() == slow[1][0].tolist()
  assert fast[1][1] == slow[1][1]


def test_words_pandas_reads_as_the_clock_are_dead_letters(tmp_path):
  # pandas reads 'now' and 'today' as the time it parses them: a run would
  # store whenever it ran, a different time on every run.
  path = _write(tmp_path, 'x.csv',
                't,lab,a\n2026-01-01T00:00:00Z,x,1\nnow,x,1\n Today ,x,1\n'
                'NOW,x,1\n2026-01-01,x,1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 4]
  assert bad == [(1, "timestamp 'now' is not ISO-8601 or a number"),
                 (2, "timestamp ' Today ' is not ISO-8601 or a number"),
                 (3, "timestamp 'NOW' is not ISO-8601 or a number")]


def test_arrow_reads_a_column_of_one_iso_form_and_no_numbers():
  read = table_timestamps._iso_by_arrow
  assert read(pa.array(['2026-01-01T00:00:00.003Z', '2026-01-01T01:00:00+01'
                        ])).tolist() == [_ns('2026-01-01T00:00:00.003'),
                                         _ns('2026-01-01T00:00:00')]
  assert read(pa.array(['2026-01-01 00:00:00', '2026-01-02'])).tolist() == [
      _ns('2026-01-01T00:00:00'), _ns('2026-01-02T00:00:00')]
  for numbers in (['1767225600'], ['20260101'], ['2026'], ['1.5e9'],
                  ['-1767225600']):
    assert read(pa.array(numbers)) is None, numbers
  assert read(pa.array(['2026-01-01T00:00:00Z', '2026-01-01T00:00:00'])) is None
  assert read(pa.array(['2026-01-01', None])) is None
  assert read(pa.array([], pa.string())) is None


def test_iso_timestamps_in_jsonl(tmp_path):
  stamps = ['2024-03-01T12:00:00Z', '2024-03-01T12:00:00+02:00',
            '2024-03-01T12:00:00', '2024-03-01T12:00:00.25Z']
  path = _write(tmp_path, 'x.jsonl', ''.join(
      json.dumps({'t': s, 'lab': 'x', 'a': 1}) + '\n' for s in stamps))
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  assert batch.time.tolist() == [
      _ns('2024-03-01T12:00:00'), _ns('2024-03-01T10:00:00'),
      _ns('2024-03-01T12:00:00'), _ns('2024-03-01T12:00:00.25')]


def test_epoch_seconds_int_and_float(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,lab,a\n'
                f'{T0},x,1\n'
                f'{T0}.5,x,1\n'
                f'{T0}.125,x,1\n'
                '-1.5,x,1\n'
                '1.7e9,x,1\n'
                f'+{T0},x,1\n'
                f'{T0}.123456,x,1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  assert batch.time.tolist()[:6] == [T0 * S, T0 * S + S // 2,
                                     T0 * S + S // 8, -3 * S // 2,
                                     1_700_000_000 * S, T0 * S]
  # A float64 near 1.7e9 resolves about 0.2 us; the fraction is kept to
  # that precision (split from the whole seconds before scaling).
  assert abs(batch.time[6] - (T0 * S + 123_456_000)) < 250


@pytest.mark.parametrize('unit,factor', [('ms', 10**6), ('us', 10**3),
                                         ('ns', 1)])
def test_epoch_units(tmp_path, unit, factor):
  value = T0 * 1000
  path = _write(tmp_path, 'x.csv',
                f't,lab,a\n{value},x,1\n{value}.5,x,1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None), unit=unit)
  assert bad == []
  # x.5 rounds to the nearest ns (half to even for the ns unit).
  half = round(0.5 * factor) if factor > 1 else 0
  assert batch.time.tolist() == [value * factor, value * factor + half]


def test_epoch_numbers_in_jsonl(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                f'{{"t": {T0}, "lab": "x", "a": 1}}\n'
                f'{{"t": {T0}.25, "lab": "x", "a": 1}}\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  assert batch.time.tolist() == [T0 * S, T0 * S + S // 4]
  batch, _, _ = _read_all(path, _cols(('a',), entity=None), unit='ms')
  assert batch.time.tolist() == [T0 * 10**6, T0 * 10**6 + 250_000]


def test_integer_epoch_keeps_full_precision(tmp_path):
  ns_value = 1_700_000_000_123_456_789
  path = _write(tmp_path, 'x.csv',
                f't,lab,a\n{ns_value},x,1\n9300000000000000000,x,1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None), unit='ns')
  assert batch.time.tolist() == [ns_value]
  assert bad == [(1, "timestamp '9300000000000000000' is out of range")]
  path = _write(tmp_path, 'x.jsonl',
                f'{{"t": {ns_value}, "lab": "x", "a": 1}}\n')
  batch, _, _ = _read_all(path, _cols(('a',), entity=None), unit='ns')
  assert batch.time.tolist() == [ns_value]


def test_timestamps_out_of_range(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,lab,a\n1e20,x,1\n99999999999,x,1\n1,x,1\n'
                '2500-01-01T00:00:00Z,x,1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [2]
  assert bad == [(0, "timestamp '1e20' is out of range"),
                 (1, "timestamp '99999999999' is out of range"),
                 (3, "timestamp '2500-01-01T00:00:00Z' is out of range")]


# --- bad rows -------------------------------------------------------------


def test_bad_csv_rows_are_dead_letters_and_others_kept(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,dev,lab,a,b\n'
                '1,d,x,1,2\n'                 # 0 good
                'yesterday,d,x,1,2\n'         # 1 bad timestamp
                ',d,x,1,2\n'                  # 2 missing timestamp
                '4,d,,1,2\n'                  # 3 missing label
                '5,d,"  ",1,2\n'              # 4 blank label
                '6,d,x,1,abc\n'               # 5 bad channel
                '7,d,x\n'                     # 6 too few fields
                '8,d,x,1,2,3\n'               # 7 too many fields
                '9,d,x,1,2\n'                 # 8 good
                'soon,d,,zz,zz\n')            # 9 first reason wins
  batch, bad, _ = _read_all(path, _cols(('a', 'b')))
  assert batch.row.tolist() == [0, 8]
  assert batch.time.tolist() == [S, 9 * S]
  assert bad == [
      (1, "timestamp 'yesterday' is not ISO-8601 or a number"),
      (2, 'missing timestamp'),
      (3, 'missing label'),
      (4, 'missing label'),
      (5, "channel 'b' value 'abc' is not a number"),
      (6, 'row has 3 fields, the header has 5'),
      (7, 'row has 6 fields, the header has 5'),
      (9, "timestamp 'soon' is not ISO-8601 or a number"),
  ]


def test_wrong_field_counts_at_start_and_end(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a\n1\n2,x,2\n3,x,3,3\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [1]
  assert bad == [(0, 'row has 1 fields, the header has 3'),
                 (2, 'row has 4 fields, the header has 3')]


def test_only_bad_rows(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a\n1\n2\n')
  batch, bad, batches = _read_all(path, _cols(('a',), entity=None))
  assert len(batch.row) == 0 and batch.values.shape == (0, 1)
  assert [r for r, _ in bad] == [0, 1]
  _check_types(batches[-1][0], 1)


@pytest.mark.parametrize('chunk_bytes,batch_rows', [(1 << 20, 65536),
                                                    (7, 2), (40, 5)])
def test_bad_jsonl_lines_are_dead_letters_and_others_kept(
    tmp_path, monkeypatch, chunk_bytes, batch_rows):
  monkeypatch.setattr(table_jsonl, '_JSON_CHUNK_BYTES', chunk_bytes)
  path = _write(tmp_path, 'x.jsonl',
                '{"t": 1, "lab": "x", "a": 1}\n'      # 0 good
                '{"t": 2, "lab": "x", "a": \n'        # 1 invalid JSON
                '[1, 2]\n'                            # 2 not an object
                'null\n'                              # 3 not an object
                '7\n'                                 # 4 not an object
                '{"t": 5, "lab": "x"} {"t": 6}\n'     # 5 extra data
                '{"t": "later", "lab": "x", "a": 1}\n'  # 6 bad timestamp
                '{"lab": "x", "a": 1}\n'              # 7 missing timestamp
                '{"t": 8, "a": 1}\n'                  # 8 missing label
                '{"t": 9, "lab": "x", "a": "abc"}\n'  # 9 bad channel
                '{"t": 10, "lab": "x", "a": true}\n'  # 10 bad channel
                '  {"t": 11, "lab": "y", "a": 2}\n')  # 11 good
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None),
                            batch_rows=batch_rows)
  assert batch.row.tolist() == [0, 11]
  assert batch.time.tolist() == [S, 11 * S]
  assert batch.label.tolist() == ['x', 'y']
  reasons = dict(bad)
  assert sorted(reasons) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  assert reasons[1].startswith('invalid JSON: ')
  assert reasons[2] == 'line is a JSON array, not an object'
  assert reasons[3] == 'line is a JSON null, not an object'
  assert reasons[4] == 'line is a JSON number, not an object'
  assert reasons[5].startswith('invalid JSON: Extra data')
  assert reasons[6] == "timestamp 'later' is not ISO-8601 or a number"
  assert reasons[7] == 'missing timestamp'
  assert reasons[8] == 'missing label'
  assert reasons[9] == "channel 'a' value 'abc' is not a number"
  assert reasons[10] == "channel 'a' value 'true' is not a number"


def test_jsonl_null_first_line_does_not_crash(tmp_path):
  # pyarrow 25 crashes on read_json of a block starting with `null`.
  path = _write(tmp_path, 'x.jsonl', 'null\n{"t": 1, "lab": "x", "a": 1}\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [1]
  assert bad == [(0, 'line is a JSON null, not an object')]


def test_jsonl_mixed_types_in_one_column(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                f'{{"t": {T0}, "lab": 3, "a": 1, "dev": 5}}\n'
                '{"t": "2024-01-01T00:00:00Z", "lab": "b", "a": "2.5", '
                '"dev": "d"}\n'
                f'{{"t": {T0}, "lab": "c", "a": {{"x": 1}}}}\n')
  batch, bad, _ = _read_all(path, _cols(('a',)))
  assert batch.row.tolist() == [0, 1]
  assert batch.time.tolist() == [T0 * S, _ns('2024-01-01')]
  assert batch.label.tolist() == ['3', 'b']
  assert batch.entity.tolist() == ['5', 'd']
  np.testing.assert_array_equal(batch.values[:, 0], [1.0, 2.5])
  assert bad == [(2, 'channel \'a\' value \'{"x": 1}\' is not a number')]


# --- missing values -------------------------------------------------------


def test_missing_channel_values_become_nan_in_csv(tmp_path):
  cells = ['', '""', 'nan', 'NaN', 'inf', '-inf', 'Infinity', '-Infinity',
           'NA', 'null', 'N/A', 'None', '  ', ' 1.5 ', '-2e-3', '.5']
  text = 't,lab,a,b\n' + ''.join(f'{i},x,{c},1\n' for i, c in
                                 enumerate(cells))
  path = _write(tmp_path, 'x.csv', text)
  names, numeric = tables.read_header(path, 'csv')
  assert numeric == ['t', 'a', 'b']
  batch, bad, _ = _read_all(path, _cols(('a', 'b'), entity=None))
  assert bad == []
  assert batch.row.tolist() == list(range(len(cells)))
  expected = [np.nan] * 13 + [1.5, -0.002, 0.5]
  np.testing.assert_array_equal(batch.values[:, 0], expected)
  np.testing.assert_array_equal(batch.values[:, 1], 1.0)


def test_nan_spellings_on_the_fast_cast_path(tmp_path):
  # No cell that the pyarrow cast refuses: the whole column is one cast.
  path = _write(tmp_path, 'x.csv',
                't,lab,a\n1,x,nan\n2,x,inf\n3,x,-Infinity\n4,x,\n5,x,2\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == []
  np.testing.assert_array_equal(batch.values[:, 0],
                                [np.nan, np.nan, np.nan, np.nan, 2.0])


def test_missing_values_in_jsonl(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                '{"t": 1, "lab": "x", "a": null, "b": 1}\n'
                '{"t": 2, "lab": "x", "b": 2}\n'
                '{"t": 3, "lab": "x", "a": NaN, "b": 3}\n'
                '{"t": 4, "lab": "x", "a": "inf", "b": 4}\n'
                '{"t": 5, "lab": "x", "a": 5, "b": 5}\n')
  batch, bad, _ = _read_all(path, _cols(('a', 'b'), entity=None))
  assert bad == []
  np.testing.assert_array_equal(batch.values,
                                [[np.nan, 1], [np.nan, 2], [np.nan, 3],
                                 [np.nan, 4], [5, 5]])


def test_missing_values_in_parquet(tmp_path):
  path = _parquet(tmp_path, pa.table({
      't': [1, 2, 3], 'lab': ['x', 'y', None],
      'a': pa.array([1.0, None, float('inf')]),
      'b': pa.array([float('nan'), 2.0, 3.0])}))
  batch, bad, _ = _read_all(path, _cols(('a', 'b'), entity=None))
  assert bad == [(2, 'missing label')]
  np.testing.assert_array_equal(batch.values, [[1.0, np.nan], [np.nan, 2.0]])


def test_entity_and_label_text(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,dev,lab,a\n1,,  walk ,1\n2," d 2 ",run,1\n3,007,"",1\n')
  batch, bad, _ = _read_all(path, _cols(('a',)))
  assert batch.entity.tolist() == ['', 'd 2']
  assert batch.label.tolist() == ['walk', 'run']
  assert bad == [(2, 'missing label')]
  batch, _, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.entity.tolist() == ['', '']


# --- invalid UTF-8 --------------------------------------------------------


def test_invalid_utf8_in_a_used_csv_column_is_a_dead_letter(tmp_path):
  path = _write(tmp_path, 'x.csv',
                b't,dev,lab,a,note\n'
                b'1,d1,walk,1,ok\n'
                b'2,d\xff2,walk,2,ok\n'     # entity
                b'3,d3,w\xe9lk,3,ok\n'      # label (Latin-1)
                b'4,d4,walk,\xff,ok\n'      # channel
                b'5,d5,walk,5,caf\xe9\n'    # unused column: no harm
                b'6,d6,caf\xc3\xa9,6,ok\n')  # valid UTF-8
  names, _ = tables.read_header(path, 'csv')
  assert names == ['t', 'dev', 'lab', 'a', 'note']
  batch, bad, _ = _read_all(path, _cols(('a',)))
  assert batch.row.tolist() == [0, 4, 5]
  assert batch.label.tolist() == ['walk', 'walk', 'caf\u00e9']
  assert bad == [(1, "column 'dev' holds invalid UTF-8"),
                 (2, "column 'lab' holds invalid UTF-8"),
                 (3, "column 'a' holds invalid UTF-8")]


def test_invalid_utf8_in_a_timestamp_is_a_dead_letter(tmp_path):
  path = _write(tmp_path, 'x.csv', b't,lab,a\n1,x,1\n\xff,x,1\n3,x,1\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 2]
  assert bad == [(1, "column 't' holds invalid UTF-8")]


def test_invalid_utf8_in_jsonl_is_a_dead_letter(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                b'{"t": 1, "lab": "x", "a": 1}\n'
                b'{"t": 2, "lab": "\xff", "a": 1}\n'
                b'{"t": 3, "lab": "z", "a": 1}\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 2]
  assert bad == [(1, 'line is not valid UTF-8')]


# --- batches --------------------------------------------------------------


def _numbered_csv(n, bad_every=5):
  lines = ['t,lab,a']
  for i in range(n):
    if i % bad_every == 2:
      lines.append(f'{i},x,notanumber')
    elif i % bad_every == 4:
      lines.append(f'{i},x')
    elif i % 7 == 1:
      lines.append(f'{i},"multi\nline {i}",{i}')
    else:
      lines.append(f'{i},x,{i}')
  return '\n'.join(lines) + '\n'


def _check_numbered(batch, bad, n, bad_every=5):
  expected_bad = [i for i in range(n) if i % bad_every in (2, 4)]
  assert [r for r, _ in bad] == expected_bad
  good = [i for i in range(n) if i not in set(expected_bad)]
  assert batch.row.tolist() == good
  assert batch.time.tolist() == [i * S for i in good]
  assert batch.values[:, 0].tolist() == [float(i) for i in good]


def test_csv_batches_and_row_indices_across_batches(tmp_path):
  path = _write(tmp_path, 'x.csv', _numbered_csv(50))
  batch, bad, batches = _read_all(path, _cols(('a',), entity=None),
                                  batch_rows=3)
  assert len(batches) > 5
  assert all(len(b.row) <= 3 for b, _ in batches)
  _check_numbered(batch, bad, 50)
  last = -1
  for b, items in batches:  # batches follow each other without overlap
    _check_types(b, 1)
    span = b.row.tolist() + [r for r, _ in items]
    assert min(span) > last
    last = max(span)


def test_csv_many_small_blocks(tmp_path, monkeypatch):
  # Many pyarrow blocks: wrong field counts are reported ahead of the block
  # they belong to, and row indices must still be exact.
  monkeypatch.setattr(table_csv, 'MIN_BLOCK_BYTES', 64)
  path = _write(tmp_path, 'x.csv', _numbered_csv(300, bad_every=9))
  batch, bad, batches = _read_all(path, _cols(('a',), entity=None),
                                  batch_rows=4)
  assert len(batches) > 40
  _check_numbered(batch, bad, 300, bad_every=9)


def test_jsonl_batches_and_row_indices_across_batches(tmp_path, monkeypatch):
  monkeypatch.setattr(table_jsonl, '_JSON_CHUNK_BYTES', 50)  # lines span reads
  lines = []
  for i in range(40):
    if i % 6 == 5:
      lines.append('{broken')
    else:
      lines.append(json.dumps({'t': i, 'lab': 'x', 'a': i}))
    if i % 4 == 0:
      lines.append('')
  path = _write(tmp_path, 'x.jsonl', '\n'.join(lines) + '\n')
  batch, bad, batches = _read_all(path, _cols(('a',), entity=None),
                                  batch_rows=3)
  assert all(len(b.row) + len(items) == 3 for b, items in batches[:-1])
  expected_bad = [i for i in range(40) if i % 6 == 5]
  assert [r for r, _ in bad] == expected_bad
  good = [i for i in range(40) if i not in expected_bad]
  assert batch.row.tolist() == good
  assert batch.time.tolist() == [i * S for i in good]


def test_parquet_batches_and_row_indices_across_batches(tmp_path):
  n = 20
  path = str(tmp_path / 'x.parquet')
  pq.write_table(pa.table({
      't': pa.array([i if i % 5 else None for i in range(n)], pa.int64()),
      'lab': ['x'] * n, 'a': pa.array(range(n), pa.float64())}), path,
                 row_group_size=7)
  batch, bad, batches = _read_all(path, _cols(('a',), entity=None),
                                  batch_rows=3)
  assert all(len(b.row) + len(items) <= 3 for b, items in batches)
  assert [r for r, _ in bad] == [0, 5, 10, 15]
  assert all(reason == 'missing timestamp' for _, reason in bad)
  assert batch.row.tolist() == [i for i in range(n) if i % 5]


# --- headers and columns --------------------------------------------------


def test_read_header_numeric_detection_csv(tmp_path):
  path = _write(tmp_path, 'x.csv',
                't,dev,lab,a,b,c,empty,mixed\n'
                '2024-01-01,1,x,1,nan,-inf,,1\n'
                '2024-01-02,2,y,,2.5e3,Infinity,,two\n')
  names, numeric = tables.read_header(path, 'csv')
  assert names == ['t', 'dev', 'lab', 'a', 'b', 'c', 'empty', 'mixed']
  assert numeric == ['dev', 'a', 'b', 'c']  # 'empty' holds no number


def test_read_header_jsonl_keys_and_types(tmp_path):
  path = _write(tmp_path, 'x.jsonl',
                '{"t": "2024-01-01", "a": 1, "flag": true}\n'
                'not json\n'
                '{"b": null, "a": 2.5, "c": "3", "d": null}\n'
                '{"b": 4}\n')
  names, numeric = tables.read_header(path, 'jsonl')
  assert names == ['t', 'a', 'flag', 'b', 'c', 'd']
  assert numeric == ['a', 'b']


@pytest.mark.parametrize('name,content,message', [
    ('x.csv', '', 'is empty'),
    ('x.csv', '\n\n', 'is empty'),
    ('x.tsv', '', 'is empty'),
    ('x.jsonl', '', 'is empty'),
    ('x.jsonl', '\n \n', 'is empty'),
    ('x.jsonl', '[1, 2]\n{"a": 1}\n', 'is not a JSON object'),
    ('x.jsonl', 'nope\n', 'is not a JSON object'),
    ('x.parquet', 'not parquet', 'is not a readable Parquet file'),
])
def test_read_header_errors(tmp_path, name, content, message):
  path = _write(tmp_path, name, content)
  with pytest.raises(tables.ColumnError, match=message):
    tables.read_header(path, tables.format_of(path))


def test_header_only_csv_has_no_rows(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a\n')
  assert tables.read_header(path, 'csv') == (['t', 'lab', 'a'], [])
  assert list(tables.iter_batches(path, 'csv', _cols(('a',), None))) == []


NAMES = ['time', 'device', 'label', 'x', 'y', 'note', 'z']
NUMERIC = ['time', 'x', 'y', 'z']


def test_channels_default_to_the_numeric_columns():
  cols = tables.resolve_columns(NAMES, NUMERIC, 'time', 'device', 'label',
                                None)
  assert cols == tables.Columns('time', 'device', 'label', ('x', 'y', 'z'))
  cols = tables.resolve_columns(NAMES, NUMERIC + ['device'], 'time', None,
                                'label', None)
  assert cols.channels == ('device', 'x', 'y', 'z')


def test_explicit_channels_keep_the_given_order():
  cols = tables.resolve_columns(NAMES, NUMERIC, 'time', None, 'label',
                                ['z', 'note', 'x'])
  assert cols.channels == ('z', 'note', 'x')
  assert cols.entity is None


@pytest.mark.parametrize('args,words', [
    (('nope', 'device', 'label', None), ["timestamp column 'nope'",
                                         'time, device, label']),
    (('time', 'dev', 'label', None), ["entity column 'dev'"]),
    (('time', 'device', 'class', None), ["label column 'class'"]),
    (('time', 'device', 'label', ['x', 'w']), ["channel column 'w'",
                                               'columns: time, device']),
    (('time', 'time', 'label', None), ["'time'", 'timestamp and the entity']),
    (('time', 'device', 'time', None), ["'time'", 'timestamp and the label']),
    (('time', 'label', 'label', None), ["'label'", 'entity and the label']),
    (('time', 'device', 'label', ['x', 'label']), ["'label'",
                                                   'label and a channel']),
    (('time', 'device', 'label', ['x', 'x']), ["'x' is given twice"]),
    (('time', 'device', 'label', []), ['no channel columns given']),
])
def test_resolve_columns_errors(args, words):
  with pytest.raises(tables.ColumnError) as e:
    tables.resolve_columns(NAMES, NUMERIC, *args)
  message = str(e.value)
  for word in words:
    assert word in message
  assert '\n' not in message


def test_no_numeric_channels_left():
  with pytest.raises(tables.ColumnError, match='no numeric channel columns'):
    tables.resolve_columns(NAMES, ['time'], 'time', 'device', 'label', None)


def test_duplicate_header_name_in_use():
  with pytest.raises(tables.ColumnError, match='more than once'):
    tables.resolve_columns(['t', 'a', 'a', 'lab'], ['t', 'a'], 't', None,
                           'lab', ['a'])


def test_iter_batches_argument_errors(tmp_path):
  path = _write(tmp_path, 'x.csv', CSV)
  with pytest.raises(ValueError, match='timestamp unit'):
    tables.iter_batches(path, 'csv', _cols(), timestamp_unit='h')
  with pytest.raises(ValueError, match='batch_rows'):
    tables.iter_batches(path, 'csv', _cols(), batch_rows=0)
  with pytest.raises(ValueError, match='format'):
    tables.iter_batches(path, 'xlsx', _cols())


def test_parquet_missing_column_is_a_column_error(tmp_path):
  path = _parquet(tmp_path, _parquet_table())
  with pytest.raises(tables.ColumnError, match="'zz'"):
    list(tables.iter_batches(path, 'parquet', _cols(('zz',))))


# --- odd CSV files --------------------------------------------------------


def test_header_without_newline_has_no_rows(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a')
  assert tables.read_header(path, 'csv') == (['t', 'lab', 'a'], [])
  assert list(tables.iter_batches(path, 'csv', _cols(('a',), None))) == []


def test_last_line_without_newline(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a\n1,x,1\n2,y,2')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert bad == [] and batch.row.tolist() == [0, 1]


def test_missing_words_are_kept_as_text_in_label_and_entity(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,dev,lab,a\n1,null,NA,1\n2,N/A,nan,2\n')
  batch, bad, _ = _read_all(path, _cols(('a',)))
  assert bad == []
  assert batch.entity.tolist() == ['null', 'N/A']
  assert batch.label.tolist() == ['NA', 'nan']


def test_whitespace_only_csv_line_is_a_one_field_row(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a\n1,x,1\n \n2,y,2\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0, 2]
  assert bad == [(1, 'row has 1 fields, the header has 3')]


def test_unterminated_quote_does_not_crash(tmp_path):
  path = _write(tmp_path, 'x.csv', 't,lab,a\n1,x,1\n2,"abc,2\n3,y,3\n')
  batch, bad, _ = _read_all(path, _cols(('a',), entity=None))
  assert batch.row.tolist() == [0]
  assert bad == [(1, 'row has 2 fields, the header has 3')]


def test_record_longer_than_a_block_is_a_plain_error(tmp_path, monkeypatch):
  monkeypatch.setattr(table_csv, 'MIN_BLOCK_BYTES', 64)
  path = _write(tmp_path, 'x.csv',
                't,lab,a\n1,x,1\n2,"' + 'long\n' * 100 + '",2\n')
  with pytest.raises(ValueError, match='cannot read .* after data row'):
    list(tables.iter_batches(path, 'csv', _cols(('a',), None),
                             batch_rows=1))
