"""The run layer: how a command's inputs become one result.

What it holds: discovery of what a path stands for (``inputs``: a file, a run folder, a URL's folder; ``runs``:
a folder of runs), found once and handed up as one ``runs.Discovered``; the ``plan.Plan`` of a run (scope,
classifier, hints, captures, files at once, decode workers); the one unit of work, ``tasks.attribute_one`` (a file
or URL read with the plan whole), and the schedulers that run it (here in ``execute``, a process pool in ``pool``,
Dask in ``cluster``); the merge of per-file results in file order; and the path-level entry points
``tracekit.analyze`` / ``tracekit.diff`` (``api``).

What it may import (``.importlinter``): analysis, io, results and the bottom modules; never renderers, the CLI or
tbplugin. It is the only layer that schedules work: process pools, ``concurrent``, ``multiprocessing``, Dask and
fsspec are forbidden below it (save io's decode pool for one big file, the contract's one named exception).

Its tests live in ``tests/run/``.
"""
