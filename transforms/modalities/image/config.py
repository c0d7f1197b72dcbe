"""What every image is turned into: ImageConfig (the run's image options)
and the choices of its options; BadImageError, the error of an input that
cannot become an example. No Beam and no image library in here, so that the
flags, the listing and the checks can use it without either.
"""

import dataclasses
import re
from typing import Tuple


RESIZE_MODES = ('fit', 'crop', 'stretch')
STORAGE_FORMATS = ('jpeg', 'png', 'uint8', 'float32')
COLOR_MODES = ('rgb', 'grey')
IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.jpe', '.png', '.gif', '.bmp', '.webp')
BACKGROUND_NAMES = {'white': '#ffffff', 'black': '#000000'}
# ImageConfig.nested_folders (--nested_folders).
NESTED_FOLDERS = ('include', 'skip')


class BadImageError(ValueError):
  """An input that cannot become an example; carries the stage and reason."""

  def __init__(self, stage: str, reason: str):
    super().__init__(reason)
    self.stage = stage
    self.reason = reason

  def __reduce__(self):
    # Comes back whole from a worker process (runtime/processes.py).
    return BadImageError, (self.stage, self.reason)


@dataclasses.dataclass(frozen=True)
class ImageConfig:
  """How every image is turned into its stored form.

  Attributes:
    height: Target height in pixels.
    width: Target width in pixels.
    resize_mode: 'fit' (scale to fit, pad the rest with black), 'crop'
      (scale to cover, cut the centre) or 'stretch' (ignore aspect ratio).
    storage: 'jpeg' or 'png' (encoded at the target size), 'uint8' (raw
      pixel bytes) or 'float32' (pixels, normalized in the pipeline).
    color: 'rgb' (3 channels) or 'grey' (1 channel).
    jpeg_quality: Quality of the stored JPEG (1-95).
    max_pixels: Images with more pixels than this are rejected before
      decoding (decompression bombs).
    draft: Use the JPEG decoder's reduced-size (DCT-scaled) decoding when the
      image is at least twice the size it is resized to.
    background: '#rrggbb': the colour transparent images are composited
      onto before they lose their alpha channel.
    nested_folders: 'include' or 'skip': whether an image in a folder
      nested inside its class folder (`cat/2019/x.jpg`) is an input of that
      class. It decides which images are listed, not how they are
      processed; it is here to be in the run's config and config hash.
  """
  height: int = 224
  width: int = 224
  resize_mode: str = 'fit'
  storage: str = 'jpeg'
  color: str = 'rgb'
  jpeg_quality: int = 90
  max_pixels: int = 100_000_000
  draft: bool = True
  background: str = '#ffffff'
  nested_folders: str = 'include'
  # Whether process_image also computes the near-duplicate signature (set
  # by the pipeline from the run's content rules, which the config holds).
  signature: bool = False

  @property
  def channels(self) -> int:
    return 1 if self.color == 'grey' else 3

  @property
  def background_rgb(self) -> Tuple[int, int, int]:
    return parse_background(self.background)

  def to_json(self) -> dict:
    d = dataclasses.asdict(self)
    d.pop('signature')
    return d


def is_image_path(path: str) -> bool:
  """True when the file name has one of the image extensions we read."""
  return path.lower().endswith(IMAGE_EXTENSIONS)


def parse_background(text: str) -> Tuple[int, int, int]:
  """'white', 'black', '#rrggbb' or 'r,g,b' -> (r, g, b).

  Raises:
    ValueError: Not one of those forms, or a value outside 0-255.
  """
  value = BACKGROUND_NAMES.get(str(text).strip().lower(), str(text).strip())
  if re.fullmatch(r'#[0-9a-fA-F]{6}', value):
    return tuple(int(value[i:i + 2], 16) for i in (1, 3, 5))
  parts = value.split(',')
  if len(parts) == 3 and all(p.strip().isdigit() for p in parts):
    rgb = tuple(int(p) for p in parts)
    if max(rgb) <= 255:
      return rgb
  raise ValueError(f'not a colour: {text!r}')


def background_hex(text: str) -> str:
  """The canonical '#rrggbb' of a background colour (see parse_background)."""
  return '#{:02x}{:02x}{:02x}'.format(*parse_background(text))
