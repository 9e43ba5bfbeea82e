"""The blocking client is generated from the asyncio one: the committed
`_sync.py` and `_streams_sync.py` must be exactly what
`scripts/generate_sync.py` writes from the committed `aio.py` and
`_streams_async.py`. Needs `unasync` in the venv (`tools/test.sh` installs
it); without it this is skipped, saying so."""

import importlib.util
import pathlib
import tempfile
import unittest

try:
    import unasync  # noqa: F401 - only whether it is importable

    HAVE_UNASYNC = True
except ImportError:
    HAVE_UNASYNC = False

HERE = pathlib.Path(__file__).resolve().parent
SCRIPT = HERE.parent / "scripts" / "generate_sync.py"


def load_generator():
    spec = importlib.util.spec_from_file_location("generate_sync", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class GeneratedTest(unittest.TestCase):
    @unittest.skipUnless(HAVE_UNASYNC, "unasync not installed in this venv: `pip install unasync`")
    def test_the_committed_blocking_client_is_what_the_generator_writes(self):
        generator = load_generator()
        with tempfile.TemporaryDirectory() as d:
            generator.generate(pathlib.Path(d))
            for name, (source, _) in generator.GENERATED.items():
                with self.subTest(name):
                    expected = (pathlib.Path(d) / name).read_text()
                    committed = (generator.PACKAGE / name).read_text()
                    self.assertTrue(
                        committed == expected,
                        "src/redlock_client/%s is not what scripts/generate_sync.py writes "
                        "from %s: edit %s, never %s, then run `python "
                        "scripts/generate_sync.py` in clients/python" % (name, source, source, name),
                    )

    def test_no_module_is_over_800_lines(self):
        for path in sorted((HERE.parent / "src" / "redlock_client").glob("*.py")):
            with self.subTest(path.name):
                self.assertLessEqual(len(path.read_text().splitlines()), 800)


if __name__ == "__main__":
    unittest.main()
