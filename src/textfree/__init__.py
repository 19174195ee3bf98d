"""textfree: use and run LLM services without the server ever seeing the user's text."""

__version__ = "0.1.0"
