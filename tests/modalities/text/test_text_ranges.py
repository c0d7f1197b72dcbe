"""Large text CSV files are read in byte ranges by local worker processes,
with the same records, dead letters and document ids as when one thread
reads them whole.

Quoted CSV may hold a newline inside a field, so a range may only end
between records: the ranges are cut where the count of quotes is even,
and each range is checked to have ended outside any field (a row is put
after its bytes and must come back as a row of its own). A file whose
quotes break the counting (a quote inside an unquoted field, which the
reader keeps as a character) is caught by that check, and the rest of it
is read in one piece.

Real runs on the DirectRunner with a tiny range size, on files with what
exports have: quoted texts with commas, doubled quotes and newlines,
CRLF inside a quoted field, repeated texts, a row with a field too many,
an empty text, a missing label, invalid UTF-8, empty lines.
"""

import csv
import io
import os
import random
import shutil

import numpy as np
import pytest

import range_runs
import readback
from transforms.core import bands
from transforms.runtime import processes
from transforms.modalities.text import documents
from transforms.modalities.text import inputs
from transforms.modalities.text import parse
from transforms.modalities.text import preprocessing
from transforms.modalities.text import ranges as text_ranges
from transforms.modalities.text import signature_kernels
from transforms.modalities.text import signatures
from transforms.sources import table_ranges
from transforms.sources import tables

LOCAL = ['--direct_running_mode', 'in_memory', '--direct_num_workers', '1']
TEXT = ['--modality', 'text', '--text_column', 'text', '--label_column',
        'label', '--max_bad_fraction', '0.5', '--vocab_size', '200']
RANGE = 2048
WORDS = ('the cat sat on a mat while rain fell over quiet hills and '
         'rivers ran past old mills').split()


def _text(rng, i):
  words = [rng.choice(WORDS) for _ in range(rng.randint(3, 25))]
  if i % 7 == 0:
    words.insert(1, 'said "hello, there"')  # quotes and a comma
  if i % 11 == 0:
    words.insert(2, 'line one\nline two')  # a newline in the field
  if i % 13 == 0:
    words.insert(0, 'crlf\r\ninside')
  return ' '.join(words)


def _quoted_csv(rows=400, seed=5) -> bytes:
  rng = random.Random(seed)
  out = io.StringIO(newline='')
  writer = csv.writer(out, lineterminator='\n')
  writer.writerow(['id', 'text', 'label'])
  repeated = _text(rng, 1)
  for i in range(rows):
    text = repeated if i % 17 == 0 else _text(rng, i)
    writer.writerow([i, text, rng.choice(['sports', 'news', 'arts'])])
  lines = out.getvalue().encode().split(b'\n')
  # Oddities, on lines that are whole records (no quote in them).
  plain = [k for k, line in enumerate(lines[1:-1], 1) if b'"' not in line]
  lines[plain[10]] += b',extra'  # a field too many
  lines[plain[20]] = b'777,,news'  # an empty text
  lines[plain[30]] = b'778,some words,'  # a missing label
  lines[plain[40]] = b'779,bad \xff bytes,news'  # invalid UTF-8
  lines.insert(plain[50], b'')  # an empty line (not a row)
  return b'\n'.join(lines)


def _lone_quotes_csv(rows=300, seed=9) -> bytes:
  """Quoted texts of two lines each, and halfway an unquoted field holding
  one quote (a 5" screen), which the reader keeps as a character: counted
  from the header, the quotes are then even exactly inside the quoted
  texts. A row without a label before and after it."""
  rng = random.Random(seed)
  lines = [b'text,label']
  for i in range(rows):
    if i == rows // 2:
      lines.append(b'a 5" screen,news')
    if i in (10, rows - 10):
      lines.append(b'no label here,')
    words = ' '.join(rng.choice(WORDS) for _ in range(rng.randint(3, 20)))
    lines.append(f'"{words}\nsecond line, {i}",'
                 f'{rng.choice(["sports", "news"])}'.encode())
  return b'\n'.join(lines) + b'\n'


def _whole(path):
  """(ids, texts, labels, bad) read in one piece."""
  ids, texts, labels, bad = [], [], [], []
  for docs, dead in parse.iter_table_batches(
      path, 'csv', inputs.TextColumns('text', 'label'), 'f'):
    ids += docs.ids
    texts += docs.text
    labels += docs.label
    bad += dead
  return ids, texts, labels, bad


def _ranged(path, ranges):
  """The same from the ranges, as the reader puts them together; None
  when a range did not end between records."""
  ids, texts, labels, bad = [], [], [], []
  offset = 0
  make_ids = documents.table_ids('f')
  for start, end in ranges.spans:
    found = parse.parse_csv_range(path, 'csv',
                                  inputs.TextColumns('text', 'label'),
                                  'replace', ranges.header, start, end)
    if found is None:
      return None
    for docs, dead in found.batches:
      ids += make_ids([r + offset for r in docs.ids])
      texts += docs.text
      labels += docs.label
      bad += [(make_ids([r + offset])[0], reason) for r, reason in dead]
    offset += found.records
  return ids, texts, labels, bad


def test_ranges_end_between_records_and_read_as_one_piece(tmp_path):
  path = tmp_path / 'docs.csv'
  path.write_bytes(_quoted_csv())
  ranges = tables.csv_ranges(str(path), 'csv', RANGE, quotes=True)
  assert ranges is not None and len(ranges.spans) >= 4
  whole = _whole(str(path))
  assert _ranged(str(path), ranges) == whole
  # What the fixture is about.
  reasons = [reason for _, reason in whole[3]]
  assert any('fields' in r for r in reasons), reasons
  assert documents.EMPTY_TEXT in reasons and documents.MISSING_LABEL in reasons
  assert any('\n' in t for t in whole[1]) and any('"' in t for t in whole[1])
  assert any('\ufffd' in t for t in whole[1])  # invalid UTF-8, replaced


def test_a_range_cut_inside_a_quoted_field_is_refused(tmp_path):
  path = tmp_path / 'docs.csv'
  data = _quoted_csv()
  path.write_bytes(data)
  header = data[:data.index(b'\n') + 1]
  # Cut right after the newline inside the first quoted multi-line text.
  inside = data.index(b'line one\n') + len(b'line one\n')
  columns = inputs.TextColumns('text', 'label')
  assert parse.parse_csv_range(str(path), 'csv', columns, 'replace',
                               header, len(header), inside) is None
  # The same range ended at the end of that record is read.
  after = data.index(b'\n', data.index(b'line two')) + 1
  found = parse.parse_csv_range(str(path), 'csv', columns, 'replace',
                                header, len(header), after)
  assert found is not None and 'line one\nline two' in found.batches[-1][0].text[-1]


def test_lone_quotes_are_caught_and_read_in_one_piece(tmp_path):
  path = tmp_path / 'docs.csv'
  path.write_bytes(_lone_quotes_csv())
  ranges = tables.csv_ranges(str(path), 'csv', RANGE, quotes=True)
  assert ranges is not None
  # The ranges before the lone quote end between records; after it, the
  # count of quotes put a cut inside a quoted field: the check sees it.
  columns = inputs.TextColumns('text', 'label')
  first = parse.parse_csv_range(str(path), 'csv', columns, 'replace',
                                ranges.header, *ranges.spans[0])
  assert first is not None and first.records > 10
  assert _ranged(str(path), ranges) is None
  whole = _whole(str(path))
  assert len(whole[1]) == 301 and 'a 5" screen' in whole[1]
  quoted = [t for t in whole[1] if t != 'a 5" screen']
  assert all(t.endswith(f'\nsecond line, {i}') for i, t in enumerate(quoted))
  assert [reason for _, reason in whole[3]] == [documents.MISSING_LABEL] * 2


@pytest.mark.parametrize('extra', [[], ['--split_key', 'id'],
                                   ['--drop_duplicates'],
                                   ['--near_duplicates', 'off']],
                         ids=['content', 'id', 'drop_duplicates',
                              'no_near_duplicates'])
@pytest.mark.parametrize('kind', ['quoted', 'lone_quotes'])
def test_ranges_give_the_records_and_dead_letters_of_one_piece(
    tmp_path, monkeypatch, extra, kind):
  src = tmp_path / 'docs.csv'
  src.write_bytes(_quoted_csv() if kind == 'quoted' else _lone_quotes_csv())
  monkeypatch.setattr(table_ranges, 'RANGE_BYTES', RANGE)
  ranged, whole = range_runs.run_with_and_without_workers(
      src, tmp_path, TEXT + extra + LOCAL)
  # A contents pass first, for the near-duplicate groups (the default) or
  # the content rules that drop.
  passes = 2 if extra == ['--near_duplicates', 'off'] else 3
  assert ranged[1] == passes and whole[1] == 0
  # The reading workers' pool; those of a run that signs also load the
  # signatures' compiled loops.
  modules = ((text_ranges.__name__,) if passes == 2 else
             (text_ranges.__name__, signature_kernels.__name__))
  assert (2, modules) in processes._POOLS  # pylint: disable=protected-access
  assert ranged[0]['fingerprint'] == whole[0]['fingerprint']
  assert ranged[0]['totals'] == whole[0]['totals']
  assert ranged[2] == whole[2]
  if kind == 'quoted':
    reasons = [reason for _, reason, _ in ranged[2]]
    assert any('fields' in r for r in reasons), reasons
    assert documents.MISSING_LABEL in reasons
  else:
    # Rows 10 and 292: the second is read after the ranges stopped.
    assert [(i, r) for i, r, _ in ranged[2]] == [
        ('docs.csv:10', documents.MISSING_LABEL),
        ('docs.csv:292', documents.MISSING_LABEL)]
  if kind == 'quoted' and extra == ['--drop_duplicates']:
    assert any('duplicate' in r for _, r, _ in ranged[2]), ranged[2]
  # The digests kept between passes went with the publish.
  assert not list((tmp_path / 'out_2').glob('**/keys_tmp'))
  if extra != ['--split_key', 'id']:
    # (Keyed by id, the fixture's repeated texts land in several splits,
    # which the validator rightly calls a leak, with or without ranges.)
    readback.assert_valid(tmp_path / 'out_2')


def test_without_worker_processes_the_file_is_read_in_one_piece(
    tmp_path, monkeypatch, caplog):
  """Workers that cannot start: a warning, and the same records."""
  src = tmp_path / 'docs.csv'
  src.write_bytes(_quoted_csv())
  monkeypatch.setattr(table_ranges, 'RANGE_BYTES', RANGE)
  range_runs.assert_same_without_workers(src, tmp_path, monkeypatch, caplog,
                                         TEXT + LOCAL, 'read CSV ranges')


def test_an_odd_count_of_quotes_does_not_make_one_range_of_the_rest(
    tmp_path, monkeypatch):
  """One lone quote and no other: the count stays odd to the end. Each
  range then ends after a bounded search, at a newline, and here those
  are between records: the ranges are read, and agree with one piece."""
  rng = random.Random(3)
  lines = [b'text,label', b'a 5" screen,news']
  lines += [f'{" ".join(rng.choice(WORDS) for _ in range(8))},arts'.encode()
            for _ in range(400)]
  path = tmp_path / 'docs.csv'
  path.write_bytes(b'\n'.join(lines) + b'\n')
  monkeypatch.setattr(table_ranges, '_QUOTED_LINE_SEARCH', 300)
  ranges = tables.csv_ranges(str(path), 'csv', RANGE, quotes=True)
  assert len(ranges.spans) >= 5
  assert all(end - start < RANGE + 300 + 200 for start, end in ranges.spans)
  assert ranges.spans[0][0] == len(lines[0]) + 1
  assert ranges.spans[-1][1] == path.stat().st_size
  assert all(a[1] == b[0] for a, b in zip(ranges.spans, ranges.spans[1:]))
  assert _ranged(str(path), ranges) == _whole(str(path))


def _rule(by_content=True, max_tokens=64):
  settings = preprocessing.TextConfig(
      text_column='text', label_column='label', lowercase=True,
      strip_punctuation=False, max_tokens=max_tokens, vocab_size=0,
      min_frequency=1, oov_buckets=1, ngrams=(1, 1), output='ids',
      keep_text=False, invalid_utf8='replace')
  return text_ranges.KeyRule(settings, by_content,
                             (('train', 0.8), ('test', 0.2)),
                             ('train', 'test'))


def _same_keys(a, b):
  assert len(a) == len(b)
  for (split_a, digests_a, _), (split_b, digests_b, _) in zip(a, b):
    assert digests_a == digests_b
    assert (split_a is None) == (split_b is None)
    if split_a is not None:
      assert split_a.tolist() == split_b.tolist()


def _same_splits(without_digests, keys):
  """The splits of `keys`, without their digests."""
  assert len(without_digests) == len(keys)
  for (split_a, digests_a, _), (split_b, _, _) in zip(without_digests, keys):
    assert digests_a is None
    assert (split_a is None) == (split_b is None)
    if split_a is not None:
      assert split_a.tolist() == split_b.tolist()


def test_a_ranges_keys_are_kept_for_the_later_passes(tmp_path, monkeypatch):
  """The first pass keeps a range's digests and splits; a later pass reads
  them back (nothing is computed: computing fails here) and gets the same.
  Another key rule, a changed file or a damaged kept file is computed
  again; a pass that signs documents always computes."""
  src = tmp_path / 'docs.csv'
  src.write_bytes(_quoted_csv())
  path, folder = str(src), str(tmp_path / 'keys')
  ranges = tables.csv_ranges(path, 'csv', RANGE, quotes=True)
  start, end = ranges.spans[1]
  columns = inputs.TextColumns('text', 'label')

  def read(rule, digests_needed=True, signatures_needed=False):
    return text_ranges.read_range(path, 'csv', columns, 'replace',
                                  ranges.header, start, end, rule,
                                  digests_needed, signatures_needed, folder)

  # Splits keyed by content need the digests, found but not sent when
  # the pass does not need them.
  _same_splits(text_ranges.read_range(
      path, 'csv', columns, 'replace', ranges.header, start, end, _rule(),
      False)[1], read(_rule())[1])
  shutil.rmtree(folder)
  found, first = read(_rule())
  assert sum(len(d) for d in first[0][1]) and len(os.listdir(folder)) == 1
  _, by_id = read(_rule(by_content=False))
  assert by_id[0][0] is None and len(os.listdir(folder)) == 2
  computed = text_ranges.batch_keys

  def no_computing(*unused_args, **unused_kwargs):
    raise AssertionError('computed again')

  monkeypatch.setattr(text_ranges, 'batch_keys', no_computing)
  again_found, again = read(_rule())
  assert again_found.records == found.records
  _same_keys(again, first)
  # A pass that does not need the digests gets the same splits, and no
  # digests.
  _same_splits(read(_rule(), digests_needed=False)[1], first)
  _same_keys(read(_rule(by_content=False))[1], by_id)
  for other in (lambda: read(_rule(max_tokens=3)),
                lambda: read(_rule(), signatures_needed=True)):
    with pytest.raises(AssertionError, match='computed again'):
      other()
  monkeypatch.setattr(text_ranges, 'batch_keys', computed)
  # A damaged kept file, then a changed input file: computed again.
  for name in os.listdir(folder):
    with open(os.path.join(folder, name), 'r+b') as f:
      f.truncate(20)
  _same_keys(read(_rule())[1], first)
  monkeypatch.setattr(text_ranges, 'batch_keys', no_computing)
  _same_keys(read(_rule())[1], first)  # kept again, whole
  stat = os.stat(path)
  os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
  with pytest.raises(AssertionError, match='computed again'):
    read(_rule())


def test_a_range_read_for_its_keys_only_comes_without_its_texts(tmp_path):
  """The contents pass needs a range's keys, ids and labels, not its
  texts: read so, the documents come without texts and with everything
  else as a full read gives it (rows, labels, bad rows, keys, signatures),
  whether the keys are computed or read back from a kept file."""
  src = tmp_path / 'docs.csv'
  src.write_bytes(_quoted_csv())
  path, folder = str(src), str(tmp_path / 'keys')
  ranges = tables.csv_ranges(path, 'csv', RANGE, quotes=True)
  columns = inputs.TextColumns('text', 'label')
  for start, end in ranges.spans[:3]:

    def read(texts_needed, signatures_needed, start=start, end=end):
      return text_ranges.read_range(
          path, 'csv', columns, 'replace', ranges.header, start, end,
          _rule(), True, signatures_needed, folder, texts_needed)

    for signatures_needed in (True, False):
      full, full_keys = read(True, signatures_needed)
      slim, slim_keys = read(False, signatures_needed)
      assert slim.records == full.records
      assert any(len(d.ids) for d, _ in full.batches)
      for (a, bad_a), (b, bad_b) in zip(full.batches, slim.batches,
                                        strict=True):
        assert len(a.text) == len(a.ids) and b.text is None
        assert (b.ids, b.label, bad_b) == (a.ids, a.label, bad_a)
      _same_keys(slim_keys, full_keys)
      for (docs, _), (_, _, signed_a), (_, _, signed_b) in zip(
          full.batches, full_keys, slim_keys, strict=True):
        assert (signed_a is None) == (signed_b is None)
        if signed_a is not None:
          assert len(signed_a) == len(signed_b) == 3
          for part_a, part_b in zip(signed_a, signed_b):
            assert np.array_equal(part_a, part_b)
          # What the search needs of the batch's signatures: the byte of
          # each value the verification reads, whether the document has
          # words, its buckets.
          values = signatures.signatures(docs.text)
          assert np.array_equal(signed_a[0], values.astype(np.uint8))
          assert signed_a[1].tolist() == [
              bool(signatures.words(t)) for t in docs.text]
          assert np.array_equal(signed_a[2], bands.keys(values.view(
              np.uint8)))
