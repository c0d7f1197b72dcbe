"""Functions the tests of runtime/processes.py run in worker processes (a
module of its own, so that a worker imports nothing else)."""

import os
import sys
import time


def square_after(x, delay):
  """x * x after `delay` seconds."""
  time.sleep(delay)
  return x * x


def squares_after(xs, delay):
  """[x * x for x in xs] after `delay` seconds."""
  time.sleep(delay)
  return [x * x for x in xs]


def fail_on(x, bad):
  """x, or ValueError when x is `bad`."""
  if x == bad:
    raise ValueError(f'{x} is bad')
  return x


def die_on(x, bad):
  """x, or this worker process ends abruptly when x is `bad` (as when a
  decoder crashes or the kernel kills it)."""
  if x == bad:
    os._exit(3)  # pylint: disable=protected-access
  time.sleep(0.01)
  return x


def modules_loaded(names):
  """Which of `names` this worker has imported."""
  return sorted(n for n in names if n in sys.modules)


def pid_after(delay):
  """This worker's process id, after `delay` seconds."""
  time.sleep(delay)
  return os.getpid()


def process_image_or_die(data, cfg, path):
  """processing.process_image, except that this worker process ends
  abruptly on a file named kill.png (a decoder that crashes on one input)."""
  from transforms.modalities.image import processing  # pylint: disable=import-outside-toplevel
  if os.path.basename(path) == 'kill.png':
    os._exit(3)  # pylint: disable=protected-access
  return processing.process_image(data, cfg, path)
