"""options.BeamOptions: Beam's PipelineOptions with each view made once.

Beam asks for a view of the options several times for every transform it
applies; a view parses the command line again. BeamOptions must behave
like PipelineOptions in every way a pipeline sees (values shared by every
view, set through any view, pickled to workers) and parse once per class.
"""

import pickle

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TypeOptions
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from pipelines import options as options_lib

ARGV = ['--runner', 'DirectRunner', '--direct_num_workers', '2',
        '--direct_running_mode', 'in_memory', '--no_pipeline_type_check',
        '--input', '/data/x', '--output', '/data/y']


def test_views_have_the_values_of_plain_pipeline_options():
  ours, plain = options_lib.BeamOptions(ARGV), PipelineOptions(ARGV)
  for cls in (StandardOptions, DirectOptions, TypeOptions,
              options_lib.PreprocessOptions):
    assert (ours.view_as(cls).get_all_options(current_only=True) ==
            plain.view_as(cls).get_all_options(current_only=True)), cls
  assert ours.get_all_options() == plain.get_all_options()
  assert ours.view_as(TypeOptions).pipeline_type_check is False
  assert ours.view_as(options_lib.PreprocessOptions).output == '/data/y'


def test_one_view_per_class_and_a_value_set_anywhere_is_seen_everywhere():
  ours = options_lib.BeamOptions(ARGV)
  direct = ours.view_as(DirectOptions)
  assert ours.view_as(DirectOptions) is direct
  assert ours.view_as(StandardOptions) is not direct
  direct.direct_num_workers = 1
  assert ours.view_as(DirectOptions).direct_num_workers == 1
  assert ours.get_all_options()['direct_num_workers'] == 1
  ours.view_as(StandardOptions).runner = 'SomeRunner'
  assert ours.view_as(StandardOptions).runner == 'SomeRunner'
  assert ours.get_all_options()['runner'] == 'SomeRunner'


def test_pickled_options_carry_values_not_views():
  ours = options_lib.BeamOptions(ARGV)
  ours.view_as(DirectOptions).direct_num_workers = 3
  state = ours.__getstate__()
  assert '_views' not in state
  assert '_views' in ours.__dict__  # the live object keeps its views
  back = pickle.loads(pickle.dumps(ours))
  assert back.view_as(DirectOptions).direct_num_workers == 3
  assert back.view_as(DirectOptions) is back.view_as(DirectOptions)


def _views_made(monkeypatch, options_class, maps: int) -> int:
  """How many views Beam makes (PipelineOptions.view_as runs) while it
  builds and runs a pipeline of `maps` Maps with options_class options."""
  made = []
  plain_view_as = PipelineOptions.view_as

  def counted(self, cls):
    made.append(cls)
    return plain_view_as(self, cls)

  monkeypatch.setattr(PipelineOptions, 'view_as', counted)
  with beam.Pipeline(options=options_class(['--runner', 'DirectRunner'])
                     ) as p:
    out = p | beam.Create(range(10))
    for i in range(maps):
      out = out | f'Add{i}' >> beam.Map(lambda x: x + 1)
    assert_that(out, equal_to([x + maps for x in range(10)]))
  monkeypatch.undo()
  return len(made)


def test_views_made_do_not_grow_with_the_pipeline(monkeypatch):
  # Plain options make views for every transform; ours as many for a
  # pipeline of 40 transforms as for one of 2 (the views that are made are
  # those of view objects and of the runner's own copies).
  plain = [_views_made(monkeypatch, PipelineOptions, n) for n in (2, 40)]
  ours = [_views_made(monkeypatch, options_lib.BeamOptions, n)
          for n in (2, 40)]
  assert plain[1] > plain[0] + 38
  assert ours[1] == ours[0]
  assert ours[1] < plain[1] / 4
