"""Real pictures for benchmarks and tests, fetched once from package
registries and cached:

  - clip art: the 64x64 PNGs of Twitter's Twemoji (CC-BY 4.0), as the npm
    package emoji-datasource-twitter ships them, labelled by their emoji
    category (Smileys & Emotion, Flags, ...); skin-tone variants are kept
    apart (`skin_tones`), since they are one drawing in other colours;
  - photos: the sample photographs scikit-image's wheel carries (astronaut,
    coffee, rocket, ...), from PyPI.

    python benchmarks/real_images.py            # fetch (if needed), print
                                                # where they are

The folder is $TFRP_DATA (default ~/.cache/tfrecord-pipelines/data). A
fetch needs npm and pip and the registries; later calls need no network.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import Dict, List, NamedTuple

EMOJI_PACKAGE = 'emoji-datasource-twitter'
EMOJI_VERSION = '16.0.0'
SKIMAGE_VERSION = '0.26.0'
PHOTO_SUFFIXES = ('.png', '.jpg')


class Picture(NamedTuple):
  path: str
  label: str  # emoji category, or 'photo'
  name: str
  # A skin-tone variant: the file name of the emoji it is a variant of.
  variant_of: str = ''


def data_dir() -> str:
  return os.environ.get('TFRP_DATA') or os.path.join(
      os.path.expanduser('~'), '.cache', 'tfrecord-pipelines', 'data')


def _emoji_dir() -> str:
  return os.path.join(data_dir(), f'{EMOJI_PACKAGE}-{EMOJI_VERSION}')


def _photo_dir() -> str:
  return os.path.join(data_dir(), f'skimage-photos-{SKIMAGE_VERSION}')


def _run(cmd: List[str], cwd: str) -> None:
  proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                        check=False)
  if proc.returncode != 0:
    raise RuntimeError(f'{" ".join(cmd)} failed: '
                       f'{(proc.stderr or proc.stdout).strip()[-500:]}')


def _fetch_emoji(dest: str) -> None:
  if shutil.which('npm') is None:
    raise RuntimeError('npm is needed once to fetch the Twemoji pictures '
                       'and is not on PATH.')
  with tempfile.TemporaryDirectory() as tmp:
    _run(['npm', 'pack', '-q', f'{EMOJI_PACKAGE}@{EMOJI_VERSION}'], tmp)
    tgz = os.path.join(tmp, f'{EMOJI_PACKAGE}-{EMOJI_VERSION}.tgz')
    partial = dest + '.partial'
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    with tarfile.open(tgz) as tar:
      wanted = [m for m in tar.getmembers()
                if m.isfile() and (m.name == 'package/emoji.json' or
                                   m.name.startswith('package/img/twitter/64/'))]
      tar.extractall(partial, members=wanted, filter='data')
    os.replace(partial, dest)


def _fetch_photos(dest: str) -> None:
  with tempfile.TemporaryDirectory() as tmp:
    _run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps',
          '--only-binary', ':all:', '--dest', tmp,
          f'scikit-image=={SKIMAGE_VERSION}'], tmp)
    wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp)
                 if f.endswith('.whl'))
    partial = dest + '.partial'
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    with zipfile.ZipFile(wheel) as z:
      for name in z.namelist():
        if (name.startswith('skimage/data/') and
            name.endswith(PHOTO_SUFFIXES) and name.count('/') == 2):
          with z.open(name) as src, open(
              os.path.join(partial, os.path.basename(name)), 'wb') as out:
            shutil.copyfileobj(src, out)
    os.replace(partial, dest)


def ensure() -> Dict[str, str]:
  """Fetches what is missing; {'emoji': folder, 'photos': folder}."""
  os.makedirs(data_dir(), exist_ok=True)
  if not os.path.isdir(_emoji_dir()):
    _fetch_emoji(_emoji_dir())
  if not os.path.isdir(_photo_dir()):
    _fetch_photos(_photo_dir())
  return {'emoji': _emoji_dir(), 'photos': _photo_dir()}


def emoji(skin_tones: bool = False) -> List[Picture]:
  """The Twemoji pictures, labelled by category: one per emoji, or (with
  `skin_tones`) the skin-tone variants only."""
  root = ensure()['emoji']
  with open(os.path.join(root, 'package', 'emoji.json'),
            encoding='utf-8') as f:
    table = json.load(f)
  folder = os.path.join(root, 'package', 'img', 'twitter', '64')
  out = []
  for entry in sorted(table, key=lambda e: e['sort_order']):
    label = entry['category']
    if skin_tones:
      files = [v['image'] for v in entry.get('skin_variations', {}).values()]
      of = entry['image']
    else:
      files, of = [entry['image']], ''
    for image in files:
      path = os.path.join(folder, image)
      if os.path.isfile(path):
        out.append(Picture(path, label, image, of))
  return out


def photos() -> List[Picture]:
  """scikit-image's sample photographs (colour and grey)."""
  root = ensure()['photos']
  return [Picture(os.path.join(root, name), 'photo', name)
          for name in sorted(os.listdir(root))]


if __name__ == '__main__':
  folders = ensure()
  print(json.dumps({'folders': folders, 'emoji': len(emoji()),
                    'skin_tone_variants': len(emoji(skin_tones=True)),
                    'photos': len(photos())}))
