"""Object stores as this process finds them: a GCS emulator named by
STORAGE_EMULATOR_HOST (the variable google-cloud-storage reads).

With STORAGE_EMULATOR_HOST set, `use_emulator` tells Beam's credentials
cache at once that there are none (compat/beam.no_gcs_credentials: Beam
would look for them for half a minute), so its clients connect anonymously
(google-cloud-storage then sends them to the emulator). Called where paths are first listed and read, in the
launching process and in every worker that imports this package.
"""

import os
import threading

_DONE = threading.Event()


def emulator_host():
  """The GCS emulator's address, or None."""
  return os.environ.get('STORAGE_EMULATOR_HOST') or None


def use_emulator() -> bool:
  """Beam's GCS clients connect anonymously when a GCS emulator is named;
  whether one is."""
  if not emulator_host():
    return False
  if not _DONE.is_set():
    from transforms.compat import beam as compat_beam  # pylint: disable=import-outside-toplevel
    compat_beam.no_gcs_credentials()
    _DONE.set()
  return True
