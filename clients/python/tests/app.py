"""The Flask application under test: one route limited by flask-limiter
with the pklimit storage.  Each create_app() is one replica: its own
Limiter, storage and pool.

    python app.py STORAGE_URI LIMIT    serves it on 127.0.0.1, a free port,
                                       and prints "listening on <url>"
"""

import contextlib
import sys

import flask
from flask_limiter import Limiter
from werkzeug.serving import make_server

import pklimit.limits  # noqa: F401  registers the pklimit+postgresql:// scheme


def client_key():
    """Each test names its client, so that tests never share a count."""
    return flask.request.headers.get("X-Client", "anonymous")


class RequestConnection:
    """A pool for the storage that hands it the request's own connection,
    inside the transaction the application opened."""

    @staticmethod
    def connection():
        return contextlib.nullcontext(flask.g.db)


def create_app(storage_uri, limit="5 per hour", *, swallow_errors=False, name="replica",
               app_transaction_pool=None, **storage_options):
    app = flask.Flask(name)

    @app.before_request
    def tenant_of_request():
        flask.g.tenant = flask.request.headers.get("X-Tenant", "")

    if app_transaction_pool is not None:
        # The application's transaction, opened before the limiter runs and
        # rolled back after the response: the storage's statements run in it.
        @app.before_request
        def begin():
            flask.g.db = app_transaction_pool.getconn()
            flask.g.db.execute("INSERT INTO app_log VALUES (%s)", (client_key(),))

        @app.teardown_request
        def rollback(_exc):
            db = flask.g.pop("db", None)
            if db is not None:
                db.rollback()
                app_transaction_pool.putconn(db)

        storage_options["pool"] = RequestConnection()

    storage_options.setdefault("tenant", lambda: flask.g.get("tenant", ""))
    limiter = Limiter(client_key, app=app, storage_uri=storage_uri,
                      storage_options=storage_options, headers_enabled=True,
                      swallow_errors=swallow_errors, strategy="fixed-window")

    @app.route("/limited")
    @limiter.limit(limit)
    def limited():
        return "ok"

    app.limiter = limiter
    return app


def serve(app):
    """A threaded werkzeug server on a free port (call serve_forever)."""
    return make_server("127.0.0.1", 0, app, threaded=True)


def main():
    uri, limit = sys.argv[1], sys.argv[2]
    server = serve(create_app(uri, limit, name="restarted"))
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

