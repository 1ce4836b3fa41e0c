"""`--mode serve` (`jaxnat.decoding.serve`): the HTTP JSON API over a loaded model: requests as translate and score
read them, one or a list, answered as they write them; what it refuses, with its status and one line; and a trained
model served as it translates."""

import contextlib
import json
import threading
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest

from jaxnat.decoding.request import Supports
from jaxnat.decoding.serve import make_server, Service
from jaxnat.errors import ConfigError
from tests.test_translate import stub_config


@contextlib.contextmanager
def running(service, max_body=1 << 20):
    """The service's server on a free port of this machine, serving in a thread: its URL."""
    server = make_server(service, "127.0.0.1", 0, max_body)
    # (its poll interval is what shutdown waits at most: 0.5 s by default, a tenth of a second each test here)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def call(url, body=None, raw: bytes | None = None):
    """(status, parsed JSON) of a GET (no body) or a POST."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Stub:
    spec = SimpleNamespace(name="m", supports=Supports(hard_constraints=True))
    config = stub_config()

    def __init__(self):
        self.asked = []

    def translate(self, texts, beam_size, batch_size, **options):
        self.asked.append((texts, options))
        return [{"hyp": f"<{t}>", "score": -1.0 if t != "inf" else float("-inf")} for t in texts]

    def start(self, init, phrases, is_hard, pairs, tgt_lang=None, given=None):
        """Every start fits this model (the line checks pass it)."""


def test_requests_are_translated_as_translate_lines_one_or_a_list():
    translator = Stub()
    with running(Service(translator, stub_config(), "runs/x")) as url:
        assert call(url) == (200, {"model": "m", "workdir": "runs/x", "endpoints": ["/translate"],
                                   "supports": {**call(url)[1]["supports"], "hard_constraints": True}})
        assert call(url + "/translate", {"src": "a", "id": 7}) == (200, {"src": "a", "id": 7, "hyp": "<a>",
                                                                          "score": -1.0})
        status, outs = call(url + "/translate", ["b", {"src": "c", "constraints": ["x"], "hard": True}, "", "inf"])
        assert status == 200 and [o["hyp"] for o in outs] == ["<b>", "<c>", "", "<inf>"]
        assert outs[3]["score"] is None  # strict JSON, as translate writes it
        assert translator.asked[-1] == (["b", "c", "inf"], {"nbest": 1, "mbr": "", "alignment": "", "inits": [
            None, None, None], "constraints": [None, ["x"], None], "hard": [False, True, False]})


@pytest.mark.parametrize("path, body, status, message", [
    ("/translate", b"{not json", 400, "the body is no UTF-8 JSON"),
    ("/translate", [{"src": "a"}, {"src": "b", "hard": True}], 400,
     'request:2: "hard": true needs "constraints"'),
    ("/translate", [{"src": "a"}, 3], 400, "request:2: a request is a JSON object"),
    ("/translate", [], 400, "an empty list: nothing to do"),
    ("/translate", {"src": "a", "init": "b"}, 400, "model 'm' does not take initial hypotheses"),
    ("/score", {"src": "a", "tgt": "b"}, 404, "no POST /score here: POST /translate"),
    ("/translate", "x" * 2000, 413, "a body of 2002 bytes is over the server's 1000 (--max-body)"),
])
def test_what_the_server_refuses_is_one_line_with_its_status(path, body, status, message):
    translator = Stub()
    with running(Service(translator, stub_config(), "runs/x"), max_body=1000) as url:
        got, answer = call(url + path, raw=body if isinstance(body, bytes) else json.dumps(body).encode())
        assert got == status and message in answer["error"] and "\n" not in answer["error"], answer
        assert translator.asked == []  # nothing decoded for a refused request
        assert call(url + "/nowhere")[0] == 404


@pytest.mark.slow
def test_a_trained_model_serves_what_it_translates_and_scores(ar_run):
    """The AR run behind the server: its outputs are translate's, with their word alignments; the translations
    score as translate scored them."""
    from jaxnat.config import workdir_config
    from jaxnat.restore import load_translator

    config = workdir_config(str(ar_run))
    config.eval.alignment = "words"
    translator = load_translator(config, str(ar_run))
    texts = ["the old man reads a book .", "a dog runs ."]
    want = translator.translate(texts, alignment="words")
    with running(Service(translator, config, str(ar_run))) as url:
        assert call(url)[1]["endpoints"] == ["/score", "/translate"]
        status, outs = call(url + "/translate", texts)
        assert status == 200 and [(o["hyp"], o["alignment"]) for o in outs] == [(w["hyp"], w["alignment"])
                                                                                for w in want]
        status, scored = call(url + "/score", [{"src": s, "tgt": o["hyp"]} for s, o in zip(texts, outs)])
        assert status == 200
        assert [s["score"] for s in scored] == pytest.approx([o["score"] for o in outs], abs=1e-5)


def test_an_address_in_use_is_one_line():
    with running(Service(Stub(), stub_config(), "runs/x")) as url:
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises(ConfigError, match=rf"^--host 127.0.0.1 --port {port}: the address is in use \(.*\); "
                                              rf"choose another --port \(or --host\)$"):
            make_server(None, "127.0.0.1", port)


def test_requests_that_wait_for_the_model_are_decoded_as_one_job():
    """While the model decodes one request, five others arrive (one a list of two): the next job decodes the six
    sentences as one input, oldest first, and each request gets its own outputs back; where that job fails, each of
    its requests runs alone, so that the error reaches the request it comes from only."""
    import time

    from jaxnat.errors import DataError

    busy, gate = threading.Event(), threading.Event()

    class Slow(Stub):
        def translate(self, texts, beam_size, batch_size, **options):
            if not self.asked:  # the first job: busy until the others wait
                busy.set()
                gate.wait(30)
            if "bad" in texts:
                raise DataError("this sentence breaks the model")
            return super().translate(texts, beam_size, batch_size, **options)

    for bad in (False, True):
        busy.clear()
        gate.clear()
        translator = Slow()
        service = Service(translator, stub_config(), "runs/x")
        results = {}

        def ask(name, body):
            try:
                results[name] = service.run("/translate", body)
            except DataError as e:
                results[name] = str(e)

        first = threading.Thread(target=ask, args=("first", "a"))
        first.start()
        assert busy.wait(30)
        bodies = {f"r{i}": f"s{i}" for i in range(4)} | {"pair": ["x", "bad" if bad else "y"]}
        threads = []
        for name, body in bodies.items():
            threads.append(threading.Thread(target=ask, args=(name, body)))
            threads[-1].start()
            while len(service.waiting) < len(threads):  # arrival order is the job's order
                time.sleep(0.001)
        gate.set()
        for t in [first, *threads]:
            t.join(30)
        assert results["first"]["hyp"] == "<a>" and [results[f"r{i}"]["hyp"] for i in range(4)] == [
            f"<s{i}>" for i in range(4)]
        if bad:
            assert results["pair"] == "this sentence breaks the model" and service.jobs_run == 1 + 5
        else:
            assert [o["hyp"] for o in results["pair"]] == ["<x>", "<y>"] and service.jobs_run == 2
            assert translator.asked[1][0] == ["s0", "s1", "s2", "s3", "x", "y"]
