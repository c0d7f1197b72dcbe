"""The columns of a table file: which play which role.

Part of the table reader (`sources/tables.py`): `resolve_columns` checks
the column roles asked for against a file's header (from `read_header`)
and turns a bad invocation into a `ColumnError` (one sentence).
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple


class ColumnError(ValueError):
  """A bad invocation about columns; the message is one plain sentence."""


@dataclasses.dataclass(frozen=True)
class Columns:
  """Which columns play which role.

  Attributes:
    timestamp: The timestamp column.
    entity: The column naming the series (device, patient...); None when all
      rows are one series.
    label: The label column.
    channels: Numeric channel columns, in file order or in the order given.
  """
  timestamp: str
  entity: Optional[str]
  label: str
  channels: Tuple[str, ...]


def column_list(names: Sequence[str], limit: int = 40) -> str:
  """Column names as an error message lists them.

  Args:
    names: The names, in file order.
    limit: How many are shown; the rest are counted ('and 3 more').

  Returns:
    'a, b, c', or 'none' for no names.
  """
  shown = ', '.join(names[:limit])
  if len(names) > limit:
    shown += f' and {len(names) - limit} more'
  return shown or 'none'


def resolve_columns(names: Sequence[str], numeric: Sequence[str],
                    timestamp: str, entity: Optional[str], label: str,
                    channels: Optional[Sequence[str]]) -> Columns:
  """Checks the column roles against a file's columns.

  Args:
    names: All column names (from read_header).
    numeric: The numeric-looking ones.
    timestamp: The timestamp column.
    entity: The entity column, or None.
    label: The label column.
    channels: Channel columns, or None for every numeric column that has no
      other role.

  Returns:
    The Columns.

  Raises:
    ColumnError: A missing column, a column with two roles, a column given
      twice, or no channel column left.
  """
  names = list(names)
  available = column_list(names)

  def check_exists(name, role):
    if name not in names:
      raise ColumnError(f'the {role} column {name!r} is not in the file '
                        f'(columns: {available})')
    if names.count(name) > 1:
      raise ColumnError(f'the {role} column {name!r} appears more than once '
                        f'in the header (columns: {available})')

  roles = [('timestamp', timestamp)]
  if entity is not None:
    roles.append(('entity', entity))
  roles.append(('label', label))
  for role, name in roles:
    check_exists(name, role)
  for i, (role, name) in enumerate(roles):
    for other, other_name in roles[i + 1:]:
      if name == other_name:
        raise ColumnError(f'the column {name!r} is used as both the {role} '
                          f'and the {other} column')
  role_of = {name: role for role, name in roles}
  if channels is None:
    numeric_set = set(numeric)
    picked = []
    for name in names:
      if name in numeric_set and name not in role_of and name not in picked:
        picked.append(name)
    if not picked:
      numeric_left = [n for n in names if n in numeric_set]
      raise ColumnError(
          'no numeric channel columns are left besides the timestamp, '
          f'entity and label columns (numeric columns: '
          f'{column_list(numeric_left)}; columns: {available})')
    return Columns(timestamp, entity, label, tuple(picked))
  if isinstance(channels, str):
    channels = [channels]
  picked = []
  for name in channels:
    check_exists(name, 'channel')
    if name in role_of:
      raise ColumnError(f'the column {name!r} is used as both the '
                        f'{role_of[name]} and a channel column')
    if name in picked:
      raise ColumnError(f'the channel column {name!r} is given twice')
    picked.append(name)
  if not picked:
    raise ColumnError(f'no channel columns given (columns: {available})')
  return Columns(timestamp, entity, label, tuple(picked))


def needed_columns(columns: Columns) -> List[str]:
  """The columns to read, each once, in role order."""
  out = []
  for name in (columns.timestamp, columns.entity, columns.label,
               *columns.channels):
    if name is not None and name not in out:
      out.append(name)
  return out
