"""The image flags and their checks."""

from typing import Tuple

from transforms.core import flags
from transforms.core.errors import UsageError
from transforms.modalities.image import config


def add_arguments(add) -> None:
  """Declares the image flags (`add` is argparse's add_argument)."""
  add('--image_size', default='224x224',
      help='Target size WIDTHxHEIGHT, or one number for a square. '
      'Default: 224x224.')
  add('--resize_mode', default='fit',
      help='fit (keep aspect ratio, pad with black), crop (keep aspect '
      'ratio, cut the centre) or stretch. Default: fit.')
  add('--storage', default='jpeg',
      help='How images are stored: jpeg or png (encoded at the target '
      'size), uint8 (raw pixels) or float32 (normalized pixels). '
      'Default: jpeg.')
  add('--jpeg_quality', default='90',
      help='JPEG quality for --storage jpeg, 1-95. Default: 90.')
  add('--color', default='rgb',
      help='rgb (3 channels; grey, palette, CMYK, RGBA and 16-bit inputs '
      'are converted) or grey (1 channel). Default: rgb.')
  add('--background', default='white',
      help='Colour that transparent images are composited onto: white, '
      'black, #rrggbb or r,g,b. Default: white.')
  add('--nested_folders', default='include',
      help='Images in folders below a class folder, such as '
      '<input>/cat/2019/x.jpg (or <input>/train/cat/2019/x.jpg with '
      '--splits from_input): include (they are of that class) or skip '
      '(counted as skipped files). Default: include.')
  add('--max_pixels', default='100000000',
      help='Reject images with more pixels than this (decompression '
      'bombs). Default: 100000000.')


def parse_image_size(text: str) -> Tuple[int, int]:
  """'224x160' -> (width 224, height 160); '224' -> (224, 224)."""
  parts = str(text).lower().replace(' ', '').split('x')
  try:
    nums = [int(p) for p in parts]
  except ValueError:
    nums = []
  if len(nums) == 1:
    nums = nums * 2
  if len(nums) != 2 or min(nums) < 1 or max(nums) > 8192:
    raise UsageError(f'--image_size must be WIDTHxHEIGHT with sides from 1 '
                     f'to 8192, such as 224x224 (got {text!r}).')
  return nums[0], nums[1]


def parse_background(text: str) -> str:
  """--background as '#rrggbb'."""
  try:
    return config.background_hex(text)
  except ValueError:
    raise UsageError(f'--background must be white, black, a #rrggbb colour '
                     f'or r,g,b with values from 0 to 255 (got {text!r}).'
                     ) from None


def settings(o) -> config.ImageConfig:
  """The checked image settings from the parsed flags."""
  width, height = parse_image_size(o.image_size)
  return config.ImageConfig(
      height=height, width=width,
      resize_mode=flags.choice('resize_mode', o.resize_mode,
                               config.RESIZE_MODES),
      storage=flags.choice('storage', o.storage, config.STORAGE_FORMATS),
      color=flags.choice('color',
                         str(o.color).lower().replace('gray', 'grey'),
                         config.COLOR_MODES),
      jpeg_quality=flags.whole_number('jpeg_quality', o.jpeg_quality, 1, 95),
      max_pixels=flags.whole_number('max_pixels', o.max_pixels, 1),
      background=parse_background(o.background),
      nested_folders=flags.choice('nested_folders', o.nested_folders,
                                  config.NESTED_FOLDERS))


def near_duplicate_rules(mode: str, o):
  """The NearDuplicateRules of a run: --near_duplicates (`mode`) and the
  distances --near_duplicate_hash_distance and
  --near_duplicate_thumb_distance."""
  from transforms.core import near_duplicates as near_lib  # pylint: disable=import-outside-toplevel
  hash_distance = near_lib.HASH_DISTANCE
  if o.near_duplicate_hash_distance is not None:
    hash_distance = flags.whole_number('near_duplicate_hash_distance',
                                       o.near_duplicate_hash_distance, 0, 16)
  thumb = near_lib.THUMB_DISTANCE
  if o.near_duplicate_thumb_distance is not None:
    thumb = flags.number('near_duplicate_thumb_distance',
                         o.near_duplicate_thumb_distance, 0.0, 2.0)
  return near_lib.NearDuplicateRules(mode=mode, hash_distance=hash_distance,
                                     thumb_distance=thumb)


def near_duplicate_rules_of(given: dict):
  """The NearDuplicateRules a dataset's config names (defaults for what it
  does not)."""
  from transforms.core import near_duplicates as near_lib  # pylint: disable=import-outside-toplevel
  return near_lib.NearDuplicateRules(
      mode=given.get('mode', 'group'),
      hash_distance=int(given.get('hash_distance', near_lib.HASH_DISTANCE)),
      thumb_distance=float(given.get('thumb_distance',
                                     near_lib.THUMB_DISTANCE)))
