"""What every worker process tracekit starts does first (the file pool and the decoding pool): end with its parent.

Why: a parent killed by SIGKILL or SIGTERM runs no clean-up, and pool workers (hundreds of MB each) would live on as
orphans. On Linux the kernel sends the worker SIGTERM when its parent dies (``PR_SET_PDEATHSIG``). Ctrl-C is the
parent's to handle (it terminates the pool and exits 130): workers ignore SIGINT, so they print no traceback.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def worker_init(parent: int | None = None) -> None:
    """Run in each new worker: ignore Ctrl-C, die at once on SIGTERM, and die with the parent (``parent``: its pid,
    checked against a parent that died before the kernel was told). SIGTERM's default is set again because a forked
    worker inherits the parent's handler (the CLI's clean-up on SIGTERM), and a terminated pool must not wait for
    its workers to run a clean-up meant for the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the worker still ends when its pool closes
        return
    if parent is not None and os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
