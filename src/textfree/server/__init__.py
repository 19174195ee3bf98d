"""``textfree serve``: the HTTP server for text-free inference (optional extra: ``pip install "textfree[server]"``).

``create_app(ServerConfig(...))`` builds the FastAPI app; docs/server.md describes the routes, wire formats, error
codes, auth, limits and what crosses the wire.
"""

from .config import ServerConfig, config_help

__all__ = ["ServerConfig", "config_help", "create_app"]


def __getattr__(name: str):
    if name == "create_app":  # imports FastAPI: only when asked for
        from .app import create_app

        return create_app
    raise AttributeError(f"module 'textfree.server' has no attribute {name!r}")
