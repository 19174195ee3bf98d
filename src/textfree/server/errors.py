"""The server's one error type and its JSON shape: ``{"error": {"type": ..., "message": ...}}``."""

from __future__ import annotations

__all__ = ["ApiError", "error_body"]


class ApiError(Exception):
    """An error answered with ``status`` and a JSON body naming its ``type`` (a stable, machine-readable word)."""

    def __init__(self, status: int, type: str, message: str, *, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.type = type
        self.message = message
        self.headers = headers or {}


def error_body(type: str, message: str) -> dict:
    return {"error": {"type": type, "message": message}}
