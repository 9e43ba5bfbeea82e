"""Generates the blocking client from the asyncio client, the one
hand-written source: `src/redlock_client/_sync.py` from `aio.py` (the
client's calls) and `_streams_sync.py` from `_streams_async.py` (its open
streams: holds, campaigns, observers).

    python scripts/generate_sync.py      # in clients/python, after editing either

unasync (a development tool, never a dependency of the package) drops
`async` and `await`, turns `__aenter__`, `__aexit__`, `__aiter__` and
`AsyncIterator` into their blocking names, and applies the rules below.
What blocking I/O does differently (the socket, a thread per stream, the
waits with a timeout) is in `_backend_sync.py`, written by hand beside
`_backend_async.py` with the same names; the rules swap one for the other.
The generated files stay committed, so the package installs without this
script; `tests/test_generated.py` fails when they are not what this writes.
"""

import ast
import pathlib
import sys
import tempfile

import unasync

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "src" / "redlock_client"

RULES = {
    "_backend_async": "_backend_sync",
    "_streams_async": "_streams_sync",
    # The streams' type-only import of the client they belong to.
    "aio": "_sync",
    "AsyncClient": "Client",
    "AsyncHold": "Hold",
    "AsyncCampaign": "Campaign",
    "AsyncObserver": "Observer",
    "_AsyncStream": "_Stream",
}

HEADER = """\
# Generated from %s by `python scripts/generate_sync.py` (unasync), run in
# clients/python. Do not edit: edit %s (or _backend_sync.py, for what
# blocking I/O does differently) and run the command again.
"""

CLIENT_DOCSTRING = '''\
"""The blocking client: the calls of `redlock_client.aio.AsyncClient`, on a
blocking Unix socket, with a daemon thread per open stream (hold, campaign)
reading its events."""
'''

GENERATED = {
    # target: (source, the target's docstring, or None to keep the source's)
    "_sync.py": ("aio.py", CLIENT_DOCSTRING),
    "_streams_sync.py": ("_streams_async.py", None),
}
"""Each generated file of the package and what it is generated from."""


def generate_one(source: pathlib.Path, target: pathlib.Path, docstring) -> None:
    """Writes the blocking code generated from `source` to `target`."""
    with tempfile.TemporaryDirectory() as scratch:
        raw = pathlib.Path(scratch) / target.name
        rule = unasync.Rule(str(source), str(raw), additional_replacements=RULES)
        unasync.unasync_files([str(source)], [rule])
        code = raw.read_text()
    lines = code.splitlines(keepends=True)
    if docstring is not None:
        # The module's own docstring in place of the source's (about asyncio).
        end = ast.parse(code).body[0].end_lineno
        lines = [docstring] + lines[end:]
    target.write_text(HEADER % (source.name, source.name) + "".join(lines))


def generate(directory: pathlib.Path = PACKAGE) -> None:
    """Writes every generated file into `directory` (the package's own by
    default), under its name in `GENERATED`."""
    for name, (source, docstring) in GENERATED.items():
        generate_one(PACKAGE / source, directory / name, docstring)


if __name__ == "__main__":
    generate(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else PACKAGE)
