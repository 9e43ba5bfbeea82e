"""Generates the blocking client, `src/redlock_client/_sync.py`, from the
asyncio client, `src/redlock_client/aio.py`, the one hand-written source.

    python scripts/generate_sync.py      # in clients/python, after editing aio.py

unasync (a development tool, never a dependency of the package) drops
`async` and `await`, turns `__aenter__`, `__aexit__`, `__aiter__` and
`AsyncIterator` into their blocking names, and applies the rules below.
What blocking I/O does differently (the socket, a thread per stream, the
waits with a timeout) is in `_backend_sync.py`, written by hand beside
`_backend_async.py` with the same names; the rules swap one for the other.
The generated file stays committed, so the package installs without this
script; `tests/test_generated.py` fails when it is not what this writes.
"""

import ast
import pathlib
import sys
import tempfile

import unasync

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "src" / "redlock_client"
SOURCE = PACKAGE / "aio.py"
TARGET = PACKAGE / "_sync.py"

RULES = {
    "_backend_async": "_backend_sync",
    "AsyncClient": "Client",
    "AsyncHold": "Hold",
    "AsyncCampaign": "Campaign",
    "AsyncObserver": "Observer",
    "_AsyncStream": "_Stream",
}

HEADER = """\
# Generated from aio.py by `python scripts/generate_sync.py` (unasync), run in
# clients/python. Do not edit: edit aio.py (or _backend_sync.py, for what
# blocking I/O does differently) and run the command again.
"""

DOCSTRING = '''\
"""The blocking client: the calls of `redlock_client.aio.AsyncClient`, on a
blocking Unix socket, with a daemon thread per open stream (hold, campaign)
reading its events."""
'''


def generate(target: pathlib.Path) -> None:
    """Writes the blocking client generated from `SOURCE` to `target`."""
    with tempfile.TemporaryDirectory() as scratch:
        raw = pathlib.Path(scratch) / TARGET.name
        rule = unasync.Rule(str(SOURCE), str(raw), additional_replacements=RULES)
        unasync.unasync_files([str(SOURCE)], [rule])
        code = raw.read_text()
    # The module's own docstring in place of aio.py's, which is about asyncio.
    docstring = ast.parse(code).body[0]
    lines = code.splitlines(keepends=True)
    target.write_text(HEADER + DOCSTRING + "".join(lines[docstring.end_lineno :]))


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else TARGET)
