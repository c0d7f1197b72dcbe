"""Where the project reaches into Apache Beam's internals, in one place.

Each function below changes or reads something Beam does not offer as an
option, says why, and names the Beam code it depends on. They were written
for Beam PINNED; tests/compat/test_pins.py fails when another Beam is
installed and one of the objects in FINGERPRINTS changed, so that an
upgrade starts here: check each function against the new code, then
record the new fingerprints and pin.

  cache_dofn_introspection()   DoFn introspection done once per DoFn
  disable_timed_flush()        no timed flush in the local data plane
  fn_api_runner(options)       the DirectRunner's FnApiRunner, no Prism
  no_gcs_credentials()         anonymous GCS clients for an emulator
  dataflow_environment_version()  for a Dataflow --dry_run description
  argument_parser_class()      Beam's ArgumentParser, for options classes
  declare_every_option(parser) every options class's flags, as Beam's own
"""

import argparse
import logging
import threading
import types
import weakref

import apache_beam
from apache_beam.transforms import core
from apache_beam.transforms import userstate

from transforms import compat

_LOG = logging.getLogger(__name__)

# The Beam release (major.minor) the functions here were written for.
PINNED = '2.77'
# The Beam objects they patch or read, by dotted name, and the SHA-256 of
# their source at PINNED (tests/compat/test_pins.py computes and compares
# them when another Beam is installed).
FINGERPRINTS = {
    'apache_beam.transforms.userstate.get_dofn_specs':
        'd2b5b83c064126928477914d0bb01b19463362436f3a3b49f18212fe68f791b4',
    'apache_beam.transforms.core.get_function_args_defaults':
        '3f4f0b046cd4da2ec0714d18cdd70dfc75f6c305b7f5fa30731d284404339bb3',
    # Read DATA_BUFFER_TIME_LIMIT_MS.
    'apache_beam.runners.portability.fn_api_runner.worker_handlers.'
    'GrpcServer.__init__':
        '355ff61d02f963c3547f9f4293579f71086afd41ba5e2cb8137594aa1b8eab54',
    'apache_beam.runners.portability.fn_api_runner.worker_handlers.'
    'EmbeddedGrpcWorkerHandler.__init__':
        '12cbf6ab55bfa21564da92a0b104bc7f524f9587046234b8bc08dd8a2c15726d',
    'apache_beam.runners.direct.direct_runner.'
    'SwitchingDirectRunner.run_pipeline':
        'b9273c06e37f39b4dcd8f95ce5e73c80fe9b8adf9e7f3b19cd18f1564ca600f9',
    'apache_beam.internal.gcp.auth._Credentials':
        '2c41658108437cb4cc313c14112f4f4a61f8f4b7a1f49799a7027679c47f7823',
    'apache_beam.runners.dataflow.internal.apiclient.Environment.__init__':
        '770973fab4af2d811773f3f8b481b239c0ff001daeaf0c264fb83fdcc0695e8d',
    # How Beam's parser collects the options classes' flags, and the
    # parser class they are declared on.
    'apache_beam.options.pipeline_options.PipelineOptions.get_all_options':
        '7f8f069407e782867e039d03179846520dc886f89db5d191307c1b9f04d7cb10',
    'apache_beam.options.pipeline_options._BeamArgumentParser':
        '43e7c093c5ab87fbc66516677bb9bf2b37bc92050544707aaaa057f551fd20c5',
}


def pinned() -> bool:
  """Whether the installed Beam is the one the functions here were
  written for (logs a warning once if not: they may no longer hold)."""
  return compat.check_release('Beam', apache_beam.__version__, PINNED,
                              'transforms/compat/beam.py')

_PLAIN = userstate.get_dofn_specs
_SPECS = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
_PLAIN_ARGS = core.get_function_args_defaults
# (arguments, defaults) per function: of the function itself, and of the
# function bound to an object (without its first argument).
_ARGS = {False: weakref.WeakKeyDictionary(), True: weakref.WeakKeyDictionary()}


def get_dofn_specs(dofn):
  """userstate.get_dofn_specs(dofn), computed once per DoFn object."""
  try:
    with _LOCK:
      found = _SPECS.get(dofn)
  except TypeError:  # not hashable, or not weakly referenceable
    return _PLAIN(dofn)
  if found is None:
    found = _PLAIN(dofn)
    try:
      with _LOCK:
        _SPECS[dofn] = found
    except TypeError:
      pass
  states, timers = found
  return set(states), set(timers)


def get_function_args_defaults(f):
  """core.get_function_args_defaults(f), computed once per function."""
  bound = isinstance(f, types.MethodType)
  func = f.__func__ if bound else f
  if not isinstance(func, types.FunctionType):
    return _PLAIN_ARGS(f)
  with _LOCK:
    found = _ARGS[bound].get(func)
  if found is None:
    found = _PLAIN_ARGS(f)
    with _LOCK:
      _ARGS[bound][func] = found
  args, defaults = found
  return list(args), list(defaults)


def cache_dofn_introspection() -> None:
  """Makes Beam's introspection of DoFns in this process go through
  get_dofn_specs and get_function_args_defaults (every caller looks them
  up on their module each time).

  Beam asks whether a DoFn uses state or timers (`userstate.
  get_dofn_specs`) each time it applies, translates, validates or sets up
  a ParDo, five to fifteen times per DoFn, taking `inspect.signature` of
  each of its methods; and the local runner asks for the arguments of
  every method of each stage's unpickled DoFns again (`core.
  get_function_args_defaults`). Together about a second of every run's
  fixed cost. The answers depend only on the DoFn's methods, which do not
  change once it exists, so they are kept per DoFn object and per function
  (weakly); what Beam cannot hash or refer to weakly, and any error, is
  left to Beam's own function. Only the launching process is changed (the
  DirectRunner's workers are its threads).
  """
  userstate.get_dofn_specs = get_dofn_specs
  core.get_function_args_defaults = get_function_args_defaults


def disable_timed_flush() -> bool:
  """Stops the local runner's data plane from flushing on a timer.

  Beam 2.77's DirectRunner in multi_threading (and multi_processing) mode
  gives every output stream of a bundle a thread that flushes it once a
  second without a lock against the bundle thread writing to it; what the
  bundle writes during a flush is lost, or a record is cut in two
  (tests/pipelines/test_local_runner.py shows it on a plain Beam
  pipeline). With no time limit the streams flush only when 10 MB are
  buffered or the bundle ends, both on the bundle's own thread. The limit
  is a module constant, `worker_handlers.DATA_BUFFER_TIME_LIMIT_MS`, not
  an option; it is set only where it exists.

  Returns:
    Whether the limit exists (and is now 0).
  """
  pinned()
  from apache_beam.runners.portability.fn_api_runner import worker_handlers  # pylint: disable=import-outside-toplevel
  if not hasattr(worker_handlers, 'DATA_BUFFER_TIME_LIMIT_MS'):
    _LOG.warning('this Beam version has no DATA_BUFFER_TIME_LIMIT_MS; the '
                 'DirectRunner\'s timed flush could not be turned off')
    return False
  worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0
  return True


def fn_api_runner(options):
  """Beam's FnApiRunner for `options`, made as the DirectRunner makes it
  for a batch pipeline it supports (DirectRunner.run_pipeline).

  Beam 2.77's DirectRunner first tries its Prism runner: it translates the
  whole pipeline for it (about 1.5 s for ours), then downloads the Prism
  binary from GitHub at run time, and only where that fails (as on a
  machine without internet access) falls back to the FnApiRunner. Where
  the download works, a local run would run on another runner than the
  one this project is tested with.
  """
  pinned()
  # pylint: disable=import-outside-toplevel
  from apache_beam.portability.api import beam_provision_api_pb2
  from apache_beam.runners.portability.fn_api_runner import fn_runner
  from apache_beam.runners.portability.portable_runner import JobServiceHandle
  # pylint: enable=import-outside-toplevel
  encoded = JobServiceHandle.encode_pipeline_options(
      options.get_all_options())
  return fn_runner.FnApiRunner(provision_info=fn_runner.ExtendedProvisionInfo(
      beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)))


def no_gcs_credentials() -> None:
  """Tells Beam's credentials cache (`auth._Credentials`) that there are no
  Google credentials, so that its GCS clients connect anonymously at once.

  Beam asks Google's default credentials for every GCS client and, when
  there are none, retries for about half a minute before it connects
  anonymously; a GCS emulator needs none, and Beam 2.77's --no_auth does
  not reach its GCS client.
  """
  pinned()
  from apache_beam.internal.gcp import auth  # pylint: disable=import-outside-toplevel
  credentials = getattr(auth, '_Credentials', None)
  if credentials is not None:
    with credentials._credentials_lock:  # pylint: disable=protected-access
      credentials._credentials = None  # pylint: disable=protected-access
      credentials._credentials_init = True  # pylint: disable=protected-access


def dataflow_environment_version() -> str:
  """The worker environment version Beam's Dataflow client sends with a
  job (`apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION`, read by
  apiclient.Environment), for a --dry_run's job description."""
  pinned()
  from apache_beam.runners.dataflow.internal import apiclient  # pylint: disable=import-outside-toplevel
  return apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION  # pylint: disable=protected-access


def argument_parser_class():
  """Beam's ArgumentParser (`pipeline_options._BeamArgumentParser`): the
  options classes declare their flags on it, some with its
  add_value_provider_argument. argparse's own where it is gone."""
  pinned()
  from apache_beam.options import pipeline_options  # pylint: disable=import-outside-toplevel
  return getattr(pipeline_options, '_BeamArgumentParser',
                 argparse.ArgumentParser)


def declare_every_option(parser) -> None:
  """Declares on `parser` the flags of every options class imported, as
  Beam's own parser collects them (PipelineOptions.get_all_options: each
  direct subclass of PipelineOptions once, by name, through its
  `_add_argparse_args`).

  A class whose flag `parser` already declares (the command's own flags,
  or another class's) adds none from that flag on: it was declared twice,
  and either declaration is fine.
  """
  pinned()
  from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel
  classes = {}
  for cls in PipelineOptions.__subclasses__():
    classes.setdefault(str(cls), cls)
  for cls in classes.values():
    try:
      cls._add_argparse_args(parser)  # pylint: disable=protected-access
    except argparse.ArgumentError:
      pass
