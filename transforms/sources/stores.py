"""Object stores as this process finds them: a GCS emulator named by
STORAGE_EMULATOR_HOST (the variable google-cloud-storage reads).

Beam's GCS file system asks Google's default credentials for every
client and, when there are none, retries for about half a minute before
it connects anonymously; an emulator needs no credentials, and Beam 2.77's
--no_auth does not reach its GCS client. With STORAGE_EMULATOR_HOST set,
`use_emulator` tells Beam's credentials cache at once that there are none,
so its clients connect anonymously (google-cloud-storage then sends them to
the emulator). Called where paths are first listed and read, in the
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
    from apache_beam.internal.gcp import auth  # pylint: disable=import-outside-toplevel
    credentials = getattr(auth, '_Credentials', None)
    if credentials is not None:
      with credentials._credentials_lock:  # pylint: disable=protected-access
        credentials._credentials = None  # pylint: disable=protected-access
        credentials._credentials_init = True  # pylint: disable=protected-access
    _DONE.set()
  return True
