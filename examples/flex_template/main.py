"""Flex Template entry point: build the job, submit it, do not wait.

The template launcher runs this file with the template's parameters
(--modality, --input, --output, --partition, ...) and the launch's Dataflow
options. A launch must finish quickly, so the job is submitted with
--detach: the job itself publishes the dataset, atomically, when it
finishes, and nothing is published if it fails. Run pipelines.validate (or
watch the job's state) afterwards to act on the outcome.
"""

import sys

from pipelines import quiet

if __name__ == '__main__':
  quiet.start()  # before TensorFlow is imported (see pipelines/quiet.py)

from pipelines import outcome  # pylint: disable=wrong-import-position
from pipelines import preprocess  # pylint: disable=wrong-import-position


def main(argv):
  argv = list(argv)
  if not any(a == '--runner' or a.startswith('--runner=') for a in argv):
    argv += ['--runner', 'DataflowRunner']
  if '--detach' not in argv:
    argv.append('--detach')
  return preprocess.main(argv)


if __name__ == '__main__':
  outcome.exit_now(main(sys.argv[1:]))
