"""What differs by modality is asked of the modality plug-in, never decided
by its name elsewhere: outside transforms/modalities/, no code of the
package compares a value with a modality's name ("== 'image'", "in
('image', 'text')", a dict keyed by them), nor imports a module of a
modality's folder (only the registry and base.py). The sample generator
(pipelines/sample_data.py) makes samples of each modality by name, and is
left out."""

import ast
import os

from repo import ROOT
from repo import package_modules
from transforms import modalities

LEFT_OUT = (os.path.join('transforms', 'modalities') + os.sep,
            os.path.join('pipelines', 'sample_data.py'))
NAMES = frozenset(modalities.names())


def _names_in(node):
  """The modality names a literal holds: a string, or a tuple, list, set
  or dict key of strings."""
  if isinstance(node, ast.Constant) and node.value in NAMES:
    return [node.value]
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return [n for e in node.elts for n in _names_in(e)]
  if isinstance(node, ast.Dict):
    return [n for k in node.keys if k is not None for n in _names_in(k)]
  return []


def _decisions_by_name(tree):
  """(line, the names) of each comparison with a modality name, and each
  literal table keyed by them, in a module's syntax tree."""
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      names = [n for side in [node.left] + node.comparators
               for n in _names_in(side)]
    elif isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
      # A table of modalities: two names or more in one literal.
      names = _names_in(node)
      names = names if len(set(names)) > 1 else []
    else:
      continue
    if names:
      found.append((node.lineno, tuple(sorted(set(names)))))
  return sorted(set(found))


def _plugin_imports(tree):
  """(line, module) of each import of a module of a modality's folder
  (transforms.modalities.<name>...; not the registry nor base.py) in a
  module's syntax tree."""
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      modules = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
      modules = [f'{node.module}.{a.name}' for a in node.names]
    else:
      continue
    for module in modules:
      parts = module.split('.')
      if parts[:2] == ['transforms', 'modalities'] and parts[2:3] not in (
          [], ['base']):
        found.append((node.lineno, module))
  return sorted(set(found))


def _scan(find):
  """'path:line: what' for each finding of find(syntax tree) in the
  package's modules outside the plug-ins."""
  for path in package_modules():
    if path.startswith(LEFT_OUT):
      continue
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
      tree = ast.parse(f.read(), path)
    yield from (f'{path}:{line}: {what}' for line, what in find(tree))


def test_no_code_outside_the_plugins_decides_by_a_modality_name():
  found = list(_scan(_decisions_by_name))
  assert not found, ('decided by modality name outside the plug-ins:\n' +
                     '\n'.join(found))


def test_no_code_outside_the_plugins_imports_their_modules():
  found = list(_scan(_plugin_imports))
  assert not found, ('a modality\'s own module imported outside the '
                     'plug-ins:\n' + '\n'.join(found))


def test_the_scan_finds_what_it_looks_for():
  # The scan itself, on the forms it must catch and one it must not.
  tree = ast.parse(
      "if m == 'image': pass\n"
      "if m.name in ('image', 'text'): pass\n"
      "FLAGS = {'--a': ('text',), '--b': ('image', 'sensor')}\n"
      "SECTIONS = ('image', 'sensor', 'text')\n"
      "x = values['image']\n")
  assert _decisions_by_name(tree) == [
      (1, ('image',)), (2, ('image', 'text')), (3, ('image', 'sensor')),
      (4, ('image', 'sensor', 'text'))]


def test_the_import_scan_finds_what_it_looks_for():
  tree = ast.parse(
      "from transforms import modalities\n"
      "from transforms.modalities import base\n"
      "from transforms.modalities.base import Modality\n"
      "from transforms.modalities.text import signatures\n"
      "from transforms.modalities import sensor\n"
      "import transforms.modalities.image.processing\n")
  assert _plugin_imports(tree) == [
      (4, 'transforms.modalities.text.signatures'),
      (5, 'transforms.modalities.sensor'),
      (6, 'transforms.modalities.image.processing')]
