"""Checks of single flag values, shared by the common and modality flags.

Each returns the checked value or raises UsageError with one sentence that
names the flag and what it takes.
"""

from typing import Optional, Sequence, Tuple

from transforms.core.errors import UsageError


def choice(flag: str, value, choices: Sequence[str]) -> str:
  """One of `choices` (case-insensitive)."""
  v = str(value).strip().lower()
  if v not in choices:
    raise UsageError(f'--{flag} must be one of {", ".join(choices)} '
                     f'(got {value!r}).')
  return v


def whole_number(flag: str, value, low: int,
                 high: Optional[int] = None) -> int:
  """A whole number from `low` to `high` (no upper bound when None)."""
  try:
    v = int(str(value).strip())
  except ValueError:
    raise UsageError(f'--{flag} must be a whole number (got {value!r}).'
                     ) from None
  if v < low or (high is not None and v > high):
    bound = f'between {low} and {high}' if high is not None else f'>= {low}'
    raise UsageError(f'--{flag} must be {bound} (got {v}).')
  return v


def number(flag: str, value, low: float, high: float) -> float:
  """A number from `low` to `high`."""
  try:
    v = float(value)
  except ValueError:
    v = float('nan')
  if not low <= v <= high:
    raise UsageError(f'--{flag} must be a number from {low:g} to {high:g} '
                     f'(got {value!r}).')
  return v


def boolean(flag: str, value) -> bool:
  """true/false, 1/0, yes/no or on/off."""
  v = str(value).strip().lower()
  if v in ('true', '1', 'yes', 'on'):
    return True
  if v in ('false', '0', 'no', 'off'):
    return False
  raise UsageError(f'--{flag} must be true or false (got {value!r}).')


def names(text) -> Tuple[str, ...]:
  """A comma-separated list, blanks dropped."""
  return tuple(c.strip() for c in str(text or '').split(',') if c.strip())
