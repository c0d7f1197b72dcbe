"""The per-image kernel alone: the previous method against process_image.

    python benchmarks/image_kernel.py [--images 600] [--repeats 5]
        [--folder DIR] [--workdir /tmp/tfrecord_bench] [--concurrent N]
        [--results PATH | --no-results]

A benchmark, not a test. In one process, on the same image bytes (read into
memory first), it times

  previous  previous_process_image below: a copy of what process_image did
            before the JPEG fast path (Pillow: draft(), decode, the
            truncation check, BILINEAR resize, histogram sums, digest of
            tobytes(), simplejpeg encode), kept here only to compare with;
  current   transforms.modalities.image.processing.process_image

with ImageConfig() defaults (224x224 fit, JPEG q90), in interleaved order
(previous, current, previous, ...), and prints the median ms/image of each
over --repeats, wall-clock and CPU time of this process, and their
ratios. The images are --folder's (every image file under it), or a corpus
of photo-like JPEGs (`pipelines.sample_data.generate`, 300x200..640x480,
the image benchmark's corpus) made in --workdir or reused from there.

It also checks that both give the same original sizes and stored image
shapes, and prints the mean PSNR between their stored images. The machine
should be otherwise idle: anything else running shows in the spread
(printed as min..max).

With --concurrent N the timing runs in N fresh processes at once, each on
all the images, as a run's local worker processes decode (one per core;
the processes are not kept in step, so one may time a kernel while
another times the other): each process's figures, their medians, and
N * 1000 / (median ms/image), the images/s the N processes reach
together. That is the ceiling of a run's decoding pass on N cores when
nothing else uses them; in a run the launching process takes its share
too.

A run on the default corpus with at least the default repeats rewrites its
section of benchmarks/RESULTS.md (image_kernel, or image_kernel_concurrent
with --concurrent N > 1; harness.write_results: date, commit, machine,
command, the printed figures); --no-results keeps it from doing so,
--results PATH writes the section of that file whatever the arguments.
"""

import argparse
import concurrent.futures
import hashlib
import io
import multiprocessing
import os
import statistics
import sys
import time

import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import JpegImagePlugin
import simplejpeg

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _path in (_ROOT, os.path.join(_ROOT, 'benchmarks')):
  if _path not in sys.path:
    sys.path.insert(0, _path)
# pylint: disable=g-import-not-at-top,wrong-import-position
import harness
import image_benchmark
from transforms.modalities.image import config
from transforms.modalities.image import exif
from transforms.modalities.image import file_formats
from transforms.modalities.image import jpeg
from transforms.modalities.image import pillow_decode
from transforms.modalities.image import processing
# pylint: enable=g-import-not-at-top,wrong-import-position


# ----------------------------------------------- the previous method --
# For comparison only: process_image as it was before the JPEG fast path
# and the OpenCV resize. The helpers it calls (_open, _orientation,
# _check_jpeg_complete, _flatten_alpha, _to_8bit) are unchanged.
# pylint: disable=protected-access


def _previous_draft(img, cfg, orientation):
  """Pillow's draft() for the size the content is resized to."""
  if img.format != 'JPEG':
    return
  w, h = img.size
  if orientation in (5, 6, 7, 8):  # EXIF orientations that swap w and h
    dst_w, dst_h = cfg.height, cfg.width
  else:
    dst_w, dst_h = cfg.width, cfg.height
  sx, sy = dst_w / w, dst_h / h
  if cfg.resize_mode in ('fit', 'crop'):
    sx = sy = (min if cfg.resize_mode == 'fit' else max)(sx, sy)
  need = (max(1, int(np.ceil(w * sx))), max(1, int(np.ceil(h * sy))))
  if need[0] * 2 > w or need[1] * 2 > h:
    return
  mode = 'L' if cfg.color == 'grey' and img.mode == 'RGB' else img.mode
  img.draft(mode, need)


def _previous_resize(img, cfg):
  """Pillow's antialiased BILINEAR resize, fit/crop/stretch."""
  w, h = img.size
  dst = (cfg.width, cfg.height)
  resample = Image.Resampling.BILINEAR
  if cfg.resize_mode == 'stretch':
    return img.resize(dst, resample) if img.size != dst else img
  if cfg.resize_mode == 'crop':
    s = max(cfg.width / w, cfg.height / h)
    box_w, box_h = cfg.width / s, cfg.height / s
    left, top = (w - box_w) / 2, (h - box_h) / 2
    return img.resize(dst, resample, box=(left, top, left + box_w,
                                          top + box_h))
  s = min(cfg.width / w, cfg.height / h)
  new = (max(1, min(cfg.width, round(w * s))),
         max(1, min(cfg.height, round(h * s))))
  content = img.resize(new, resample) if new != img.size else img
  if new == dst:
    return content
  canvas = Image.new(img.mode, dst, 0)
  canvas.paste(content, ((cfg.width - new[0]) // 2, (cfg.height - new[1]) // 2))
  return canvas


def previous_decode_and_resize(data, cfg):
  """The previous decode + resize: (Pillow image, height, width)."""
  img = file_formats.open_image(data)
  w, h = img.size
  orientation = 1
  if img.format == 'JPEG':
    orientation = exif.orientation(img)
    if cfg.draft:
      _previous_draft(img, cfg, orientation)
  img.load()
  if isinstance(img, JpegImagePlugin.JpegImageFile):
    jpeg.check_jpeg_complete(img, data, (w, h))
  if img.format != 'JPEG':
    orientation = exif.orientation(img)
  if orientation != 1:
    img = ImageOps.exif_transpose(img)
  img = pillow_decode._flatten_alpha(img, cfg.background_rgb)
  img = pillow_decode._to_8bit(img, cfg.color)
  if orientation in (5, 6, 7, 8):
    w, h = h, w
  return _previous_resize(img, cfg), h, w


def previous_process_image(data, cfg):
  """The previous process_image (JPEG storage): stored bytes, sizes, sums
  and content digest, computed as before."""
  img, h, w = previous_decode_and_resize(data, cfg)
  hist = np.asarray(img.histogram(), dtype=np.float64).reshape(-1, 256)
  values = np.arange(256, dtype=np.float64)
  sums, squares = hist @ values, hist @ (values * values)
  digest = hashlib.sha256(f'{img.mode}:{img.size[0]}x{img.size[1]}:'.encode())
  digest.update(img.tobytes())
  arr = np.asarray(img)
  if arr.ndim == 2:
    arr = arr[:, :, None]
  stored = simplejpeg.encode_jpeg(
      np.ascontiguousarray(arr), quality=cfg.jpeg_quality,
      colorspace='GRAY' if arr.shape[2] == 1 else 'RGB',
      colorsubsampling='420')
  return stored, h, w, sums, squares, digest.hexdigest()[:32]


# pylint: enable=protected-access


# ------------------------------------------------------------ measuring --


def read_images(folder):
  """The bytes of every image file under `folder`, in path order."""
  paths = []
  for dirpath, _, names in os.walk(folder):
    paths += [os.path.join(dirpath, n) for n in names
              if config.is_image_path(n)]
  out = []
  for path in sorted(paths):
    with open(path, 'rb') as f:
      out.append(f.read())
  return out


def ms_per_image(fn, datas, cfg):
  """(wall, CPU) milliseconds per image of one pass over `datas`."""
  wall, cpu = time.perf_counter(), time.process_time()
  for data in datas:
    fn(data, cfg)
  return ((time.perf_counter() - wall) / len(datas) * 1e3,
          (time.process_time() - cpu) / len(datas) * 1e3)


def psnr(a, b):
  mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
  return float('inf') if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def compare_outputs(datas, cfg):
  """Mean PSNR between the two methods' stored images; raises when their
  sizes differ."""
  values = []
  for data in datas:
    before, h, w = previous_process_image(data, cfg)[:3]
    now = processing.process_image(data, cfg)
    if (h, w) != (now.original_height, now.original_width):
      raise SystemExit(f'original size differs: {(h, w)} != '
                       f'{(now.original_height, now.original_width)}')
    a = np.asarray(Image.open(io.BytesIO(before)))
    b = np.asarray(Image.open(io.BytesIO(now.data)))
    if a.shape != b.shape:
      raise SystemExit(f'stored shape differs: {a.shape} != {b.shape}')
    values.append(psnr(a, b))
  finite = [v for v in values if np.isfinite(v)]
  return statistics.mean(finite) if finite else float('inf')


def time_kernels(datas, cfg, repeats):
  """{kernel name: [(wall, CPU) ms/image of each repeat]}, interleaved."""
  kernels = {'previous': lambda d, c: previous_process_image(d, c),
             'current': processing.process_image}
  times = {name: [] for name in kernels}
  for name, fn in kernels.items():  # warm up: imports, caches
    fn(datas[0], cfg)
  for _ in range(repeats):
    for name, fn in kernels.items():
      times[name].append(ms_per_image(fn, datas, cfg))
  return times


def _time_in_process(folder, repeats):
  """time_kernels in a process of its own (--concurrent)."""
  return time_kernels(read_images(folder), config.ImageConfig(), repeats)


def _medians(times, label=''):
  """Prints each kernel's median (wall, CPU) ms/image; returns them."""
  medians = {}
  for name, values in times.items():
    wall = [w for w, _ in values]
    cpu = [c for _, c in values]
    medians[name] = statistics.median(wall), statistics.median(cpu)
    print(f'{label}{name:9s} {medians[name][0]:6.3f} ms/image wall (median '
          f'of {len(values)}; {min(wall):.3f}..{max(wall):.3f}), '
          f'{medians[name][1]:.3f} CPU')
  return medians


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--images', type=int, default=600,
                      help='Size of the generated corpus (without --folder).')
  parser.add_argument('--folder', default=None,
                      help='Time the images under this folder instead.')
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--workdir', default='/tmp/tfrecord_bench',
                      help='Where the generated corpus is made or reused.')
  parser.add_argument(
      '--concurrent', type=int, default=1,
      help='Time the kernels in this many processes at once, each on all '
      'the images, as the local worker processes of a run decode (one per '
      'core); also prints the images/s they would reach together.')
  harness.add_results_flags(parser)
  args = parser.parse_args(argv)
  if args.concurrent < 1:
    parser.error('--concurrent must be at least 1')
  info = harness.run_info(sys.argv[1:] if argv is None else argv, __file__)
  with harness.printed() as table:
    measure(args)
  if args.concurrent == 1:
    name, title = 'image_kernel', 'The per-image kernel (image_kernel.py)'
  else:
    name = 'image_kernel_concurrent'
    title = ('The per-image kernel in several processes at once '
             '(image_kernel.py --concurrent)')
  harness.write_results(
      args, harness.at_defaults(parser, args, ['images', 'folder']), name,
      title, info, harness.code_block(table.getvalue()))
  return 0


def measure(args):
  """Times the kernels as args say and prints the figures."""
  folder = args.folder or image_benchmark.ensure_corpus(
      os.path.abspath(args.workdir), args.images)
  datas = read_images(folder)
  if not datas:
    raise SystemExit(f'no images under {folder}')
  cfg = config.ImageConfig()
  print(f'{len(datas)} images from {folder}, {cfg.width}x{cfg.height} '
        f'{cfg.resize_mode}, {cfg.storage} q{cfg.jpeg_quality}')
  print(f'mean PSNR previous vs current stored image: '
        f'{compare_outputs(datas, cfg):.2f} dB')
  if args.concurrent == 1:
    medians = _medians(time_kernels(datas, cfg, args.repeats))
  else:
    context = multiprocessing.get_context('spawn')
    with concurrent.futures.ProcessPoolExecutor(
        args.concurrent, mp_context=context) as pool:
      found = list(pool.map(_time_in_process, [folder] * args.concurrent,
                            [args.repeats] * args.concurrent))
    per_process = [_medians(times, f'process {i + 1}: ')
                   for i, times in enumerate(found)]
    medians = {name: tuple(statistics.median(m[name][i] for m in
                                             per_process) for i in (0, 1))
               for name in per_process[0]}
    for name, (wall, _) in medians.items():
      print(f'{name:9s} {wall:6.3f} ms/image wall (median of the '
            f'{args.concurrent} processes); together '
            f'{args.concurrent * 1000 / wall:,.0f} images/s')
  for i, what in enumerate(('wall', 'CPU')):
    ratio = medians['current'][i] / medians['previous'][i]
    print(f'current/previous, {what}: {ratio:.3f} ({(1 - ratio) * 100:.0f}% '
          'less time per image)')


if __name__ == '__main__':
  sys.exit(main())
