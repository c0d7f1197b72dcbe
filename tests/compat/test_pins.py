"""The library internals the project relies on (transforms/compat/) are
the ones its patches were written for: the installed Beam and tf.Transform
are the pinned releases, and each object a patch changes or reads has the
source it had then. An upgrade fails here first, naming what changed."""

import ast
import hashlib
import importlib
import inspect

import pytest

from transforms.compat import beam as compat_beam
from transforms.compat import tensorflow_transform as compat_tft

COMPAT = (compat_beam, compat_tft)


def _split(dotted: str):
  """(module, [names inside it]) of a dotted name: the longest importable
  module prefix."""
  parts = dotted.split('.')
  for cut in range(len(parts), 0, -1):
    try:
      return importlib.import_module('.'.join(parts[:cut])), parts[cut:]
    except ImportError:
      continue
  raise ImportError(dotted)


def fingerprint(dotted: str) -> str:
  """SHA-256 of the source of the class or function named `dotted`, read
  from its module's file (not the live object, which a patch may have
  replaced); '' when it is gone."""
  try:
    module, names = _split(dotted)
    path = inspect.getsourcefile(module)
  except (ImportError, TypeError):
    return ''
  with open(path, encoding='utf-8') as f:
    source = f.read()
  scope = ast.parse(source).body
  node = None
  for name in names:
    node = next((n for n in scope if isinstance(
        n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and
                 n.name == name), None)
    if node is None:
      return ''
    scope = node.body
  if node is None:
    return ''
  return hashlib.sha256(ast.get_source_segment(source, node).encode(
      'utf-8')).hexdigest()


@pytest.mark.parametrize('module', COMPAT, ids=lambda m: m.__name__)
def test_the_installed_release_is_the_pinned_one(module):
  assert module.pinned(), (
      f'{module.__name__} was written for release {module.PINNED} of its '
      'library, and another is installed: check each of its functions '
      'against the new code, then move PINNED (and FINGERPRINTS)')


@pytest.mark.parametrize('module', COMPAT, ids=lambda m: m.__name__)
def test_the_patched_objects_are_unchanged(module):
  changed = sorted(name for name, recorded in module.FINGERPRINTS.items()
                   if not recorded or fingerprint(name) != recorded)
  assert not changed, (
      f'these objects that {module.__name__} patches or reads differ from '
      f'the release it was written for ({module.PINNED}): '
      f'{", ".join(changed)}; check the functions that use them against '
      'the new code, then record their fingerprints: ' +
      ', '.join(f'{name!r}: {fingerprint(name)!r}' for name in changed))


def test_a_changed_object_is_told_apart():
  # The fingerprint is the object's source: another object's differs, and
  # a name that is gone has none.
  assert fingerprint('transforms.compat.beam.pinned') != fingerprint(
      'transforms.compat.beam.disable_timed_flush')
  assert fingerprint('apache_beam.transforms.core.no_such_thing') == ''
