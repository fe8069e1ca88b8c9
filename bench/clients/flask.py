#!/usr/bin/python3
"""Requests per second through flask-limiter: the pklimit storage beside
limits' memory:// storage and the same app with no limiter, measured side
by side in one run with wrk (Debian's package) against werkzeug's threaded
server, every request on one hot key.

    venv/bin/python bench/clients/flask.py [--uri URI] [--connections 64]
        [--duration 10] [--threads 2] [--pool 16] [--headers] [--limit N] [--rounds 3]

URI is the pklimit storage's (default pklimit://: libpq's PG* environment)
and needs the pklimit package installed (pip install ./clients/python) and
the extension created in the database.  The limit (default a billion per
day) is high enough that nothing is refused; --limit 1 measures refusals.
Each app runs in its own process, measured one after another.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

# This file is named flask.py: keep its directory off the path so that
# "import flask" finds Flask, not this script.
sys.path[:] = [p for p in sys.path
               if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import flask  # noqa: E402


def build_app(mode, uri, limit, headers, pool):
    app = flask.Flask(f"bench-{mode}")

    def hello():
        return "ok"

    if mode == "none":
        app.route("/")(hello)
        return app
    from flask_limiter import Limiter

    options = {}
    if mode == "pklimit":
        import pklimit.limits  # noqa: F401  registers the scheme

        options = {"pool_min_size": pool, "pool_max_size": pool}
    limiter = Limiter(lambda: "hot", app=app, headers_enabled=headers,
                      storage_uri=uri if mode == "pklimit" else "memory://",
                      storage_options=options, strategy="fixed-window")
    app.route("/")(limiter.limit(limit)(hello))
    return app


def serve(args):
    import logging

    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = make_server("127.0.0.1", 0, build_app(args.mode, args.uri, args.limit, args.headers,
                                                   args.pool), threaded=True)
    print(server.server_port, flush=True)
    server.serve_forever()


def measure(args, mode):
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", mode,
                              "--uri", args.uri, "--limit", args.limit, "--pool", str(args.pool)]
                             + (["--headers"] if args.headers else []),
                             stdout=subprocess.PIPE, text=True)
    try:
        port = int(child.stdout.readline())
        url = f"http://127.0.0.1:{port}/"
        # a warm-up fills the pool and the server's threads
        subprocess.run(["wrk", "-t1", "-c8", "-d2s", url], check=True, capture_output=True)
        run = subprocess.run(["wrk", f"-t{args.threads}", f"-c{args.connections}",
                              f"-d{args.duration}s", "--latency", url],
                             check=True, capture_output=True, text=True).stdout
    finally:
        child.terminate()
        child.wait()
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", run).group(1))
    p50 = re.search(r"^\s+50%\s+(\S+)", run, re.M).group(1)
    p99 = re.search(r"^\s+99%\s+(\S+)", run, re.M).group(1)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", run)
    return rate, p50, p99, int(non2xx.group(1)) if non2xx else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", default=os.environ.get("PKLIMIT_BENCH_URI", "pklimit://"))
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--pool", type=int, default=16, help="the pklimit storage's pool size")
    parser.add_argument("--limit", default="1000000000 per day")
    parser.add_argument("--headers", action="store_true", help="headers_enabled=True")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the three, interleaved; the median round of each is shown")
    parser.add_argument("--serve", dest="mode", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode:
        return serve(args)
    if not shutil.which("wrk"):
        sys.exit("wrk is missing (apt-get install wrk)")

    print(f"wrk -t{args.threads} -c{args.connections} -d{args.duration}s, one hot key,"
          f" werkzeug threaded server, limit {args.limit!r}, headers {'on' if args.headers else 'off'},"
          f" pklimit pool {args.pool}")
    modes = ("none", "memory", "pklimit")
    # interleaved rounds, so that a slow spell of a shared machine falls
    # on every mode alike; each mode's median round is reported
    rounds = {mode: [] for mode in modes}
    for _ in range(args.rounds):
        for mode in modes:
            rounds[mode].append(measure(args, mode))
    results = {mode: sorted(rounds[mode])[len(rounds[mode]) // 2] for mode in modes}
    print(f"median of {args.rounds} rounds")
    print(f"{'storage':<10} {'req/s':>10} {'p50':>10} {'p99':>10} {'non-2xx':>9}")
    for mode, (rate, p50, p99, refused) in results.items():
        print(f"{mode:<10} {rate:>10.0f} {p50:>10} {p99:>10} {refused:>9}")
    none, memory, pk = (results[m][0] for m in ("none", "memory", "pklimit"))
    print(f"pklimit/memory = {pk / memory:.2f}, pklimit/none = {pk / none:.2f},"
          f" memory/none = {memory / none:.2f}")


if __name__ == "__main__":
    main()
