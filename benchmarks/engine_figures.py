"""engines_benchmark.py's figures from its runs: medians over the
repeats, the steady state and its ratio to the DirectRunner's, the
growth of each engine process's memory, and the targets they are held
to.
"""

import os
import statistics
import sys

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import engine_clusters
import harness
# pylint: enable=g-import-not-at-top,wrong-import-position

FLINK_STEADY_TARGET = 0.8  # Flink's steady state / the DirectRunner's
MEMORY_TARGET = 1.1  # an engine process's peak RSS at size 2 / at size 1


def job_key(runner, n):
  """'flink@20000': the name of a runner's job at size n in the results."""
  return f'{runner}@{n}'


def _median(values):
  values = [v for v in values if v is not None]
  return statistics.median(values) if values else None


def _ratio(a, b):
  return a / b if a is not None and b else None


def summarize(runs, unit):
  """harness.summarize, plus medians of the engine figures of each job."""
  out = harness.summarize(runs, unit)
  for name, rs in runs.items():
    engines = [r['engine'] for r in rs if 'engine' in r]
    if not engines:
      continue
    labels = sorted({k for e in engines for k in e['peak_rss_kib']})
    out[name]['engine_peak_rss_mib_median'] = {
        k: _median([e['peak_rss_kib'].get(k) for e in engines]) / 1024
        for k in labels}
    out[name]['engine_cpu_seconds_median'] = _median(
        [e['cpu_seconds'] for e in engines])
    out[name]['engine_job_seconds_median'] = _median(
        [r['engine_job'].get('seconds') for r in rs])
    # Cores busy, the launcher's and the cluster's CPU together.
    out[name]['cores_busy_median'] = _median(
        [(r['cpu_seconds'] + r['engine']['cpu_seconds']) / r['seconds']
         for r in rs])
  return out


def steady_rate(s1, s2, t1, t2):
  """(s2 - s1) / (t2 - t1), None when size 2 took no longer (noise)."""
  if t1 is None or t2 is None or t2 <= t1:
    return None
  return (s2 - s1) / (t2 - t1)


def figures(summary, runners, sizes, tiny, unit):
  """The reported figures and targets from summarize() output.

  Returns:
    {'figures': {...}, 'targets': [{'target', 'key', 'value', 'met'}]}.
  """
  s1, s2 = sizes

  def get(runner, n, key):
    return summary[job_key(runner, n)].get(key)

  seconds = {r: {str(n): get(r, n, 'seconds_median') for n in sizes}
             for r in runners}
  steady = {r: steady_rate(s1, s2, seconds[r][str(s1)], seconds[r][str(s2)])
            for r in runners}
  direct = steady.get('direct')
  f = {
      'fixed_seconds': {r: get(r, tiny, 'seconds_median') for r in runners},
      'seconds': seconds,
      'steady_state_per_second': steady,
      'steady_state_over_direct': {r: _ratio(steady[r], direct)
                                   for r in runners},
      'launcher_peak_rss_mib': {r: {str(n): get(r, n, 'peak_rss_mib_median')
                                    for n in sizes} for r in runners},
      'launcher_tree_rss_mib': {
          r: {str(n): get(r, n, 'tree_rss_mib_sampled_max') for n in sizes}
          for r in runners},
      'engine_peak_rss_mib': {},
      'engine_peak_rss_ratio': {},
      'engine_job_seconds': {},
      'cores_busy': {},
      'other_load_share_max': {
          r: max((get(r, n, 'other_load_share_max') or 0.0)
                 for n in (tiny,) + tuple(sizes)) for r in runners},
  }
  for r in runners:
    peak = f['launcher_peak_rss_mib'][r]
    f.setdefault('launcher_peak_rss_ratio', {})[r] = _ratio(
        peak[str(s2)], peak[str(s1)])
    f['cores_busy'][r] = {
        str(n): (get(r, n, 'cores_busy_median') if r in engine_clusters.ENGINES
                 else get(r, n, 'cpu_utilization_median')) for n in sizes}
    if r not in engine_clusters.ENGINES:
      continue
    per = {str(n): get(r, n, 'engine_peak_rss_mib_median') or {}
           for n in sizes}
    labels = sorted(set(per[str(s1)]) | set(per[str(s2)]))
    f['engine_peak_rss_mib'][r] = {
        k: {str(n): per[str(n)].get(k) for n in sizes} for k in labels}
    f['engine_peak_rss_ratio'][r] = {
        k: _ratio(per[str(s2)].get(k), per[str(s1)].get(k)) for k in labels}
    f['engine_job_seconds'][r] = {str(n): get(r, n, 'engine_job_seconds_median')
                                  for n in sizes}
  targets = []
  if 'flink' in runners and 'direct' in runners:
    value = f['steady_state_over_direct']['flink']
    targets.append({'target': f'Flink steady state >= '
                              f'{FLINK_STEADY_TARGET:g}x the DirectRunner\'s',
                    'key': 'steady', 'runner': 'flink', 'value': value,
                    'met': value is not None and value >= FLINK_STEADY_TARGET})
  for r in runners:
    for label, value in f['engine_peak_rss_ratio'].get(r, {}).items():
      targets.append({'target': f'{r} {label} peak RSS {s2:,}/{s1:,} <= '
                                f'{MEMORY_TARGET:g}x',
                      'key': 'memory', 'runner': r, 'label': label,
                      'value': value,
                      'met': value is not None and value <= MEMORY_TARGET})
  return {'figures': f, 'targets': targets}
