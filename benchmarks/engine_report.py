"""engines_benchmark.py's tables: printed per modality as the runs end,
and as the markdown of the `engines` section of benchmarks/RESULTS.md.
"""

import os
import sys

# The modules beside this one, also when imported from elsewhere than
# this folder.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# pylint: disable=g-import-not-at-top,wrong-import-position
import all_modalities
import engine_clusters
import engine_figures
import engine_processes
import harness
# pylint: enable=g-import-not-at-top,wrong-import-position

# The cells of the tables, as all_modalities draws them.
_f = all_modalities.figure_text
_verdict = all_modalities.verdict


def table_rows(result):
  """[(figure, one cell per runner..., target, met)] as text."""
  f, unit, runners = result['figures'], result['unit'], result['runners']
  tiny, (s1, s2) = result['tiny'], result['sizes']
  targets = result['targets']

  def each(fn):
    return tuple(fn(r) for r in runners)

  rows = [(f'fixed cost: seconds, {tiny:,} {unit}',
           *each(lambda r: _f(f['fixed_seconds'][r], '.1f')), '', '')]
  for n in (s1, s2):
    rows.append((f'seconds, {n:,} {unit}',
                 *each(lambda r, n=n: _f(f['seconds'][r][str(n)], '.1f')),
                 '', ''))
  rows.append((f'steady state, {unit}/s ({s1:,} -> {s2:,})',
               *each(lambda r: _f(f['steady_state_per_second'][r], ',.0f',
                                  missing='n/a')), '', ''))
  steady = [t for t in targets if t['key'] == 'steady']
  rows.append(('steady state / the DirectRunner\'s',
               *each(lambda r: _f(f['steady_state_over_direct'][r], '.2f',
                                  'x', missing='n/a')),
               steady[0]['target'] if steady else '',
               _verdict(steady[0]['met']) if steady else ''))
  rows.append((f'job seconds on the engine, {s1:,} / {s2:,}',
               *each(lambda r: ' / '.join(
                   _f(f['engine_job_seconds'][r][str(n)], '.1f')
                   for n in (s1, s2)) if r in engine_clusters.ENGINES
                   else ''), '', ''))

  rows.append((f'peak RSS MiB of the launching process, {s1:,} / {s2:,} '
               f'(size2/size1)',
               *each(lambda r: _mib(f['launcher_peak_rss_mib'][r],
                                    f['launcher_peak_rss_ratio'][r],
                                    (s1, s2))), '', ''))
  rows += _engine_memory_rows(result)
  rows.append((f'CPU cores busy (launcher + cluster), {s1:,} / {s2:,}',
               *each(lambda r: ' / '.join(_f(f['cores_busy'][r][str(n)],
                                             '.2f') for n in (s1, s2))),
               '', ''))
  rows.append(('other load (max share of CPUs, noise)',
               *each(lambda r: _f(f['other_load_share_max'][r], '.0%')),
               '', ''))

  rows.append(('record counts',
               *each(lambda r: all_modalities.records_cell(result, r)), '',
               ''))
  return rows


def _mib(peaks, ratio, sizes):
  """'1,000 / 1,500 (1.50x)': peak RSS MiB at both sizes, and their ratio."""
  s1, s2 = sizes
  return (f'{_f(peaks[str(s1)], ",.0f")} / {_f(peaks[str(s2)], ",.0f")} '
          f'({_f(ratio, ".2f", "x")})')


def _engine_memory_rows(result):
  """table_rows' rows of the engines' processes' peak RSS.

  TaskManager N and executor N share a row (the N-th engine JVM), as do
  the SDK workers of both.
  """
  f, runners, targets = result['figures'], result['runners'], result['targets']
  s1, s2 = result['sizes']
  keys = sorted({_row_key(k) for r in engine_clusters.ENGINES if r in runners
                 for k in f['engine_peak_rss_mib'][r]},
                key=lambda k: (k == engine_processes.SDK, k))
  rows = []
  for key in keys:

    def label_of(r, key=key):
      if r not in engine_clusters.ENGINES:
        return None
      return next((k for k in f['engine_peak_rss_mib'][r]
                   if _row_key(k) == key), None)

    def cell(r):
      label = label_of(r)
      if label is None:
        return ''
      return _mib(f['engine_peak_rss_mib'][r][label],
                  f['engine_peak_rss_ratio'][r][label], (s1, s2))

    mem = {t['runner']: t for t in targets if t['key'] == 'memory' and
           t['label'] == label_of(t['runner'])}
    shown = ('SDK workers (largest)' if key == engine_processes.SDK else
             f'{engine_processes.WORKER_JVM["flink"]} / '
             f'{engine_processes.WORKER_JVM["spark"]} {key}')
    rows.append((f'peak RSS MiB, {shown}, {s1:,} / {s2:,}',
                 *(cell(r) for r in runners),
                 f'<= {engine_figures.MEMORY_TARGET:g}x' if mem else '',
                 ', '.join(f'{r} {_verdict(mem[r]["met"])}'
                           for r in runners if r in mem)))
  return rows


def _row_key(label):
  """'TaskManager 2' and 'executor 2' -> '2'; the SDK workers -> SDK."""
  return (engine_processes.SDK if label == engine_processes.SDK
          else label.split()[-1])


def header(result):
  return ('figure',) + tuple(result['runners']) + ('target', 'met')


def print_table(result):
  """The modality's table as aligned text, then its record problems."""
  head = header(result)
  rows = [head] + table_rows(result)
  widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
  print()
  print(f'{result["modality"]}: ours on {", ".join(result["runners"])}, '
        f'{result["repeats"]} repeat(s)')
  n = len(head)
  for i, row in enumerate(rows):
    print('  '.join(c.ljust(w) if j == 0 or j >= n - 2 else c.rjust(w)
                    for j, (c, w) in enumerate(zip(row, widths))).rstrip())
    if i == 0:
      print('-' * (sum(widths) + 2 * (len(widths) - 1)))
  harness.print_problems(result['record_problems'])


def print_targets(results):
  """Every modality's targets, met or missed, with their values."""
  all_modalities.print_targets(
      results, lambda t, r: _f(t['value'], '.2f', 'x', missing='n/a'))


def describe_clusters(clusters):
  """One line per engine: how its cluster's start was handled."""
  out = []
  for engine, c in clusters.items():
    if c['started']:
      out.append(f'{engine}: not running before; this benchmark started it '
                 f'in {c["start_seconds"]:.1f} s (not part of any run) and '
                 f'{"stopped" if c.get("stopped") else "stops"} it at the '
                 'end')
    else:
      out.append(f'{engine}: already running; used as it was, not started '
                 'or stopped by this benchmark (start time not measured)')
  return out


def markdown_tables(results, clusters, repeats, warmup):
  """How the figures are computed, the clusters, one table per modality."""
  other = max((max(r['figures']['other_load_share_max'].values())
               for r in results), default=0.0)
  lines = [
      ('Every figure is from one run' if repeats == 1 else
       f'Every figure is the median of {repeats} repeats') +
      ' of each command, interleaved over the runners and sizes, each a '
      'whole process with start-up' +
      (', after one unmeasured run of each runner at the tiny size. '
       if warmup else ' (no warm-up run). ') +
      'Flink: run_flink.sh on 2 TaskManagers (1 slot each, parallelism 2); '
      'Spark: the PortableRunner on 2 workers (1 core each); both with the '
      'SDK workers of an EXTERNAL worker pool. Steady state = (size2 - '
      'size1) / (t(size2) - t(size1)). Job seconds: Flink\'s REST duration '
      'of the job, or the Spark job server log\'s (invoke to finished). '
      'Peak RSS of the launching process is that of the largest process of '
      'the command (for the DirectRunner: the run); of a TaskManager or '
      'executor, its JVM; of the SDK workers, the largest of them (all '
      'sampled from /proc every 0.2 s); in parentheses size2/size1. '
      'TaskManagers live across runs (their RSS carries over), executors '
      'start with each run. Other load excludes the clusters\' own CPU. '
      'PASS/MISS is information, not an exit code.',
      '', 'Clusters:', '']
  lines += [f'- {line}' for line in describe_clusters(clusters)]
  if other > 0.1:
    lines += ['', f'Other processes used up to {other:.0%} of the CPUs '
              'during these runs: the figures are noisy.']
  for r in results:
    head = header(r)
    lines += ['', f'### {all_modalities.MODALITIES[r["modality"]].title}', '',
              '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    lines += ['| ' + ' | '.join(row) + ' |' for row in table_rows(r)]
    if r['record_problems']:
      lines += ['', 'Wrong record counts:', '']
      lines += [f'- {p}' for p in r['record_problems']]
  return '\n'.join(lines) + '\n'
