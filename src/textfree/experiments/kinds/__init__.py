"""Built-in cell kinds. Importing this package registers them (see :mod:`..registry`)."""

from . import ppft, privatization  # noqa: F401
from . import attacks, attributes, inversion, substitution_inversion  # noqa: F401

__all__ = ["privatization", "ppft"]
