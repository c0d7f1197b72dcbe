"""Reading labelled documents for the text modality (transforms/modalities/text/
inputs.py, documents.py and parse.py)."""

import csv
import io
import json
import os
import random

import pytest

from transforms.modalities.text import inputs
from transforms.modalities.text import parse
from transforms.modalities.text.inputs import TextColumns
from transforms.core.errors import UsageError

COLS = TextColumns('text', 'label')
BOM = b'\xef\xbb\xbf'
BAD_BYTES = b'caf\xe9 \xff ok'  # Latin-1 and a stray byte: not UTF-8


def _write(tmp_path, name, content):
  path = tmp_path / name
  path.parent.mkdir(parents=True, exist_ok=True)
  if isinstance(content, str):
    content = content.encode('utf-8')
  path.write_bytes(content)
  return str(path)


def _collect(batches):
  """(ids, texts, labels, bad, number of batches) of all batches."""
  ids, texts, labels, bad, count = [], [], [], [], 0
  for batch, bad_docs in batches:
    assert len(batch.ids) == len(batch.text) == len(batch.label)
    assert all(isinstance(t, str) for t in batch.text)
    assert all(isinstance(t, str) for t in batch.label)
    ids += batch.ids
    texts += batch.text
    labels += batch.label
    bad += bad_docs
    count += 1
  return ids, texts, labels, bad, count


def _read(path, fmt, columns=COLS, source='f', **kwargs):
  return _collect(parse.iter_table_batches(path, fmt, columns, source,
                                           **kwargs))


def _jsonl(*records):
  return ''.join((json.dumps(r) if not isinstance(r, str) else r) + '\n'
                 for r in records)


# --- list_inputs ----------------------------------------------------------


def test_list_inputs_single_table_file(tmp_path):
  path = _write(tmp_path, 'docs.csv', 'text,label\na,b\n')
  assert inputs.list_inputs(path) == ('table', [path], str(tmp_path))


def test_list_inputs_glob_keeps_non_empty_table_files(tmp_path):
  a = _write(tmp_path, 'a/part1.csv', 'text,label\na,b\n')
  b = _write(tmp_path, 'b/part2.jsonl', '{"text": "a", "label": "b"}\n')
  _write(tmp_path, 'a/empty.csv', b'')
  _write(tmp_path, 'a/readme.md', 'notes')
  kind, files, root = inputs.list_inputs(str(tmp_path / '*' / '*'))
  assert (kind, files, root) == ('table', sorted([a, b]), str(tmp_path))


def test_list_inputs_class_folders(tmp_path):
  expected = [_write(tmp_path, 'neg/002.txt', 'bad'),
              _write(tmp_path, 'neg/010.TXT', 'worse'),
              _write(tmp_path, 'pos/001.txt', 'good')]
  _write(tmp_path, 'readme.txt', 'top-level file')
  _write(tmp_path, 'pos/notes.md', 'not a txt')
  _write(tmp_path, 'pos/deeper/003.txt', 'too deep')
  _write(tmp_path, '.ipynb_checkpoints/004.txt', 'hidden folder')
  _write(tmp_path, 'pos/.hidden.txt', 'hidden file')
  for root in (str(tmp_path), str(tmp_path) + '/'):
    assert inputs.list_inputs(root) == ('folder', sorted(expected),
                                        str(tmp_path))


def test_list_inputs_errors(tmp_path):
  with pytest.raises(UsageError, match='does not exist'):
    inputs.list_inputs(str(tmp_path / 'missing'))
  with pytest.raises(UsageError, match='does not exist'):
    inputs.list_inputs(str(tmp_path / 'missing.csv'))
  with pytest.raises(UsageError, match='no files match'):
    inputs.list_inputs(str(tmp_path / '*.csv'))
  _write(tmp_path, 'flat/doc.txt', 'no class folder')
  _write(tmp_path, 'flat/pos/deeper/doc.txt', 'too deep')
  with pytest.raises(UsageError, match=r'<label>/\*\.txt'):
    inputs.list_inputs(str(tmp_path / 'flat'))
  empty = _write(tmp_path, 'empty.csv', b'')
  with pytest.raises(UsageError, match='is empty'):
    inputs.list_inputs(empty)
  with pytest.raises(UsageError, match='every file matching'):
    inputs.list_inputs(str(tmp_path / 'empty*'))
  with pytest.raises(UsageError, match='none of the 1 files'):
    inputs.list_inputs(str(tmp_path / 'flat' / '*.txt'))


# --- check_columns --------------------------------------------------------


def test_check_columns_csv_tsv_jsonl(tmp_path):
  csv_path = _write(tmp_path, 'a.csv', BOM + b'id,"text",label\n1,a,b\n')
  tsv_path = _write(tmp_path, 'a.tsv', 'label\ttext\nb\ta\n')
  jsonl_path = _write(tmp_path, 'a.jsonl', 'not json\n' + _jsonl(
      {'text': 'a'}, {'label': 'b', 'text': 'c'}))
  for path, fmt in ((csv_path, 'csv'), (tsv_path, 'tsv'),
                    (jsonl_path, 'jsonl')):
    assert inputs.check_columns(path, fmt, 'text', 'label') == COLS


def test_check_columns_errors_name_the_column(tmp_path):
  path = _write(tmp_path, 'a.csv', 'id,body,label\n1,a,b\n')
  with pytest.raises(UsageError) as e:
    inputs.check_columns(path, 'csv', 'text', 'label')
  assert str(e.value) == (f"the text column 'text' is not in the header of "
                          f'{path} (columns: id, body, label)')
  with pytest.raises(UsageError, match="label column 'y'.*body"):
    inputs.check_columns(path, 'csv', 'body', 'y')
  with pytest.raises(UsageError, match='both the text and the label'):
    inputs.check_columns(path, 'csv', 'body', 'body')
  twice = _write(tmp_path, 'b.csv', 'text,label,text\n')
  with pytest.raises(UsageError, match='more than once'):
    inputs.check_columns(twice, 'csv', 'text', 'label')
  jsonl = _write(tmp_path, 'a.jsonl', _jsonl({'body': 'a', 'label': 'b'}))
  with pytest.raises(UsageError,
                     match=r"text column 'text' is not in the first 1 lines"
                           r'.*keys: body, label'):
    inputs.check_columns(jsonl, 'jsonl', 'text', 'label')
  arrays = _write(tmp_path, 'b.jsonl', '[1]\n\n[2]\n')
  with pytest.raises(UsageError, match='none of the first 2 lines'):
    inputs.check_columns(arrays, 'jsonl', 'text', 'label')
  blank = _write(tmp_path, 'blank.csv', BOM + b'\n\n')
  with pytest.raises(UsageError, match='is empty'):
    inputs.check_columns(blank, 'csv', 'text', 'label')
  with pytest.raises(ValueError, match='not a table format'):
    inputs.check_columns(path, 'folder', 'text', 'label')


# --- CSV / TSV ------------------------------------------------------------


def test_csv_round_trip(tmp_path):
  path = _write(tmp_path, 'a.csv',
                'id,text,label\n1,Hello world,pos\n2,"Hi, there", neg \n')
  ids, texts, labels, bad, _ = _read(path, 'csv', source='a.csv')
  assert ids == ['a.csv:0', 'a.csv:1']
  assert texts == ['Hello world', 'Hi, there']
  assert labels == ['pos', 'neg']
  assert bad == []


def test_csv_embedded_newline_is_one_row(tmp_path):
  path = _write(tmp_path, 'a.csv',
                'text,label\n"line one\nline two",a\n"say ""hi""",b\nlast,c\n')
  ids, texts, labels, bad, _ = _read(path, 'csv')
  assert ids == ['f:0', 'f:1', 'f:2']
  assert texts == ['line one\nline two', 'say "hi"', 'last']
  assert labels == ['a', 'b', 'c']
  assert bad == []


def test_csv_bom_empty_lines_crlf(tmp_path):
  path = _write(tmp_path, 'a.csv', BOM + b'text,label\r\n\r\none,a\r\n\r\n\r\n'
                b'"two\r\nlines",b\r\nthree,c')
  ids, texts, labels, bad, _ = _read(path, 'csv')
  assert ids == ['f:0', 'f:1', 'f:2']
  assert texts == ['one', 'two\r\nlines', 'three']
  assert labels == ['a', 'b', 'c']
  assert bad == []


def test_tsv(tmp_path):
  path = _write(tmp_path, 'a.tsv', 'label\ttext\npos\tgood, really\n'
                'neg\t"quoted\ttab"\n')
  ids, texts, labels, bad, _ = _read(path, 'tsv')
  assert ids == ['f:0', 'f:1']
  assert texts == ['good, really', 'quoted\ttab']
  assert labels == ['pos', 'neg']
  assert bad == []


def test_csv_dead_letters_keep_the_other_rows(tmp_path):
  path = _write(tmp_path, 'a.csv', 'text,label\n'
                'good one,a\n'       # 0
                ',a\n'               # 1 empty text
                '"   ",a\n'          # 2 blank text
                'no label,\n'        # 3
                'blank label,"  "\n'  # 4
                'x,y,z\n'            # 5
                '  \n'               # 6 one field
                'good two,b\n')      # 7
  ids, texts, labels, bad, _ = _read(path, 'csv')
  assert ids == ['f:0', 'f:7']
  assert texts == ['good one', 'good two']
  assert labels == ['a', 'b']
  assert bad == [('f:1', 'empty text'), ('f:2', 'empty text'),
                 ('f:3', 'missing label'), ('f:4', 'missing label'),
                 ('f:5', 'row has 3 fields, the header has 2'),
                 ('f:6', 'row has 1 field, the header has 2')]


def test_csv_invalid_utf8_policies(tmp_path):
  path = _write(tmp_path, 'a.csv', b'text,label\nfine,a\n' + BAD_BYTES +
                b',b\nok,bad \xff label\n')
  ids, texts, labels, bad, _ = _read(path, 'csv', invalid_utf8='replace')
  assert ids == ['f:0', 'f:1']
  assert texts == ['fine', 'caf\ufffd \ufffd ok']
  assert labels == ['a', 'b']
  assert bad == [('f:2', 'invalid UTF-8 in the label')]
  ids, texts, labels, bad, _ = _read(path, 'csv', invalid_utf8='dead_letter')
  assert ids == ['f:0']
  assert bad == [('f:1', 'invalid UTF-8 in the text'),
                 ('f:2', 'invalid UTF-8 in the label')]


def test_csv_invalid_utf8_in_other_columns_is_harmless(tmp_path):
  path = _write(tmp_path, 'a.csv', b'junk,text,label\n\xff\xfe,a,b\n')
  ids, texts, _, bad, _ = _read(path, 'csv', invalid_utf8='dead_letter')
  assert (ids, texts, bad) == (['f:0'], ['a'], [])


def test_csv_batches_continue_ids(tmp_path):
  lines = ['text,label']
  for i in range(10):
    if i == 3:
      lines.append(f'"multi\nline {i}",l{i % 2}')
    elif i == 5:
      lines.append('too,many,fields')
    elif i == 8:
      lines.append(',l0')
    else:
      lines.append(f'doc {i},l{i % 2}')
  path = _write(tmp_path, 'a.csv', '\n'.join(lines) + '\n')
  ids, texts, labels, bad, count = _read(path, 'csv', batch_rows=3)
  assert count == 3  # 9 parsed rows (one skipped) in batches of 3
  assert ids == [f'f:{i}' for i in (0, 1, 2, 3, 4, 6, 7, 9)]
  assert texts[3] == 'multi\nline 3' and texts[-1] == 'doc 9'
  assert labels == ['l0', 'l1', 'l0', 'l1', 'l0', 'l0', 'l1', 'l1']
  assert bad == [('f:5', 'row has 3 fields, the header has 2'),
                 ('f:8', 'empty text')]
  for batch, _ in parse.iter_table_batches(path, 'csv', COLS, 'f',
                                           batch_rows=3):
    assert len(batch) <= 3


def test_csv_header_only_and_missing_column(tmp_path):
  for content in ('text,label', 'text,label\n', '\n\n'):
    path = _write(tmp_path, 'h.csv', content)
    assert _read(path, 'csv')[4] == 0
  path = _write(tmp_path, 'b.csv', 'text,lab\na,b\n')
  with pytest.raises(UsageError, match="label column 'label'"):
    _read(path, 'csv')


def test_bad_arguments(tmp_path):
  path = _write(tmp_path, 'a.csv', 'text,label\na,b\n')
  with pytest.raises(ValueError, match='invalid_utf8'):
    parse.iter_table_batches(path, 'csv', COLS, 'f', invalid_utf8='ignore')
  with pytest.raises(ValueError, match='not a table format'):
    parse.iter_table_batches(path, 'folder', COLS, 'f')
  with pytest.raises(ValueError, match='batch_rows'):
    parse.iter_table_batches(path, 'csv', COLS, 'f', batch_rows=0)
  with pytest.raises(ValueError, match='batch_docs'):
    parse.iter_folder_batches([path], str(tmp_path), batch_docs=0)


# --- JSON lines -----------------------------------------------------------


def test_jsonl_round_trip(tmp_path):
  path = _write(tmp_path, 'a.jsonl', _jsonl(
      {'text': 'Hello', 'label': 'pos', 'extra': [1, 2]},
      {'text': 'multi\nline "quoted"', 'label': ' neg '}))
  ids, texts, labels, bad, _ = _read(path, 'jsonl', source='a.jsonl')
  assert ids == ['a.jsonl:0', 'a.jsonl:1']
  assert texts == ['Hello', 'multi\nline "quoted"']
  assert labels == ['pos', 'neg']
  assert bad == []


def test_jsonl_bad_lines_and_values(tmp_path):
  path = _write(tmp_path, 'a.jsonl', BOM + _jsonl(
      {'text': 'first', 'label': 'a'},   # 0
      '{"text": "cut',                   # 1
      '[1, 2]',                          # 2
      {'text': None, 'label': 'a'},      # 3
      {'text': 42, 'label': 'b'},        # 4
      '',                                # blank: not a row
      {'text': True, 'label': 1},        # 5
      {'text': 2.5, 'label': 'c'},       # 6
      {'text': ['x'], 'label': 'c'},     # 7
      {'text': 'no label'},              # 8
      {'text': '  \t', 'label': 'c'},    # 9
      'null',                            # 10
      {'text': 'last', 'label': 'd'},    # 11
  ).replace('\n', '\r\n').encode('utf-8'))
  ids, texts, labels, bad, _ = _read(path, 'jsonl')
  assert ids == ['f:0', 'f:4', 'f:5', 'f:6', 'f:11']
  assert texts == ['first', '42', 'true', '2.5', 'last']
  assert labels == ['a', 'b', '1', 'c', 'd']
  reasons = dict(bad)
  assert sorted(reasons) == ['f:1', 'f:10', 'f:2', 'f:3', 'f:7', 'f:8', 'f:9']
  assert reasons['f:1'].startswith('invalid JSON: ')
  assert reasons['f:2'] == reasons['f:10'] == 'line is not a JSON object'
  assert reasons['f:3'] == reasons['f:9'] == 'empty text'
  assert reasons['f:7'] == 'the text is an array, not a string'
  assert reasons['f:8'] == 'missing label'
  assert [i for i, _ in bad] == ['f:1', 'f:2', 'f:3', 'f:7', 'f:8', 'f:9',
                                 'f:10']


def test_jsonl_fast_path_numbers_and_nulls(tmp_path, monkeypatch):
  # Every line an object: the block goes through pyarrow.json.
  def no_slow_path(*args):
    raise AssertionError('the per-line path was used')

  monkeypatch.setattr(parse, '_json_lines', no_slow_path)
  path = _write(tmp_path, 'a.jsonl', BOM + _jsonl(
      {'text': 'a', 'label': 1}, {'text': None, 'label': 2}, '',
      {'label': 3}, {'text': 'd', 'label': None}, {'text': 'e', 'label': 0}
  ).replace('\n', '\r\n').encode('utf-8'))
  ids, texts, labels, bad, _ = _read(path, 'jsonl')
  assert (ids, texts, labels) == (['f:0', 'f:4'], ['a', 'e'], ['1', '0'])
  assert bad == [('f:1', 'empty text'), ('f:2', 'empty text'),
                 ('f:3', 'missing label')]


def test_jsonl_invalid_utf8_policies(tmp_path):
  path = _write(tmp_path, 'a.jsonl',
                b'{"text": "fine", "label": "a"}\n'
                b'{"text": "' + BAD_BYTES + b'", "label": "b"}\n'
                b'{"text": "ok", "label": "\xff"}\n'
                b'{"text": "escaped \\ud800", "label": "c"}\n')
  ids, texts, labels, bad, _ = _read(path, 'jsonl')
  assert ids == ['f:0', 'f:1', 'f:3']
  assert texts[1] == 'caf\ufffd \ufffd ok'
  assert '\ufffd' in texts[2] and texts[2].startswith('escaped ')
  assert labels == ['a', 'b', 'c']
  assert bad == [('f:2', 'invalid UTF-8 in the label')]
  ids, _, _, bad, _ = _read(path, 'jsonl', invalid_utf8='dead_letter')
  assert ids == ['f:0']
  assert bad == [('f:1', 'invalid UTF-8 in the text'),
                 ('f:2', 'invalid UTF-8 in the label'),
                 ('f:3', 'invalid UTF-8 in the text')]


def test_jsonl_batches_continue_ids(tmp_path):
  records = [{'text': f'doc {i}', 'label': 'x'} for i in range(7)]
  records[4] = 'oops'
  path = _write(tmp_path, 'a.jsonl', _jsonl(*records[:3]) + '\n\n' +
                _jsonl(*records[3:]))
  ids, texts, _, bad, count = _read(path, 'jsonl', batch_rows=2)
  assert count == 4
  assert ids == ['f:0', 'f:1', 'f:2', 'f:3', 'f:5', 'f:6']
  assert texts == ['doc 0', 'doc 1', 'doc 2', 'doc 3', 'doc 5', 'doc 6']
  assert [i for i, _ in bad] == ['f:4']


# --- class folders --------------------------------------------------------


def _folder_read(tmp_path, **kwargs):
  kind, files, root = inputs.list_inputs(str(tmp_path / 'docs'))
  assert kind == 'folder'
  return _collect(parse.iter_folder_batches(files, root, **kwargs))


def test_folder_round_trip(tmp_path):
  _write(tmp_path, 'docs/pos/001.txt', BOM + b'Great film\r\nloved it')
  _write(tmp_path, 'docs/neg/002.txt', 'Dull.\n')
  _write(tmp_path, 'docs/neg/sub/junk.txt', 'ignored')
  _write(tmp_path, 'docs/neg/junk.csv', 'ignored')
  ids, texts, labels, bad, _ = _folder_read(tmp_path)
  assert ids == ['neg/002.txt', 'pos/001.txt']
  assert texts == ['Dull.\n', 'Great film\r\nloved it']
  assert labels == ['neg', 'pos']
  assert bad == []


def test_folder_dead_letters(tmp_path):
  _write(tmp_path, 'docs/a/1.txt', 'kept')
  _write(tmp_path, 'docs/a/2.txt', b'')
  _write(tmp_path, 'docs/a/3.txt', BOM + b' \n\t')
  _write(tmp_path, 'docs/b/4.txt', BAD_BYTES)
  _write(tmp_path, 'docs/b/5.txt', 'kept too')
  ids, texts, labels, bad, _ = _folder_read(tmp_path)
  assert ids == ['a/1.txt', 'b/4.txt', 'b/5.txt']
  assert texts == ['kept', 'caf\ufffd \ufffd ok', 'kept too']
  assert labels == ['a', 'b', 'b']
  assert bad == [('a/2.txt', 'empty text'), ('a/3.txt', 'empty text')]
  ids, _, _, bad, _ = _folder_read(tmp_path, invalid_utf8='dead_letter')
  assert ids == ['a/1.txt', 'b/5.txt']
  assert bad == [('a/2.txt', 'empty text'), ('a/3.txt', 'empty text'),
                 ('b/4.txt', 'invalid UTF-8 in the text')]


def test_folder_unreadable_and_batches(tmp_path):
  root = str(tmp_path / 'docs')
  files = [_write(tmp_path, f'docs/c{i % 2}/{i}.txt', f'doc {i}')
           for i in range(5)]
  os.makedirs(os.path.join(root, 'c1', 'dir.txt'))
  files.insert(2, os.path.join(root, 'c0', 'gone.txt'))
  files.insert(4, os.path.join(root, 'c1', 'dir.txt'))
  ids, texts, labels, bad, count = _collect(
      parse.iter_folder_batches(files, root, batch_docs=2))
  assert count == 4
  assert ids == ['c0/0.txt', 'c1/1.txt', 'c0/2.txt', 'c1/3.txt', 'c0/4.txt']
  assert texts == [f'doc {i}' for i in range(5)]
  assert labels == ['c0', 'c1', 'c0', 'c1', 'c0']
  assert [i for i, _ in bad] == ['c0/gone.txt', 'c1/dir.txt']
  assert bad[0][1] == ('the file no longer exists (deleted or moved after '
                       'it was listed)')
  assert bad[1][1].startswith('cannot read: ')


# --- speed (small; the 200,000-row measurement is run separately) --------


def test_csv_many_rows(tmp_path):
  n = 20000
  words = [f'w{i}' for i in range(50)]
  body = ''.join(f'"{" ".join(words[(i + j) % 50] for j in range(20))}",'
                 f'l{i % 3}\n' for i in range(n))
  path = _write(tmp_path, 'big.csv', 'text,label\n' + body)
  ids, texts, labels, bad, count = _read(path, 'csv', batch_rows=4096)
  assert len(ids) == n and not bad and count == 5
  assert ids[-1] == f'f:{n - 1}' and labels[-1] == f'l{(n - 1) % 3}'
  assert texts[1].startswith('w1 w2 ')


def test_csv_row_ids_match_python_csv_across_blocks(tmp_path):
  # About 3 MB, so pyarrow reads several blocks (at least 1 MiB each); the
  # expected rows come from Python's csv module.
  rng = random.Random(7)
  lines = ['text,label']
  for i in range(12000):
    kind = rng.random()
    if kind < 0.02:
      lines.append('')
    elif kind < 0.04:
      lines.append(f'x{i},y,z')
    elif kind < 0.08:
      lines.append(f'"two\nlines ""{i}""",l{i % 4}')
    else:
      lines.append(f'{"word " * rng.randint(1, 80)}{i},l{i % 4}')
  content = '\n'.join(lines) + '\n'
  path = _write(tmp_path, 'r.csv', content)
  records = [r for r in csv.reader(io.StringIO(content, newline=''))
             if r][1:]
  want_ids = [f'f:{i}' for i, r in enumerate(records) if len(r) == 2]
  want_bad = [f'f:{i}' for i, r in enumerate(records) if len(r) != 2]
  for batch_rows in (1000, 4096, 10000):
    ids, texts, _, bad, _ = _read(path, 'csv', batch_rows=batch_rows)
    assert ids == want_ids
    assert texts == [r[0] for r in records if len(r) == 2]
    assert sorted(i for i, _ in bad) == sorted(want_bad)


def test_csv_skipped_rows_at_batch_ends(tmp_path):
  path = _write(tmp_path, 'a.csv',
                'text,label\na,1\nb,2\nc,3,x\nd,4\ne,5,x\nf,6,x\n')
  ids, _, _, bad, count = _read(path, 'csv', batch_rows=2)
  assert ids == ['f:0', 'f:1', 'f:3']
  assert [i for i, _ in bad] == ['f:2', 'f:4', 'f:5']
  assert count == 3  # the last batch holds only the two skipped rows


def test_jsonl_dates_stay_text(tmp_path):
  # pyarrow.json infers timestamps from such strings; the text must not
  # change (the block takes the per-line path).
  path = _write(tmp_path, 'a.jsonl', _jsonl(
      {'text': '2020-01-01', 'label': '2021-02-03 10:00:00'},
      {'text': '2020-01-02', 'label': 'x'}))
  ids, texts, labels, bad, _ = _read(path, 'jsonl')
  assert texts == ['2020-01-01', '2020-01-02']
  assert labels == ['2021-02-03 10:00:00', 'x']
  assert (ids, bad) == (['f:0', 'f:1'], [])
