"""Finding the text modality's inputs and checking their columns.

No Beam pipeline in here: plain functions that run on the launching machine,
find the input files (table files, or class folders of documents) and check
the column names of a table file, and turn a bad invocation into a
`UsageError` (one plain sentence): `list_inputs` and `check_columns`. The
documents are then read by `parse.py` and checked by `documents.py`.

Decisions:

- Files are listed and opened with Beam's `FileSystems`, so `gs://` works.
- Table files: the format comes from the extension (`tables.format_of`):
  .csv; .tsv and .tab; .jsonl, .ndjson and .json (all read as JSON lines).
  A glob keeps only the matched files with one of those extensions and skips
  empty files; `root` is the deepest folder holding all of them.
- Class folders: every `root/<label>/<name>.txt` (the extension in any case),
  exactly one folder level deep. Other files, deeper files and hidden names
  (starting with '.', such as `.ipynb_checkpoints/`) are ignored.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from transforms.core.errors import UsageError
from transforms.sources import table_columns
from transforms.sources import table_formats
from transforms.sources import tables

if TYPE_CHECKING:
  from transforms.sources import files

FORMATS = ('csv', 'tsv', 'jsonl', 'folder')
INVALID_UTF8 = ('replace', 'dead_letter')
_TABLE_FORMATS = ('csv', 'tsv', 'jsonl')
_TABLE_EXTENSIONS = '.csv, .tsv, .tab, .jsonl, .ndjson or .json'
_GLOB_CHARS = '*?['
# How much of a table file check_columns looks at.
_HEADER_BYTES = 1 << 20
_SAMPLE_LINES = 1000


@dataclasses.dataclass(frozen=True)
class TextColumns:
  """The columns of a table file that hold the text and the label."""
  text: str
  label: str


# ---------------------------------------------------------------------------
# Finding the inputs.


def _table_format(path: str) -> Optional[str]:
  fmt = tables.format_of(path)
  return fmt if fmt in _TABLE_FORMATS else None


def _folder_of(path: str) -> str:
  head, sep, _ = path.rpartition('/')
  if not sep:
    return '.'
  if not head or head.endswith(':/'):
    return head + '/'  # '/x.csv' -> '/', 'gs://x' -> 'gs://'
  return head


def _common_folder(paths: Sequence[str]) -> str:
  """The deepest folder that holds every path."""
  folders = [_folder_of(p) for p in paths]
  first = folders[0].split('/')
  common = len(first)
  for folder in folders[1:]:
    parts = folder.split('/')
    n = 0
    while n < min(common, len(parts)) and parts[n] == first[n]:
      n += 1
    common = n
  joined = '/'.join(first[:common])
  if joined or not folders[0].startswith('/'):
    return joined or '.'
  return '/'


def _class_files(root: str) -> List[str]:
  """Every root/<label>/<name>.txt, sorted."""
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  found = []
  for meta in files.match(FileSystems.join(root, '*', '*')):
    parts = files.relative_parts(root, meta.path)
    if (len(parts) == 2 and parts[1].lower().endswith('.txt')
        and not parts[0].startswith('.') and not parts[1].startswith('.')):
      found.append(meta.path)
  return sorted(found)


def list_inputs(path: str) -> Tuple[str, List[str], str]:
  """Finds the input files.

  Args:
    path: A table file (.csv, .tsv, .tab, .jsonl, .ndjson, .json), a glob of
      table files, or a folder with one folder of .txt documents per class.

  Returns:
    (kind, files, root): ('table', the matched non-empty table files sorted,
    the deepest folder holding them) or ('folder', every root/<label>/*.txt
    sorted, the folder).

  Raises:
    UsageError: The path does not exist, a glob matches no table file,
      every table file is empty, or a folder holds no <label>/*.txt file.
  """
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  from transforms.sources import files  # pylint: disable=import-outside-toplevel,redefined-outer-name
  if not path:
    raise UsageError('no input path was given')
  if any(c in path for c in _GLOB_CHARS):
    matched = files.match(path)
    if not matched:
      raise UsageError(f'no files match {path}')
    table_files = [m for m in matched if _table_format(m.path)]
    if not table_files:
      raise UsageError(f'none of the {len(matched)} files matching {path} '
                           f'is a {_TABLE_EXTENSIONS} file')
    paths = sorted(m.path for m in table_files if m.size_in_bytes > 0)
    if not paths:
      raise UsageError(f'every file matching {path} is empty')
    return 'table', paths, _common_folder(paths)
  if _table_format(path):
    matched = files.match(path)
    if not matched:
      raise UsageError(f'the input file {path} does not exist')
    if matched[0].size_in_bytes == 0:
      raise UsageError(f'the input file {path} is empty')
    return 'table', [path], _folder_of(path)
  root = files.strip_slash(path)
  paths = _class_files(root)
  if paths:
    return 'folder', paths, root
  if not files.exists(path) and not files.match(FileSystems.join(root, '*')):
    raise UsageError(f'the input {path} does not exist')
  raise UsageError(
      f'{path} is neither a {_TABLE_EXTENSIONS} file nor a folder with one '
      'folder of .txt documents per class (<label>/*.txt)')


# ---------------------------------------------------------------------------
# Columns.


def check_table_format(fmt: str):
  """Raises ValueError when `fmt` is not a table format (csv, tsv,
  jsonl)."""
  if fmt not in _TABLE_FORMATS:
    raise ValueError(f'format {fmt!r} is not a table format '
                     f'({", ".join(_TABLE_FORMATS)})')


def _csv_names(path: str, fmt: str) -> List[str]:
  """The header of a CSV/TSV file (the first non-empty record)."""
  data, _ = table_formats.read_prefix(path, _HEADER_BYTES)
  text = data.decode('utf-8-sig', errors='replace')
  if not text.strip():
    raise UsageError(f'the file {path} is empty')
  reader = csv.reader(io.StringIO(text, newline=''),
                      delimiter='\t' if fmt == 'tsv' else ',')
  try:
    for record in reader:
      if record:
        return record
  except csv.Error as e:
    raise UsageError(f'cannot read the header of {path}: {e}') from None
  raise UsageError(f'the file {path} has no header line')


def _jsonl_keys(path: str) -> Tuple[List[str], int]:
  """The keys of the JSON objects among the first non-blank lines.

  Returns:
    (keys in first-seen order, number of non-blank lines looked at).
  """
  keys = {}
  seen = 0
  objects = 0
  with table_formats.open_file(path) as f:
    while seen < _SAMPLE_LINES:
      line = f.readline()
      if not line:
        break
      if not seen and line.startswith(table_formats.BOM):
        line = line[len(table_formats.BOM):]
      if not line.strip(b' \t\r\n'):
        continue
      seen += 1
      try:
        record = json.loads(line.decode('utf-8', 'surrogateescape'))
      except (ValueError, RecursionError):
        continue
      if isinstance(record, dict):
        objects += 1
        for key in record:
          keys.setdefault(key, None)
  if not seen:
    raise UsageError(f'the file {path} is empty')
  if not objects:
    raise UsageError(f'none of the first {seen} lines of {path} is a JSON '
                         'object, expected one JSON object per line')
  return list(keys), seen


def check_columns(path: str, fmt: str, text_column: str,
                  label_column: str) -> TextColumns:
  """Checks that a table file has the text and label columns.

  Args:
    path: The file (any path Beam's FileSystems opens).
    fmt: 'csv', 'tsv' or 'jsonl'.
    text_column: The column holding the document text.
    label_column: The column holding the label.

  Returns:
    The TextColumns.

  Raises:
    UsageError: A missing column (the message lists the available ones),
      a column given for both roles or appearing twice in a CSV header, an
      empty file, or a JSON-lines file without a JSON object.
    ValueError: A format that is not a table format.
  """
  check_table_format(fmt)
  if text_column == label_column:
    raise UsageError(f'the column {text_column!r} is given as both the '
                         'text and the label column')
  if fmt == 'jsonl':
    names, seen = _jsonl_keys(path)
    where = f'the first {seen} lines of {path}'
    what = 'keys'
  else:
    names = _csv_names(path, fmt)
    where = f'the header of {path}'
    what = 'columns'
  for role, name in (('text', text_column), ('label', label_column)):
    if name not in names:
      raise UsageError(f'the {role} column {name!r} is not in {where} '
                           f'({what}: {table_columns.column_list(names)})')
    if names.count(name) > 1:
      raise UsageError(f'the {role} column {name!r} appears more than '
                           f'once in {where} ({what}: '
                           f'{table_columns.column_list(names)})')
  return TextColumns(text_column, label_column)
