"""The sensor input on the launching machine: its table files, their columns
and size, and which local worker processes a run needs.

`check_input` runs before the pipeline is built and turns an unusable input
(no table file, a column that does not exist) into one plain sentence; the
`SensorInput` it returns is the plan both passes read with (pipeline.py).
"""

import glob
import posixpath
from typing import List, NamedTuple, Optional

from apache_beam.io.filesystems import FileSystems

from transforms.runtime import progress
from transforms.modalities.sensor import ranges as sensor_ranges
from transforms.sources import files as files_lib
from transforms.sources import tables
from transforms.core.errors import UsageError


# What the local worker processes that parse CSV ranges import.
WORKER_MODULES = (sensor_ranges.__name__,)


def worker_modules(cfg, plan: 'SensorInput'):
  """WORKER_MODULES when the run will parse a file in ranges with local
  worker processes (a large local CSV or TSV file), else ()."""
  if cfg.local_processes <= 0 or '://' in plan.pattern:
    return ()
  files = glob.glob(plan.pattern) if glob.has_magic(plan.pattern) else [
      plan.pattern]
  return (WORKER_MODULES if any(map(tables.ranges_possible, files))
          else ())


class SensorInput(NamedTuple):
  """What the launch-time input check found."""
  pattern: str  # file pattern listed in the pipeline
  root: str  # folder example ids are relative to
  columns: tables.Columns


def _listing_pattern(path: str):
  """(pattern, root) for a file, a folder or a glob."""
  if any(c in path for c in '*?['):
    return path, posixpath.dirname(path.split('*')[0].split('?')[0])
  if files_lib.exists(path) and not _is_file(path):
    root = path.rstrip('/')
    return FileSystems.join(root, '*'), root
  return path, posixpath.dirname(path)


def _is_file(path: str) -> bool:
  try:
    matched = FileSystems.match([path])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return False
  return len(matched) == 1 and matched[0].path.rstrip('/') == path.rstrip(
      '/') and tables.format_of(path) is not None


def list_files(pattern: str) -> List[str]:
  try:
    matched = FileSystems.match([pattern])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return []
  return sorted(m.path for m in matched
                if tables.format_of(m.path) and m.size_in_bytes > 0)


def check_input(cfg) -> SensorInput:
  """Checks the input on the launching machine and resolves the columns.

  Raises:
    UsageError: No readable table files, or columns that do not exist; one
      sentence.
  """
  sc = cfg.settings
  if not files_lib.exists(cfg.input) and not any(
      c in cfg.input for c in '*?['):
    raise UsageError(f'the input {cfg.input} does not exist')
  pattern, root = _listing_pattern(cfg.input)
  files = list_files(pattern)
  if not files:
    raise UsageError(f'the input {cfg.input} has no non-empty CSV, TSV, '
                     'JSONL or Parquet file')
  first = files[0]
  try:
    names, numeric = tables.read_header(first, tables.format_of(first))
    columns = tables.resolve_columns(
        names, numeric, sc.timestamp_column, sc.entity_column,
        sc.label_column, sc.channels or None)
  except tables.ColumnError as e:
    raise UsageError(f'{posixpath.basename(first)}: {e}') from None
  return SensorInput(pattern, root, columns)


def progress_measure(cfg, plan: SensorInput) -> progress.BytesMeasure:
  """The progress line's measure: bytes of the input read, over the
  statistics and example passes."""
  del cfg
  return progress.BytesMeasure('sensor', input_bytes(plan.pattern), 2,
                               ('rows', 'rows'))


def input_bytes(pattern: str) -> Optional[int]:
  """The total size of the table files the pipeline lists (None when they
  cannot be listed)."""
  try:
    matched = FileSystems.match([pattern])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    return None
  return sum(m.size_in_bytes for m in matched
             if tables.format_of(m.path)) or None
