"""Checks of the input and output made before anything is built, so that
what would fail slowly, or deep in the pipeline, fails at once with one
sentence (a UsageError, exit code 2).

- `check_reachable`: a remote path (gs://, s3://, ...) must answer within a
  few seconds. Beam's GCS client retries for two minutes (after half a
  minute of looking for credentials) when there is no network; a missing
  client library or credentials surface as exceptions or as that wait.
- `check_tensorflow_writes`: the output must be a path TensorFlow's own
  file systems write (tf.Transform writes there): local, gs://, not s3://.
- `check_not_empty`: table inputs (CSV/TSV/JSONL/Parquet files, an image
  manifest) must hold at least one data row; a header alone is an empty
  input, not a data-quality failure.
"""

import csv
import io
import logging
import os
import re
import threading
import time
from typing import List, Optional, Sequence

from pipelines import errors
from pipelines.options import UsageError
from transforms.sources import files
from transforms.sources import stores

# How long a remote path may take to answer.
PROBE_SECONDS = 12.0
# Table files read to find one data row, and how much of each.
_FILES_TO_READ = 20
_PREFIX_BYTES = 1 << 20
_GLOB_CHARS = '*?['


class _Problems(logging.Handler):
  """The last problem logged by a thread other than `caller` (the probes,
  and the threads their clients start: Beam's and the client libraries'
  retries say why they retry)."""

  def __init__(self, caller: int):
    super().__init__(logging.DEBUG)
    self.caller = caller
    self.last = None

  def emit(self, record):
    if record.thread == self.caller:
      return
    try:
      self.last = record.getMessage()
    except Exception:  # pylint: disable=broad-except
      pass


def _reason(text: str, limit: int = 200) -> str:
  """A logged complaint as a short reason: a host name that does not
  resolve, or the complaint's first line without a retry preamble and with
  exception names without their module, cut at the end of its first
  sentence."""
  host = re.search(r"Failed to resolve '([^']+)'", text)
  if host:
    return f'{host.group(1)} does not resolve: no network or no DNS'
  first = text.strip().splitlines()[0] if text.strip() else ''
  first = re.sub(r'^.*?because we caught exception: ', '', first)
  first = re.sub(r'^Retrying due to (.*), sleeping [\d.]+s \.\.\.$', r'\1',
                 first)
  first = re.sub(r'\b(?:[a-z_][\w]*\.)+([A-Z]\w*(?:Error|Exception))\b',
                 r'\1', first)
  end = first.find('. ', 20)
  if end > 0:
    first = first[:end]
  if len(first) > limit:
    first = first[:limit].rstrip() + '...'
  return first.rstrip('.')


def _probe(path: str, outcome: dict) -> None:
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  try:
    FileSystems.exists(path)
    outcome['ok'] = True
  except Exception as e:  # pylint: disable=broad-except
    outcome['error'] = e


def _no_filesystem(path: str) -> Optional[str]:
  """Why Beam cannot open `path` at all (no file system registered for its
  scheme), or None."""
  from apache_beam.io.filesystem import FileSystem  # pylint: disable=import-outside-toplevel
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  scheme = FileSystems.get_scheme(path)
  if any(fs.scheme() == scheme for fs in FileSystem.get_all_subclasses()):
    return None
  extra = {'gs': 'gcp', 's3': 'aws', 'azfs': 'azure', 'hdfs': 'hadoop'}
  hint = (f' (pip install "apache-beam[{extra[scheme]}]")'
          if scheme in extra else '')
  return (f'Beam has no file system for {scheme}:// paths in this '
          f'environment{hint}')


def check_tensorflow_writes(output: str) -> None:
  """Raises UsageError when TensorFlow has no file system for the output's
  scheme. tf.Transform writes its temporary files and the exported
  transform into the output through TensorFlow's file systems, which know
  local paths and gs:// but no longer s3:// (moved to the tensorflow-io
  package) or hdfs://; Beam would write the rest and the run fail at the
  end. Nor does TensorFlow's GCS file system read STORAGE_EMULATOR_HOST:
  with an emulator named and no https proxy to route TensorFlow to it, a
  gs:// output would be split between the emulator and Google's servers.
  Reads nothing remote."""
  if files.is_local(output):
    return
  if output.startswith('gs://'):
    if stores.emulator_host() and not (os.environ.get('https_proxy') or
                                       os.environ.get('HTTPS_PROXY')):
      raise UsageError(
          f'STORAGE_EMULATOR_HOST names a GCS emulator '
          f'({stores.emulator_host()}), but TensorFlow\'s GCS file system, '
          'through which tf.Transform writes into the output, does not read '
          'that variable and would write to Google\'s servers; route it to '
          'the emulator with https_proxy and CURL_CA_BUNDLE (see '
          'docs/object-stores.md), or write the output to a local folder.')
    return
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  try:
    tf.io.gfile.exists(output)
  except tf.errors.UnimplementedError:
    scheme = output.split('://', 1)[0]
    raise UsageError(  # pylint: disable=raise-missing-from
        f'TensorFlow {tf.__version__} cannot write {scheme}:// paths (it '
        'has no file system for them), and tf.Transform writes its '
        'temporary files and exported transform into the output; write to '
        'gs:// or to a folder every worker reaches.')
  except Exception:  # pylint: disable=broad-except
    pass  # reachability is check_reachable's


def check_reachable(paths: Sequence[str], options=None,
                    seconds: float = PROBE_SECONDS) -> None:
  """Asks each remote path whether it exists, all at once, and gives up
  after `seconds`.

  Args:
    paths: Paths; local ones are not asked.
    options: The run's PipelineOptions, which Beam's file systems read
      their credentials settings from (as the pipeline will).
    seconds: How long the paths may take to answer.

  Raises:
    UsageError: A path whose file system is missing, that raised, or that
      did not answer in time: "cannot reach PATH (reason)".
  """
  remote = [p for p in dict.fromkeys(paths) if p and not files.is_local(p)]
  for path in remote:
    missing = _no_filesystem(path)
    if missing:
      raise UsageError(f'cannot reach {path}: {missing}.')
  if not remote:
    return
  if options is not None:
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
    FileSystems.set_options(options)
  outcomes = {path: {} for path in remote}
  threads = [threading.Thread(target=_probe, args=(path, outcomes[path]),
                              name=f'probe {path}', daemon=True)
             for path in remote]
  caller = threading.get_ident()
  problems = _Problems(caller)
  root = logging.getLogger()
  root.addHandler(problems)
  # Google's client retries quietly (DEBUG); its complaint is the reason.
  retries = logging.getLogger('google.api_core.retry')
  level = retries.level
  retries.setLevel(logging.DEBUG)
  errors.only_thread(caller)
  try:
    for thread in threads:
      thread.start()
    deadline = time.monotonic() + seconds
    for thread in threads:
      thread.join(max(0.0, deadline - time.monotonic()))
  finally:
    root.removeHandler(problems)
    retries.setLevel(level)
  failed = [p for p in remote if not outcomes[p].get('ok')]
  if not failed:
    errors.only_thread(None)
    return
  # The run stops here; probes given up on keep retrying in the background
  # until the process ends, off stderr.
  path = failed[0]
  if 'error' in outcomes[path]:
    raise UsageError(f'cannot reach {path} '
                     f'({errors.describe(outcomes[path]["error"])[:300]}).')
  seen = f'; last problem: {_reason(problems.last)}' if problems.last else ''
  raise UsageError(f'cannot reach {path} (no answer within {seconds:g} '
                   f's{seen}); check the network and the credentials.')


def _table_kind(path: str) -> Optional[str]:
  from transforms.sources import tables  # pylint: disable=import-outside-toplevel
  return tables.format_of(path)


def _table_files(cfg) -> List[str]:
  """The table files the input consists of, as far as that is plain from
  the path (a glob, a table file, or a folder of table files; a modality
  may say that its input is one table file, or none: see
  Modality.input_is_table); [] for inputs that are not tables (image and
  document folders)."""
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  path = cfg.input
  listed = cfg.plugin.input_is_table(path)
  if listed is not None:
    from transforms.sources import files  # pylint: disable=import-outside-toplevel
    if not listed:
      return []
    # One file, named literally ('[', '*' and '?' in it are not patterns).
    found = [m for m in [files.metadata(path)] if m is not None]
  else:
    if any(c in path for c in _GLOB_CHARS) or _table_kind(path):
      pattern = path
    else:
      pattern = FileSystems.join(path.rstrip('/'), '*')
    try:
      found = FileSystems.match([pattern])[0].metadata_list
    except Exception:  # pylint: disable=broad-except
      return []
  return sorted(m.path for m in found
                if _table_kind(m.path) and m.size_in_bytes > 0)


def _has_rows(path: str) -> bool:
  """Whether a table file holds a data row (True when unsure)."""
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  kind = _table_kind(path)
  try:
    with FileSystems.open(path, compression_type='uncompressed') as f:
      if kind == 'parquet':
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel
        return pq.ParquetFile(f).metadata.num_rows > 0
      data = f.read(_PREFIX_BYTES)
      whole = len(data) < _PREFIX_BYTES or not f.read(1)
  except Exception:  # pylint: disable=broad-except
    return True  # whatever is wrong, the input check or the pipeline says
  text = data.decode('utf-8-sig', errors='replace')
  if kind == 'jsonl':
    return bool(text.strip())
  if not whole:
    return True
  try:
    records = [r for r in csv.reader(
        io.StringIO(text, newline=''), delimiter='\t' if kind == 'tsv' else
        ',') if r]
  except csv.Error:
    return True
  return len(records) > 1


def check_not_empty(cfg) -> None:
  """Refuses a table input that holds no data row (a header alone).

  Only inputs of at most a few files are read; for more, and for inputs
  that are not tables, the pipeline's own count decides.

  Raises:
    UsageError: No table file of the input holds a data row.
  """
  try:
    paths = _table_files(cfg)
  except Exception:  # pylint: disable=broad-except
    return  # the modality's own input check says what is wrong
  if not paths or len(paths) > _FILES_TO_READ or any(
      _has_rows(p) for p in paths):
    return
  headed = [p for p in paths if _table_kind(p) in ('csv', 'tsv')]
  what = ('a header but no data rows' if len(headed) == len(paths) else
          'no data rows')
  if len(paths) == 1:
    raise UsageError(f'the input {paths[0]} is empty: it has {what}.')
  raise UsageError(f'the input {cfg.input} is empty: its {len(paths)} '
                   f'files have {what}.')
