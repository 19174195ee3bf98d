"""Built-in cell kinds. Importing this package registers them (see :mod:`..registry`)."""

from . import (  # noqa: F401
    attacks,
    attributes,
    inversion,
    ner,
    ppft,
    privacy_restore,
    privatization,
    rapt,
    rapt_qa,
    snd,
    snd_update,
    substitution_inversion,
    text_inversion,
)

__all__ = ["privatization", "ppft"]
