"""Where the repository is, for tests that run its scripts or read its
files (the test tree mirrors the package tree, at different depths)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The project's packages (what setup.py installs).
PACKAGES = ('pipelines', 'transforms')


def package_modules():
  """The paths, relative to ROOT, of every module of the packages."""
  for package in PACKAGES:
    for parent, _, files in os.walk(os.path.join(ROOT, package)):
      for name in sorted(files):
        if name.endswith('.py'):
          yield os.path.relpath(os.path.join(parent, name), ROOT)
