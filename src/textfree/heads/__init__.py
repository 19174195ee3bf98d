"""Heads over released vectors, shared by PPFT's answer head and the attacks: see :mod:`.classifier`."""
