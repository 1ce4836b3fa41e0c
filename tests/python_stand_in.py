"""The Python that `tests.cli.forking_python` writes a stand-in for (``python -S python_stand_in.py DIRECTORY
ARGS...``): runs ``python ARGS...`` forked from the server that talks through DIRECTORY's named pipes, with this
process's environment, working directory and standard streams, and ends as the command ended (its exit status, or
the signal that ended it); SIGTERM and SIGINT reach the command. A command the server must not fork runs as the
interpreter itself would."""

import json
import os
import select
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests import cli  # noqa: E402  (the standard library only)


def _ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie its parent has not waited for yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _reply(replies, server: int) -> dict:
    """The server's next reply line, read a byte at a time (nothing of the next one buffered here); an error once
    the server has ended without it, where reading would wait forever (the test process holds the pipe open)."""
    line = b""
    while not line.endswith(b"\n"):
        if select.select([replies], [], [], 1.0)[0]:
            line += os.read(replies.fileno(), 1)
        elif _ended(server):
            raise SystemExit(f"python_stand_in.py: the server {server} ended before it answered")
    return json.loads(line)


def main(directory: str, args: list[str]) -> None:
    with open(os.path.join(directory, "server.json")) as f:
        server = json.load(f)
    cmd, env = [server["python"], *args], dict(os.environ)
    if not cli.forkable(cmd, env, server["env"]):
        os.execv(cmd[0], cmd)
    # the server's child opens this process's own streams (a pipeline's log file, opened to append)
    streams = {name: f"/proc/{os.getpid()}/fd/{fd}" for fd, name in enumerate(("stdin", "stdout", "stderr"))}
    with open(os.path.join(directory, "requests"), "w") as requests:
        requests.write(json.dumps({**cli.target(cmd), "cwd": os.getcwd(), "env": env, **streams}) + "\n")
    with open(os.path.join(directory, "replies"), "rb", buffering=0) as replies:
        pid = _reply(replies, server["pid"])["pid"]
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda received, _: os.kill(pid, received))
        code = os.waitstatus_to_exitcode(_reply(replies, server["pid"])["status"])
    if code < 0:  # ended by a signal: so is this process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
