"""How a command ends: its exit code, the one-line JSON summary a
scheduler reads from the end of stdout, the sentence for a bad
invocation, the logging both commands set up, and the quick exit.

Exit codes: 0 published (or sound); 2 bad invocation (one sentence on
stderr); 3 the data-quality gate failed (nothing published) or the dataset
is not sound; 1 the pipeline failed; 128 + the signal's number for a run
cancelled by SIGTERM or SIGINT (pipelines/signals.py).
"""

import json
import logging
import os
import sys
import time
from typing import Optional

from pipelines import quiet
from pipelines import signals
from transforms.runtime import processes

# When this command started (its summary's "seconds").
PROCESS_START = time.time()

EXIT_OK = 0
EXIT_PIPELINE_FAILED = 1
EXIT_USAGE = 2
EXIT_DATA_QUALITY = 3


def summary_line(manifest: dict) -> str:
  t = manifest['totals']
  parts = [f'{name}: {s["records"]} records in {len(s["shards"])} shards'
           for name, s in manifest['splits'].items()]
  return (f'published {t["records"]} records ({"; ".join(parts)}); '
          f'{t["dead_lettered"]} of {t["inputs"]} inputs dead-lettered; '
          f'{manifest["timings"]["seconds"]:.1f} s')


STATUSES = {EXIT_OK: 'published', EXIT_USAGE: 'bad_invocation',
            EXIT_DATA_QUALITY: 'data_quality_failed',
            EXIT_PIPELINE_FAILED: 'pipeline_failed'}
STATUSES.update({signals.exit_code(s): 'cancelled' for s in signals.SIGNALS})


def summary_json(code: int, progress: dict, manifest: Optional[dict],
                 error: Optional[str]) -> str:
  """The one-line JSON summary a scheduler reads from the end of stdout.

  {"status", "exit_code", "modality", "runner", "output", "partition",
   "run_id", "published", "inputs", "examples", "records", "dead_lettered",
   "bad_fraction", "splits": {split: records}, "fingerprint", "seconds",
   "error", "log"}; counts are null when the run stopped before counting,
  and a data-quality failure carries the counts it was refused for. "error"
  is null, the bad invocation's or the data-quality failure's sentence, or
  for a failed pipeline "<ExceptionType>: <first line of its message>";
  "log" names the file holding a failed pipeline's traceback. A Dataflow
  --dry_run has status "dry_run" and adds "job_name" and "job_file"; a
  Dataflow job submitted with --detach has status "submitted" (published
  false: the job publishes when it finishes) and adds "job_id".
  """
  m = manifest or progress.get('failed_manifest') or {}
  totals = m.get('totals', {})
  dry_run = progress.get('dry_run')
  submitted = progress.get('submitted')
  extra = {'job_name': dry_run['job_name'],
           'job_file': dry_run['job_file']} if dry_run else {}
  if submitted:
    extra = {'job_id': submitted['job_id']}
  status = ('dry_run' if dry_run else 'submitted' if submitted else
            STATUSES[code])
  return json.dumps({
      'status': status, 'exit_code': code,
      'modality': progress.get('modality'),
      'runner': progress.get('runner'),
      'output': progress.get('output'),
      'partition': progress.get('partition'),
      'run_id': progress.get('run_id'),
      'published': code == EXIT_OK and not (dry_run or submitted),
      'inputs': totals.get('inputs'), 'examples': totals.get('examples'),
      'records': totals.get('records'),
      'dead_lettered': totals.get('dead_lettered'),
      'bad_fraction': totals.get('bad_fraction'),
      'splits': {name: s['records'] for name, s in m.get('splits',
                                                         {}).items()},
      'fingerprint': m.get('fingerprint') if code == EXIT_OK else None,
      'seconds': round(time.time() - PROCESS_START, 3),
      'error': error,
      'log': progress.get('log'),
      **extra,
  }, sort_keys=False)


class _DropInstanceDictAdvice(logging.Filter):
  """tf.Transform advises Arrow input on every run; for images, whose
  analysis input is a few statistics per image, dicts cost nothing."""

  def filter(self, record):
    return 'instance dicts' not in record.getMessage()


class _DropWorkerStartupNotices(logging.Filter):
  """Beam's SDK workers in other processes (multi_processing, portable
  runners) warn at start-up that they have no semi-persistent directory and
  that they discard the options Beam does not know (ours); both are
  expected, and the local job service logs each as a warning."""

  NOTICES = ('message: "No semi_persistent_directory found',
             'message: "Discarding unparseable args')

  def filter(self, record):
    message = record.getMessage()
    return not any(notice in message for notice in self.NOTICES)


def configure_logging() -> None:
  logging.basicConfig(level=logging.WARNING,
                      format='%(asctime)s %(levelname)s %(name)s: %(message)s')
  for name in ('pipelines', 'transforms'):
    logging.getLogger(name).setLevel(logging.INFO)
  logging.getLogger('absl').addFilter(_DropInstanceDictAdvice())
  logging.getLogger(
      'apache_beam.runners.portability.local_job_service').addFilter(
          _DropWorkerStartupNotices())


def usage_sentence(error: Exception) -> str:
  """A bad invocation's message as the one sentence printed for it."""
  msg = str(error)
  first = msg.split(' ', 1)[0]
  # "The input ...", but not "Photos.csv: ..." or "--flag ...".
  if not (first.startswith('-') or any(c in first for c in './\\:')):
    msg = msg[0].upper() + msg[1:]
  return msg + ('' if msg.endswith('.') else '.')


def exit_now(code: int) -> None:
  """Flushes stdout, stderr and logs, then ends the process at once.

  For command-line entry points only: everything is written and closed by
  then (local worker processes are stopped first), and the interpreter's
  teardown of TensorFlow and of Beam's gRPC threads would only add 1-2 s.
  """
  sys.stdout.flush()
  sys.stderr.flush()
  logging.shutdown()
  processes.stop_all()  # main() did, unless it did not return
  quiet.finish()
  os._exit(code)  # pylint: disable=protected-access
