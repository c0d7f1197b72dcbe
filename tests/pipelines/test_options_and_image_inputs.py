"""Unit tests for transforms/modalities/image/inputs.py (pure functions, check_input on tmp
folders) and pipelines/options.py (resolve_config). No pipeline runs."""

import csv
import io
import json
import os
import re

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import options
from transforms.modalities.image import inputs
from transforms.modalities.image import config
from transforms.core import splits
from transforms.core.errors import UsageError
from transforms.sources import files

RATIOS = splits.parse_ratios('train=0.8,validation=0.1,test=0.1')


# ------------------------------------------------------------ relative_parts


@pytest.mark.parametrize('root,path,want', [
    ('/data/in', '/data/in/cat/1.jpg', ['cat', '1.jpg']),
    ('/data/in/', '/data/in/cat/1.jpg', ['cat', '1.jpg']),
    ('/data/in', '/data/in/train/cat/1.jpg', ['train', 'cat', '1.jpg']),
    ('gs://bucket/in', 'gs://bucket/in/dog/a.png', ['dog', 'a.png']),
    ('gs://bucket/in/', 'gs://bucket/in/dog/a.png', ['dog', 'a.png']),
    ('gs://bucket', 'gs://bucket/val/dog/a.png', ['val', 'dog', 'a.png']),
    ('C:\\data\\in', 'C:\\data\\in\\cat\\1.jpg', ['cat', '1.jpg']),
    ('/data/in', '/data/in/chat noir/é 1.jpg', ['chat noir', 'é 1.jpg']),
    ('/data/in', '/data/in//cat//1.jpg', ['cat', '1.jpg']),
])
def test_relative_parts(root, path, want):
  assert files.relative_parts(root, path) == want


# -------------------------------------------------------------- ref_from_path


@pytest.mark.parametrize('root', ['/data/in', '/data/in/', 'gs://b/in'])
def test_ref_from_path_class_folders(root):
  base = root.rstrip('/')
  ref, skip, dead = inputs.ref_from_path(root, f'{base}/cat/001.JPG', False,
                                         RATIOS)
  assert skip is None and dead is None
  assert ref.path == f'{base}/cat/001.JPG'
  assert ref.example_id == 'cat/001.JPG'
  assert ref.label == 'cat'
  assert ref.split == splits.assign_split('cat/001.JPG', RATIOS)


def test_ref_from_path_id_does_not_depend_on_the_root():
  local, _, _ = inputs.ref_from_path('/tmp/a', '/tmp/a/dog/x.png', False,
                                     RATIOS)
  remote, _, _ = inputs.ref_from_path('gs://b/c', 'gs://b/c/dog/x.png',
                                      False, RATIOS)
  assert local.example_id == remote.example_id == 'dog/x.png'
  assert local.split == remote.split


@pytest.mark.parametrize('label', ['chat noir', 'café', '猫', 'a b  c',
                                   "o'brien"])
def test_ref_from_path_unicode_and_spaces_in_labels(label):
  ref, skip, dead = inputs.ref_from_path(
      'gs://b/in', f'gs://b/in/{label}/photo 1.jpeg', False, RATIOS)
  assert (skip, dead) == (None, None)
  assert ref.label == label
  assert ref.example_id == f'{label}/photo 1.jpeg'


def test_ref_from_path_split_folders():
  ref, skip, dead = inputs.ref_from_path('/in', '/in/val/cat/1.png', True,
                                         RATIOS)
  assert (skip, dead) == (None, None)
  assert (ref.label, ref.split, ref.example_id) == ('cat', 'validation',
                                                    'val/cat/1.png')
  ref, _, _ = inputs.ref_from_path('/in', '/in/Training/dog/1.png', True,
                                   RATIOS)
  assert (ref.label, ref.split) == ('dog', 'train')


def test_ref_from_path_unknown_split_folder_is_dead_lettered():
  ref, skip, dead = inputs.ref_from_path('/in', '/in/holdout/cat/1.jpg',
                                         True, RATIOS)
  assert ref is None and skip is None
  assert 'unknown split' in dead and 'holdout' in dead


@pytest.mark.parametrize('path,from_input,nested,why', [
    ('/in/cat/notes.txt', False, 'include',
     'file extension is not an image extension'),
    ('/in/cat/.DS_Store', False, 'include',
     'file extension is not an image extension'),
    ('/in/top.jpg', False, 'include', 'not in a class folder'),
    ('/in/cat/1.jpg', True, 'include',
     'not in a class folder inside a split folder'),
    ('/in/a/b/c.jpg', False, 'skip',
     'in a folder nested inside the class folder a (--nested_folders skip)'),
    ('/in/train/a/b/1.jpg', True, 'skip',
     'in a folder nested inside the class folder a (--nested_folders skip)'),
])
def test_ref_from_path_skips(path, from_input, nested, why):
  ref, skip, dead = inputs.ref_from_path('/in', path, from_input, RATIOS,
                                         nested)
  assert ref is None and dead is None
  assert skip == why


@pytest.mark.parametrize('root,path,from_input,label,split_of', [
    ('/in', '/in/cat/2019/x.jpg', False, 'cat', None),
    ('gs://b/in/', 'gs://b/in/cat/2019/06/x.jpg', False, 'cat', None),
    ('/in', '/in/train/cat/2019/x.jpg', True, 'cat', 'train'),
    ('/in', '/in/val/dog/a/b/c/x.png', True, 'dog', 'validation'),
])
def test_ref_from_path_nested_folders_are_of_their_class(root, path,
                                                         from_input, label,
                                                         split_of):
  ref, skip, dead = inputs.ref_from_path(root, path, from_input, RATIOS)
  assert (skip, dead) == (None, None)
  example_id = '/'.join(files.relative_parts(root, path))
  assert (ref.path, ref.example_id, ref.label) == (path, example_id, label)
  # The id is the whole path below the root, and so is the split key.
  assert ref.split == (split_of or splits.assign_split(example_id, RATIOS))


def _listed(path, problem=None, skip=None):
  return files.Listed(os.fsdecode(path), problem, skip)


@pytest.mark.parametrize('entry,nested,want', [
    (_listed('/in/cat/a.jpg'), 'include', 'ref'),
    (_listed('/in/cat/loop', skip='symbolic link loop: x'), 'include',
     ('skip', 'symbolic link loop: x')),
    (_listed('/in/cat/gone.jpg', problem='broken symbolic link: y'),
     'include', ('dead', 'broken symbolic link: y')),
    (_listed(b'/in/cat/caf\xe9.jpg', problem='not UTF-8'), 'include',
     ('dead', 'not UTF-8')),
    (_listed(b'/in/caf\xe9/2019/a.jpg', problem='not UTF-8'), 'include',
     ('dead', 'not UTF-8')),
    # Where it would not have been an input, it is skipped as any file.
    (_listed(b'/in/cat/caf\xe9.txt', problem='not UTF-8'), 'include',
     ('skip', 'file extension is not an image extension')),
    (_listed('/in/gone.jpg', problem='broken symbolic link: y'), 'include',
     ('skip', 'not in a class folder')),
    (_listed('/in/cat/2019/gone.jpg', problem='broken symbolic link: y'),
     'skip', ('skip', 'in a folder nested inside the class folder cat '
              '(--nested_folders skip)')),
])
def test_ref_from_listed(entry, nested, want):
  ref, skip, dead = inputs.ref_from_listed('/in', entry, False, RATIOS,
                                           nested)
  if want == 'ref':
    assert (ref.example_id, skip, dead) == ('cat/a.jpg', None, None)
  elif want[0] == 'skip':
    assert (ref, skip, dead) == (None, want[1], None)
  else:
    assert (ref, skip, dead) == (None, None, want[1])


# ------------------------------------------------------- manifest lines


CSV = inputs.ManifestFormat(kind='csv')
TSV = inputs.ManifestFormat(kind='tsv')
JSONL = inputs.ManifestFormat(kind='jsonl')
CSV_WITH_SPLIT = inputs.ManifestFormat(kind='csv', path_index=1,
                                       label_index=2, split_index=0)


@pytest.mark.parametrize('fmt,line', [
    (CSV, 'imgs/a 1.jpg,chat noir'),
    (CSV, '"imgs/a 1.jpg","chat noir"'),
    (TSV, 'imgs/a 1.jpg\tchat noir'),
    (JSONL, json.dumps({'path': 'imgs/a 1.jpg', 'label': 'chat noir'})),
    (JSONL, json.dumps({'label': 'chat noir', 'path': 'imgs/a 1.jpg',
                        'extra': 1}, ensure_ascii=False)),
])
def test_manifest_line_relative_path_resolved_against_manifest_folder(
    fmt, line):
  manifest = f'/data/lists/manifest.{fmt.kind}'
  ref, reason = inputs.ref_from_manifest_line(line, fmt, manifest, False,
                                              RATIOS)
  assert reason is None
  assert ref.path == '/data/lists/imgs/a 1.jpg'
  assert ref.example_id == 'imgs/a 1.jpg'
  assert ref.label == 'chat noir'
  assert ref.split == splits.assign_split('imgs/a 1.jpg', RATIOS)


def test_manifest_line_gs_manifest_and_absolute_paths():
  ref, _ = inputs.ref_from_manifest_line(
      'x/é.png,cat', CSV, 'gs://bucket/lists/m.csv', False, RATIOS)
  assert ref.path == 'gs://bucket/lists/x/é.png'
  for path in ['gs://other/y.jpg', '/abs/y.jpg']:
    ref, _ = inputs.ref_from_manifest_line(
        json.dumps({'path': path, 'label': 'dog'}), JSONL,
        'gs://bucket/lists/m.jsonl', False, RATIOS)
    assert ref.path == path and ref.example_id == path
  # A manifest in the current folder leaves relative paths alone.
  ref, _ = inputs.ref_from_manifest_line('y.jpg,dog', CSV, 'm.csv', False,
                                         RATIOS)
  assert ref.path == 'y.jpg'


def test_manifest_line_split_column():
  manifest = '/m/list.csv'
  ref, reason = inputs.ref_from_manifest_line('val,a.jpg,cat',
                                              CSV_WITH_SPLIT, manifest,
                                              True, RATIOS)
  assert reason is None and ref.split == 'validation'
  ref, reason = inputs.ref_from_manifest_line(
      json.dumps({'path': 'a.jpg', 'label': 'cat', 'split': 'Test'}), JSONL,
      manifest, True, RATIOS)
  assert reason is None and ref.split == 'test'
  # Without --splits from_input the column is ignored and the hash decides.
  ref, _ = inputs.ref_from_manifest_line('test,a.jpg,cat', CSV_WITH_SPLIT,
                                         manifest, False, RATIOS)
  assert ref.split == splits.assign_split('a.jpg', RATIOS)


@pytest.mark.parametrize('fmt,line,from_input,match', [
    (CSV, ',cat', False, 'has no path'),
    (CSV, '  ,cat', False, 'has no path'),
    (CSV, 'a.jpg', False, 'a.jpg has no label'),
    (CSV, 'a.jpg,', False, 'a.jpg has no label'),
    (CSV, 'a.jpg,  ', False, 'a.jpg has no label'),
    (TSV, 'a.jpg', False, 'a.jpg has no label'),
    (TSV, '\tcat', False, 'has no path'),
    (JSONL, '{"label": "cat"}', False, 'has no path'),
    (JSONL, '{"path": "a.jpg"}', False, 'a.jpg has no label'),
    (JSONL, '{"path": "a.jpg", "label": null}', False, 'has no label'),
    (JSONL, '{"path": "a.jpg", "label": ""}', False, 'has no label'),
    (JSONL, '{"path": "a.jpg", "label": "cat"', False, 'not valid JSON'),
    (JSONL, 'path,label', False, 'not valid JSON'),
    (JSONL, '["a.jpg", "cat"]', False, 'not a JSON object'),
    (CSV_WITH_SPLIT, ',a.jpg,cat', True, 'a.jpg has no split'),
    (CSV_WITH_SPLIT, 'holdout,a.jpg,cat', True, "unknown split 'holdout'"),
    (JSONL, '{"path": "a.jpg", "label": "cat"}', True, 'has no split'),
])
def test_manifest_line_dead_letters(fmt, line, from_input, match):
  ref, reason = inputs.ref_from_manifest_line(line, fmt, '/m/list.x',
                                              from_input, RATIOS)
  assert ref is None
  assert reason is not None and match in reason


def _records(text, fmt=CSV):
  return list(inputs.manifest_records(io.StringIO(text, newline=''), fmt))


CSV_CAPTION = inputs.ManifestFormat(kind='csv', path_index=0, label_index=1)


def test_manifest_records_quoted_line_breaks_span_lines():
  text = ('path,label,caption\r\n'
          'a.jpg,cat,"two\r\nlines"\r\n'
          '"b, c.jpg",dog,"three\nshort\nlines"\n'
          '\n'
          'd.jpg,"the ""big"" cat",plain\n')
  assert _records(text, CSV_CAPTION) == [
      (1, 'path,label,caption\r\n', ['path', 'label', 'caption'], None),
      (2, 'a.jpg,cat,"two\r\nlines"\r\n', ['a.jpg', 'cat', 'two\r\nlines'],
       None),
      (4, '"b, c.jpg",dog,"three\nshort\nlines"\n',
       ['b, c.jpg', 'dog', 'three\nshort\nlines'], None),
      (7, '\n', [], None),
      (8, 'd.jpg,"the ""big"" cat",plain\n', ['d.jpg', 'the "big" cat',
                                             'plain'], None),
  ]


def test_manifest_records_tsv_quotes_too():
  text = 'path\tlabel\tnote\na.jpg\tcat\t"x\ny"\nb.jpg\tdog\tz\n'
  assert [(n, row) for n, _, row, _ in _records(text, TSV)] == [
      (1, ['path', 'label', 'note']), (2, ['a.jpg', 'cat', 'x\ny']),
      (4, ['b.jpg', 'dog', 'z'])]


def test_manifest_records_an_unclosed_quote_costs_one_line():
  # The quote opened on line 2 would swallow lines 3 and 4 into its path.
  text = ('path,label\n'
          '"a.jpg,cat\n'
          'b.jpg,dog\n'
          '"c.jpg",bird\n'
          'd.jpg,"cat\n'
          'e.jpg,dog"\n')
  assert _records(text) == [
      (1, 'path,label\n', ['path', 'label'], None),
      (2, '"a.jpg,cat\n', None, 'a quote opened on this line is not closed '
       'on it (only columns other than path, label and split may hold line '
       'breaks)'),
      (3, 'b.jpg,dog\n', ['b.jpg', 'dog'], None),
      (4, '"c.jpg",bird\n', ['c.jpg', 'bird'], None),
      (5, 'd.jpg,"cat\n', None, 'a quote opened on this line is not closed '
       'on it (only columns other than path, label and split may hold line '
       'breaks)'),
      (6, 'e.jpg,dog"\n', ['e.jpg', 'dog"'], None),
  ]


def test_manifest_records_a_quote_open_for_too_many_lines(monkeypatch):
  monkeypatch.setattr(inputs, 'MAX_RECORD_LINES', 3)
  text = 'path,label,note\na.jpg,cat,"x\n' + ''.join(
      f'{i}.jpg,dog,y\n' for i in range(4))
  records = _records(text, CSV_CAPTION)
  assert records[1] == (2, 'a.jpg,cat,"x\n', None, 'a quote opened on this '
                        'line is not closed within 3 lines')
  assert [(n, row) for n, _, row, _ in records[2:]] == [
      (3 + i, [f'{i}.jpg', 'dog', 'y']) for i in range(4)]


def test_manifest_records_bad_bytes_and_csv_errors_are_one_line_each():
  # Undecodable bytes arrive as surrogates (the file is read with
  # errors='surrogateescape').
  text = ('path,label\n'
          'caf\udce9.jpg,cat\n'
          '"long,\n'
          'field",cat\n'
          'b.jpg,dog\n')
  limit = csv.field_size_limit(8)
  try:
    records = _records(text)
  finally:
    csv.field_size_limit(limit)
  assert records == [
      (1, 'path,label\n', ['path', 'label'], None),
      (2, 'caf\udce9.jpg,cat\n', None, 'manifest line is not valid UTF-8'),
      (3, '"long,\n', None, 'manifest line is not valid CSV: field larger '
       'than field limit (8)'),
      (4, 'field",cat\n', ['field"', 'cat'], None),
      (5, 'b.jpg,dog\n', ['b.jpg', 'dog'], None),
  ]


def test_manifest_line_with_parsed_fields():
  ref, reason = inputs.ref_from_manifest_line(
      'a.jpg,cat,"x\ny"\n', CSV_CAPTION, '/m/l.csv', False, RATIOS,
      row=['a.jpg', 'cat', 'x\ny'])
  assert reason is None
  assert (ref.path, ref.example_id, ref.label) == ('/m/a.jpg', 'a.jpg', 'cat')


@pytest.mark.parametrize('fmt', [CSV, TSV, JSONL])
def test_manifest_blank_line_is_ignored(fmt):
  assert inputs.ref_from_manifest_line('   ', fmt, '/m/l', False,
                                       RATIOS) == (None, None)


def test_manifest_numeric_json_label_becomes_text():
  ref, _ = inputs.ref_from_manifest_line('{"path": "a.jpg", "label": 3}',
                                         JSONL, '/m/l.jsonl', False, RATIOS)
  assert ref.label == '3'


# -------------------------------------------------------------- check_input


def _touch(root, *parts):
  path = os.path.join(str(root), *parts)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'wb') as f:
    f.write(b'\xff\xd8')  # listing never reads the bytes
  return path


def test_check_input_missing_path(tmp_path):
  missing = str(tmp_path / 'nope')
  with pytest.raises(UsageError, match='does not exist') as info:
    inputs.check_input(missing, False)
  assert missing in str(info.value)


def test_check_input_empty_folder(tmp_path):
  with pytest.raises(UsageError, match='is empty'):
    inputs.check_input(str(tmp_path), False)


def test_check_input_files_without_class_folders(tmp_path):
  _touch(tmp_path, 'a.jpg')
  _touch(tmp_path, 'b.png')
  with pytest.raises(UsageError, match='no labels found') as info:
    inputs.check_input(str(tmp_path), False)
  message = str(info.value)
  assert '<label>/image.jpg' in message
  assert '\n' not in message


@pytest.mark.parametrize('trailing_slash', [False, True])
def test_check_input_class_folders(tmp_path, trailing_slash):
  _touch(tmp_path, 'cat', '1.jpg')
  _touch(tmp_path, 'chat noir é', '2.png')
  root = str(tmp_path) + ('/' if trailing_slash else '')
  assert inputs.check_input(root, False) is None


def test_check_input_split_folders_from_input(tmp_path):
  _touch(tmp_path, 'train', 'cat', '1.jpg')
  _touch(tmp_path, 'val', 'cat', '2.jpg')
  _touch(tmp_path, 'test', 'dog', '3.jpg')
  assert inputs.check_input(str(tmp_path), True) is None


def test_check_input_unknown_split_folder_from_input(tmp_path):
  _touch(tmp_path, 'train', 'cat', '1.jpg')
  _touch(tmp_path, 'holdout', 'cat', '2.jpg')
  with pytest.raises(UsageError, match="found 'holdout'"):
    inputs.check_input(str(tmp_path), True)


def test_check_input_from_input_with_files_but_no_split_folders(tmp_path):
  _touch(tmp_path, 'a.jpg')
  with pytest.raises(UsageError, match='no labels found') as info:
    inputs.check_input(str(tmp_path), True)
  assert 'train/<label>/image.jpg' in str(info.value)


def _write(path, text):
  path.write_text(text, encoding='utf-8')
  return str(path)


def test_check_input_manifests(tmp_path):
  fmt = inputs.check_input(
      _write(tmp_path / 'm.csv', 'label,path\ncat,a.jpg\n'), False)
  assert (fmt.kind, fmt.path_index, fmt.label_index, fmt.split_index) == (
      'csv', 1, 0, None)
  fmt = inputs.check_input(
      _write(tmp_path / 'm.tsv', 'path\tlabel\tsplit\na.jpg\tcat\ttrain\n'),
      True)
  assert (fmt.kind, fmt.split_index) == ('tsv', 2)
  fmt = inputs.check_input(
      _write(tmp_path / 'm.jsonl', '{"path": "a.jpg", "label": "cat"}\n'),
      False)
  assert fmt.kind == 'jsonl'


@pytest.mark.parametrize('name,text,from_input,match', [
    ('missing.csv', None, False, 'does not exist'),
    ('empty.csv', '', False, 'is empty'),
    ('nolabel.csv', 'path,class\na.jpg,cat\n', False, 'no label column'),
    ('nosplit.csv', 'path,label\na.jpg,cat\n', True, 'needs a split column'),
    ('bad.jsonl', 'not json\n', False, 'not a JSON object'),
    ('keys.jsonl', '{"path": "a.jpg"}\n', False, '"path" and "label"'),
    ('nosplit.jsonl', '{"path": "a.jpg", "label": "c"}\n', True,
     'needs a "split" key'),
])
def test_check_input_bad_manifests(tmp_path, name, text, from_input, match):
  path = tmp_path / name
  if text is not None:
    _write(path, text)
  with pytest.raises(UsageError, match=match):
    inputs.check_input(str(path), from_input)


@pytest.mark.parametrize('parts,from_input', [
    (('cat', '2019', 'x.jpg'), False),
    (('cat', '2019', '06', 'x.jpg'), False),
    (('train', 'cat', '2019', 'x.jpg'), True),
])
def test_check_input_accepts_images_only_in_nested_folders(tmp_path, parts,
                                                           from_input):
  _touch(tmp_path, *parts)
  assert inputs.check_input(str(tmp_path), from_input) is None
  assert inputs.check_input(str(tmp_path), from_input, 'include') is None


def test_check_input_nested_images_with_nested_folders_skip(tmp_path):
  _touch(tmp_path, 'cat', '2019', 'x.jpg')
  with pytest.raises(UsageError) as info:
    inputs.check_input(str(tmp_path), False, 'skip')
  assert str(info.value) == (
      f'the images in {tmp_path} are all in folders nested inside the class '
      f'folders, such as {tmp_path}/cat/2019/x.jpg, and --nested_folders '
      'skip skips those; pass --nested_folders include to use them')
  _touch(tmp_path, 'cat', 'y.jpg')
  assert inputs.check_input(str(tmp_path), False, 'skip') is None


def test_check_input_split_folders_without_from_input(tmp_path):
  # Below split folders, images are two folders deep: a hint, not classes
  # named train and test.
  _touch(tmp_path, 'train', 'cat', '1.jpg')
  _touch(tmp_path, 'test', 'dog', '2.jpg')
  with pytest.raises(UsageError) as info:
    inputs.check_input(str(tmp_path), False)
  assert str(info.value) == (
      f'{tmp_path} holds images two folders deep, as in '
      f'{tmp_path}/train/<label>/image.jpg; pass --splits from_input to use '
      'those split folders')


def test_check_input_nested_class_folder_is_not_a_split_folder(tmp_path):
  _touch(tmp_path, 'cat', '2019', 'x.jpg')
  with pytest.raises(UsageError, match="found 'cat'"):
    inputs.check_input(str(tmp_path), True)


@pytest.mark.parametrize('name', ['photos [2019]', 'what?', 'a*b', '[x]'])
def test_check_input_takes_folder_names_literally(tmp_path, name):
  root = tmp_path / name
  _touch(root, 'cat', '1.jpg')
  assert inputs.check_input(str(root), False) is None
  assert inputs.check_input(str(root) + '/', False) is None
  # Not a pattern: a folder the pattern would match is not the input.
  _touch(tmp_path, 'photos 2', 'cat', '1.jpg')
  with pytest.raises(UsageError, match='does not exist'):
    inputs.check_input(str(tmp_path / 'photos [2]'), False)


def test_check_input_manifest_named_with_pattern_characters(tmp_path):
  path = tmp_path / 'lists [1]' / 'what?.csv'
  path.parent.mkdir()
  fmt = inputs.check_input(_write(path, 'path,label\na.jpg,cat\n'), False)
  assert fmt.kind == 'csv'


def test_check_input_symbolic_link_loop(tmp_path):
  _touch(tmp_path, 'cat', '1.jpg')
  os.symlink('..', tmp_path / 'cat' / 'up')
  assert inputs.check_input(str(tmp_path), False) is None


# ------------------------------------------------------------ options


def _resolve(*flags, input_path='/data/in', output='/data/out'):
  args = []
  if input_path is not None:
    args += ['--input', input_path]
  if output is not None:
    args += ['--output', output]
  return options.resolve_config(PipelineOptions(args + list(flags)))


def _assert_one_sentence(message):
  assert message.endswith('.'), message
  assert '\n' not in message
  assert not re.search(r'[.!?]\s+[A-Z]', message), message


def test_defaults():
  cfg = _resolve()
  assert cfg.modality == 'image'
  assert (cfg.input, cfg.output, cfg.name) == ('/data/in', '/data/out',
                                               'images')
  assert (cfg.settings.width, cfg.settings.height) == (224, 224)
  assert cfg.settings.resize_mode == 'fit'
  assert cfg.settings.storage == 'jpeg'
  assert cfg.settings.color == 'rgb'
  assert cfg.settings.jpeg_quality == 90
  assert cfg.settings.max_pixels == 100_000_000
  assert cfg.settings.background == '#ffffff'
  assert cfg.settings.nested_folders == 'include'
  assert cfg.normalization == 'zscore'
  assert cfg.split_ratios == (('train', 0.8), ('validation', 0.1),
                              ('test', 0.1))
  assert cfg.splits_from_input is False
  assert cfg.split_names == ['train', 'validation', 'test']
  assert cfg.rebalance == 'none'
  assert cfg.rebalance_splits == ('train',)
  assert cfg.seed == 42
  assert cfg.num_shards == 0
  assert cfg.compression == 'none'
  assert cfg.max_bad_fraction == 0.05
  assert cfg.overwrite is False


@pytest.mark.parametrize('storage,want', [
    ('jpeg', 'none'), ('png', 'none'), ('uint8', 'gzip'),
    ('float32', 'gzip')])
def test_auto_compression(storage, want):
  assert _resolve('--storage', storage).compression == want


def test_explicit_compression_wins():
  assert _resolve('--storage', 'uint8', '--compression', 'none'
                  ).compression == 'none'
  assert _resolve('--compression', 'gzip').compression == 'gzip'


def test_non_default_values():
  cfg = _resolve('--image_size', '320x200', '--resize_mode', 'crop',
                 '--color', 'gray', '--storage', 'PNG', '--splits',
                 'train=0.9,test=0.1', '--rebalance', 'oversample',
                 '--rebalance_splits', 'train,test', '--seed', '7',
                 '--num_shards', '16', '--max_bad_fraction', '0',
                 '--overwrite', '--name', 'pets',
                 output='gs://bucket/out/')
  assert (cfg.settings.width, cfg.settings.height) == (320, 200)
  assert cfg.settings.resize_mode == 'crop'
  assert cfg.settings.color == 'grey' and cfg.settings.channels == 1
  assert cfg.settings.storage == 'png'
  assert cfg.split_ratios == (('train', 0.9), ('test', 0.1))
  assert cfg.rebalance == 'oversample'
  assert cfg.rebalance_splits == ('train', 'test')
  assert (cfg.seed, cfg.num_shards, cfg.max_bad_fraction) == (7, 16, 0.0)
  assert cfg.overwrite is True
  assert cfg.output == 'gs://bucket/out'
  assert cfg.name == 'pets'


def test_square_image_size_and_splits_from_input():
  cfg = _resolve('--image_size', '96', '--splits', 'from_input',
                 '--rebalance_splits', 'validation')
  assert (cfg.settings.width, cfg.settings.height) == (96, 96)
  assert cfg.splits_from_input is True
  assert cfg.split_ratios == ()
  assert cfg.split_names == ['train', 'validation', 'test']
  assert cfg.rebalance_splits == ('validation',)


def test_config_hash_ignores_output_and_overwrite():
  a = _resolve(output='/a')
  b = _resolve('--overwrite', output='/b')
  c = _resolve('--seed', '1', output='/a')
  assert a.config_hash() == b.config_hash()
  assert a.config_hash() != c.config_hash()


@pytest.mark.parametrize('value,expected', [
    ('white', '#ffffff'), ('Black', '#000000'), ('#FF8000', '#ff8000'),
    ('255, 128,0', '#ff8000')])
def test_background_is_checked_kept_and_hashed(value, expected):
  cfg = _resolve('--background', value)
  assert cfg.settings.background == expected
  assert cfg.settings.background_rgb == config.parse_background(expected)
  assert cfg.to_json()['image']['background'] == expected
  # It changes the records of transparent images: part of the hash.
  assert (cfg.config_hash() == _resolve().config_hash()) == (
      expected == '#ffffff')


def test_nested_folders_is_checked_kept_and_hashed():
  cfg = _resolve('--nested_folders', 'SKIP')
  assert cfg.settings.nested_folders == 'skip'
  assert cfg.to_json()['image']['nested_folders'] == 'skip'
  # It decides which images are inputs: part of the hash.
  assert cfg.config_hash() != _resolve().config_hash()
  assert _resolve('--nested_folders', 'include').config_hash() == (
      _resolve().config_hash())


def test_output_inside_an_input_folder_named_like_a_pattern(tmp_path):
  photos = tmp_path / 'photos [2019]'
  photos.mkdir()
  with pytest.raises(UsageError) as info:
    options.check_output_outside_input(str(photos), str(photos / 'out'))
  _assert_one_sentence(str(info.value))
  options.check_output_outside_input(str(photos), str(tmp_path / 'out'))
  # A pattern that names no folder is not checked.
  options.check_output_outside_input(str(tmp_path / '*.csv'),
                                     str(tmp_path / 'out'))


def test_preflight_reads_a_manifest_named_like_a_pattern(tmp_path):
  from pipelines import preflight  # pylint: disable=import-outside-toplevel
  path = tmp_path / 'lists [1]' / 'm.csv'
  path.parent.mkdir()
  _write(path, 'path,label\n')
  cfg = _resolve(input_path=str(path), output=str(tmp_path / 'out'))
  with pytest.raises(UsageError) as info:
    preflight.check_not_empty(cfg)
  assert str(info.value) == (f'the input {path} is empty: it has a header '
                             'but no data rows.')
  _write(path, 'path,label\na.jpg,cat\n')
  preflight.check_not_empty(cfg)


@pytest.mark.parametrize('flags,match', [
    (['--storage', 'tiff'], r"--storage must be one of jpeg, png, uint8, "
     r"float32 \(got 'tiff'\)"),
    (['--image_size', '0x10'], '--image_size must be WIDTHxHEIGHT'),
    (['--image_size', 'abc'], '--image_size must be WIDTHxHEIGHT'),
    (['--image_size', '224x224x3'], '--image_size must be WIDTHxHEIGHT'),
    (['--image_size', '9000x10'], 'sides from 1 to 8192'),
    (['--image_size', '-5'], '--image_size must be WIDTHxHEIGHT'),
    (['--splits', 'train=0.5,validation=0.1,test=0.1'],
     '--splits: split ratios add up to 0.7, not 1'),
    (['--splits', 'train:0.8,test:0.2'], '--splits: .*not of the form'),
    (['--splits', 'train=0.8;test=0.2'], '--splits: .*is not a number'),
    (['--splits', 'train=0.5,train=0.5'], 'given twice'),
    (['--splits', 'train=1.5,test=-0.5'], 'between 0 and 1'),
    (['--modality', 'audio'], r"--modality must be one of image, text, "
     r"sensor \(got 'audio'\)"),
    (['--modality', 'text', '--normalization', 'zscore'],
     '--normalization does not apply to text'),
    (['--modality', 'text', '--ngrams', '0'], '--ngrams'),
    (['--modality', 'text', '--min_frequency', '0'],
     '--min_frequency must be >= 1'),
    (['--modality', 'text', '--splits', 'from_input'],
     '--splits from_input is for images'),
    (['--modality', 'sensor', '--window_length', '50', '--split_by',
      'hash'], '--split_by hash would put overlapping windows'),
    (['--modality', 'sensor', '--window_length', '10'],
     'windows without --entity_column need --split_by time'),
    (['--modality', 'sensor', '--split_by', 'entity'],
     '--split_by entity needs --entity_column'),
    (['--modality', 'sensor', '--split_by', 'time'],
     '--split_by time needs --time_cutoffs'),
    (['--modality', 'sensor', '--time_cutoffs', 'soon'],
     "--time_cutoffs: 'soon' is not an ISO-8601 time"),
    (['--modality', 'sensor', '--time_cutoffs', '2024-03-02,2024-03-01'],
     '--time_cutoffs must be in increasing order'),
    (['--modality', 'sensor', '--split_by', 'hash', '--time_cutoffs',
      '2024-03-01'], '--time_cutoffs needs --split_by time'),
    (['--modality', 'sensor', '--window_stride', '5'],
     '--window_stride needs --window_length'),
    (['--modality', 'sensor', '--window_length', '-1'],
     '--window_length must be between 0'),
    (['--modality', 'sensor', '--window_label', 'first'],
     '--window_label must be one of last, majority'),
    (['--modality', 'sensor', '--missing', 'zero'],
     '--missing must be one of dead_letter, drop, impute'),
    (['--modality', 'sensor', '--normalization', 'scale'],
     '--normalization must be one of zscore, minmax, none'),
    (['--modality', 'sensor', '--timestamp_unit', 'h'],
     '--timestamp_unit must be one of s, ms, us, ns'),
    (['--modality', 'sensor', '--splits', 'from_input'],
     '--splits from_input is for images'),
    (['--modality', 'sensor', '--normalization', 'none', '--missing',
      'impute', '--splits', 'validation=0.5,test=0.5'],
     '--missing impute needs a train split'),
    (['--modality', 'sensor', '--bucketize', '-2'], '--bucketize'),
    (['--modality', 'sensor', '--chunk_rows', '10'],
     '--chunk_rows must be >= 1000'),
    (['--splits', 'validation=0.5,test=0.5'],
     '--normalization zscore needs a train split'),
    (['--splits', 'train=0,validation=0.5,test=0.5'],
     '--normalization zscore needs a train split'),
    (['--max_bad_fraction', '1.5'], '--max_bad_fraction must be a number '
     'from 0 to 1'),
    (['--max_bad_fraction', '-0.1'], '--max_bad_fraction'),
    (['--max_bad_fraction', 'lots'], '--max_bad_fraction'),
    (['--max_bad_fraction', 'nan'], '--max_bad_fraction'),
    (['--rebalance', 'oversample', '--rebalance_splits', 'holdout'],
     '--rebalance_splits names holdout, which is not a split'),
    (['--rebalance', 'weight', '--rebalance_splits', 'train,holdout'],
     'names holdout'),
    (['--splits', 'train=0.5,test=0.5', '--rebalance', 'undersample',
      '--rebalance_splits', 'validation'], 'names validation'),
    (['--rebalance', 'smote'], '--rebalance must be one of'),
    (['--resize_mode', 'pad'], '--resize_mode must be one of fit, crop, '
     'stretch'),
    (['--color', 'cmyk'], '--color must be one of rgb, grey'),
    (['--normalization', 'minmax'], '--normalization must be one of'),
    (['--compression', 'zip'], '--compression must be one of'),
    (['--jpeg_quality', '100'], '--jpeg_quality must be between 1 and 95'),
    (['--jpeg_quality', 'high'], '--jpeg_quality must be a whole number'),
    (['--num_shards', '-1'], '--num_shards'),
    (['--seed', 'x'], '--seed must be a whole number'),
    (['--max_pixels', '0'], '--max_pixels must be >= 1'),
    (['--background', 'grey'], '--background must be white, black, a '
     '#rrggbb colour or r,g,b with values from 0 to 255'),
    (['--background', '#fff'], '--background must be white, black'),
    (['--nested_folders', 'flatten'], r"--nested_folders must be one of "
     r"include, skip \(got 'flatten'\)"),
    (['--background', '255,255,256'], '--background must be white, black'),
    (['--name', 'my-data'], '--name must be a plain name'),
    (['--name', 'a/b'], '--name must be a plain name'),
])
def test_bad_values_raise_usage_error(flags, match):
  with pytest.raises(options.UsageError, match=match) as info:
    _resolve(*flags)
  _assert_one_sentence(str(info.value))


def test_sensor_flags_resolve():
  cfg = _resolve('--modality', 'sensor', '--entity_column', 'device',
                 '--window_length', '50', '--window_stride', '25',
                 '--channels', 'ax, ay,az', '--missing', 'impute',
                 '--normalization', 'minmax', '--bucketize', '8')
  sc = cfg.settings
  assert type(sc).__name__ == 'SensorConfig' and cfg.name == 'sensor'
  assert sc.split_by == 'entity' and sc.windowed
  assert (sc.window_length, sc.window_stride) == (50, 25)
  assert sc.channels == ('ax', 'ay', 'az')
  assert (sc.missing, sc.bucketize, cfg.normalization) == ('impute', 8,
                                                           'minmax')
  assert cfg.compression == 'none'
  assert cfg.split_names == ['train', 'validation', 'test']
  # Defaults: rows, split by hash of the row, stride = length.
  rows = _resolve('--modality', 'sensor').settings
  assert (rows.split_by, rows.window_length, rows.missing) == (
      'hash', 0, 'dead_letter')
  assert _resolve('--modality', 'sensor', '--window_length', '10',
                  '--entity_column', 'd').settings.window_stride == 10
  timed = _resolve('--modality', 'sensor', '--window_length', '10',
                   '--time_cutoffs', '2024-03-01T00:00:00Z')
  assert timed.settings.split_by == 'time'
  assert timed.split_names == ['train', 'test']
  assert timed.settings.time_cutoffs == (1709251200 * 10**9,)
  assert timed.to_json()['sensor']['time_cutoffs'][0].startswith(
      '2024-03-01T00:00:00')
  assert timed.config_hash() != cfg.config_hash()


def test_text_flags_resolve():
  cfg = _resolve('--modality', 'text', '--text_column', 'body',
                 '--vocab_size', '500', '--max_tokens', '64', '--ngrams',
                 '1,2', '--text_output', 'tfidf', '--lowercase', 'false',
                 '--oov_buckets', '3', '--keep_text')
  tc = cfg.settings
  assert cfg.name == 'text' and cfg.normalization == 'none'
  assert (tc.text_column, tc.label_column) == ('body', 'label')
  assert (tc.vocab_size, tc.max_tokens, tc.ngrams) == (500, 64, (1, 2))
  assert (tc.output, tc.lowercase, tc.oov_buckets, tc.keep_text) == (
      'tfidf', False, 3, True)
  assert cfg.to_json()['text']['ngrams'] == [1, 2]
  defaults = _resolve("--modality", "text").settings
  assert (defaults.vocab_size, defaults.max_tokens, defaults.output,
          defaults.invalid_utf8) == (20000, 128, 'ids', 'replace')


def test_missing_input_and_output():
  with pytest.raises(options.UsageError, match='--input is required') as info:
    _resolve(input_path=None)
  _assert_one_sentence(str(info.value))
  with pytest.raises(options.UsageError,
                     match='--output is required') as info:
    _resolve(output=None)
  _assert_one_sentence(str(info.value))


def test_usage_error_is_a_value_error():
  assert issubclass(options.UsageError, ValueError)
