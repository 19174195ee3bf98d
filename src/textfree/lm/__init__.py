"""Language models, shared by every system: load any Hugging Face model, adapt it, generate from it.

* :mod:`.loading`: causal LMs and encoders by hub name or local path (``from_pretrained``), tiny ones for tests;
* :mod:`.adapters`: :class:`~textfree.lm.adapters.AdapterSettings`, one setting for every ``peft`` method (LoRA,
  prompt tuning, prefix tuning, IA3) or full fine-tuning;
* :mod:`.generate`: greedy and sampled decoding from ``inputs_embeds`` prompts and from text;
* :mod:`.refs`: how a run names the base model it was trained on (path + sha256);
* :mod:`.hub`: a run or model by local path or hub id (``snapshot_download``), saving and publishing run directories;
* :mod:`.local`: the local decoder (config, tokenizer, corpus, pretraining), made here because no pretrained
  decoder is available offline.
"""
