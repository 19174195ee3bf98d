"""Training, shared by every system: one Accelerate loop and what it writes.

* :mod:`.loop`: :func:`~textfree.training.loop.fit`, the loop (resumable, weight averaging, ``accelerate launch``);
* :mod:`.config`: :class:`~textfree.training.config.LoopConfig`, its settings;
* :mod:`.schedule`: the learning-rate schedule;
* :mod:`.checkpoint`: the one checkpoint format (safetensors + JSON);
* :mod:`.runs`: run directories, summaries and fingerprints;
* :mod:`.average`: the exponential moving average of the weights.

Import from the submodules: this package imports nothing on its own, so that a light module can use one piece
without loading torch's training stack.
"""
