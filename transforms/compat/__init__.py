"""Every use of a library's internals, one module per library (see each).

A patch or a read of a private name goes here, with the release it was
written for and the objects it relies on (tests/compat/test_pins.py).
"""

import logging

_LOG = logging.getLogger(__name__)
# The libraries whose release has been found other than pinned (warned).
_WARNED = set()


def check_release(library: str, version: str, pinned: str,
                  module: str) -> bool:
  """Whether `version` of `library` is the release `pinned` (major.minor)
  that the compat module `module` was written for; logs a warning once
  per library if not (its patches may no longer hold)."""
  installed = '.'.join(version.split('.')[:2])
  if installed != pinned and library not in _WARNED:
    _WARNED.add(library)
    _LOG.warning('%s %s is installed; %s was written for %s', library,
                 version, module, pinned)
  return installed == pinned
