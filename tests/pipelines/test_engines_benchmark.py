"""benchmarks/engines_benchmark.py's pure parts (in its engine_*.py
modules): the commands it runs per runner, how it finds an engine's
processes in the process table and what its sampler counts, where a job's
time went (Flink's REST view, the Spark job server's log), the figures and
targets, and when it publishes. No cluster, no run, nothing timed."""

import os
import sys

import pytest

import repo

sys.path.insert(0, os.path.join(repo.ROOT, 'benchmarks'))
# pylint: disable=g-import-not-at-top,wrong-import-position
import engine_clusters
import engine_figures
import engine_jobs
import engine_processes
import engine_report
import engines_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position

OURS = [sys.executable, '-m', 'pipelines.preprocess', '--input', 'IN',
        '--output', 'OUT', '--overwrite']


def test_direct_is_ours_with_its_own_output():
  assert engine_clusters.runner_command(
      'direct', OURS, 'OUT_direct', 'job') == (
          OURS[:5] + ['--output', 'OUT_direct', '--overwrite'])


def test_flink_goes_through_run_flink_with_two_slots_and_a_job_name():
  cmd = engine_clusters.runner_command('flink', OURS, 'OUT_flink', 'the-job')
  assert cmd[0] == os.path.join(repo.ROOT, 'run_flink.sh')
  assert cmd[cmd.index('--output') + 1] == 'OUT_flink'
  assert cmd[cmd.index('--job_name') + 1] == 'the-job'
  assert cmd[-8:] == ['--job_endpoint', 'localhost:8099', '--environment',
                      'EXTERNAL', '--environment_config', 'localhost:8096',
                      '--parallelism', '2']


@pytest.mark.parametrize('via, first, env_flag', [
    ('preprocess', sys.executable, '--environment_type'),
    ('run_spark', os.path.join(repo.ROOT, 'run_spark.sh'), '--environment'),
])
def test_spark_command_switches_in_one_place(via, first, env_flag):
  cmd = engine_clusters.runner_command('spark', OURS, 'OUT_spark', 'j',
                                       spark_via=via)
  assert cmd[0] == first
  assert cmd[cmd.index('--job_endpoint') + 1] == 'localhost:8199'
  assert cmd[cmd.index(env_flag) + 1] == 'EXTERNAL'
  assert cmd[cmd.index('--environment_config') + 1] == 'localhost:8196'
  # The cache of SDK workers: set here, or by run_spark.sh itself.
  assert (via == 'preprocess') == (
      '--environment_cache_millis=86400000' in cmd)


def test_only_preprocess_commands_are_turned_into_engine_runs():
  with pytest.raises(ValueError):
    engine_clusters.runner_command('flink', ['python', 'baseline.py'], 'O',
                                   'j')
  with pytest.raises(ValueError):
    engine_clusters.runner_command('dataflow', OURS, 'O', 'j')


def test_descendants_follow_the_parent_pids():
  # pid: (ppid, rss, cpu, start)
  table = {1: (0, 0, 0, 0), 10: (1, 0, 0, 0), 11: (10, 0, 0, 0),
           12: (11, 0, 0, 0), 20: (1, 0, 0, 0)}
  assert sorted(engine_processes.descendants(table, [10])) == [11, 12]
  assert engine_processes.descendants(table, [12]) == []
  assert sorted(engine_processes.descendants(table, [10, 20])) == [11, 12]


def test_pid_files_name_only_live_processes_that_are_ours(tmp_path):
  path = tmp_path / 'x.pid'
  path.write_text(f'{os.getpid()}\n999999999\n')
  assert engine_processes.pid_file_pids(str(path), 'python') == [os.getpid()]
  assert engine_processes.pid_file_pids(str(path), 'TaskManagerRunner') == []
  assert engine_processes.pid_file_pids(str(tmp_path / 'missing.pid'),
                                        'x') == []


def test_sampler_counts_the_cpu_cluster_processes_used_while_sampled(
    monkeypatch):
  # pid: (ppid, rss KiB, CPU seconds, start time); one table per look.
  tables = iter([
      {1: (0, 100, 5.0, 10.0)},  # when the sampler is made
      {1: (0, 100, 6.0, 10.0), 2: (1, 300, 0.5, 20.0)},
      {1: (0, 200, 7.5, 10.0), 2: (1, 250, 2.0, 20.0)},
      {1: (0, 200, 7.5, 10.0), 2: (1, 400, 0.4, 30.0)},  # 2 reused
  ])
  monkeypatch.setattr(engine_processes, 'process_table',
                      lambda: next(tables))
  sampler = engine_processes.EngineSampler('flink')
  sampler.find = lambda table: {'cluster': list(table),
                                engine_processes.SDK: [2] if 2 in table else []}
  for _ in range(3):
    sampler.sample()
  got = sampler.result()
  # 1 ran before: from its first sample (6.0 -> 7.5); 2 started meanwhile,
  # from 0, and so did the later process with its pid.
  assert got['cpu_seconds'] == pytest.approx(1.5 + 2.0 + 0.4)
  assert got['peak_rss_kib'] == {engine_processes.SDK: 400}
  assert got['rss_at_start_kib'] == {engine_processes.SDK: 300}


def test_flink_job_summary_keeps_the_longest_vertices():
  job = {'jid': 'j1', 'name': 'n', 'state': 'FINISHED', 'duration': 12500,
         'vertices': [{'name': f'v{i}', 'duration': i * 1000}
                      for i in range(8)] + [{'name': 'x' * 200,
                                             'duration': 500}]}
  s = engine_jobs.flink_job_summary(job)
  assert s['seconds'] == 12.5 and s['vertices'] == 9
  assert [v['name'] for v in s['top']] == ['v7', 'v6', 'v5', 'v4', 'v3']
  assert s['top'][0]['seconds'] == 7.0
  assert len(engine_jobs.top_steps([('x' * 200, 1.0)])[0]['name']) == 120


SPARK_LOG = """\
26/11/26 15:11:58 INFO SparkJobInvoker: Invoking job other_1
26/11/26 15:12:19 INFO DAGScheduler: ShuffleMapStage 0 (a) finished in 9.0 s
26/11/26 15:16:12 INFO SparkJobInvoker: Invoking job mine_4eec-1
26/11/26 15:16:20 INFO DAGScheduler: ShuffleMapStage 3 (repartition at G.java:213) finished in 3.5 s
26/11/26 15:16:24 INFO DAGScheduler: ResultStage 4 (collect at B.java:80) finished in 1.25 s
26/11/26 15:16:24 INFO DAGScheduler: Job 2 finished: collect at B.java:80, took 4.8 s
26/11/26 15:16:30 INFO DAGScheduler: Job 3 finished: foreach at B.java:128, took 0.2 s
26/11/26 15:16:31 INFO SparkPipelineRunner: Job mine_4eec-1 finished.
26/11/26 15:16:40 INFO DAGScheduler: ResultStage 9 (late) finished in 50.0 s
"""


def test_spark_job_summary_reads_only_the_named_job():
  s = engine_jobs.spark_job_summary(SPARK_LOG.splitlines(), 'mine')
  assert s['seconds'] == 19.0
  assert s['spark_jobs'] == 2 and s['spark_jobs_seconds'] == 5.0
  assert s['stages'] == 2
  assert s['top'][0] == {'name': 'ShuffleMapStage 3 (repartition at '
                                 'G.java:213)', 'seconds': 3.5}
  assert 'error' in engine_jobs.spark_job_summary(SPARK_LOG.splitlines(),
                                                  'absent')


def test_steady_rate_needs_size_two_to_take_longer():
  assert engine_figures.steady_rate(100, 300, 10.0, 20.0) == 20.0
  assert engine_figures.steady_rate(100, 300, 10.0, 10.0) is None
  assert engine_figures.steady_rate(100, 300, None, 10.0) is None


def _summary(sizes, tiny):
  """A summarize()-like dict: direct twice as fast as flink at steady
  state; Flink's TaskManager 2 grows 1.5x, spark's executors stay flat."""
  seconds = {'direct': {tiny: 5, sizes[0]: 10, sizes[1]: 20},
             'flink': {tiny: 20, sizes[0]: 30, sizes[1]: 45},
             'spark': {tiny: 25, sizes[0]: 40, sizes[1]: 80}}
  out = {}
  for r, by_n in seconds.items():
    for n, t in by_n.items():
      row = {'seconds_median': t, 'peak_rss_mib_median': 800.0,
             'tree_rss_mib_sampled_max': 900.0,
             'cpu_utilization_median': 1.5, 'other_load_share_max': 0.01}
      if r in engine_clusters.ENGINES:
        grow = 1.5 if (r == 'flink' and n == sizes[1]) else 1.0
        kind = engine_processes.WORKER_JVM[r]
        row.update({'engine_peak_rss_mib_median': {
            f'{kind} 1': 1000.0, f'{kind} 2': 1000.0 * grow,
            engine_processes.SDK: 500.0}, 'engine_job_seconds_median': t - 10,
                    'cores_busy_median': 1.8})
      out[f'{r}@{n}'] = row
  return out


def test_figures_and_targets():
  sizes, tiny = (1000, 3000), 10
  got = engine_figures.figures(_summary(sizes, tiny),
                               list(engine_clusters.RUNNERS), sizes, tiny,
                               'rows')
  f = got['figures']
  assert f['steady_state_per_second']['direct'] == 200.0
  assert f['steady_state_over_direct']['flink'] == pytest.approx(2 / 3)
  assert f['steady_state_over_direct']['spark'] == 0.25
  assert f['engine_peak_rss_ratio']['flink']['TaskManager 2'] == 1.5
  targets = {(t['key'], t['runner'], t.get('label')): t['met']
             for t in got['targets']}
  assert targets[('steady', 'flink', None)] is False
  assert targets[('memory', 'flink', 'TaskManager 1')] is True
  assert targets[('memory', 'flink', 'TaskManager 2')] is False
  assert targets[('memory', 'spark', 'executor 2')] is True
  assert targets[('memory', 'spark', engine_processes.SDK)] is True
  # No target on Spark's speed, none on the DirectRunner's memory.
  assert not any(t['key'] == 'steady' and t['runner'] == 'spark'
                 for t in got['targets'])
  assert not any(t['runner'] == 'direct' for t in got['targets'])


def test_table_puts_taskmanager_and_executor_n_on_one_row():
  sizes, tiny = (1000, 3000), 10
  result = {'unit': 'rows', 'runners': list(engine_clusters.RUNNERS),
            'tiny': tiny, 'sizes': list(sizes), 'record_problems': []}
  result.update(engine_figures.figures(_summary(sizes, tiny),
                                       result['runners'], sizes, tiny,
                                       'rows'))
  rows = {row[0]: row for row in engine_report.table_rows(result)}
  row = rows['peak RSS MiB, TaskManager / executor 2, 1,000 / 3,000']
  assert row[1:] == ('', '1,000 / 1,500 (1.50x)', '1,000 / 1,000 (1.00x)',
                     '<= 1.1x', 'flink MISS, spark PASS')
  assert 'peak RSS MiB, SDK workers (largest), 1,000 / 3,000' in rows
  steady = rows["steady state / the DirectRunner's"]
  assert steady[1:4] == ('1.00x', '0.67x', '0.25x') and steady[-1] == 'MISS'
  assert all(len(r) == len(engine_report.header(result))
             for r in rows.values())


@pytest.mark.parametrize('argv, want', [
    ([], True),
    (['--repeats', '5'], True),
    (['--repeats', '1'], False),
    (['--modalities', 'image'], False),
    (['--runners', 'direct,flink'], False),
    (['--image-sizes', '200,400'], False),
    (['--text-tiny', '50'], False),
    (['--no-warmup'], False),
])
def test_publishes_only_its_default_run(argv, want):
  args = engines_benchmark.parse_args(argv)
  assert engines_benchmark.published(args, args.modality_names,
                                     args.runner_names) == want
