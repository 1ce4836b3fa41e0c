"""`--mode serve` under many clients: sentences a second and each request's latency when C clients each send one
sentence at a time, with the waiting requests decoded together (the server's default) and one request a job (its
behaviour before), side by side in one run.

    python bench/serve_load.py --data-dir ../shared/data/multi30k --split test_2016_flickr --src en \
        [--clients 1,8,32] [--sentences 256] [--repeats 3] WORKDIR

The server runs in this process on a free port of 127.0.0.1 (`jaxnat.decoding.serve.make_server`); each client is a
process of its own that POSTs its sentences to /translate one by one over HTTP, the next when the last is answered. Each
setting runs once untimed first, which compiles the request shapes it meets (the jobs of waiting requests take
shapes of several rows); each figure is the median of --repeats passes, the two ways alternating within each repeat
so that both see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def post(url: str, body) -> object:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def client(url: str, sentences: list[str]) -> list[float]:
    """One client: its sentences posted one by one, each when the last is answered → each request's seconds."""
    latencies = []
    for sentence in sentences:
        start = time.perf_counter()
        post(url, sentence)
        latencies.append(time.perf_counter() - start)
    return latencies


def load(pool, url: str, sentences: list[str], clients: int) -> tuple[float, list[float]]:
    """(seconds for all sentences, each request's seconds) with ``clients`` client processes of ``pool`` (processes,
    so that their HTTP and JSON work does not hold the server's interpreter lock), sentence i by client i % clients."""
    start = time.perf_counter()
    done = pool.starmap(client, [(url, sentences[c::clients]) for c in range(clients)])
    return time.perf_counter() - start, [x for latencies in done for x in latencies]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir")
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--split", required=True)
    parser.add_argument("--src", default="en")
    parser.add_argument("--clients", default="1,8,32", help="client counts, comma-separated")
    parser.add_argument("--sentences", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    if min(clients + [args.sentences, args.repeats]) < 1:
        raise SystemExit("error: --clients, --sentences and --repeats must be at least 1")

    from jaxnat.config import workdir_config
    from jaxnat.data.text import read_lines
    from jaxnat.decoding import serve
    from jaxnat.provenance import machine
    from jaxnat.restore import load_translator

    path = os.path.join(args.data_dir, f"{args.split}.{args.src}")
    sentences = read_lines(path + ".gz" if os.path.exists(path + ".gz") else path)[:args.sentences]
    config = workdir_config(args.workdir)
    service = serve.Service(load_translator(config, args.workdir), config, args.workdir)
    server = serve.make_server(service, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    pool = multiprocessing.get_context("spawn").Pool(max(clients))  # (spawned: no copy of this process's XLA)
    url = f"http://127.0.0.1:{server.server_address[1]}/translate"
    merged = serve.MERGE_ITEMS
    print(f"{machine()}; {args.workdir}, {len(sentences)} sentences of {args.split}, beam {config.eval.beam_size}, "
          f"batch {config.eval.batch_size}, median of {args.repeats}")
    print("| clients | requests a job | sentences/s | median latency (ms) | 90th percentile (ms) | jobs run |")
    print("|---|---|---|---|---|---|")
    for c in clients:
        runs = {merged: [], 1: []}
        for limit in runs:  # untimed: compiles the shapes these jobs take
            serve.MERGE_ITEMS = limit
            load(pool, url, sentences, c)
        for _ in range(args.repeats):
            for limit in runs:
                serve.MERGE_ITEMS = limit
                before = service.jobs_run
                seconds, latencies = load(pool, url, sentences, c)
                runs[limit].append((seconds, latencies, service.jobs_run - before))
        for limit, done in runs.items():
            seconds = statistics.median(s for s, _, _ in done)
            latencies = sorted(x for _, lat, _ in done for x in lat)
            print(f"| {c} | {'waiting ones together' if limit > 1 else 'one'} | {len(sentences) / seconds:.1f} | "
                  f"{1000 * statistics.median(latencies):.1f} | {1000 * latencies[int(0.9 * len(latencies))]:.1f} | "
                  f"{statistics.median(j for _, _, j in done):.0f} |")
    serve.MERGE_ITEMS = merged
    pool.close()
    server.shutdown()
    return 0


if __name__ == "__main__":
    from jaxnat.errors import run_script

    run_script(main)
