"""A real GCS server on loopback, as both of our GCS clients reach it.

fake-gcs-server (a Go implementation of the GCS JSON and XML APIs, built
by scripts/fake_gcs_server.sh from the Go module proxy) keeps the objects,
their generations and the `ifGenerationMatch` preconditions. In front of
it runs `Front`, a small HTTP proxy in this process, for three reasons:

- TensorFlow's own GCS file system (tf.io.gfile, tf.data, tf.Transform's
  temp files, TFDS) has https://www.googleapis.com and
  https://storage.googleapis.com built in and does not read
  STORAGE_EMULATOR_HOST. It does honour `https_proxy` and
  `CURL_CA_BUNDLE` (libcurl's), so the front answers CONNECT for those two
  hosts with TLS under a certificate of a throwaway test CA and forwards
  what it reads there to the server.
- Two requests the real service accepts and fake-gcs-server does not are
  put right on the way: TensorFlow starts uploads with an empty body and
  "Transfer-Encoding: identity" (Go's HTTP server answers 501), and
  google-cloud-storage sends batch parts without a Content-ID (the server
  skips those parts, so Beam's batched deletes and renames did nothing).
- Faults the stores really show are injected here (`Faults`): a request
  that fails once with 503, a slow listing, an object deleted before its
  read, a request held while the test kills its client.

Every other host asked for through the front (pip's index, say) is
tunnelled to as before: through the proxy the environment named, or
directly.

`GcsServer(folder)` starts both; its `env()` is what a process needs to
use them: STORAGE_EMULATOR_HOST for google-cloud-storage and Beam,
https_proxy, no_proxy and CURL_CA_BUNDLE for TensorFlow.
"""

import datetime
import http.client
import http.server
import ipaddress
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

from repo import ROOT

# The bucket the tests use.
BUCKET = 'tfrp-bucket'
# The variables env() sets.
NAMING = ('STORAGE_EMULATOR_HOST', 'https_proxy', 'HTTPS_PROXY', 'no_proxy',
          'CURL_CA_BUNDLE')
# The hosts TensorFlow's GCS file system talks to.
GOOGLE_HOSTS = ('www.googleapis.com', 'storage.googleapis.com')
# Hop-by-hop headers and those the front sets itself.
_HOP = {'connection', 'keep-alive', 'proxy-connection', 'transfer-encoding',
        'te', 'trailer', 'upgrade', 'content-length', 'proxy-authorization'}


def binary() -> str:
  """The path of fake-gcs-server's binary (scripts/fake_gcs_server.sh
  builds it once from the Go module proxy)."""
  proc = subprocess.run([os.path.join(ROOT, 'scripts', 'fake_gcs_server.sh'),
                         'path'], capture_output=True, text=True,
                        timeout=900, check=False)
  if proc.returncode != 0:
    raise RuntimeError('scripts/fake_gcs_server.sh failed: ' +
                       proc.stderr[-3000:])
  return proc.stdout.strip().splitlines()[-1]


def die_with_parent():
  """A Popen preexec_fn: the child gets SIGTERM when this process dies, so
  a test session that is killed leaves no server behind (Linux)."""
  import ctypes  # pylint: disable=import-outside-toplevel
  import signal  # pylint: disable=import-outside-toplevel
  ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_server(argv, log_path: str, probe_url: str, seconds: float):
  """Starts a server process (its output to log_path; it dies with this
  process) and returns its Popen once probe_url answers; RuntimeError with
  the log's end when it exits or does not answer within `seconds`."""
  with open(log_path, 'wb') as log:
    server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                              preexec_fn=die_with_parent)
  deadline = time.monotonic() + seconds
  while True:
    try:
      with urllib.request.urlopen(probe_url, timeout=2):
        return server
    except OSError:
      if server.poll() is not None or time.monotonic() > deadline:
        stop_server(server)
        with open(log_path, encoding='utf-8', errors='replace') as f:
          raise RuntimeError(f'{os.path.basename(argv[0])} did not start: '
                             + f.read()[-2000:]) from None
      time.sleep(0.2)


def stop_server(server: subprocess.Popen) -> None:
  if server.poll() is None:
    server.terminate()
    server.wait(timeout=30)


def free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def make_certificates(folder: str):
  """(CA bundle, certificate file, key file): a CA made for this run (in a
  bundle with the usual CAs) and a certificate it signs for GOOGLE_HOSTS
  and 127.0.0.1."""
  # pylint: disable=import-outside-toplevel
  from cryptography import x509
  from cryptography.hazmat.primitives import hashes, serialization
  from cryptography.hazmat.primitives.asymmetric import ec
  from cryptography.x509.oid import NameOID
  now = datetime.datetime.now(datetime.timezone.utc)

  def build(subject, issuer, public_key, signing_key, extensions):
    builder = (x509.CertificateBuilder().subject_name(subject)
               .issuer_name(issuer).public_key(public_key)
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(hours=1))
               .not_valid_after(now + datetime.timedelta(days=7)))
    for extension, critical in extensions:
      builder = builder.add_extension(extension, critical=critical)
    return builder.sign(signing_key, hashes.SHA256())

  ca_key = ec.generate_private_key(ec.SECP256R1())
  ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                          'tfrecord-pipeline test CA')])
  ca = build(ca_name, ca_name, ca_key.public_key(), ca_key,
             [(x509.BasicConstraints(ca=True, path_length=0), True)])
  key = ec.generate_private_key(ec.SECP256R1())
  names = [x509.DNSName(h) for h in GOOGLE_HOSTS + ('localhost',)]
  names.append(x509.IPAddress(ipaddress.ip_address('127.0.0.1')))
  cert = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                             GOOGLE_HOSTS[0])]),
               ca_name, key.public_key(), ca_key,
               [(x509.SubjectAlternativeName(names), False)])
  paths = tuple(os.path.join(folder, n)
                for n in ('ca.pem', 'cert.pem', 'key.pem'))
  pem = serialization.Encoding.PEM
  with open(paths[0], 'wb') as f:
    # With the usual CAs after it: CURL_CA_BUNDLE names this file to
    # every client that reads it (requests too), for every host.
    import certifi  # pylint: disable=import-outside-toplevel
    f.write(ca.public_bytes(pem))
    with open(certifi.where(), 'rb') as usual:
      f.write(b'\n' + usual.read())
  with open(paths[1], 'wb') as f:
    f.write(cert.public_bytes(pem))
  with open(paths[2], 'wb') as f:
    f.write(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))
  return paths


class Faults:
  """Rules the front applies to the requests it forwards, first match
  first, each `times` times (None: always):

  - fail: answer with an error status instead of forwarding;
  - delay: wait, then forward;
  - vanish: delete the object the request names, then forward it (an
    object deleted between listing and reading);
  - hold: stop the request until release(): at 'request', before it is
    forwarded, and then drop it unsent (a client that died while
    sending); at 'response', after the server has done it, and then pass
    the answer on if anyone still listens.

  A rule matches a method and a pattern searched in the request's path
  and body (a batch request names its parts' objects only in its body).
  `applied` lists (method, path, what) of each rule applied, as it is.
  """

  def __init__(self):
    self._lock = threading.Lock()
    self._rules = []
    self._released = threading.Event()
    self.applied = []

  def _add(self, method, pattern, times, **what):
    rule = {'method': method, 'pattern': re.compile(pattern.encode()),
            'times': times, 'status': None, 'delay': 0.0, 'hold': None,
            'vanish': False}
    rule.update(what)
    with self._lock:
      self._rules.append(rule)

  def fail(self, method: str, pattern: str, status: int = 503,
           times=1):
    self._add(method, pattern, times, status=status)

  def delay(self, method: str, pattern: str, seconds: float,
            times=None):
    self._add(method, pattern, times, delay=seconds)

  def vanish(self, method: str, pattern: str, times=1):
    self._add(method, pattern, times, vanish=True)

  def hold(self, method: str, pattern: str, at: str = 'request',
           times=1):
    assert at in ('request', 'response'), at
    self._add(method, pattern, times, hold=at)

  def release(self):
    """Lets every held request go on (and those held later pass)."""
    self._released.set()

  def wait_released(self, timeout: float = 600.0):
    self._released.wait(timeout)

  def clear(self):
    with self._lock:
      self._rules.clear()
      self.applied.clear()
      self._released.clear()

  def take(self, method: str, path: str, body: bytes = b''):
    """The first rule that applies to this request (counted), or None."""
    target = path.encode() + b'\n' + body
    with self._lock:
      for rule in self._rules:
        if rule['method'] != method or not rule['pattern'].search(target):
          continue
        if rule['times'] is not None:
          if rule['times'] <= 0:
            continue
          rule['times'] -= 1
        what = (rule['status'] or
                (f'hold at {rule["hold"]}' if rule['hold'] else
                 'vanish' if rule['vanish'] else f'delay {rule["delay"]}s'))
        self.applied.append((method, path, what))
        return rule
    return None


def _number_batch_parts(body: bytes, content_type: str) -> bytes:
  """A multipart/mixed batch with a Content-ID in every part (the
  server skips parts without one; the service does not need them)."""
  found = re.search(r'boundary="?([^";]+)"?', content_type)
  if not found:
    return body
  sep = b'--' + found.group(1).encode('ascii')
  pieces = body.split(sep)
  for i in range(1, len(pieces)):
    piece = pieces[i]
    if piece.startswith(b'--'):
      break  # the closing delimiter
    head_end = min((p for p in (piece.find(b'\r\n\r\n'), piece.find(b'\n\n'))
                    if p >= 0), default=-1)
    if head_end < 0 or b'content-id:' in piece[:head_end].lower():
      continue
    # The part starts with the newline that ends its delimiter line.
    newline = b'\r\n' if piece.startswith(b'\r\n') else b'\n'
    pieces[i] = newline + b'Content-ID: <item-%d>' % i + piece
  return sep.join(pieces)


class _Writer:
  """A write-all file object over a socket (TLS sockets send in parts)."""

  closed = False

  def __init__(self, sock):
    self._sock = sock

  def write(self, data):
    self._sock.sendall(data)
    return len(data)

  def flush(self):
    pass

  def close(self):
    pass


class _Handler(http.server.BaseHTTPRequestHandler):
  protocol_version = 'HTTP/1.1'
  tls = False
  # A response goes out as two writes (head, body): with Nagle's algorithm
  # the body waits for the client's delayed ACK of the head, 40 ms a
  # request.
  disable_nagle_algorithm = True

  def log_message(self, format, *args):  # pylint: disable=redefined-builtin
    pass

  def do_CONNECT(self):  # pylint: disable=invalid-name
    host, _, port = self.path.rpartition(':')
    if host not in GOOGLE_HOSTS:
      self._tunnel(host, int(port))
      return
    self.send_response(200, 'Connection established')
    self.end_headers()
    tls = self.server.tls.wrap_socket(self.connection, server_side=True)
    self.connection = tls
    self.rfile = tls.makefile('rb')
    self.wfile = _Writer(tls)
    self.tls = True
    self.close_connection = False  # handle() goes on with the TLS requests

  def _tunnel(self, host: str, port: int):
    """Any other host (pip's index, say) is reached as without the front:
    through the proxy the environment named before, or directly."""
    try:
      upstream = self.server.upstream
      if upstream:
        far = socket.create_connection(upstream, timeout=30)
        far.sendall(f'CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}'
                    '\r\n\r\n'.encode())
        answer = b''
        while b'\r\n\r\n' not in answer:
          chunk = far.recv(4096)
          if not chunk:
            raise OSError('the upstream proxy closed the connection')
          answer += chunk
        if answer.split()[1] != b'200':
          raise OSError(answer.split(b'\r\n')[0].decode(errors='replace'))
      else:
        far = socket.create_connection((host, port), timeout=30)
      far.settimeout(None)
    except OSError as e:
      self.send_error(502, f'cannot reach {host}:{port}: {e}')
      return
    self.send_response(200, 'Connection established')
    self.end_headers()
    near = self.connection

    def pipe(source, target):
      try:
        while True:
          data = source.recv(65536)
          if not data:
            break
          target.sendall(data)
      except OSError:
        pass
      finally:
        try:
          target.shutdown(socket.SHUT_WR)
        except OSError:
          pass

    other = threading.Thread(target=pipe, args=(far, near), daemon=True)
    other.start()
    pipe(near, far)
    other.join()
    far.close()
    self.close_connection = True

  def _body(self) -> bytes:
    if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
      data = []
      while True:
        size = int(self.rfile.readline().split(b';')[0].strip(), 16)
        if size == 0:
          while self.rfile.readline() not in (b'\r\n', b'\n', b''):
            pass
          return b''.join(data)
        data.append(self.rfile.read(size))
        self.rfile.readline()
    length = int(self.headers.get('Content-Length') or 0)
    return self.rfile.read(length) if length else b''

  def _forward(self):
    try:
      self._forward_one()
    except (BrokenPipeError, ConnectionResetError):
      self.close_connection = True  # the client is gone (killed, say)

  def _forward_one(self):
    body = self._body()
    headers = {k: v for k, v in self.headers.items()
               if k.lower() not in _HOP}
    if self.tls:  # the server then names https URLs for uploads
      headers['X-Forwarded-Proto'] = 'https'
    path = self.path
    if '://' in path:  # absolute form, from a client that took us for a proxy
      path = '/' + path.split('://', 1)[1].partition('/')[2]
    if path.startswith('/batch/'):
      body = _number_batch_parts(body, self.headers.get('Content-Type', ''))
    faults = self.server.faults
    rule = faults.take(self.command, path, body) or {}
    if rule.get('delay'):
      time.sleep(rule['delay'])
    if rule.get('hold') == 'request':
      faults.wait_released()
      self.close_connection = True
      return  # dropped: the server never sees it
    if rule.get('vanish'):
      self._delete_named_object(path)
    status = rule.get('status')
    if status:
      data = json.dumps({'error': {'code': status, 'message':
                                   'injected by the test front'}}).encode()
      self.send_response(status)
      self.send_header('Content-Type', 'application/json')
      self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      self.wfile.write(data)
      return
    conn = http.client.HTTPConnection('127.0.0.1', self.server.backend,
                                      timeout=120)
    try:
      try:
        conn.request(self.command, path, body=body, headers=headers)
      except ConnectionRefusedError:
        self.send_error(502, 'the server is not listening (yet)')
        return
      resp = conn.getresponse()
      data = resp.read()
      if rule.get('hold') == 'response':
        faults.wait_released()
      self.send_response(resp.status, resp.reason)
      for key, value in resp.getheaders():
        if key.lower() not in _HOP:
          self.send_header(key, value)
      if self.command == 'HEAD':
        length = resp.getheader('Content-Length')
        if length is not None:
          self.send_header('Content-Length', length)
      else:
        self.send_header('Content-Length', str(len(data)))
      self.end_headers()
      if self.command != 'HEAD':
        self.wfile.write(data)
    finally:
      conn.close()

  def _delete_named_object(self, path: str):
    """Deletes the object a JSON API request names (/b/B/o/NAME...)."""
    found = re.search(r'/b/([^/]+)/o/([^/?]+)', path)
    assert found, f'no object named in {path}'
    conn = http.client.HTTPConnection('127.0.0.1', self.server.backend,
                                      timeout=60)
    try:
      conn.request('DELETE', f'/storage/v1/b/{found.group(1)}/o/'
                   f'{found.group(2)}')
      assert conn.getresponse().status in (200, 204), path
    finally:
      conn.close()

  do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


class Front(http.server.ThreadingHTTPServer):
  daemon_threads = True

  def handle_error(self, request, client_address):
    # A client that hung up (a killed run, a closed keep-alive
    # connection) is no error of the front's.
    if isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError,
                                      TimeoutError)):
      return
    super().handle_error(request, client_address)

  def __init__(self, port: int, backend: int, cert: str, key: str,
               upstream=None):
    super().__init__(('127.0.0.1', port), _Handler)
    self.backend = backend
    self.upstream = upstream  # (host, port) of the proxy to chain, or None
    self.faults = Faults()
    self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    self.tls.load_cert_chain(cert, key)
    self.tls.set_alpn_protocols(['http/1.1'])


class GcsServer:
  """fake-gcs-server (in memory) behind a Front, both on loopback."""

  def __init__(self, folder: str, buckets=()):
    os.makedirs(folder, exist_ok=True)
    self.ca, cert, key = make_certificates(folder)
    data = os.path.join(folder, 'data')
    for bucket in buckets:
      os.makedirs(os.path.join(data, bucket), exist_ok=True)
    backend, port = free_port(), free_port()
    self.url = f'http://127.0.0.1:{port}'
    self.front = Front(port, backend, cert, key, _upstream_proxy())
    self.faults = self.front.faults
    self._front_thread = threading.Thread(
        target=self.front.serve_forever, daemon=True)
    self._front_thread.start()
    try:
      self._server = start_server(
          [binary(), '-scheme', 'http', '-host', '127.0.0.1', '-port',
           str(backend), '-backend', 'memory', '-data', data,
           '-external-url', self.url, '-log-level', 'warn'],
          os.path.join(folder, 'server.log'), f'{self.url}/storage/v1/b',
          seconds=30)
    except RuntimeError:
      self.front.shutdown()
      self.front.server_close()
      raise

  def env(self, base=None) -> dict:
    """`base` (default: this process's environment) with this server
    named to google-cloud-storage, Beam and TensorFlow."""
    env = dict(os.environ if base is None else base)
    env.update(STORAGE_EMULATOR_HOST=self.url, https_proxy=self.url,
               no_proxy='127.0.0.1,localhost', CURL_CA_BUNDLE=self.ca)
    env.pop('HTTPS_PROXY', None)
    return env

  def client(self):
    """A google-cloud-storage client of this server, for the tests' own
    uploads and downloads (this process's environment is left alone)."""
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=import-outside-toplevel
    from google.cloud import storage  # pylint: disable=import-outside-toplevel
    return storage.Client(project='test', credentials=AnonymousCredentials(),
                          client_options={'api_endpoint': self.url})

  def upload(self, local: str, url: str) -> int:
    """Every file below the folder `local` to gs://BUCKET/PREFIX/<its
    relative path>, given url 'gs://BUCKET/PREFIX'; how many."""
    bucket, _, prefix = url[len('gs://'):].partition('/')
    target = self.client().bucket(bucket)
    count = 0
    for folder, _, names in os.walk(local):
      for name in names:
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, local).replace(os.sep, '/')
        target.blob(f'{prefix}/{rel}' if prefix else rel
                    ).upload_from_filename(path)
        count += 1
    return count

  def download(self, url: str, local: str) -> int:
    """Every object below gs://BUCKET/PREFIX into the folder `local`, at
    its path relative to the prefix; how many."""
    bucket, _, prefix = url[len('gs://'):].partition('/')
    prefix = prefix.rstrip('/') + '/'
    count = 0
    for blob in self.client().list_blobs(bucket, prefix=prefix):
      rel = blob.name[len(prefix):]
      if not rel or rel.endswith('/'):
        continue  # a folder marker
      path = os.path.join(local, *rel.split('/'))
      os.makedirs(os.path.dirname(path), exist_ok=True)
      blob.download_to_filename(path)
      count += 1
    return count

  def names(self, url: str):
    """The names of the objects below gs://BUCKET/PREFIX, relative to it."""
    bucket, _, prefix = url[len('gs://'):].partition('/')
    prefix = prefix.rstrip('/') + '/'
    return sorted(b.name[len(prefix):]
                  for b in self.client().list_blobs(bucket, prefix=prefix))

  def stop(self):
    self.front.shutdown()
    self.front.server_close()
    stop_server(self._server)


def _upstream_proxy():
  """(host, port) of the https proxy this process's environment names, if
  any (the front chains to it for every host but Google's)."""
  named = os.environ.get('https_proxy') or os.environ.get('HTTPS_PROXY')
  if not named:
    return None
  hostport = named.split('://', 1)[-1].split('@')[-1].strip('/')
  host, _, port = hostport.rpartition(':')
  return host, int(port or 80)


def encoded_name(url: str) -> str:
  """The object name of gs://BUCKET/NAME as GCS request paths carry it
  ('/' as %2F), for fault patterns."""
  return url[len('gs://'):].partition('/')[2].replace('/', '%2F')


def without_server(env: dict) -> dict:
  """`env` with no GCS server named."""
  return {k: v for k, v in env.items() if k not in NAMING}
