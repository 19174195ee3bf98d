"""Split-N-Denoise (Mai et al. 2023): the client runs only the token-embedding layer and adds clipped d_chi noise,
the server runs the rest of the encoder, and the client denoises the answer with a small transformer that sees its
own noise. See ``docs/snd.md``.

* :mod:`.denoiser`: the denoiser model and its one-file format;
* :mod:`.noise`: the client's noise, clipped d_chi noise per token and the effective noise (one function for all);
* :mod:`.corpus`: the public training text (never PUPA, Pri-* or an evaluation split);
* :mod:`.train`: training the denoiser on that text with the shared loop (``textfree snd train``);
* :mod:`.train_config`: its settings, :class:`~textfree.snd.train_config.DenoiserTrainConfig` (no torch);
"""
