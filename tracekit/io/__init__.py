"""The io layer: one trace file in, one :class:`~tracekit.model.Trace` out.

What it holds: streaming and decoding the profiler's JSON (``read``, ``jsonscan``; gzip too), mapping and checking
each event at the parse boundary (``builder``), the header's facts and the graph launches (``load``, ``graphs``),
the file checks that word a bad path (``paths``), and the decoding of one big file's batches in worker processes
(``pload``; the decode-worker count is called ``decode_workers`` throughout). It knows nothing of folders, runs,
attention blocks or output formats.

What it may import (``.importlinter``): the layers below it only (model, errors, vocab, memory, workers, output,
text): not analysis, results, run, renderers or the CLI. It schedules nothing but that one decode pool (the
forbidden contract's one named exception for ``multiprocessing``): files are run/'s.

Its tests live in ``tests/io/``.
"""
