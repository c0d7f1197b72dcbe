"""The manifest's sensor section and normalization, from what the run
counted: rows per split, each entity's series shape over time
(sensor.time), the windows expected and formed, the channel statistics.
"""

from transforms.modalities.sensor import config
from transforms.modalities.sensor import entity_statistics
from transforms.modalities.sensor import preprocessing
from transforms.modalities.sensor import windows


def manifest_section(cfg, values, splits):
  """The manifest's sensor section and normalization."""
  sc = cfg.settings
  counts = dict(values['counts'])
  time_counts = dict(values.get('time_counts') or ())
  for name, split in splits.items():
    # Rows used: the observations, after repeated rows were dropped and
    # conflicting ones dead-lettered (they are in dead_lettered).
    duplicates = time_counts.get((name, 'duplicates'), 0)
    split['rows_used'] = counts.get((name, 'used'), 0) - duplicates - (
        time_counts.get((name, 'conflicts'), 0))
    split['rows_dropped'] = counts.get((name, 'dropped'), 0)
    split['duplicates_dropped'] = duplicates
    if sc.windowed:
      split['rows_windowed'] = int(sum(
          r[s] for r in values['rows_windowed']
          for s in [cfg.split_names.index(name)]))
  entity_rows = dict((e, es[0]) for e, es in values['entity_stats'])
  time_shape = _time_shape(sc, values['entity_stats'], values['shapes'])
  stats = values['train_stats']
  section = {
      'columns': values['columns'],
      'channels': list(values['columns']['channels']),
      'mode': 'window' if sc.windowed else 'row',
      'window_length': sc.window_length,
      'window_stride': sc.window_stride if sc.windowed else 0,
      'window_label': sc.window_label if sc.windowed else None,
      'value_shape': preprocessing.value_shape(
          sc.window_length, len(values['columns']['channels'])),
      'time_unit': 'ns since 1970-01-01T00:00:00Z',
      'missing': sc.missing,
      'split_by': sc.split_by,
      'time_cutoffs': [config.format_time(t) for t in sc.time_cutoffs],
      'entities': len(entity_rows),
      # Windowed while reading (in one file, in time order); the others
      # were grouped by (entity, time chunk).
      'entities_in_time_order': sum(
          1 for _, es in values['entity_stats']
          if entity_statistics.streamable(entity_statistics.EntityStats(*es))
      ) if sc.windowed else None,
      'longest_entity_rows': max(entity_rows.values(), default=0),
      'longest_segment': time_shape['total']['longest_segment'],
      'max_gap': sc.max_gap_text,
      'same_time': sc.same_time,
      'resample': {
          'period': sc.resample_text, 'period_ns': sc.resample,
          'fill': 'linear between the observations around each grid time; '
                  'label of the observation at or before it'}
                  if sc.resample else None,
      'time': time_shape,
      'rows_dropped': sum(counts.get((n, 'dropped'), 0)
                          for n in cfg.split_names),
      'bucketize': sc.bucketize,
  }
  if sc.windowed:
    formed = dict(values['formed'])
    w = time_shape['total']['windows']
    section['windows'] = {
        'expected': w['in_segments'] - w['too_long'],
        'formed': sum(formed.values()),
        'crossing_time_cutoff': formed.get('', 0),
        'lost_to_gaps': w['without_gaps'] - w['in_segments'],
        'too_long': w['too_long'],
    }
  normalization = {
      'method': cfg.normalization,
      'applied': 'stored',
      'statistics_split': 'train',
      'rows_analyzed': max(stats['count'], default=0),
      'per_channel': {
          name: {k: stats[k][i] for k in ('count', 'mean', 'std', 'min',
                                          'max')}
          for i, name in enumerate(values['columns']['channels'])
      } if stats['count'] else {},
  }
  return section, normalization


def _shape_keys(sc):
  """The keys of a sensor.time entry that add up over entities."""
  keys = ('rows', 'observations', 'gaps', 'segments', 'duplicates_dropped',
          'conflicting_rows', 'out_of_order_rows')
  return keys + (('rows_resampled', 'rows_filled') if sc.resample else ())


def _time_shape(sc, entity_stats, shapes) -> dict:
  """The manifest's sensor.time: each entity's series shape and the
  total (see the guide's sensor page)."""
  shapes = dict(shapes)
  entities = {}
  for entity, stats in sorted(entity_stats):
    stats = entity_statistics.EntityStats(*stats)
    part = windows.SeriesShape.merge([shapes.get(entity, {})])
    shape = {
        'rows': stats.rows, 'observations': part['observations'],
        'median_interval_ns': part['median_interval_ns'],
        'max_gap_ns': part['max_gap_ns'],
        'gaps': part['gaps'], 'longest_gap_ns': part['longest_gap_ns'],
        'segments': part['segments'],
        'longest_segment': part['longest_segment'],
        'duplicates_dropped': part['duplicates_dropped'],
        'conflicting_rows': part['conflicting_rows'],
        'out_of_order_rows': stats.out_of_order,
    }
    if sc.resample:
      shape['rows_resampled'] = int(part['rows_resampled'])
      shape['rows_filled'] = int(part['rows_filled'])
    if sc.windowed:
      # Without gaps: the observations, or the grid rows of the whole time
      # the entity was observed.
      rows = part['observations']
      if sc.resample and part['first_ns'] is not None:
        rows = (part['last_ns'] - part['first_ns']) // sc.resample + 1
      shape['windows'] = {
          'without_gaps': windows.window_count(
              rows, sc.window_length, sc.window_stride),
          'in_segments': part['in_segments'],
          'too_long': part['too_long'],
          'formed': part['in_segments'] - part['too_long']}
    entities[entity] = shape
  total = {}
  for key in _shape_keys(sc):
    total[key] = sum(e[key] for e in entities.values())
  for key in ('longest_gap_ns', 'longest_segment'):
    total[key] = max((e[key] for e in entities.values()), default=0)
  # The entities' median intervals, their median (the lower middle one).
  medians = sorted(e['median_interval_ns'] for e in entities.values()
                   if e['median_interval_ns'] is not None)
  total['median_interval_ns'] = (medians[(len(medians) - 1) // 2]
                                 if medians else None)
  if sc.windowed:
    total['windows'] = {key: sum(e['windows'][key] for e in entities.values())
                        for key in ('without_gaps', 'in_segments',
                                    'too_long', 'formed')}
  return {'entities': entities, 'total': total}
