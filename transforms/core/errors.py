"""The two ways a run stops that are the user's to act on.

- `UsageError`: a bad invocation (a flag, the input, the output). The
  message is one plain sentence; nothing was written; exit code 2.
- `DataQualityError`: the run finished but its data failed the quality
  gate (too many dead letters, counts that do not add up); nothing was
  published; exit code 3.

Anything else that stops a run is a failure of the pipeline (exit code 1).
A bad *record* is neither: it becomes a dead letter and the run goes on.
"""


class UsageError(ValueError):
  """A bad invocation: the message is one sentence for the user."""


class DataQualityError(RuntimeError):
  """The data failed the quality gate; nothing was published."""
