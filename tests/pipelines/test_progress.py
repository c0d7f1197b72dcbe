"""The progress line (pipelines/progress.py, transforms/runtime/progress.py).

Real pipeline runs on small generated inputs, with the interval made
small so that even a short run shows lines: for each modality, the lines
name a plausible done of total (the images listed; twice the input's
bytes for text and sensor, read in two passes), their rates are positive,
and the last line says 100%. `--progress off` shows nothing and `--progress
bar` redraws one line with carriage returns. Timings are not asserted.
Below them, the pieces: reading counts exactly the input's bytes, a
worker in another process reports through the run's folder, the lines'
wording, the bar on a pseudo-terminal (its width, a log line below it, its
line ended however the run ends), and the flag's checks.
"""

import contextlib
import fcntl
import logging
import os
import pickle
import pty
import re
import struct
import subprocess
import sys
import termios
import time
import tty

import pytest
import tqdm

import imagegen
import sensorgen
from pipelines import options as options_lib
from pipelines import outcome
from pipelines import preprocess
from pipelines import progress as progress_lib
from pipelines import signals
from transforms.runtime import progress as core_progress
from transforms.core.errors import UsageError
from transforms.modalities.text import parse
from transforms.sources import files
from transforms.sources import tables

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
RATE = re.compile(r', ([\d,.]+) (?:([kMG]?B)|images)/s')


@pytest.fixture(autouse=True)
def _short_interval(monkeypatch):
  monkeypatch.setattr(progress_lib, 'INTERVAL_SECONDS', 0.1)


def _lines(caplog):
  return [r.getMessage() for r in caplog.records
          if r.name == 'pipelines.progress']


def _text_input(tmp_path, n=300):
  src = tmp_path / 'docs.csv'
  rows = ['text,label'] + [f'"word{i % 7} other{i % 5} doc{i}",c{i % 3}'
                           for i in range(n)]
  src.write_text('\n'.join(rows) + '\n', encoding='utf-8')
  return src


def _check_rates(lines):
  rated = [RATE.search(line) for line in lines]
  rated = [m for m in rated if m]
  assert rated, lines
  for m in rated:
    assert float(m.group(1).replace(',', '')) > 0, m.string


def test_image_run_reports_images_of_images_listed(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger='pipelines.progress')
  root = tmp_path / 'images'
  listed = sum(imagegen.write_good_images(str(root)).values())
  preprocess.run(['--input', str(root), '--output', str(tmp_path / 'out'),
                  '--image_size', '32', '--progress', 'log'])
  lines = _lines(caplog)
  assert lines and all(line.startswith('progress: ') for line in lines)
  counted = [re.search(r'\(([\d,]+) of ([\d,]+) images', line)
             for line in lines]
  counted = [tuple(int(g.replace(',', '')) for g in m.groups())
             for m in counted if m]
  assert counted, lines
  assert all(total == listed and 0 < done <= total
             for done, total in counted), lines
  _check_rates(lines)
  assert lines[-1].startswith(
      f'progress: 100% ({listed:,} of {listed:,} images), '), lines[-1]
  assert 'done in' in lines[-1]


@pytest.mark.parametrize('flags, passes', [
    ([], 3),  # a contents pass for the near-duplicate groups first
    (['--near_duplicates', 'off'], 2)])
def test_text_run_reports_bytes_of_its_passes(tmp_path, caplog, flags,
                                              passes):
  caplog.set_level(logging.INFO, logger='pipelines.progress')
  src = _text_input(tmp_path)
  preprocess.run(['--modality', 'text', '--input', str(src), '--output',
                  str(tmp_path / 'out'), '--progress', 'log'] + LOCAL +
                 flags)
  lines = _lines(caplog)
  size = os.path.getsize(src)
  total = core_progress.format_bytes(passes * size)
  of_total = [line for line in lines if f' of {total} read' in line]
  assert of_total, lines
  assert all(f'{passes} passes over {core_progress.format_bytes(size)} of input'
             in line for line in of_total)
  _check_rates(of_total)
  assert lines[-1].startswith(f'progress: 100% ({total} of {total} read'), (
      lines[-1])
  assert '; 300 documents; records: 300 encoded, 300 written)' in lines[-1]


def test_sensor_run_reports_bytes_and_rows(tmp_path, caplog):
  caplog.set_level(logging.INFO, logger='pipelines.progress')
  src = tmp_path / 'rows.csv'
  frame = sensorgen.frame(devices=4, rows_per_device=100)
  frame.to_csv(src, index=False)
  preprocess.run(['--modality', 'sensor', '--timestamp_column', 'time',
                  '--entity_column', 'device',
                  '--input', str(src), '--output', str(tmp_path / 'out'),
                  '--progress', 'log'] + LOCAL)
  lines = _lines(caplog)
  total = core_progress.format_bytes(2 * os.path.getsize(src))
  of_total = [line for line in lines if f' of {total} read' in line]
  assert of_total, lines
  _check_rates(of_total)
  assert lines[-1].startswith(f'progress: 100% ({total} of {total} read'), (
      lines[-1])
  n = len(frame)
  assert f'; {n:,} rows; records: {n:,} encoded, {n:,} written)' in (
      lines[-1])


def test_off_shows_nothing(tmp_path, caplog, capsys):
  caplog.set_level(logging.INFO, logger='pipelines.progress')
  src = _text_input(tmp_path, 60)
  preprocess.run(['--modality', 'text', '--input', str(src), '--output',
                  str(tmp_path / 'out'), '--progress', 'off'] + LOCAL)
  assert not _lines(caplog)
  assert 'progress' not in capsys.readouterr().err


def test_bar_redraws_one_line(tmp_path, caplog, capsys):
  caplog.set_level(logging.INFO, logger='pipelines.progress')
  src = _text_input(tmp_path, 60)
  preprocess.run(['--modality', 'text', '--input', str(src), '--output',
                  str(tmp_path / 'out'), '--progress', 'bar'] + LOCAL)
  err = capsys.readouterr().err
  # Drawn in place: carriage returns, no log records.
  assert len(re.findall(r'\r *\d+%\|', err)) >= 2, err
  assert not _lines(caplog)
  # Three passes: the contents pass (near-duplicate groups), statistics,
  # examples.
  total = tqdm.tqdm.format_sizeof(3 * os.path.getsize(src), divisor=1000)
  last = err.rsplit('\r', 1)[1]
  assert re.match(rf'100%\|.+\| {re.escape(total)}/{re.escape(total)} '
                  r'\[\d\d:\d\d<00:00, .+B/s, 60 records written\] *\n$',
                  last), repr(last)


# ------------------------------------------------------------- the pieces --


def test_reading_counts_the_bytes_of_each_format(tmp_path):
  frame = sensorgen.frame(devices=2, rows_per_device=50)
  columns = tables.Columns('time', 'device', 'label', ('ch0', 'ch1', 'ch2'))
  for name, write in (('r.csv', lambda p: frame.to_csv(p, index=False)),
                      ('r.jsonl', lambda p: frame.to_json(
                          p, orient='records', lines=True)),
                      ('r.parquet', lambda p: frame.to_parquet(p))):
    path = str(tmp_path / name)
    write(path)
    reads = files.ReadCount()
    rows = sum(len(b.row) for b, _ in tables.iter_batches(
        path, tables.format_of(path), columns, batch_rows=16, reads=reads))
    assert rows == len(frame)
    assert reads.take() == os.path.getsize(path), name
    assert reads.take() == 0
  folder = tmp_path / 'docs'
  (folder / 'a').mkdir(parents=True)
  for i in range(3):
    (folder / 'a' / f'{i}.txt').write_text('x' * (10 + i))
  reads = files.ReadCount()
  paths = sorted(str(p) for p in (folder / 'a').iterdir())
  list(parse.iter_folder_batches(paths, str(folder), reads=reads))
  assert reads.take() == 10 + 11 + 12


def test_a_file_read_again_counts_once():
  reads = files.ReadCount()
  reads.reached('a', 100)
  reads.reached('a', 40)  # read again from the start
  reads.reached('a', 150)
  reads.reached('b', 10)
  assert reads.take() == 160


def test_another_process_reports_through_the_folder(tmp_path):
  channel = core_progress.start()
  try:
    counter = core_progress.counter('text', 'bytes_read')
    code = ('import pickle, sys, time\n'
            'counter = pickle.loads(sys.stdin.buffer.read())\n'
            'counter.inc(5)\n'
            'counter.inc(7)\n'
            'time.sleep(2.5)\n')
    subprocess.run([sys.executable, '-c', code], input=pickle.dumps(counter),
                   check=True, timeout=120,
                   env={**os.environ, 'PYTHONPATH': ROOT})
    counter.inc(3)  # in this process: the in-memory tally
    assert core_progress.read(channel) == {'text.bytes_read': 15}
  finally:
    core_progress.stop(channel)
  assert not os.path.exists(channel.folder)


def test_counters_made_outside_a_run_report_nowhere():
  counter = core_progress.counter('image', 'listed')
  counter.inc(2)  # only its Beam counter
  channel = core_progress.start()
  try:
    assert core_progress.read(channel) == {}
  finally:
    core_progress.stop(channel)


def test_lines_say_done_of_total_rate_and_time_left():
  measure = core_progress.ItemMeasure('image', 'images', 'listed',
                                      ('processed',))
  reporter = progress_lib.Reporter(measure)
  reporter._start = 0.0  # pylint: disable=protected-access
  reporter._samples.append((0.0, 0))  # pylint: disable=protected-access
  values = {'image.listed': 3000, 'image.processed': 1530}
  line = reporter._line(values, 10.0)  # pylint: disable=protected-access
  assert line == ('progress: 51% (1,530 of 3,000 images), 153 images/s, '
                  'about 10 s left')
  assert reporter._line({'image.listed': 40}, 11.0) == (  # pylint: disable=protected-access
      'progress: listing images: 40 found so far')


def test_bar_says_done_of_total_rate_time_left_and_what_runs(capsys):
  measure = core_progress.ItemMeasure('image', 'images', 'listed',
                                      ('processed',))
  with progress_lib.Reporter(measure, bar=True, interval=3600) as reporter:
    bar = reporter._bar  # pylint: disable=protected-access
    bar.start_t -= 10.0
    reporter._draw({'image.listed': 40})  # pylint: disable=protected-access
    assert str(bar).endswith(', listing images: 40 found so far]'), str(bar)
    reporter._draw({'image.listed': 3000, 'image.processed': 1530})  # pylint: disable=protected-access
    assert re.fullmatch(r' 51%\|.{10}\| 1530/3000 \[00:1\d<00:\d\d, '
                        r'1\d\d\.\d\dimages/s\]', str(bar)), str(bar)
    reporter._draw({'image.listed': 3000, 'image.processed': 3001})  # pylint: disable=protected-access
    assert re.fullmatch(r'100%\|.{10}\| 3000/3000 \[00:1\d<00:00, .+/s, '
                        r'finishing\]', str(bar)), str(bar)
  # Nothing is drawn before the first interval.
  assert not capsys.readouterr().err


def _read_terminal(fd) -> str:
  out = b''
  while True:
    try:
      data = os.read(fd, 4096)
    except OSError:  # the terminal was closed and everything read
      break
    if not data:
      break
    out += data
  return out.decode('utf-8')


@pytest.mark.parametrize('ending, columns, rows', [
    (None, 60, 24), (RuntimeError, 60, 24), (signals.Cancelled, 60, 24),
    (None, 0, 0)])  # a terminal of unknown size: 80 columns
def test_bar_on_a_terminal_fits_and_ends_its_line(monkeypatch, ending,
                                                  columns, rows):
  master, slave = pty.openpty()
  fcntl.ioctl(slave, termios.TIOCSWINSZ,
              struct.pack('HHHH', rows, columns, 0, 0))
  tty.setraw(slave)  # no newline translation
  terminal = open(slave, 'w', encoding='utf-8')  # pylint: disable=consider-using-with
  monkeypatch.setattr(sys, 'stderr', terminal)
  handler = logging.StreamHandler(terminal)
  logging.getLogger().addHandler(handler)
  measure = core_progress.ItemMeasure('image', 'images', 'listed',
                                      ('processed',))
  try:
    assert progress_lib.mode('auto') == 'bar'
    with pytest.raises(ending) if ending else contextlib.nullcontext():
      with progress_lib.report('bar', measure) as reporter:
        core_progress.counter('image', 'listed').inc(3000)
        processed = core_progress.counter('image', 'processed')
        processed.inc(100)
        deadline = time.monotonic() + 60
        while not reporter._shown and time.monotonic() < deadline:  # pylint: disable=protected-access
          time.sleep(0.05)
        logging.getLogger('tests').warning('a warning below the bar')
        processed.inc(700)
        time.sleep(0.3)
        if ending:
          raise ending('stopped')
  finally:
    logging.getLogger().removeHandler(handler)
    terminal.close()
  out = _read_terminal(master)
  os.close(master)
  drawn = [line for line in re.split(r'[\r\n]', out) if line.strip()]
  assert any(re.match(r' *\d+%\|.+\| \d+/3000 \[', line)
             for line in drawn), out
  assert all(len(line) <= (columns or 80) for line in drawn), out
  # The bar is cleared before the log line, which starts a line of its own.
  assert re.search(r'\r *\ra warning below the bar\n', out), repr(out)
  # Its line is ended however the run ends; at 100% only when it succeeded.
  assert out.endswith('\n'), repr(out)
  assert drawn[-1].startswith('100%') == (ending is None), repr(out)


def test_two_image_passes_and_byte_totals():
  twice = core_progress.ItemMeasure('image', 'images', 'listed',
                                    ('identified', 'processed'), passes=2)
  assert twice.done_total({'image.listed': 10, 'image.identified': 10,
                           'image.processed': 4}) == (14, 20)
  assert twice.done_total({'image.listed': 10}) == (0, None)
  text = core_progress.BytesMeasure('text', 1_500_000, 3,
                                    ('documents', 'documents'))
  values = {'text.bytes_read': 2_000_000, 'text.documents': 1200}
  assert text.done_total(values) == (2_000_000, 4_500_000)
  assert text.note(values) == ('3 passes over 1.5 MB of input; 1,200 '
                               'documents')
  assert text.note(values, short=True) == '1,200 documents'
  values.update({'text.encoded': 900, 'text.written': 300})
  assert text.note(values, short=True) == '300 records written'
  assert text.note(values) == ('3 passes over 1.5 MB of input; 1,200 '
                               'documents; records: 900 encoded, 300 written')


def test_progress_flag_is_checked_and_not_hashed(tmp_path):

  class Stream:

    def __init__(self, tty):
      self._tty = tty

    def isatty(self):
      return self._tty

  assert progress_lib.mode('auto', Stream(True)) == 'bar'
  assert progress_lib.mode('auto', Stream(False)) == 'log'
  assert progress_lib.mode('LOG') == 'log'
  with pytest.raises(UsageError, match='--progress must be one of auto, '
                     'bar, log, off'):
    progress_lib.mode('loud')
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel
  base = ['--input', str(tmp_path / 'in'), '--output',
          str(tmp_path / 'out')]
  hashes = {options_lib.resolve_config(PipelineOptions(
      base + extra)).config_hash() for extra in (
          [], ['--progress', 'off'], ['--progress', 'bar'])}
  assert len(hashes) == 1


def test_bad_progress_value_is_a_bad_invocation(tmp_path, capsys):
  src = _text_input(tmp_path, 10)
  code = preprocess.main(['--modality', 'text', '--input', str(src),
                          '--output', str(tmp_path / 'out'), '--progress',
                          'sometimes'])
  assert code == outcome.EXIT_USAGE
  assert 'error: --progress must be one of auto, bar, log, off' in (
      capsys.readouterr().err)
  assert not (tmp_path / 'out').exists()
