"""The output's run folders, as the preprocess command makes and removes
them: the output checked for a dataset, a new run folder (written to once),
old folders of failed or killed runs removed, and a cancelled job's folder
removed until its workers stop writing into it.
"""

import calendar
import logging
import os
import re
import time
from typing import List

from pipelines.options import UsageError
from transforms.output import manifest as manifest_lib

_LOG = logging.getLogger('pipelines.run_folders')


def check_output(cfg) -> None:
  """Refuses an output that holds a dataset (unless --overwrite)."""
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  if cfg.overwrite:
    return
  if FileSystems.exists(manifest_lib.join(cfg.output, manifest_lib.MANIFEST)):
    raise UsageError(f'the output {cfg.output} already holds a dataset; pass '
                     '--overwrite to replace it.')
  try:
    leftovers = FileSystems.match(
        [manifest_lib.join(cfg.output, '*.tfrecord*')])[0].metadata_list
  except Exception:  # pylint: disable=broad-except
    leftovers = []
  if leftovers:
    raise UsageError(f'the output {cfg.output} holds TFRecord files but no '
                     'manifest (from a failed run?); pass --overwrite to '
                     'replace them.')


# Run folders (output/manifest.py), and the staging folders of runs from
# before run folders existed.
_STAGING_NAMES = (manifest_lib.RUN_FOLDER,
                  re.compile(r'^\.staging-(\d{8}T\d{6})-[0-9a-f]+$'))


def remove_stale_staging(output: str, hours: float, now: float) -> List[str]:
  """Deletes run folders in `output` older than `hours` that the published
  manifest does not name: those of failed or killed runs.

  A run's id starts with its UTC start time, which is what "older" means
  here; folders whose names do not parse are left alone. Runs that are
  still going are younger than any sensible limit (and hold the output's
  lease, so none is going when this runs).

  Returns:
    The names of the folders deleted.
  """
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  try:
    found = FileSystems.match([manifest_lib.join(output, pattern, '**')
                               for pattern in ('run-*', '.staging-*')])
    found = [m for result in found for m in result.metadata_list]
  except Exception:  # pylint: disable=broad-except
    return []  # no output yet, or nothing to match
  try:
    published = (manifest_lib.read_manifest(output) or {}).get('data_dir')
  except ValueError:
    published = None
  prefix = manifest_lib.join(output, '')
  names = {m.path[len(prefix):].split('/', 1)[0] for m in found
           if m.path.startswith(prefix)}
  removed = []
  for name in sorted(names):
    match = next((m for m in (p.match(name) for p in _STAGING_NAMES) if m),
                 None)
    if not match or name == published:
      continue
    started = calendar.timegm(time.strptime(match.group(1), '%Y%m%dT%H%M%S'))
    if now - started > hours * 3600:
      remove_tree(manifest_lib.join(output, name))
      removed.append(name)
  return removed


def make_staging(cfg, run_id: str) -> str:
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  staging = manifest_lib.join(cfg.output, manifest_lib.run_folder(run_id))
  try:
    FileSystems.mkdirs(staging)
    probe = manifest_lib.join(staging, '.write_test')
    with FileSystems.create(probe) as f:
      f.write(b'ok')
    FileSystems.delete([probe])
  except Exception as e:  # pylint: disable=broad-except
    raise UsageError(f'cannot write to the output {cfg.output} '
                     f'({type(e).__name__}: {e}).') from None
  return staging


# A cancelled remote job's run folder counts as gone once it has stayed
# gone this many seconds; the launcher stops trying after LIMIT seconds
# (a later run removes what is left: --stale_staging_hours).
GONE_FOR_SECONDS = 3.0
GONE_LIMIT_SECONDS = 20.0


def remove_until_gone(path: str, gone_for: float = GONE_FOR_SECONDS,
                      limit: float = GONE_LIMIT_SECONDS,
                      interval: float = 0.25) -> bool:
  """Removes the folder `path`, and again each time something appears
  in it, until nothing has for `gone_for` seconds (True) or `limit`
  seconds have passed (False, with a warning)."""
  start = time.monotonic()
  remove_tree(path)
  gone_since = time.monotonic()
  while time.monotonic() - gone_since < gone_for:
    if time.monotonic() - start > limit:
      _LOG.warning('the cancelled job\'s workers were still writing into '
                   '%s %.0f s after it was cancelled; a later run removes '
                   'what is left (--stale_staging_hours)', path, limit)
      return False
    time.sleep(interval)
    if folder_has_anything(path):
      _LOG.info('a worker of the cancelled job wrote into %s; removing it '
                'again', path)
      remove_tree(path)
      gone_since = time.monotonic()
  return True


def folder_has_anything(path: str) -> bool:
  """Whether the folder `path` exists (local disk) or holds an object
  (an object store, which has no folders)."""
  if '://' not in path:
    return os.path.lexists(path)
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  try:
    found = FileSystems.match([manifest_lib.join(path, '**')])
  except Exception:  # pylint: disable=broad-except
    return False
  return any(m.metadata_list for m in found)


def remove_tree(path: str) -> None:
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  try:
    FileSystems.delete([path])
  except Exception:  # pylint: disable=broad-except
    _LOG.warning('could not remove %s', path)


def read_json(path: str) -> dict:
  import json  # pylint: disable=import-outside-toplevel
  from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel
  with FileSystems.open(path, compression_type='uncompressed') as f:
    return json.loads(f.read().decode('utf-8'))
