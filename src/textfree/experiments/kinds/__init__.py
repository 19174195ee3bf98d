"""Built-in cell kinds. Importing this package registers them (see :mod:`..registry`)."""

from . import attacks, attributes, inversion, ner, ppft, privatization, rapt, snd, snd_update, substitution_inversion  # noqa: F401  # noqa: F401

__all__ = ["privatization", "ppft"]
