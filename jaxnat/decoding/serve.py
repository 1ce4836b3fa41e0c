"""`--mode serve`: a trained model kept loaded behind an HTTP JSON API, for a CAT tool, a web page or a pipeline that
translates as it goes (as marian-server and OpenNMT's REST server serve theirs), its compiled programs kept between
requests.

    GET  /            {"model", "workdir", "endpoints", "supports"}: what the server takes
    POST /translate   a request or a list of them, each a JSON object as `--mode translate` reads a JSON line
                      ({"src": ..., "constraints": [...], "hard": true, "prefix": ..., "init": ...}) or a
                      string (its source) → the output, or the list of outputs in order, each as translate writes its
                      line (the request's keys, "hyp", "score", and what eval.nbest, eval.alignment, eval.glossary
                      add)
    POST /score       the same of `--mode score`'s requests ({"src", "tgt"}) → each with "logp", "score", "length"

A request translate or score would refuse is refused whole with status 400 and {"error": one line} naming it
("request:2: ..."), before anything is decoded; a body that is no JSON, 400; one over --max-body bytes, 413; another
path, 404. The model computes one job at a time, and the items of one request are batched together as translate
batches its lines. Requests that arrive while the model is busy wait together: the next job takes all of them that
are waiting at the same path (up to `MERGE_ITEMS` items, oldest first) and decodes them as one input, so that many
clients sending a sentence each get the throughput of batched decoding, with no added wait when the model is idle
(`Service.run`: whichever request's thread gets the model runs the waiting ones). Each request is logged with its
size and time; Ctrl-C or SIGTERM stops the server.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from jaxnat.decoding.score_io import SCORE
from jaxnat.decoding.translate_io import output_line, translate_job
from jaxnat.errors import ConfigError, DataError, JaxnatError

log = logging.getLogger("jaxnat")
MAX_BODY = 16 << 20  # bytes: a request larger than this is refused (413), not read
# the most items one job takes from waiting requests (a request larger than this is one job of its own): enough for
# full batches, few enough that a request that arrives meanwhile waits for one job, not for a flood of them
MERGE_ITEMS = 256


class Waiting:
    """One request's checked items waiting for the model at ``path``; ``outs`` (or ``error``) once decoded."""

    def __init__(self, path: str, requests: list[dict]):
        self.path, self.requests = path, requests
        self.outs: list | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class Service:
    """The jobs a server runs on one `Translator`, one at a time, each over the requests waiting for it."""

    def __init__(self, translator, config, workdir: str):
        self.translator, self.config, self.workdir = translator, config, workdir
        translator.fit_rows = True  # a request of one sentence decodes one row, not eval.batch_size
        self.jobs = {"/translate": translate_job(config)}
        if translator.spec.supports.score:
            self.jobs["/score"] = SCORE
        self.model = threading.Lock()  # held while a job runs
        self.queue = threading.Lock()  # guards `waiting`
        self.waiting: list[Waiting] = []
        self.jobs_run = 0  # jobs the model ran (a log line, and the tests, count them against the requests)

    def info(self) -> dict:
        supports = dataclasses.asdict(self.translator.spec.supports)
        return {"model": self.translator.spec.name, "workdir": self.workdir, "endpoints": sorted(self.jobs),
                "supports": {k: v for k, v in supports.items() if k != "note"}}

    def run(self, path: str, body: object) -> object:
        """The response to ``body`` (parsed JSON) at ``path``: a list of output lines for a list, one for one
        request; a one-line DataError for a request the job refuses."""
        job = self.jobs[path]
        items = body if isinstance(body, list) else [body]
        if not items:
            raise DataError("an empty list: nothing to do")
        lines = []
        plain = job is not SCORE  # a translation's request may be its source alone
        for n, item in enumerate(items, 1):
            if isinstance(item, str) and plain:
                item = {"src": item}
            if not isinstance(item, dict):
                raise DataError(f"request:{n}: a request is a JSON object ({{\"src\": ...}}){' or a string' * plain}, "
                                f"not {type(item).__name__}")
            lines.append(json.dumps(item, ensure_ascii=False))
        requests = job.parse(lines, "request")
        # checked while another request may decode (tokenizing only), so that it waits checked, ready to join the next
        job.check(requests, self.translator, "request")
        mine = Waiting(path, requests)
        with self.queue:
            self.waiting.append(mine)
        while not mine.done.is_set():
            with self.model:  # whoever gets the model decodes what waits, this request or others with it
                if not mine.done.is_set():
                    self.run_waiting(path)
        if mine.error is not None:
            raise mine.error
        written = [output_line(r, o) for r, o in zip(requests, mine.outs)]
        return written if isinstance(body, list) else written[0]

    def run_waiting(self, path: str) -> None:
        """One job over the requests waiting at ``path``, oldest first, as long as they stay within `MERGE_ITEMS`
        items (the oldest always); the model is held. Where it fails, each of them runs alone, so that an error is
        told to the request it comes from."""
        with self.queue:
            taken, items = [], 0
            for w in self.waiting:
                if w.path == path and (not taken or items + len(w.requests) <= MERGE_ITEMS):
                    taken.append(w)
                    items += len(w.requests)
            self.waiting = [w for w in self.waiting if w not in taken]
        if not taken:  # (this request's job ran meanwhile: `run` sees it done)
            return
        job = self.jobs[path]
        try:
            try:
                outs = job.run(self.translator, [r for w in taken for r in w.requests], self.config)
                self.jobs_run += 1
                for w in taken:
                    w.outs, outs = outs[:len(w.requests)], outs[len(w.requests):]
            except Exception as e:
                if len(taken) == 1:
                    raise
                log.info("a job of %d waiting requests failed (%s); each runs alone", len(taken), e)
                for w in taken:
                    try:
                        w.outs = job.run(self.translator, w.requests, self.config)
                    except Exception as alone:
                        w.error = alone
                    self.jobs_run += 1
            if len(taken) > 1:
                log.info("decoded %d waiting requests (%d items) as one job", len(taken), items)
        except Exception as e:
            taken[0].error = e
        finally:  # a request is never left waiting: one the job did not answer (it was stopped) gets an error
            for w in taken:
                if w.outs is None and w.error is None:
                    w.error = RuntimeError("the server stopped before this request was decoded")
                w.done.set()


class Server(ThreadingHTTPServer):
    # connections that wait to be accepted: socketserver's 5 reset the sixth of many clients connecting at once
    request_queue_size = 128
    daemon_threads = True  # a client's thread does not keep the server's process from ending


def make_server(service: Service | None, host: str, port: int, max_body: int = MAX_BODY) -> ThreadingHTTPServer:
    """An HTTP server of ``service`` (its ``service``, which may be set later: the address is had before the model is
    loaded) bound to ``host``:``port`` (0: a free port, `server.server_address` says which); a one-line ConfigError
    where the address cannot be had."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "jaxnat"

        @property
        def service(self) -> Service:
            return self.server.service

        def endpoints(self) -> str:
            return ", POST ".join(sorted(self.service.jobs))

        def reply(self, status: int, value: object) -> None:
            data = json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") in ("", "/info"):
                self.reply(200, self.service.info())
            else:
                self.reply(404, {"error": f"no {self.path} here: GET /, POST {self.endpoints()}"})

        def do_POST(self):
            started = time.perf_counter()
            if self.path not in self.service.jobs:
                self.reply(404, {"error": f"no POST {self.path} here: POST {self.endpoints()}"})
                return
            size = self.headers.get("Content-Length")
            if size is None or not size.isdigit():
                self.reply(411, {"error": "a POST needs its Content-Length"})
                return
            if int(size) > max_body:
                self.reply(413, {"error": f"a body of {int(size)} bytes is over the server's {max_body} (--max-body); "
                                          f"send the sentences in smaller lists"})
                self.close_connection = True
                return
            raw = self.rfile.read(int(size))
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError) as e:
                self.reply(400, {"error": f"the body is no UTF-8 JSON ({str(e).splitlines()[0]})"})
                return
            try:
                value = self.service.run(self.path, body)
            except JaxnatError as e:
                self.reply(400, {"error": str(e)})
                return
            except Exception as e:  # a bug: the client gets one line, the log the traceback
                log.exception("POST %s failed", self.path)
                first = str(e).splitlines()[0] if str(e) else ""
                self.reply(500, {"error": f"internal error: {type(e).__name__}: {first}"})
                return
            self.reply(200, value)
            log.info("POST %s: %d request%s in %.2f s", self.path, len(body) if isinstance(body, list) else 1,
                     "s" if isinstance(body, list) and len(body) != 1 else "", time.perf_counter() - started)

        def log_message(self, format, *args):  # each request is logged above, once
            log.debug("%s %s", self.address_string(), format % args)

    try:
        server = Server((host, port), Handler)
    except OSError as e:
        why = "is in use" if e.errno == errno.EADDRINUSE else "cannot be had"
        raise ConfigError(f"--host {host} --port {port}: the address {why} ({e.strerror}); choose another --port (or "
                          f"--host)") from None
    server.service = service
    return server


def serve(load_translator, config, workdir: str, host: str, port: int, max_body: int = MAX_BODY) -> None:
    """`--mode serve`: loads the model, then answers requests until Ctrl-C or SIGTERM."""
    import jax

    if jax.process_count() > 1:
        raise ConfigError("--mode serve runs in a single process; start it without the multi-process launcher")
    server = make_server(None, host, port, max_body)  # first: a port in use is said before the model loads
    service = server.service = Service(load_translator(), config, workdir)
    bound = server.server_address
    log.info("serving %s (model %r) at http://%s:%d: POST %s; Ctrl-C stops", workdir, service.translator.spec.name,
             bound[0], bound[1], ", POST ".join(sorted(service.jobs)))
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        log.info("stopped serving")
    finally:
        server.server_close()
