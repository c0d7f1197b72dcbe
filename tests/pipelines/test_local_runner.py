"""The DirectRunner's timed-flush race, and our guard against it.

In Beam 2.77's multi_threading mode a thread flushes each bundle's output
stream once a second without a lock, so elements written during a flush
can be lost (or cut in two). `compat/beam.disable_timed_flush` turns the
timer off. The test fans one element out to many keyed elements in a
single long bundle (several seconds, longer than the 1 s timer), groups and
counts them, in multi_threading mode, with Python switching threads every
10 microseconds so that a flush meets a write often. Without the guard
that loses elements in most runs (checked by hand with GUARD=0 below);
with it, none may be lost.

It runs in a child process with its address space capped: a cut record can
make the runner decode a huge length and exhaust memory, which must end as
a failed test, not as a machine out of memory.
"""

import os
import subprocess
import sys
import textwrap
import repo

N = 200_000

CHILD = textwrap.dedent('''
    import os, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
    import apache_beam as beam
    import numpy as np
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.options.pipeline_options import PipelineOptions
    from pipelines import runner_setup

    N = int(sys.argv[1])

    def fan_out(seed):
      # Dicts holding small arrays, with some work each: a slow bundle.
      rng = np.random.default_rng(seed)
      for i in range(N):
        x = rng.standard_normal(16)
        yield i % 1000, {'i': i, 'x': x, 's': float(x.sum())}

    def count(kv):
      Metrics.counter('t', 'grouped').inc(sum(1 for _ in kv[1]))

    argv = ['--direct_running_mode', 'multi_threading',
            '--direct_num_workers', '1']
    options = PipelineOptions(argv)
    if os.environ.get('GUARD', '1') == '1':
      runner_setup.apply_local_defaults(options, argv)
    sys.setswitchinterval(1e-5)
    p = beam.Pipeline(options=options)
    _ = (p | beam.Create([0]) | beam.FlatMap(fan_out) | beam.GroupByKey()
         | beam.Map(count))
    result = p.run()
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name('grouped'))
    print('GROUPED', sum(c.committed for c in counters['counters']))
''')


def run_child(guard: bool) -> subprocess.CompletedProcess:
  root = repo.ROOT
  env = dict(os.environ, PYTHONPATH=root, GUARD='1' if guard else '0')
  return subprocess.run([sys.executable, '-c', CHILD, str(N)], env=env,
                        capture_output=True, text=True, timeout=600,
                        check=False)


def test_no_element_is_lost_in_multi_threading_mode():
  result = run_child(guard=True)
  assert result.returncode == 0, result.stderr[-2000:]
  grouped = [line for line in result.stdout.splitlines()
             if line.startswith('GROUPED')]
  assert grouped == [f'GROUPED {N}'], result.stdout[-2000:]


if __name__ == '__main__':
  # python tests/test_local_runner.py [guard|noguard]
  outcome = run_child(guard=sys.argv[1:] != ['noguard'])
  print(outcome.returncode, outcome.stdout.strip()[-200:],
        outcome.stderr.strip()[-300:])


def test_a_local_run_goes_straight_to_the_fn_api_runner(caplog):
  # Beam's DirectRunner would first translate the pipeline for its Prism
  # runner and try to download the Prism binary; ours runs the FnApiRunner
  # it would fall back to, with the options the DirectRunner gives it.
  import logging  # pylint: disable=import-outside-toplevel
  import apache_beam as beam  # pylint: disable=import-outside-toplevel
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel
  from apache_beam.runners.portability.fn_api_runner import fn_runner  # pylint: disable=import-outside-toplevel
  from apache_beam.testing.util import assert_that, equal_to  # pylint: disable=import-outside-toplevel
  from pipelines import runner_setup  # pylint: disable=import-outside-toplevel
  options = PipelineOptions(['--direct_num_workers', '2',
                             '--direct_running_mode', 'multi_threading'])
  runner = runner_setup.local_runner(options)
  assert isinstance(runner, fn_runner.FnApiRunner)
  assert runner_setup.local_runner(PipelineOptions(
      ['--runner', 'DataflowRunner'])) is None
  caplog.set_level(logging.INFO)
  with beam.Pipeline(runner=runner, options=options) as p:
    assert_that(p | beam.Create(range(100)) | beam.Map(lambda x: x * 2),
                equal_to([x * 2 for x in range(100)]))
  assert 'Prism' not in caplog.text
  # What the same pipeline logs through Beam's DirectRunner: the check
  # above can see the attempt.
  caplog.clear()
  with beam.Pipeline(options=options) as p:
    assert_that(p | beam.Create(range(3)), equal_to([0, 1, 2]))
  assert 'PrismRunner' in caplog.text
