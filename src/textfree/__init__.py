"""textfree: use and run LLM services without the server ever seeing the user's text."""

__version__ = "0.1.0"
__all__ = ["Client", "__version__"]


def __getattr__(name: str):
    """``textfree.Client`` without importing the HTTP client (httpx) on ``import textfree``."""
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(f"module 'textfree' has no attribute {name!r}")
