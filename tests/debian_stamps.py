"""Tux Paint's stamps, a real clip-art collection for the tests, built from
Debian's `tuxpaint-stamps-default` package: every PNG of its
usr/share/tuxpaint/stamps tree in a folder named after its top-level
category (a later file of one name in a category replaces an earlier
one), 782 mostly RGBA pictures in 16 classes. Drawings of letters,
arrows and shapes, many of them symmetric, and sets of one drawing in
variants (dreidels, operators): the pictures pHash finds hardest.

It is built once and kept in $TFRP_DATA (default
~/.cache/tfrecord-pipelines/data), as benchmarks/real_images.py keeps its
pictures. Building needs apt-get and dpkg-deb (Debian) and the package
archive (about 160 MB; unpacking takes some seconds); later calls need
neither.
"""

import os
import shutil
import subprocess
import tarfile
import tempfile

PACKAGE = 'tuxpaint-stamps-default'
STAMPS = ('usr', 'share', 'tuxpaint', 'stamps')
PICTURES = 782
CLASSES = 16


def _data_dir() -> str:
  return os.environ.get('TFRP_DATA') or os.path.join(
      os.path.expanduser('~'), '.cache', 'tfrecord-pipelines', 'data')


def _download(folder: str) -> str:
  """The package's .deb, downloaded into `folder` (after `apt-get update`
  when the package lists do not know it and this is root)."""
  command = ['apt-get', 'download', '-q', PACKAGE]
  proc = subprocess.run(command, cwd=folder, capture_output=True, text=True,
                        check=False)
  if proc.returncode != 0 and os.geteuid() == 0:
    subprocess.run(['apt-get', 'update', '-qq'], capture_output=True,
                   check=False)
    proc = subprocess.run(command, cwd=folder, capture_output=True,
                          text=True, check=False)
  if proc.returncode != 0:
    raise RuntimeError(f'apt-get download {PACKAGE} failed (run apt-get '
                       f'update first?): {proc.stderr.strip()[-500:]}')
  debs = [n for n in os.listdir(folder) if n.endswith('.deb')]
  assert len(debs) == 1, debs
  return os.path.join(folder, debs[0])


def _unpack(deb: str, dest: str) -> int:
  """Writes the stamps' PNGs into dest/<category>/; returns how many were
  read (some names repeat in a category)."""
  proc = subprocess.Popen(['dpkg-deb', '--fsys-tarfile', deb],
                          stdout=subprocess.PIPE)
  read = 0
  with tarfile.open(fileobj=proc.stdout, mode='r|') as tar:
    for member in tar:
      parts = member.name.split('/')
      if parts[:1] == ['.']:
        parts = parts[1:]
      if (not member.isfile() or not member.name.endswith('.png') or
          tuple(parts[:len(STAMPS)]) != STAMPS or
          len(parts) < len(STAMPS) + 2):
        continue
      category = os.path.join(dest, parts[len(STAMPS)])
      os.makedirs(category, exist_ok=True)
      with open(os.path.join(category, parts[-1]), 'wb') as f:
        shutil.copyfileobj(tar.extractfile(member), f)
      read += 1
  if proc.wait() != 0:
    raise RuntimeError(f'dpkg-deb --fsys-tarfile {deb} failed')
  return read


def stamps() -> str:
  """The folder of the stamps (built when absent).

  Raises:
    RuntimeError: It is absent and cannot be built here (no apt-get or
      dpkg-deb): the tests never skip, so the test fails, saying what it
      needs.
  """
  folder = os.path.join(_data_dir(), PACKAGE)
  if os.path.isdir(folder):
    return folder
  missing = [tool for tool in ('apt-get', 'dpkg-deb')
             if not shutil.which(tool)]
  if missing:
    raise RuntimeError(
        f'{folder} is absent, and building it from Debian\'s {PACKAGE} '
        f'package needs {" and ".join(missing)}, which this machine lacks: '
        f'run the tests where they are (Debian or Ubuntu), or build the '
        f'folder there and copy it to {folder}')
  os.makedirs(_data_dir(), exist_ok=True)
  with tempfile.TemporaryDirectory(dir=_data_dir()) as tmp:
    staged = os.path.join(tmp, 'stamps')
    _unpack(_download(tmp), staged)
    os.replace(staged, folder)  # only a whole folder gets the final name
  return folder
