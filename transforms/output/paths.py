"""Joining output paths the same way for local folders and gs:// (Beam's
FileSystems for URLs, posixpath for local paths)."""

import posixpath

from apache_beam.io.filesystems import FileSystems


def join(*parts: str) -> str:
  return FileSystems.join(*parts) if '://' in parts[0] else posixpath.join(
      *parts)
