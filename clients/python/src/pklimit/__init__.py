"""Python clients of the pklimit PostgreSQL extension.

``import pklimit.limits`` registers the storage of the ``limits`` library
(and so of flask-limiter and slowapi) for the ``pklimit+postgresql://``,
``pklimit+postgres://`` and ``pklimit://`` URL schemes; ``pklimit.lease``
is a concurrency limit on pklimit's leases (at most N at once per key).
"""

__version__ = "0.4.0"

from .leases import Lease, LeaseRefused, lease  # noqa: E402

__all__ = ["lease", "Lease", "LeaseRefused"]
