"""The session folder written by ``gpuprof run`` and read by ``gpuprof analyze``.

See :mod:`gpuprof.session.layout` for the documented, versioned format.
"""

from gpuprof.session.layout import SESSION_SCHEMA, is_session
from gpuprof.session.reader import Session, read_session

__all__ = ["SESSION_SCHEMA", "Session", "is_session", "read_session"]
