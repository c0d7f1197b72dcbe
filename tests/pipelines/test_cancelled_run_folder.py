"""A cancelled job on a cluster: its run folder is removed and stays gone.

The launcher removes the run folder as soon as the job is cancelled, but a
worker in the middle of a bundle then may still create a file there (Beam's
FileSystems makes the folders a new file needs), a moment later. Seen on
the Spark cluster: a `hold_tmp/<id>.spill` and a `.hold` file in a
cancelled run's folder, written after the launcher had removed it. Here a
thread plays that worker.
"""

import logging
import threading
import time

from pipelines import run_folders


def _late_writer(folder, delays):
  """Writes a file in `folder`/hold_tmp (making the folders, as Beam's
  FileSystems.create does) at each of `delays` seconds from now; returns
  the thread and the times (monotonic) it wrote at."""
  wrote = []

  def write():
    start = time.monotonic()
    for i, delay in enumerate(delays):
      time.sleep(max(0.0, start + delay - time.monotonic()))
      (folder / 'hold_tmp').mkdir(parents=True, exist_ok=True)
      (folder / 'hold_tmp' / f'{i}.spill').write_bytes(b'late')
      wrote.append(time.monotonic())

  thread = threading.Thread(target=write)
  thread.start()
  return thread, wrote


def test_files_written_after_the_removal_are_removed_until_none_come(
    tmp_path):
  staging = tmp_path / 'out' / 'run-20261129T120000-abcdef'
  (staging / 'hold_tmp').mkdir(parents=True)
  (staging / 'hold_tmp' / 'early.hold').write_bytes(b'x')
  thread, wrote = _late_writer(staging, [0.3, 0.9])
  try:
    gone = run_folders.remove_until_gone(
        str(staging), gone_for=1.0, limit=10.0, interval=0.05)
    returned = time.monotonic()
  finally:
    thread.join()
  assert gone
  assert len(wrote) == 2 and wrote[-1] < returned
  # Both late files came and went, and so did the folders they made.
  assert not staging.exists()
  assert list((tmp_path / 'out').iterdir()) == []


def test_writers_that_never_stop_are_left_to_a_later_run_with_a_warning(
    tmp_path, caplog):
  staging = tmp_path / 'out' / 'run-20261129T120000-abcdef'
  staging.mkdir(parents=True)
  thread, _ = _late_writer(staging, [0.1 * i for i in range(1, 16)])
  try:
    with caplog.at_level(logging.WARNING, logger='pipelines.run_folders'):
      gone = run_folders.remove_until_gone(
          str(staging), gone_for=0.5, limit=1.0, interval=0.05)
  finally:
    thread.join()
  assert not gone
  assert any('still writing into' in r.getMessage() and
             '--stale_staging_hours' in r.getMessage()
             for r in caplog.records)


def test_a_folder_nobody_writes_to_again_takes_gone_for_seconds(tmp_path):
  staging = tmp_path / 'run-20261129T120000-abcdef'
  (staging / 'shards').mkdir(parents=True)
  start = time.monotonic()
  assert run_folders.remove_until_gone(
      str(staging), gone_for=0.3, limit=5.0, interval=0.05)
  assert 0.3 <= time.monotonic() - start < 5.0
  assert not staging.exists()
