"""No module of pipelines/ or transforms/ imports itself back, through any
chain of imports, at the top or inside a function: a maintainer can read
the package from the bottom up. (Plug-ins and launchers found by name,
importlib.import_module in transforms/modalities/__init__.py and
pipelines/runner_hooks.py, are not imports of a named module.)"""

import ast
import os

from repo import ROOT
from repo import package_modules


def _modules():
  """{dotted module name: path} of the packages' modules."""
  found = {}
  for path in package_modules():
    dotted = path[:-len('.py')].replace(os.sep, '.')
    if dotted.endswith('.__init__'):
      dotted = dotted[:-len('.__init__')]
    found[dotted] = os.path.join(ROOT, path)
  return found


def _imports(path, modules):
  """The package modules a module imports anywhere in it."""
  with open(path, encoding='utf-8') as f:
    tree = ast.parse(f.read(), path)
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name in modules}
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      if node.module in modules:
        found.add(node.module)
      found |= {f'{node.module}.{a.name}' for a in node.names
                if f'{node.module}.{a.name}' in modules}
  return found


def cycles(graph):
  """The strongly connected groups of more than one module (Tarjan's
  algorithm, iterative), each sorted."""
  index, low, on_stack, stack, found = {}, {}, set(), [], []
  counter = 0
  for root in sorted(graph):
    if root in index:
      continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = counter
    counter += 1
    stack.append(root)
    on_stack.add(root)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is not None:
        if child not in index:
          index[child] = low[child] = counter
          counter += 1
          stack.append(child)
          on_stack.add(child)
          work.append((child, iter(sorted(graph[child]))))
        elif child in on_stack:
          low[node] = min(low[node], index[child])
        continue
      work.pop()
      if work:
        low[work[-1][0]] = min(low[work[-1][0]], low[node])
      if low[node] == index[node]:
        group = []
        while True:
          member = stack.pop()
          on_stack.discard(member)
          group.append(member)
          if member == node:
            break
        if len(group) > 1:
          found.append(sorted(group))
  return found


def test_no_import_cycles_in_the_package():
  modules = _modules()
  graph = {name: _imports(path, modules) for name, path in modules.items()}
  found = cycles(graph)
  assert not found, 'modules that import each other:\n' + '\n'.join(
      ' <-> '.join(group) for group in found)


def test_cycles_are_found():
  graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}, 'e': {'e', 'd'}}
  assert cycles(graph) == [['a', 'b', 'c']]


def test_transforms_import_nothing_from_pipelines():
  # The layers: pipelines/ (commands, launchers) builds on transforms/
  # (the pipelines' parts, which run on workers), never the other way.
  modules = _modules()
  upward = sorted(f'{name} imports {target}'
                  for name, path in modules.items()
                  if name.startswith('transforms')
                  for target in _imports(path, modules)
                  if target.startswith('pipelines'))
  assert not upward, '\n'.join(upward)
