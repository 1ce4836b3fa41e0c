"""The tests' Python commands, forked from a server that has imported jax and jaxnat already
(`tests/cli_server.py`) instead of started from scratch: the same process boundary, exit status, output and
signals, without 1.5 s of imports each time.

`run` stands for ``subprocess.run(cmd, capture_output=True, text=True)``, `start` for ``subprocess.Popen(cmd,
stdout=PIPE, stderr=STDOUT, text=True)`` (a process to signal, then `communicate` with). A command that is not
``[sys.executable, "-m", MODULE, ...]`` or ``[sys.executable, SCRIPT, ...]``, whose environment differs from this
process's in what the imports read (JAX_*, XLA_*, PYTHON*, TF_*), or that comes while a started one still runs
(the server runs one command at a time), runs as a real subprocess.

`forking_python` stands in for the Python a program starts its own commands with (launch/*.py's --python): their
`python -m jaxnat.main` runs are forked from a server of their own in the same way.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_server.py")
READ_AT_IMPORT = ("JAX_", "XLA_", "PYTHON", "TF_")
_server: subprocess.Popen | None = None
_running: Forked | None = None


def _start_server() -> subprocess.Popen:
    global _server
    if _server is None or _server.poll() is not None:
        _server = subprocess.Popen([sys.executable, SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        atexit.register(_stop, _server)
    return _server


def _stop(server: subprocess.Popen) -> None:
    """Ends the server and reaps it, its pipes closed (no ResourceWarning at the session's end)."""
    server.kill()
    server.wait()
    server.stdin.close()
    server.stdout.close()


def _reply(timeout: float | None) -> dict | None:
    """The server's next reply line, or None when none came within ``timeout`` seconds. Read a byte at a time
    from the unbuffered pipe, so that nothing of a later reply sits in a buffer that `select` cannot see."""
    line = b""
    while not line.endswith(b"\n"):
        if timeout is not None and not select.select([_server.stdout], [], [], timeout)[0]:
            return None
        byte = _server.stdout.read(1)
        if not byte:
            raise RuntimeError(f"the test CLI server ({SERVER}) ended")
        line += byte
    return json.loads(line)


def read_at_import(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(READ_AT_IMPORT)}


def forkable(cmd: list[str], env: dict, server_env: dict) -> bool:
    """Whether a server whose imports read ``server_env`` runs ``cmd`` (with ``env``) as the interpreter would."""
    if len(cmd) < 2 or cmd[0] != sys.executable:
        return False
    if cmd[1] == "-m" and len(cmd) < 3 or cmd[1].startswith("-") and cmd[1] != "-m":
        return False
    return read_at_import(env) == read_at_import(server_env)


def target(cmd: list[str]) -> dict:
    """What a server's request names to run: the module or script of ``cmd`` and its arguments."""
    return {"module": cmd[2], "args": cmd[3:]} if cmd[1] == "-m" else {"script": cmd[1], "args": cmd[2:]}


def _forkable(cmd, env) -> bool:
    return _running is None and forkable(cmd, env, dict(os.environ))


class Forked:
    """A command forked by the server: ``pid``, ``send_signal``, ``communicate`` and ``returncode`` as a
    `subprocess.Popen`'s."""

    def __init__(self, cmd: list[str], cwd: str, env: dict, input: str | None, merge_stderr: bool):
        global _running
        self.args, self.returncode, self.merged = cmd, None, merge_stderr
        self.tmp = tempfile.mkdtemp(prefix="jaxnat-cli-")
        self.streams = {name: os.path.join(self.tmp, name) for name in ("stdin", "stdout", "stderr")}
        if merge_stderr:
            self.streams["stderr"] = self.streams["stdout"]
        with open(self.streams["stdin"], "w") as f:
            f.write(input or "")
        for name in ("stdout", "stderr"):
            open(self.streams[name], "w").close()
        _start_server().stdin.write((json.dumps({**target(cmd), "cwd": str(cwd), "env": env, **self.streams}) + "\n")
                                    .encode())
        self.pid = _reply(None)["pid"]
        _running = self

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        global _running
        if self.returncode is None:
            ended = _reply(timeout)
            if ended is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode, _running = os.waitstatus_to_exitcode(ended["status"]), None
        out, err = (self._read(name) for name in ("stdout", "stderr"))
        shutil.rmtree(self.tmp, ignore_errors=True)
        return out, None if self.merged else err

    def _read(self, name: str) -> str:
        with open(self.streams[name]) as f:
            return f.read()


def start(cmd, *, cwd=None, env=None) -> Forked | subprocess.Popen:
    cmd, cwd, env = [str(c) for c in cmd], os.getcwd() if cwd is None else cwd, dict(os.environ if env is None else env)
    if not _forkable(cmd, env):
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return Forked(cmd, cwd, env, None, merge_stderr=True)


def run(cmd, *, cwd=None, env=None, input=None, timeout=600) -> subprocess.CompletedProcess:
    cmd, cwd, env = [str(c) for c in cmd], os.getcwd() if cwd is None else cwd, dict(os.environ if env is None else env)
    if not _forkable(cmd, env):
        return subprocess.run(cmd, cwd=cwd, env=env, input=input, capture_output=True, text=True, timeout=timeout)
    forked = Forked(cmd, cwd, env, input, merge_stderr=False)
    try:
        out, err = forked.communicate(timeout)
    except subprocess.TimeoutExpired:
        forked.send_signal(signal.SIGKILL)
        forked.communicate()
        raise
    return subprocess.CompletedProcess(cmd, forked.returncode, out, err)


@contextlib.contextmanager
def forking_python(directory):
    """Yields the path of an executable that a program can start its commands with instead of ``sys.executable``
    (launch/*.py's --python): each command that `run` would fork (the same interpreter's ``-m MODULE`` or SCRIPT,
    imports that read the same environment) is forked from a server of its own, with the stand-in's environment,
    working directory and standard streams, and the stand-in ends as the command does (tests/python_stand_in.py);
    any other command runs as the interpreter itself would. One command at a time, as a pipeline's jobs run. The
    server talks through two named pipes in ``directory``, which this process holds open for reading and writing
    too, so that neither end ever sees the other closed between commands; it ends with the context."""
    directory = str(directory)
    paths = {name: os.path.join(directory, name) for name in ("requests", "replies")}
    for path in paths.values():
        os.mkfifo(path)
    stand_in, script = os.path.join(directory, "python"), os.path.join(os.path.dirname(SERVER), "python_stand_in.py")
    with open(stand_in, "w") as f:  # -S: the stand-in needs the standard library only (a hundredth of a second)
        f.write(f"#!/bin/sh\nexec '{sys.executable}' -S '{script}' '{directory}' \"$@\"\n")
    os.chmod(stand_in, 0o755)
    fds = {name: os.open(path, os.O_RDWR) for name, path in paths.items()}  # Linux opens a FIFO so at once
    server = subprocess.Popen([sys.executable, SERVER], stdin=fds["requests"], stdout=fds["replies"])
    with open(os.path.join(directory, "server.json"), "w") as f:
        json.dump({"python": sys.executable, "env": read_at_import(os.environ), "pid": server.pid}, f)
    try:
        yield stand_in
    finally:
        server.kill()
        server.wait()
        for fd in fds.values():
            os.close(fd)
