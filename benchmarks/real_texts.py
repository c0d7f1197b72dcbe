"""Real quotations for benchmarks, fetched once from Debian's package
archive and cached: the fortune cookie files of Debian's `fortunes` and
`fortunes-min` packages (BSD licence): about 14,500 quotations, jokes and
aphorisms in some 40 files (computers, literature, politics, wisdom, ...),
many with an attribution line, each file a label.

    python benchmarks/real_texts.py     # fetch (if needed), print where

The folder is $TFRP_DATA (default ~/.cache/tfrecord-pipelines/data), as
for benchmarks/real_images.py. A fetch needs apt-get and dpkg-deb (Debian)
and the package archive; later calls need no network.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_images  # pylint: disable=wrong-import-position

PACKAGES = ('fortunes', 'fortunes-min')
# Files that are pictures drawn in characters, not text.
PICTURES = ('art', 'ascii-art')
FOLDER = 'debian-fortunes'


class Quotation(NamedTuple):
  text: str
  label: str  # the fortune file it is in


def _folder() -> str:
  return os.path.join(real_images.data_dir(), FOLDER)


def fetch() -> str:
  """The folder of the fortune files (fetched when absent)."""
  folder = _folder()
  if os.path.isdir(folder) and os.listdir(folder):
    return folder
  with tempfile.TemporaryDirectory() as tmp:
    subprocess.run(['apt-get', 'download', *PACKAGES], cwd=tmp, check=True,
                   stdout=subprocess.DEVNULL)
    unpacked = os.path.join(tmp, 'unpacked')
    for name in os.listdir(tmp):
      if name.endswith('.deb'):
        subprocess.run(['dpkg-deb', '-x', os.path.join(tmp, name), unpacked],
                       check=True)
    source = os.path.join(unpacked, 'usr', 'share', 'games', 'fortunes')
    staged = folder + '.partial'
    shutil.rmtree(staged, ignore_errors=True)
    os.makedirs(staged)
    for name in sorted(os.listdir(source)):
      path = os.path.join(source, name)
      if ('.' in name or os.path.islink(path) or not os.path.isfile(path)
          or name in PICTURES):
        continue
      shutil.copyfile(path, os.path.join(staged, name))
    os.replace(staged, folder)
  return folder


def quotations(min_words: int = 4) -> List[Quotation]:
  """Every quotation of at least `min_words` words, in file order."""
  folder = fetch()
  out = []
  for name in sorted(os.listdir(folder)):
    with open(os.path.join(folder, name), encoding='utf-8',
              errors='replace') as f:
      for text in f.read().split('\n%\n'):
        text = text.strip('\n')
        if len(text.split()) >= min_words:
          out.append(Quotation(text, name))
  return out


if __name__ == '__main__':
  found = quotations()
  print(f'{len(found):,} quotations in {len({q.label for q in found})} '
        f'files: {fetch()}')
