"""The plugin: list the runs that hold profiler traces, serve the report of one run, of all, or of two as a diff.

Why it is built on the HTML report: the page is self-contained and offline already, so the tab is a run
picker around an ``<iframe>`` of it. Analyses are cached by each file's (path, inode, mtime, ctime, size): reopening the
tab, or switching between runs of a 32-run logdir, analyses nothing twice.
"""

from __future__ import annotations

import logging
import os
import threading
from importlib import resources
from pathlib import Path
from typing import Any, BinaryIO, Callable

import orjson
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers
from werkzeug.wsgi import wrap_file as wsgi_file

from .. import __version__
from ..errors import TracekitError
from ..run.api import analyze_for_report, diff
from ..run.inputs import Inputs
from ..renderers.html import HTMLRenderer
from ..results.measured import MEASURED_FILE
from ..run.runs import Run, find_runs, usable_runs
from .annotated import AnnotatedCache, Refused, download_name, file_key

PLUGIN_NAME = "tracekit"
TOOL = f"tracekit {__version__}"

Signature = tuple[tuple[str, int, int, int, int, int], ...]


def _signature(files: list[Path]) -> Signature:
    """What a cached analysis is valid for: each file's path, identity (device, inode), mtime, ctime and size. A
    file replaced by other content of the same size and mtime is a new inode, or (rewritten in place) a new ctime.
    The run's measured.json counts too (its latency heads the report); a missing one counts as absent."""
    out = []
    folders = {f.parent for f in files}
    for f in list(files) + sorted(d / MEASURED_FILE for d in folders if len(folders) == 1):
        try:
            out.append(file_key(f))
        except FileNotFoundError:
            if f.name != MEASURED_FILE:
                raise
            out.append((str(f), 0, 0, 0, 0, -1))
    return tuple(out)


class AnalysisCache:
    """Per-run analyses of one logdir, reused while none of the run's files changed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[Signature, Any]] = {}
        self._inflight: dict[str, threading.Lock] = {}  # run name -> held while its analysis runs
        self.analysed = 0  # how many analyses ran (tests read it to see the cache work)

    def runs(self) -> list[Run]:
        try:
            return find_runs(self.root)[1]
        except TracekitError:
            return []

    def run(self, name: str) -> Run:
        for r in self.runs():
            if r.name == name:
                return r
        raise KeyError(name)

    def attribution(self, run: Run) -> Any:
        """The run's analysis: from the cache while its files are unchanged. One analysis per run is in flight at a
        time: concurrent first requests wait for it and share its result (24 at once cost one, not 24)."""
        hit = self._cached(run)
        if hit is not None:
            return hit
        with self._lock:
            gate = self._inflight.setdefault(run.name, threading.Lock())
        with gate:
            hit = self._cached(run)  # (it may have been filled while this one waited)
            if hit is not None:
                return hit
            sig = _signature(run.files)
            try:
                # as ``tracekit report`` reads it: with its what-if prediction (the "What if" section, issue 39)
                result: Any = analyze_for_report(Inputs(path=self.root / run.name, files=list(run.files)), jobs=1,
                                                 decode_workers=1)
                result.source = run.name
                result.check()
            except TracekitError as exc:  # a dead run fails the same way until its files change: kept, not redone
                result = exc
            with self._lock:
                self._cache[run.name] = (sig, result)
                self.analysed += 1
        return _result(result)

    def sweep(self, label: str, runs: list[Run]) -> Any:
        """Every run's analysis, combined (the all-runs view). A run that cannot be analysed (no usable trace) is
        named in a warning and left out, as ``attribute --by run`` leaves it out; with none left, its error."""
        from ..results.attribution import RunResult

        results, skipped = [], []
        for r in runs:
            try:
                results.append(RunResult(name=r.name, attribution=self.attribution(r)))
            except TracekitError as exc:
                skipped.append((r.name, exc))
        return usable_runs(label, results, skipped)

    def _cached(self, run: Run) -> Any:
        """The run's kept analysis (or kept error, raised) while its files are unchanged; else None."""
        sig = _signature(run.files)
        with self._lock:
            hit = self._cache.get(run.name)
        return _result(hit[1]) if hit is not None and hit[0] == sig else None


def _result(kept: Any) -> Any:
    """A kept analysis, or a kept TracekitError raised again: the all-runs view asks every run on each request,
    and a run with no usable trace would otherwise be read and analysed again each time."""
    if isinstance(kept, TracekitError):
        raise kept.with_traceback(None)  # (raised again and again: no traceback growing on it)
    return kept


def _script_sha256() -> str:
    """TensorBoard's CSP allows inline scripts only by hash: the report's one script (the page's own CSP too)."""
    from ..renderers.html import script_sha256

    return script_sha256()


class TracekitPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        super().__init__(context)
        self.logdir = Path(context.logdir) if context.logdir else None
        self.cache = AnalysisCache(self.logdir) if self.logdir is not None else None
        self.annotated = AnnotatedCache(self.logdir) if self.logdir is not None else None
        self._sha = _script_sha256()

    def get_plugin_apps(self) -> dict[str, Callable[..., Any]]:
        app = wrappers.Request.application
        return {"/index.js": app(self._serve_js), "/runs": app(self._serve_runs), "/report": app(self._serve_report),
                "/annotated": app(self._serve_annotated)}

    def is_active(self) -> bool:
        return self.cache is not None and bool(self.cache.runs())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="tracekit", disable_reload=True)

    def _serve_js(self, request: wrappers.Request) -> wrappers.Response:
        code = resources.files(__package__).joinpath("index.js").read_text(encoding="utf-8")
        return http_util.Respond(request, code, "application/javascript")

    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        runs = self.cache.runs() if self.cache is not None else []
        body = {"logdir": str(self.logdir), "analyses": self.cache.analysed if self.cache is not None else 0, "runs": [
            {"name": r.name, "files": len(r.files), "bytes": sum(_size(f) for f in r.files),
             "traces": [f.name for f in r.files]} for r in runs]}
        return http_util.Respond(request, orjson.dumps(body).decode(), "application/json")

    def _serve_report(self, request: wrappers.Request) -> wrappers.Response:
        """``?run=NAME``: that run; ``?before=A&after=B``: their diff; no argument: every run (a sweep)."""
        if self.cache is None:
            return http_util.Respond(request, "no logdir", "text/plain", code=404)
        args = request.args
        try:
            if args.get("before") or args.get("after"):
                b, a = self.cache.run(args.get("before", "")), self.cache.run(args.get("after", ""))
                result: Any = diff(self.cache.attribution(b), self.cache.attribution(a))
                result.labels = (b.name, a.name)
            elif args.get("run"):
                result = self.cache.attribution(self.cache.run(args["run"]))
            else:
                runs = self.cache.runs()
                if not runs:
                    return http_util.Respond(request, "no runs with profiler traces", "text/plain", code=404)
                result = self.cache.sweep(self.logdir.name if self.logdir else "logdir", runs)
            result.check()
        except KeyError as exc:
            return http_util.Respond(request, f"no run named {exc.args[0]!r}", "text/plain", code=404)
        except (TracekitError, OSError) as exc:
            return http_util.Respond(request, f"cannot analyse: {exc}", "text/plain", code=400)
        page = HTMLRenderer(tool=TOOL).render(result)
        return http_util.Respond(request, page, "text/html", csp_scripts_sha256s=[self._sha])


    def _serve_annotated(self, request: wrappers.Request) -> wrappers.Response:
        """``?run=NAME&file=FILE``: the annotated copy of that trace file of the run (its name as ``/runs`` lists it),
        as a ``.json.gz`` download. Errors answer one line of text: 400, 403, 404, 422 (cannot annotate) or 500."""
        args = request.args
        try:
            run, src, body = self._annotated_copy(args)
        except Refused as exc:
            return _text(request, exc.code, str(exc))
        except TracekitError as exc:
            return _text(request, 422, f"cannot annotate: {exc}")
        except OSError as exc:
            return _text(request, 500, f"cannot annotate: {exc.strerror or type(exc).__name__}")
        except Exception as exc:  # noqa: BLE001 (a bug: one line to the browser, the traceback to the log)
            logging.getLogger(__name__).exception("tracekit: annotating %r of %r", args.get("file"), args.get("run"))
            return _text(request, 500, f"cannot annotate: internal error ({type(exc).__name__})")
        name = download_name(run.name, src)
        headers = {"Content-Disposition": f'attachment; filename="{name}"', "X-Content-Type-Options": "nosniff",
                   "Content-Length": str(os.fstat(body.fileno()).st_size), "Cache-Control": "no-store"}
        return wrappers.Response(wsgi_file(request.environ, body), mimetype="application/gzip", headers=headers,
                                 direct_passthrough=True)

    def _annotated_copy(self, args: Any) -> tuple[Run, Path, BinaryIO]:
        """The run, the trace file and the open annotated copy that ``?run=NAME&file=FILE`` names; Refused (404
        or 400) when there is no logdir, a parameter is missing or no run has that name."""
        if self.cache is None or self.annotated is None:
            raise Refused(404, "no logdir")
        if not args.get("run") or not args.get("file"):
            raise Refused(400, "name the run and the file: ?run=NAME&file=FILE")
        try:
            run = self.cache.run(args["run"])
        except KeyError:
            raise Refused(404, f"no run named {args['run']!r}") from None
        src = self.annotated.trace(run, args["file"])
        return run, src, open(self.annotated.copy(src), "rb")


def _text(request: wrappers.Request, code: int, message: str) -> wrappers.Response:
    """A one-line plain-text answer (the first line of ``message``)."""
    return http_util.Respond(request, (message.splitlines() or [""])[0], "text/plain", code=code)


def _size(f: Path) -> int:
    try:
        return os.stat(f).st_size
    except OSError:
        return 0


class TracekitLoader(base_plugin.TBLoader):
    """What the ``tensorboard_plugins`` entry point names: builds the plugin for TensorBoard's context."""

    def load(self, context: base_plugin.TBContext) -> TracekitPlugin:
        return TracekitPlugin(context)
