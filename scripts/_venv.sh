# Sourced by the scripts: make sure .venv exists and holds mploader with its dev, codecs, spark and experiments extras.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV" >&2
  "$PY" -m venv "$VENV"
fi
stamp="$VENV/.mploader-installed"
# reinstall when the build configuration or the compiled walk's source changed (an editable install
# builds mploader/scan/_walk.c in place; the build is optional: without a compiler the walk stays Python)
stale=0
for f in pyproject.toml setup.py mploader/scan/_walk.c; do
  if [ ! -f "$stamp" ] || [ "$ROOT/$f" -nt "$stamp" ]; then stale=1; fi
done
if [ "$stale" = 1 ]; then
  echo "installing mploader and its dev, codecs, spark and experiments extras into $VENV" >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >&2
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e "$ROOT[dev,codecs,spark,experiments]" >&2
  touch "$stamp"
fi
if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then  # the spark extra's tests start a local Spark (a JVM)
  echo "java not found: the Spark tests (tests/test_spark*.py) will be skipped; install Java 17, e.g." \
       "'apt-get install openjdk-17-jre-headless', or set JAVA_HOME" >&2
fi
if ! ldconfig -p 2>/dev/null | grep -q 'libfuse3\?\.so'; then  # mfusepy (the experiments extra) loads libfuse
  echo "libfuse not found: the seek-modelled disk's tests (tests/test_seek_disk.py) will be skipped; install it," \
       "e.g. 'apt-get install libfuse3-3'" >&2
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
