"""The HTML validation report, rendered in headless Chromium.

Chromium (Debian's package) is installed by .ci/run where missing; without
it these tests are skipped outside CI and fail in CI.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

import imagegen
import sensorgen
from pipelines import preprocess
from pipelines import validate
from transforms.validation import html_report

CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get('CI'),
    reason='chromium is not installed (.ci/run installs it)')

# The flags that keep Chromium from reaching for the network it does not
# have here, and let it run as root in a container.
FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
         '--no-first-run', '--disable-background-networking',
         '--disable-component-update', '--disable-sync',
         '--virtual-time-budget=5000']


def _dom(page, tmp_path):
  assert CHROMIUM, 'chromium is not installed (.ci/run installs it)'
  profile = tmp_path / 'chromium-profile'
  proc = subprocess.run(
      [CHROMIUM] + FLAGS + [f'--user-data-dir={profile}', '--dump-dom',
                            page.as_uri()],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  return proc.stdout


def _body(dom):
  tag = re.search(r'<body([^>]*)>', dom).group(1)
  return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', tag))


def _no_outside_references(page):
  text = page.read_text(encoding='utf-8')
  # Only the SVG namespace names a URL; nothing is fetched from anywhere.
  refs = re.findall(r'(?:src|href|url)\s*[=(]\s*["\']?([a-z]+:)?//', text)
  assert refs == [], refs
  assert 'xmlns="http://www.w3.org/2000/svg"' in text


@pytest.fixture(scope='module')
def image_dataset(tmp_path_factory):
  root = tmp_path_factory.mktemp('html_image')
  imagegen.write_good_images(str(root / 'in'))
  out = root / 'out'
  preprocess.run(['--input', str(root / 'in'), '--output', str(out),
                  '--image_size', '48x48', '--rebalance', 'oversample',
                  '--max_bad_fraction', '0.5'])
  return out


@needs_chromium
def test_image_report_loads_with_verdict_samples_and_charts(image_dataset,
                                                            tmp_path):
  assert validate.main(['--output', str(image_dataset)]) == 0
  page = image_dataset / 'validation_report.html'
  _no_outside_references(page)
  dom = _dom(page, tmp_path)
  body = _body(dom)
  assert body['rendered'] == 'ok' and body['errors'] == '0'
  # A sample grid per class, every thumbnail decoded by the browser.
  report = json.loads((image_dataset / 'validation_report.json').read_text())
  shown = sum(len(v) for v in report['splits']['train']['samples'].values())
  assert int(body['images']) == shown >= 3
  assert body['images-decoded'] == body['images']
  verdict = re.search(r'<span class="verdict ([a-z]+)" id="verdict">(\w+)<',
                      dom)
  assert verdict.groups() == ('pass', 'PASS')
  assert dom.index('id="verdict"') < dom.index('Classes per split')
  assert 'before rebalancing' in dom and 'after rebalancing' in dom
  assert 'Sample images per class' in dom
  assert 'chat noir é' in dom
  assert 'bytes per shard' in dom and '<svg' in dom


@needs_chromium
def test_failed_checks_come_first_naming_the_file(image_dataset, tmp_path):
  broken = tmp_path / 'broken'
  shutil.copytree(image_dataset, broken)
  shard = sorted(broken.glob('run-*/*-train.tfrecord-*'))[0]
  data = bytearray(shard.read_bytes())
  data[len(data) // 2] ^= 0xFF
  shard.write_bytes(bytes(data))
  assert validate.main(['--output', str(broken)]) == validate.EXIT_UNSOUND
  dom = _dom(broken / 'validation_report.html', tmp_path)
  assert _body(dom)['rendered'] == 'ok'
  assert re.search(r'id="verdict">FAIL<', dom)
  failed = dom.index('Failed checks')
  assert failed < dom.index('Classes per split')
  assert shard.name in dom[failed:dom.index('Classes per split')]


@needs_chromium
def test_sensor_report_plots_sample_windows(tmp_path):
  sensorgen.frame(devices=6, rows_per_device=80, seed=3).to_csv(
      tmp_path / 'log.csv', index=False)
  out = tmp_path / 'out'
  preprocess.run(['--modality', 'sensor', '--input', str(tmp_path / 'log.csv'),
                  '--output', str(out), '--timestamp_column', 'time',
                  '--entity_column', 'device', '--window_length', '10',
                  '--window_stride', '5'])
  assert validate.main(['--output', str(out)]) == 0
  page = out / 'validation_report.html'
  _no_outside_references(page)
  dom = _dom(page, tmp_path)
  assert _body(dom)['rendered'] == 'ok' and _body(dom)['errors'] == '0'
  assert 'Sample windows' in dom
  assert dom.count('<polyline') >= 3 * 2  # 3 channels, several windows
  assert 'values/ch0' in dom  # per-channel statistics


@needs_chromium
def test_text_report_shows_token_histograms(tmp_path):
  lines = ['text,label'] + [
      f'"w{i % 7} w{i % 5}{" more" * (i % 9)}",{("a", "b")[i % 2]}'
      for i in range(200)]
  (tmp_path / 'docs.csv').write_text('\n'.join(lines) + '\n')
  out = tmp_path / 'out'
  preprocess.run(['--modality', 'text', '--input', str(tmp_path / 'docs.csv'),
                  '--output', str(out), '--max_tokens', '16'])
  assert validate.main(['--output', str(out)]) == 0
  dom = _dom(out / 'validation_report.html', tmp_path)
  assert _body(dom)['rendered'] == 'ok' and _body(dom)['errors'] == '0'
  assert 'Token counts' in dom and 'train: tokens per text' in dom
  assert 'mean OOV share' in dom


def test_render_escapes_text_from_the_data():
  report = {'verdict': 'fail', 'dataset': '<script>x</script>',
            'modality': 'image', 'run_id': 'r', 'checks': [
                {'check': 'c', 'status': 'fail', 'detail': '<b>&'}],
            'splits': {}, 'shards': []}
  page = html_report.render(report)
  assert '<script>x</script>' not in page
  assert '&lt;script&gt;x&lt;/script&gt;' in page
  assert '&lt;b&gt;&amp;' in page


def _sensor_report(samples):
  return {'verdict': 'pass', 'dataset': 'd', 'modality': 'sensor',
          'run_id': 'r', 'checks': [], 'shards': [],
          'splits': {'train': {'records': 2, 'class_counts': {'a': 2},
                               'samples': samples}}}


def test_sensor_rows_are_sampled_as_a_table_and_windows_as_lines():
  rows = {'a': [{'id': 'f.csv:1', 'channels': ['temp', 'wind'],
                 'values': [[0.5, -1.25]]},
                {'id': 'f.csv:2', 'channels': ['temp', 'wind'],
                 'values': [[2.0, 0.125]]}]}
  page = html_report.render(_sensor_report(rows))
  assert 'Sample rows (train, normalized values)' in page
  assert ('<tr><th>class</th><th>id</th><th>temp</th><th>wind</th></tr>'
          '<tr><td>a</td><td>f.csv:1</td><td class="num">0.5</td>'
          '<td class="num">-1.25</td></tr>') in page
  assert '<polyline' not in page and 'Sample windows' not in page
  windows = {'a': [{'id': 'dev#0', 'channels': ['temp', 'wind'],
                    'values': [[0.5, -1.25], [0.75, -1.0], [1.0, 0.0]]}]}
  page = html_report.render(_sensor_report(windows))
  assert 'Sample windows' in page and page.count('<polyline') == 2
  assert 'Sample rows' not in page


# The guide's picture of the report (docs/validation.md) is this test's
# screenshot: UPDATE_DOCS_SCREENSHOT=1 writes it to docs/images/.
DOCS_SCREENSHOT = os.path.join(os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))), 'docs', 'images',
                               'validation-report.png')


@needs_chromium
def test_screenshot_of_the_report_for_the_guide(image_dataset, tmp_path):
  from PIL import Image  # pylint: disable=import-outside-toplevel
  assert validate.main(['--output', str(image_dataset)]) == 0
  page = image_dataset / 'validation_report.html'
  shot = tmp_path / 'report.png'
  proc = subprocess.run(
      [CHROMIUM] + FLAGS + [f'--user-data-dir={tmp_path / "profile"}',
                            '--hide-scrollbars', '--window-size=1100,1400',
                            f'--screenshot={shot}', page.as_uri()],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  with Image.open(shot) as img:
    assert img.size == (1100, 1400)
    # A rendered page: text, charts and thumbnails, not one blank colour.
    colours = img.convert('RGB').getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 200
  if os.environ.get('UPDATE_DOCS_SCREENSHOT'):
    shutil.copyfile(shot, DOCS_SCREENSHOT)
  with open(os.path.join(os.path.dirname(os.path.dirname(DOCS_SCREENSHOT)),
                         'validation.md'), encoding='utf-8') as f:
    assert '](images/validation-report.png)' in f.read()
  assert os.path.getsize(DOCS_SCREENSHOT) > 10_000
