"""A fork server for the tests' command-line runs (`tests/cli.py` starts one per test process).

Every `python -m jaxnat.main ...` a test runs spends about 1.5 s of CPU importing jax, flax, optax, orbax and
jaxnat before it does anything, and the suite runs over a hundred of them. This process imports them once and
then, per request, forks a child that becomes the requested command: its arguments, working directory,
environment and standard streams (files the requester names), run as ``python -m MODULE`` or ``python SCRIPT``
would run it (`runpy`, ``__main__``, the same ``sys.path[0]``), exiting the way the interpreter exits. No XLA
backend starts here, so the child starts its own, as a fresh process would.

Protocol (JSON lines): the requester writes {"module" or "script", "args", "cwd", "env", "stdin", "stdout",
"stderr"} to this process's standard input; it answers {"pid": N} once the child runs, then {"status": S} (the
raw wait status) once it has ended. It exits when its standard input closes.
"""

import atexit
import contextlib
import gc
import json
import logging
import os
import runpy
import sys
import threading

import flax.linen  # noqa: F401  (the imports of a CLI run, done once)
import jax  # noqa: F401
import numpy  # noqa: F401
import optax  # noqa: F401
import orbax.checkpoint  # noqa: F401
import sacrebleu  # noqa: F401
import sacremoses  # noqa: F401  (imported where Moses words are first needed: a third of a second each run)
import sentencepiece  # noqa: F401

import jaxnat.evaluate  # noqa: F401
import jaxnat.restore  # noqa: F401
import jaxnat.training.trainer  # noqa: F401

# as a fresh interpreter has it: an import above (orbax) configured the root logger, which would turn the
# commands' own `logging.basicConfig` into a no-op
logging.root.handlers.clear()
logging.root.setLevel(logging.WARNING)


def serve() -> dict:
    """Answers requests until standard input closes (then exits); returns a request in the forked child."""
    gc.freeze()  # what is imported stays put: the children's collections do not walk (and so copy) it
    requests = os.fdopen(os.dup(0), "r")
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            return request
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": status}) + "\n")
    sys.exit(0)


def become(request: dict) -> None:
    """Turns this (forked) process into the requested command, short of running it."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # appending: stdout and stderr may be one file (stderr=STDOUT)
    out = os.O_WRONLY | os.O_APPEND
    for fd, (name, mode) in enumerate((("stdin", os.O_RDONLY), ("stdout", out), ("stderr", out))):
        target = os.open(request[name], mode)
        os.dup2(target, fd)
        os.close(target)
    # the standard streams as a fresh interpreter opens them for files: block-buffered output, line-buffered errors
    sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
    sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
    sys.stderr = sys.__stderr__ = open(2, "w", closefd=False, buffering=1, errors="backslashreplace")


def run(request: dict) -> int:
    """Runs the command as the interpreter would; its exit status."""
    try:
        if "module" in request:  # python -m MODULE: sys.path[0] is the working directory
            sys.path[0] = os.getcwd()
            sys.argv = [request["module"], *request["args"]]
            sys.modules.pop(request["module"], None)  # imported here already: run afresh, as `python -m` would
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        else:  # python SCRIPT: sys.path[0] is the script's directory
            script = os.path.abspath(request["script"])
            sys.path[0] = os.path.dirname(script)
            sys.argv = [request["script"], *request["args"]]
            runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        sys.excepthook(*sys.exc_info())
        return 1


def exit_like_the_interpreter(status: int) -> None:
    """What the interpreter does on exit that anyone can see (join the non-daemon threads, atexit, flush the
    streams), then `os._exit`: tearing down every module, as a real exit would, would touch, and so copy, every page
    the child shares with this server (half a second each time)."""
    threading._shutdown()  # the interpreter's own wait for non-daemon threads (and their executors' atexit hooks)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream the command closed, or a full disk
            stream.flush()
    os._exit(status)


if __name__ == "__main__":
    job = serve()
    become(job)
    exit_like_the_interpreter(run(job))
