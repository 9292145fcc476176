"""What the tests share and are not fixtures: trace builders, the one trace reader and writer helpers, paths.

Imported as ``from support.builders import TraceBuilder`` (``tests/`` is on pytest's ``pythonpath``;
``--import-mode=importlib``): a test file never imports another test file, and ``conftest.py`` holds fixtures
and hooks only.
"""
