"""Python clients of the pklimit PostgreSQL extension.

``import pklimit.limits`` registers the storage of the ``limits`` library
(and so of flask-limiter and slowapi) for the ``pklimit+postgresql://``,
``pklimit+postgres://`` and ``pklimit://`` URL schemes.
"""

__version__ = "0.4.0"
