"""Airflow DAG: build and validate one TFRecord dataset per day.

Uses the Apache Beam provider (`apache-airflow-providers-apache-beam`):
`BeamRunPythonPipelineOperator` runs `python -m pipelines.preprocess` and
then `python -m pipelines.validate` with the day's partition. Airflow
renders `{{ ds }}` (the logical date, YYYY-MM-DD) in `pipeline_options`;
the single braces of `{partition}` are left for the pipeline, which fills
them from `--partition`.

Exit codes: 0 published (or sound); 2 bad invocation; 3 data quality (the
gate refused to publish, or the validator found the dataset unsound); 1
the pipeline failed. Codes 2 and 3 will not change on a retry, so retries
are few; the task log ends with the run's JSON summary.

Set PROJECT_DIR to a checkout of this repository on the workers; its
virtual environment (made by scripts/ensure_venv.sh) has the project
installed, so `python -m pipelines.preprocess` runs from any directory. Or
use `py_requirements` to let the provider build an environment. For Dataflow, set `runner="DataflowRunner"` and add project,
region, temp_location and setup_file to the pipeline options.
"""

import datetime
import os

from airflow import DAG
from airflow.providers.apache.beam.operators.beam import (
    BeamRunPythonPipelineOperator)

PROJECT_DIR = '/opt/tfrecord-pipelines'
PYTHON = os.path.join(PROJECT_DIR, '.venv', 'bin', 'python')
RAW = '/data/raw/reviews/{partition}/*.csv'
DATASET = '/data/datasets/reviews/{partition}'

with DAG(
    dag_id='tfrecord_reviews_daily',
    schedule='0 2 * * *',
    start_date=datetime.datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,  # one run writes one partition at a time
    default_args={'retries': 1,
                  'retry_delay': datetime.timedelta(minutes=10)},
    tags=['tfrecord'],
) as dag:
  preprocess = BeamRunPythonPipelineOperator(
      task_id='preprocess',
      runner='DirectRunner',
      py_file='pipelines.preprocess',
      py_options=['-m'],
      py_interpreter=PYTHON,
      pipeline_options={
          'modality': 'text',
          'input': RAW,
          'output': DATASET,
          'partition': '{{ ds }}',
          'text_column': 'review',
          'label_column': 'stars',
          # A retry of a run that published must not fail on its own
          # dataset: replace it (the result is the same: same input, same
          # options, same fingerprint).
          'overwrite': True,
      },
  )

  check = BeamRunPythonPipelineOperator(
      task_id='validate',
      runner='DirectRunner',
      py_file='pipelines.validate',
      py_options=['-m'],
      py_interpreter=PYTHON,
      pipeline_options={
          'output': '/data/datasets/reviews/{{ ds }}',
      },
  )

  preprocess >> check
