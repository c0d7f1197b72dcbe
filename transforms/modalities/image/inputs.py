"""Finding the input images: class folders, split folders or a manifest file.

Two layers:

- plain functions that turn one path (or one manifest line) into an
  `InputRef` (path, stable id, label, split) or say why they cannot;
- `ListImageInputs`, a PTransform that lists the inputs inside the pipeline
  (`fileio.MatchFiles`, `ReadFromText`), so that millions of files on `gs://`
  never pass through the launching machine.

`check_input` runs on the launching machine before the pipeline is built and
turns an unusable input into one plain sentence.
"""

import csv
import dataclasses
import io
import json
import posixpath
from typing import NamedTuple, Optional, Sequence, Tuple

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.io.filesystems import FileSystems

from transforms.modalities.image import processing as images
from transforms.core import splits as split_lib
from transforms.core import metrics
from transforms.core.dead_letters import DEAD
from transforms.core.dead_letters import SKIPPED
from transforms.core.dead_letters import dead_letter
from transforms.core.errors import UsageError
from transforms.sources import files

MANIFEST_EXTENSIONS = ('.csv', '.tsv', '.jsonl', '.json')


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
                  ratios: Sequence[Tuple[str, float]]):
  """Turns a listed file into an InputRef, or a skip/dead-letter reason.

  Args:
    root: The input root folder.
    path: A file under it.
    splits_from_input: Whether the first folder level names the split.
    ratios: Split ratios, used when the split is not from the input.

  Returns:
    (InputRef or None, skip reason or None, dead-letter reason or None).
  """
  parts = files.relative_parts(root, path)
  depth = 3 if splits_from_input else 2
  if not images.is_image_path(path):
    return None, 'file extension is not an image extension', None
  if len(parts) != depth:
    return None, f'not at depth {depth} below the input folder', None
  example_id = '/'.join(parts)
  label = parts[-2]
  if splits_from_input:
    try:
      split = split_lib.canonical_split(parts[0])
    except ValueError as e:
      return None, None, str(e)
  else:
    split = split_lib.assign_split(example_id, list(ratios))
  return InputRef(path, example_id, label, split), None, None


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


def resolve_manifest_path(manifest_path: str, path: str) -> str:
  """A path from a manifest line, relative to the manifest's folder."""
  if '://' in path or path.startswith('/'):
    return path
  base = posixpath.dirname(manifest_path.replace('\\', '/'))
  return FileSystems.join(base, path) if base else path


def ref_from_manifest_line(line: str, fmt: ManifestFormat,
                           manifest_path: str, splits_from_input: bool,
                           ratios: Sequence[Tuple[str, float]]):
  """Parses one manifest line into an InputRef.

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
    delimiter = '\t' if fmt.kind == 'tsv' else ','
    try:
      row = next(csv.reader(io.StringIO(line), delimiter=delimiter))
    except (csv.Error, StopIteration) as e:
      return None, f'manifest line is not valid {fmt.kind.upper()}: {e}'
    get = lambda i: row[i] if i is not None and i < len(row) else None  # pylint: disable=unnecessary-lambda-assignment
    path, label = get(fmt.path_index), get(fmt.label_index)
    split = get(fmt.split_index)
  if not path or not str(path).strip():
    return None, 'manifest line has no path'
  if label is None or not str(label).strip():
    return None, f'manifest line for {path} has no label'
  path, label = str(path).strip(), str(label).strip()
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


def check_input(path: str, splits_from_input: bool) -> Optional[
    ManifestFormat]:
  """Checks on the launching machine that the input can be used at all.

  Lists at most a few thousand names, so it stays quick on `gs://`.

  Args:
    path: The --input value: a folder or a manifest file.
    splits_from_input: Whether splits come from folders or a column.

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

  def images_at(depth):
    pattern = FileSystems.join(root, *(['*'] * depth))
    return [p for p in files.match_paths(pattern, limit=5000) if images.is_image_path(p)]

  found = images_at(3 if splits_from_input else 2)
  if found:
    if splits_from_input:
      for p in found:
        first = files.relative_parts(root, p)[0]
        try:
          split_lib.canonical_split(first)
        except ValueError:
          raise UsageError(
              f'--splits from_input expects split folders train, validation '
              f'and test in {root}, found {first!r}') from None
    return None
  if splits_from_input and images_at(2):
    raise UsageError(f'--splits from_input expects split folders such as '
                     f'{split_layout}, but {root} holds class folders')
  if not splits_from_input and images_at(3):
    raise UsageError(f'{root} holds images two folders deep, as in '
                     f'{split_layout}; pass --splits from_input to use those '
                     'split folders')
  if images_at(1):
    raise UsageError(f'no labels found in {root}: put images in one folder '
                     f'per class, for example '
                     f'{split_layout if splits_from_input else layout}')
  if not any(files.match_paths(FileSystems.join(root, *(['*'] * d)), limit=1)
             for d in (1, 2, 3)):
    raise UsageError(f'the input folder {root} is empty')
  raise UsageError(f'no image files ({", ".join(images.IMAGE_EXTENSIONS)}) '
                   f'found in {root}; expected {layout}')


def _split_pairs(ratios):
  return tuple((name, float(r)) for name, r in ratios)


class ListImageInputs(beam.PTransform):
  """Lists the input images inside the pipeline.

  Output tags:
    main: InputRef per image.
    'dead': dead-letter dicts (bad manifest lines, unknown split folders).
    'skipped': paths that are not images (other extensions, wrong depth).
  """

  def __init__(self, input_path: str, splits_from_input: bool,
               ratios: Sequence[Tuple[str, float]],
               manifest: Optional[ManifestFormat]):
    super().__init__()
    self._input = input_path
    self._from_input = splits_from_input
    self._ratios = _split_pairs(ratios)
    self._manifest = manifest

  def expand(self, pbegin):
    if self._manifest is not None:
      lines = pbegin | 'ReadManifestLines' >> beam.io.ReadFromText(
          self._input,
          skip_header_lines=0 if self._manifest.kind == 'jsonl' else 1)
      # -> str per line
      return lines | 'ParseManifestLines' >> beam.ParDo(
          _ParseManifestLine(self._input, self._manifest, self._from_input,
                             self._ratios)).with_outputs(
                                 DEAD, SKIPPED, main='refs')
    root = files.strip_slash(self._input)
    depth = ('*', '*', '*') if self._from_input else ('*', '*')
    pattern = FileSystems.join(root, *depth)
    return (pbegin
            | 'MatchImageFiles' >> fileio.MatchFiles(
                pattern, empty_match_treatment=fileio.EmptyMatchTreatment.ALLOW)
            # -> FileMetadata per file
            | 'PathsToInputRefs' >> beam.ParDo(
                _PathToRef(root, self._from_input, self._ratios)).with_outputs(
                    DEAD, SKIPPED, main='refs'))


class _PathToRef(beam.DoFn):

  def __init__(self, root, from_input, ratios):
    super().__init__()
    self._root, self._from_input, self._ratios = root, from_input, ratios
    self._skipped = metrics.counter('image', 'skipped')

  def process(self, metadata):
    ref, skip, dead = ref_from_path(self._root, metadata.path,
                                    self._from_input, self._ratios)
    if ref is not None:
      yield ref
    elif dead is not None:
      yield beam.pvalue.TaggedOutput(DEAD, dead_letter(metadata.path, 'list',
                                                       dead))
    else:
      self._skipped.inc()
      yield beam.pvalue.TaggedOutput(SKIPPED, {'input': metadata.path,
                                               'reason': skip})


class _ParseManifestLine(beam.DoFn):

  def __init__(self, manifest_path, fmt, from_input, ratios):
    super().__init__()
    self._path, self._fmt = manifest_path, fmt
    self._from_input, self._ratios = from_input, ratios

  def process(self, line):
    ref, reason = ref_from_manifest_line(line, self._fmt, self._path,
                                         self._from_input, self._ratios)
    if ref is not None:
      yield ref
    elif reason is not None:
      yield beam.pvalue.TaggedOutput(
          DEAD, dead_letter(f'{self._path}: {line[:200]}', 'read_manifest',
                            reason))
