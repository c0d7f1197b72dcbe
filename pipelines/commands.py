"""Console scripts (setup.py's entry points): `tfrecord-preprocess` and
`tfrecord-validate`.

Each quiets TensorFlow's native start-up lines before the command's module,
and TensorFlow with it, is imported (see pipelines/quiet.py), then runs the
command as `python -m pipelines.preprocess` / `python -m pipelines.validate`
would, with the garbage collector paused while it starts, as there
(pipelines/collector.py).
"""

from pipelines import collector
from pipelines import quiet


def preprocess() -> None:
  collector.pause()
  quiet.start()
  from pipelines import preprocess as command  # pylint: disable=import-outside-toplevel
  command.cli()


def validate() -> None:
  collector.pause()
  quiet.start()
  from pipelines import validate as command  # pylint: disable=import-outside-toplevel
  command.cli()
