"""Finding the input images: class folders, split folders or a manifest file.

Two layers:

- plain functions that turn one path (or one manifest record) into an
  `InputRef` (path, stable id, label, split) or say why they cannot;
- `ListImageInputs`, a PTransform that lists the inputs inside the pipeline
  (`files.list_tree`, a CSV reader, `ReadFromText`), so that millions of
  files on `gs://` never pass through the launching machine.

Every listed file is an input (then an example or a dead letter) or a
skipped file with its reason; none is dropped without being counted.

`check_input` runs on the launching machine before the pipeline is built and
turns an unusable input into one plain sentence.
"""

import csv
import dataclasses
import functools
import io
import json
import os
import posixpath
from typing import (Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

import apache_beam as beam
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems

from transforms.modalities.image import config
from transforms.core import label_text
from transforms.core import splits as split_lib
from transforms.core import metrics
from transforms.runtime import progress
from transforms.core.dead_letters import DEAD
from transforms.core.dead_letters import SKIPPED
from transforms.core.dead_letters import dead_letter
from transforms.core.errors import UsageError
from transforms.sources import files

MANIFEST_EXTENSIONS = ('.csv', '.tsv', '.jsonl', '.json')
# The progress counter of the inputs listed (runtime/progress.py).
LISTED = 'listed'


class InputRef(NamedTuple):
  """One input image before it is read (a tuple: cheap to encode).

  Attributes:
    path: Where to read it (any path Beam's FileSystems opens).
    example_id: Stable id: the path relative to the input root (folders) or
      as written in the manifest file.
    label: Class name.
    split: Split name.
  """
  path: str
  example_id: str
  label: str
  split: str


def is_manifest(path: str) -> bool:
  return path.lower().endswith(MANIFEST_EXTENSIONS)


def ref_from_path(root: str, path: str, splits_from_input: bool,
                  ratios: Sequence[Tuple[str, float]],
                  nested_folders: str = 'include'):
  """Turns a listed file into an InputRef, or a skip/dead-letter reason.

  The class folder is the first folder level below the root (below the
  split folder with --splits from_input). An image in a folder nested
  inside it (`cat/2019/x.jpg`) is of that class with `nested_folders`
  'include', skipped with 'skip'; its id is its whole path below the root
  either way.

  Args:
    root: The input root folder.
    path: A file under it.
    splits_from_input: Whether the first folder level names the split.
    ratios: Split ratios, used when the split is not from the input.
    nested_folders: 'include' or 'skip' (--nested_folders).

  Returns:
    (InputRef or None, skip reason or None, dead-letter reason or None).
  """
  parts = files.relative_parts(root, path)
  depth = 3 if splits_from_input else 2
  if not config.is_image_path(path):
    return None, 'file extension is not an image extension', None
  if len(parts) < depth:
    where = ('a class folder inside a split folder' if splits_from_input
             else 'a class folder')
    return None, f'not in {where}', None
  if len(parts) > depth and nested_folders == 'skip':
    return None, (f'in a folder nested inside the class folder '
                  f'{parts[depth - 2]} (--nested_folders skip)'), None
  example_id = '/'.join(parts)
  label = label_text.canonical(parts[depth - 2])
  if splits_from_input:
    try:
      split = split_lib.canonical_split(parts[0])
    except ValueError as e:
      return None, None, str(e)
  else:
    split = split_lib.assign_split(example_id, list(ratios))
  return InputRef(path, example_id, label, split), None, None


def ref_from_listed(root: str, listed: files.Listed, splits_from_input: bool,
                    ratios: Sequence[Tuple[str, float]],
                    nested_folders: str = 'include'):
  """Turns an entry of `files.list_tree` into an InputRef, or a
  skip/dead-letter reason.

  An entry that is not a file (a symbolic link loop, a FIFO) is skipped
  with its reason. A file that cannot be read (a broken symbolic link, a
  name that is not valid UTF-8) is a dead letter with its reason where it
  would have been an input, and skipped like any file where it would not
  (another extension, a nested folder with `nested_folders` 'skip').

  Returns:
    (InputRef or None, skip reason or None, dead-letter reason or None).
  """
  if listed.skip:
    return None, listed.skip, None
  # Undecodable bytes as U+FFFD, so that a name that is not valid UTF-8 is
  # placed like any other (its id is never used).
  path = listed.path if listed.problem is None else os.fsencode(
      listed.path).decode('utf-8', 'replace')
  ref, skip, dead = ref_from_path(root, path, splits_from_input, ratios,
                                  nested_folders)
  if listed.problem is not None and skip is None:
    return None, None, listed.problem
  return ref, skip, dead


@dataclasses.dataclass(frozen=True)
class ManifestFormat:
  """How to read a manifest file's lines: kind and column positions."""
  kind: str  # 'csv', 'tsv' or 'jsonl'
  path_column: str = 'path'
  label_column: str = 'label'
  split_column: str = 'split'
  path_index: int = 0
  label_index: int = 1
  split_index: Optional[int] = None


def _manifest_kind(path: str) -> str:
  lower = path.lower()
  if lower.endswith('.tsv'):
    return 'tsv'
  if lower.endswith('.csv'):
    return 'csv'
  return 'jsonl'


def _read_first_line(path: str) -> str:
  with FileSystems.open(path) as f:
    head = f.read(1 << 16)
  text = head.decode('utf-8-sig', errors='replace')
  return text.splitlines()[0] if text.strip() else ''


def manifest_format(path: str, splits_from_input: bool) -> ManifestFormat:
  """Reads a manifest's header and finds the columns.

  Raises:
    UsageError: Empty file or missing columns, in one sentence.
  """
  kind = _manifest_kind(path)
  first = _read_first_line(path)
  if not first.strip():
    raise UsageError(f'the manifest file {path} is empty')
  if kind == 'jsonl':
    try:
      record = json.loads(first)
    except json.JSONDecodeError:
      raise UsageError(f'the first line of {path} is not a JSON object, '
                       'expected one JSON object per line') from None
    if not isinstance(record, dict) or 'path' not in record or (
        'label' not in record):
      raise UsageError(f'the JSON lines of {path} need "path" and "label" '
                       'keys')
    if splits_from_input and 'split' not in record:
      raise UsageError(f'--splits from_input needs a "split" key in {path}')
    return ManifestFormat(kind='jsonl')
  delimiter = '\t' if kind == 'tsv' else ','
  header = [c.strip().lower() for c in next(csv.reader([first],
                                                      delimiter=delimiter))]
  missing = [c for c in ('path', 'label') if c not in header]
  if missing:
    raise UsageError(f'the manifest {path} has no {" or ".join(missing)} '
                     f'column in its header (found: {", ".join(header)})')
  if splits_from_input and 'split' not in header:
    raise UsageError(f'--splits from_input needs a split column in {path}')
  return ManifestFormat(
      kind=kind, path_index=header.index('path'),
      label_index=header.index('label'),
      split_index=header.index('split') if 'split' in header else None)


@functools.lru_cache(maxsize=16)
def _manifest_folder(manifest_path: str):
  """(the manifest's folder, the FileSystem that joins paths to it); looked
  up once per manifest rather than once per line."""
  base = posixpath.dirname(manifest_path.replace('\\', '/'))
  return base, FileSystems.get_filesystem(base) if base else None


def resolve_manifest_path(manifest_path: str, path: str) -> str:
  """A path from a manifest line, relative to the manifest's folder."""
  if '://' in path or path.startswith('/'):
    return path
  base, filesystem = _manifest_folder(manifest_path)
  return filesystem.join(base, path) if base else path


def ref_from_manifest_line(line: str, fmt: ManifestFormat,
                           manifest_path: str, splits_from_input: bool,
                           ratios: Sequence[Tuple[str, float]],
                           row: Optional[Sequence[str]] = None):
  """Parses one manifest line (a JSON line, or a CSV/TSV record) into an
  InputRef.

  Args:
    line: The line, or the CSV/TSV record's text (see manifest_records).
    fmt: The manifest's format.
    manifest_path: The manifest file (relative paths are below its folder).
    splits_from_input: Whether the split column names the split.
    ratios: Split ratios, used when the split is not from the input.
    row: The CSV/TSV record's fields when already parsed (`line` is then
      only checked for being blank).

  Returns:
    (InputRef or None, dead-letter reason or None).
  """
  if not line.strip():
    return None, None
  split = None
  if fmt.kind == 'jsonl':
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      return None, f'manifest line is not valid JSON: {e}'
    if not isinstance(record, dict):
      return None, 'manifest line is not a JSON object'
    path, label = record.get('path'), record.get('label')
    split = record.get('split')
  else:
    if row is None:
      try:
        row = next(csv.reader(io.StringIO(line), delimiter=_delimiter(fmt)))
      except (csv.Error, StopIteration) as e:
        return None, f'manifest line is not valid {fmt.kind.upper()}: {e}'
    get = lambda i: row[i] if i is not None and i < len(row) else None  # pylint: disable=unnecessary-lambda-assignment
    path, label = get(fmt.path_index), get(fmt.label_index)
    split = get(fmt.split_index)
  if not path or not str(path).strip():
    return None, 'manifest line has no path'
  if label is None or not str(label).strip():
    return None, f'manifest line for {path} has no label'
  path, label = str(path).strip(), label_text.canonical(str(label))
  if splits_from_input:
    if split is None or not str(split).strip():
      return None, f'manifest line for {path} has no split'
    try:
      split = split_lib.canonical_split(str(split))
    except ValueError as e:
      return None, str(e)
  else:
    split = split_lib.assign_split(path, list(ratios))
  return InputRef(resolve_manifest_path(manifest_path, path), path, label,
                  split), None


def _delimiter(fmt: ManifestFormat) -> str:
  return '\t' if fmt.kind == 'tsv' else ','


# A quoted field may hold line breaks, so a record may span lines; one that
# spans more than this is a quote left open by mistake.
MAX_RECORD_LINES = 100


class _RecordTooLong(Exception):
  pass


class _Lines:
  """The lines of a text, some of which can be put back to read again;
  remembers the lines of the record being read."""

  def __init__(self, lines: Iterable[str]):
    self._lines = iter(lines)
    self._back: List[str] = []  # put back, last line first
    self.number = 0  # of the last line read
    self.taken: List[str] = []

  def __iter__(self):
    return self

  def __next__(self) -> str:
    if len(self.taken) >= MAX_RECORD_LINES:
      raise _RecordTooLong()
    line = self._back.pop() if self._back else next(self._lines)
    self.number += 1
    self.taken.append(line)
    return line

  def put_back(self, lines: List[str]) -> None:
    self._back.extend(reversed(lines))
    self.number -= len(lines)


def _has_line_break(row: Sequence[str], columns: Sequence[int]) -> bool:
  return any(i < len(row) and ('\n' in row[i] or '\r' in row[i])
             for i in columns)


def manifest_records(lines: Iterable[str], fmt: ManifestFormat
                     ) -> Iterator[Tuple[int, str, Optional[List[str]],
                                         Optional[str]]]:
  """Splits the lines of a CSV/TSV manifest into records, as CSV: a quoted
  field may hold line breaks (a caption on two lines), so a record may
  span lines.

  A quote opened by mistake would swallow every line up to the next quote
  character, so a record that spans lines is kept only when its path,
  label and split fields hold no line break and it spans at most
  MAX_RECORD_LINES lines. Otherwise, as for a line the csv module refuses,
  only its first line is a dead letter and reading goes on from the line
  after it, so every other line still counts once. (A path that truly
  holds a line break is refused this way too.)

  Args:
    lines: The manifest's lines with their line ends, header included
      (a text file opened with newline='').
    fmt: The manifest's format (its delimiter and columns).

  Yields:
    (number of the record's first line, the record's text, its fields or
    None, a dead-letter reason or None), the header first. Blank lines are
    records without fields.
  """
  source = _Lines(lines)
  reader = csv.reader(source, delimiter=_delimiter(fmt))
  columns = [i for i in (fmt.path_index, fmt.label_index, fmt.split_index)
             if i is not None]
  while True:
    source.taken = []
    start = source.number + 1
    reason = None
    try:
      row = next(reader)
    except StopIteration:
      return
    except _RecordTooLong:
      row, reason = None, (f'a quote opened on this line is not closed '
                           f'within {MAX_RECORD_LINES} lines')
    except csv.Error as e:
      row, reason = None, f'manifest line is not valid {fmt.kind.upper()}: {e}'
    if row is not None and len(source.taken) > 1 and _has_line_break(
        row, columns):
      row, reason = None, ('a quote opened on this line is not closed on '
                           'it (only columns other than path, label and '
                           'split may hold line breaks)')
    if row is None and len(source.taken) > 1:
      source.put_back(source.taken[1:])
      del source.taken[1:]
    text = ''.join(source.taken)
    if reason is None and files.printable(text) != text:
      row, reason = None, 'manifest line is not valid UTF-8'
    yield start, text, row, reason


# How many names check_input lists at most.
CHECK_LIMIT = 10000


def _is_split_name(name: str) -> bool:
  try:
    split_lib.canonical_split(name)
    return True
  except ValueError:
    return False


def check_input(path: str, splits_from_input: bool,
                nested_folders: str = 'include') -> Optional[
                    ManifestFormat]:
  """Checks on the launching machine that the input can be used at all.

  Lists at most CHECK_LIMIT names, so it stays quick on `gs://`. The folder
  name is taken literally (`[`, `*` and `?` in it are not patterns).

  Args:
    path: The --input value: a folder or a manifest file.
    splits_from_input: Whether splits come from folders or a column.
    nested_folders: --nested_folders: whether images in folders nested
      inside the class folders are inputs ('include') or not ('skip').

  Returns:
    The manifest format for a manifest file, None for a folder.

  Raises:
    UsageError: With one sentence saying what is wrong.
  """
  if is_manifest(path):
    if not files.exists(path):
      raise UsageError(f'the input manifest {path} does not exist')
    return manifest_format(path, splits_from_input)
  root = files.strip_slash(path)
  if not files.exists(root):
    raise UsageError(f'the input path {root} does not exist')
  layout = f'{root}/<label>/image.jpg'
  split_layout = f'{root}/train/<label>/image.jpg'
  try:
    listed = [entry for entry in files.list_tree(root, limit=CHECK_LIMIT)
              if entry.skip is None]
  except (OSError, BeamIOError):
    listed = []
  # Path components below the root of every image name.
  found = [files.relative_parts(root, entry.path) for entry in listed
           if config.is_image_path(entry.path)]
  depth = 3 if splits_from_input else 2
  at_depth = [parts for parts in found if len(parts) == depth]
  nested = [parts for parts in found if len(parts) > depth]
  usable = at_depth + (nested if nested_folders == 'include' else [])
  if usable:
    if splits_from_input:
      for parts in usable:
        if not _is_split_name(parts[0]):
          raise UsageError(
              f'--splits from_input expects split folders train, validation '
              f'and test in {root}, found {parts[0]!r}')
    elif not at_depth and all(_is_split_name(p[0]) for p in usable):
      raise UsageError(f'{root} holds images two folders deep, as in '
                       f'{split_layout}; pass --splits from_input to use '
                       'those split folders')
    return None
  if splits_from_input and any(len(parts) == 2 for parts in found):
    raise UsageError(f'--splits from_input expects split folders such as '
                     f'{split_layout}, but {root} holds class folders')
  if nested:
    example = files.printable('/'.join([root] + nested[0]))
    raise UsageError(f'the images in {root} are all in folders nested '
                     f'inside the class folders, such as {example}, and '
                     '--nested_folders skip skips those; pass '
                     '--nested_folders include to use them')
  if found:
    raise UsageError(f'no labels found in {root}: put images in one folder '
                     f'per class, for example '
                     f'{split_layout if splits_from_input else layout}')
  if not listed:
    raise UsageError(f'the input folder {root} is empty')
  raise UsageError(f'no image files ({", ".join(config.IMAGE_EXTENSIONS)}) '
                   f'found in {root}; expected {layout}')


def split_pairs(ratios):
  return tuple((name, float(r)) for name, r in ratios)


class ListImageInputs(beam.PTransform):
  """Lists the input images inside the pipeline.

  A folder is listed by one worker (`files.list_tree`: every depth, its
  name taken literally, symbolic links as that function says); a CSV/TSV
  manifest is read by one worker too (see _ReadManifestRecords), a JSON
  lines manifest line by line by Beam's text source (in parallel).

  Output tags:
    main: InputRef per image.
    'dead': dead-letter dicts (bad manifest lines, unknown split folders,
      broken symbolic links, names that are not valid UTF-8).
    'skipped': {'input', 'reason'} of files that are not inputs (other
      extensions, outside a class folder, nested folders with
      --nested_folders skip, symbolic link loops).
  """

  def __init__(self, input_path: str, splits_from_input: bool,
               ratios: Sequence[Tuple[str, float]],
               manifest: Optional[ManifestFormat],
               nested_folders: str = 'include'):
    super().__init__()
    self._input = input_path
    self._from_input = splits_from_input
    self._ratios = split_pairs(ratios)
    self._manifest = manifest
    self._nested = nested_folders

  def expand(self, pbegin):
    outputs = (DEAD, SKIPPED)
    if self._manifest is not None and self._manifest.kind == 'jsonl':
      lines = pbegin | 'ReadManifestLines' >> beam.io.ReadFromText(
          files.escape_glob(self._input))
      # -> str per line
      return lines | 'ParseManifestLines' >> beam.ParDo(
          _ParseManifestLine(self._input, self._manifest, self._from_input,
                             self._ratios)).with_outputs(*outputs,
                                                         main='refs')
    if self._manifest is not None:
      return (pbegin
              | 'ManifestFile' >> beam.Create([self._input])
              | 'ReadManifestRecords' >> beam.ParDo(_ReadManifestRecords(
                  self._manifest, self._from_input, self._ratios)
                                                   ).with_outputs(
                                                       *outputs, main='refs'))
    root = files.strip_slash(self._input)
    return (pbegin
            | 'InputFolder' >> beam.Create([root])
            | 'ListImageFiles' >> beam.ParDo(
                _ListImageFiles(self._from_input, self._ratios, self._nested)
            ).with_outputs(*outputs, main='refs'))


class _ListImageFiles(beam.DoFn):
  """Input folder -> InputRef per image, and its dead letters and skipped
  files (the listing and the naming in one step, so that a name that is
  not valid UTF-8 never has to be encoded)."""

  def __init__(self, from_input, ratios, nested_folders):
    super().__init__()
    self._from_input, self._ratios = from_input, ratios
    self._nested = nested_folders
    self._skipped = metrics.counter('image', 'skipped')
    self._listed = progress.counter('image', LISTED)

  def process(self, root):
    for listed in files.list_tree(root):
      ref, skip, dead = ref_from_listed(root, listed, self._from_input,
                                        self._ratios, self._nested)
      path = files.printable(listed.path)
      if ref is not None:
        self._listed.inc()
        yield ref
      elif dead is not None:
        yield beam.pvalue.TaggedOutput(DEAD, dead_letter(path, 'list', dead))
      else:
        self._skipped.inc()
        yield beam.pvalue.TaggedOutput(SKIPPED, {'input': path,
                                                 'reason': skip})


class _ParseManifestLine(beam.DoFn):

  def __init__(self, manifest_path, fmt, from_input, ratios):
    super().__init__()
    self._path, self._fmt = manifest_path, fmt
    self._from_input, self._ratios = from_input, ratios
    self._listed = progress.counter('image', LISTED)

  def process(self, line):
    ref, reason = ref_from_manifest_line(line, self._fmt, self._path,
                                         self._from_input, self._ratios)
    if ref is not None:
      self._listed.inc()
      yield ref
    elif reason is not None:
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(f'{self._path}: {line[:200]}', 'read_manifest',
                            reason))


class _ReadManifestRecords(beam.DoFn):
  """CSV/TSV manifest path -> InputRef per record, and a dead letter per
  bad record (named `manifest:line: text`).

  The file is read as CSV (manifest_records), streamed through
  FileSystems.open, so memory holds one record whatever the file's size,
  on local disk and gs:// alike. It is read by one worker: a CSV file
  cannot be cut at byte offsets the way Beam's text source cuts files for
  parallel reading, since an offset may fall inside a quoted field that
  holds a line break. Reading a million lines into references takes a few
  seconds of one core, next to the hours their images take to decode, and
  the references are shuffled right after listing, so the decoding is
  spread over every worker all the same.
  """

  def __init__(self, fmt, from_input, ratios):
    super().__init__()
    self._fmt, self._from_input, self._ratios = fmt, from_input, ratios
    self._listed = progress.counter('image', LISTED)

  def process(self, manifest_path):
    with FileSystems.open(manifest_path) as raw:
      text = io.TextIOWrapper(raw, encoding='utf-8-sig',
                              errors='surrogateescape', newline='')
      for number, record, row, reason in manifest_records(text, self._fmt):
        if number == 1:
          continue  # the header
        if reason is None:
          ref, reason = ref_from_manifest_line(
              record, self._fmt, manifest_path, self._from_input,
              self._ratios, row=row)
          if ref is not None:
            self._listed.inc()
            yield ref
        if reason is not None:
          shown = files.printable(record).rstrip('\r\n')[:200]
          yield beam.pvalue.TaggedOutput(DEAD, dead_letter(
              f'{manifest_path}:{number}: {shown}', 'read_manifest', reason))
