"""Where the repository is, for tests that run its scripts or read its
files (the test tree mirrors the package tree, at different depths)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
