"""The one generation module: greedy (or sampled) decoding with a KV cache, from embeddings or from text.

* :func:`greedy_generate`: a LEFT-padded batch of continuous prefixes (``inputs_embeds``) -> new token ids per row
  (the PPFT server, the learned substitution attack);
* :func:`generate_text`: text prompts -> text continuations (the local decoder's samples), by embedding each
  prompt's ids and running the same loop;
* :func:`generate_ids`: many prompts' ids at once, in left-padded batches of similar length (the paraphraser, the
  text inverter);
* :func:`next_tokens`: the choice of the next id from logits (argmax, or a temperature / nucleus draw), shared by both.

A manual loop rather than ``model.generate``: the inputs are left-padded embeddings whose position ids we set
ourselves (``cumsum(attention_mask) - 1``), so a padded row decodes exactly as it would alone, with any causal LM
that accepts ``inputs_embeds``, ``position_ids`` and ``past_key_values`` (PEFT-wrapped or not).
``tests/test_ppft_model.py`` checks it against ``generate(inputs_embeds=...)`` of transformers 5.23.

Every forward call asks for the last position's logits only (``logits_to_keep=1``, as ``model.generate`` does),
where the model takes that argument: the prefill would otherwise project every prompt position onto the whole
vocabulary and keep one row (with the served decoder's shape, hidden 256 x 6 layers and a 30,522-token
vocabulary, that projection is about 60% of the prefill's multiply-adds; docs/benchmarks.md has the speed-up). The
tokens are the same: ``tests/test_lm_generate.py`` compares them with the full-logits computation, greedy and
sampled, and with Hugging Face ``generate``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence

import torch

__all__ = ["generate_ids", "greedy_generate", "generate_text", "next_tokens", "last_logits_kwargs"]


def next_tokens(
    logits: torch.Tensor,
    *,
    temperature: float = 0.0,
    top_p: float = 1.0,
    generators: list[torch.Generator] | None = None,
) -> torch.Tensor:
    """The next id of each row: argmax at ``temperature`` 0; else a draw from softmax(logits / temperature) restricted
    to the smallest set of tokens whose probability reaches ``top_p`` (nucleus), row i drawn with ``generators[i]``."""
    if temperature == 0.0:
        return logits.argmax(dim=-1)
    if not (temperature > 0.0 and 0.0 < top_p <= 1.0):
        raise ValueError(f"need temperature >= 0 and top_p in (0, 1], got {temperature!r}, {top_p!r}")
    if generators is None or len(generators) != logits.shape[0]:
        raise ValueError("sampling needs one generator per row")
    # float64 and the max subtracted first: a temperature as small as 5e-324 gives the argmax's one-hot, never
    # inf - inf = NaN (a top_p as small as 5e-324 keeps the first token: it always stays)
    z = logits.double()
    probs = torch.softmax((z - z.amax(dim=-1, keepdim=True)) / temperature, dim=-1)
    sorted_p, order = probs.sort(dim=-1, descending=True)
    drop = sorted_p.cumsum(dim=-1) - sorted_p >= top_p  # tokens after the nucleus
    drop[..., 0] = False  # the most likely token always stays
    sorted_p = sorted_p.masked_fill(drop, 0.0)
    # each row is drawn on its generator's device (a CPU generator for a model on a GPU)
    picks = [
        order[i, torch.multinomial(sorted_p[i].to(g.device), 1, generator=g).to(order.device)]
        for i, g in enumerate(generators)
    ]
    return torch.cat(picks)


@functools.lru_cache(maxsize=None)
def _takes_logits_to_keep(forward_class: type) -> bool:
    return "logits_to_keep" in inspect.signature(forward_class.forward).parameters


def last_logits_kwargs(model) -> dict:
    """``{"logits_to_keep": 1}`` where ``model`` (or, PEFT-wrapped, its base model) names that argument in its
    ``forward``, else ``{}``: the keyword arguments that make a forward call compute the last position's logits
    alone. Decided per model class, once."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {"logits_to_keep": 1} if _takes_logits_to_keep(type(base)) else {}


@torch.no_grad()
def greedy_generate(
    model,
    inputs_embeds: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    eos_token_id: int | None,
    pad_token_id: int | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    generators: list[torch.Generator] | None = None,
) -> list[list[int]]:
    """Greedy continuation of each row of a LEFT-padded batch; returns the new token ids per row (EOS excluded).
    With ``temperature`` > 0 the rows are sampled instead (:func:`next_tokens`; every row draws once per step from
    its own generator, so a row's output does not depend on the other rows of the batch).

    inputs_embeds: [B, L, d]; attention_mask: [B, L] (0 on the left padding).
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    b = inputs_embeds.shape[0]
    out: list[list[int]] = [[] for _ in range(b)]
    if max_new_tokens == 0:
        return out
    embed = model.get_input_embeddings()
    attention_mask = attention_mask.long()
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp_min(0)
    finished = torch.zeros(b, dtype=torch.bool, device=inputs_embeds.device)
    filler = pad_token_id if pad_token_id is not None else (eos_token_id if eos_token_id is not None else 0)
    last = last_logits_kwargs(model)  # every call below needs the last position's logits only
    result = model(
        inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **last
    )
    past = result.past_key_values
    for step in range(max_new_tokens):
        next_ids = next_tokens(result.logits[:, -1, :], temperature=temperature, top_p=top_p, generators=generators)
        next_ids = torch.where(finished, torch.full_like(next_ids, filler), next_ids)
        for i in range(b):
            if not finished[i] and (eos_token_id is None or int(next_ids[i]) != eos_token_id):
                out[i].append(int(next_ids[i]))
        if eos_token_id is not None:
            finished |= next_ids == eos_token_id
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(b, 1)], dim=1)
        position_ids = position_ids[:, -1:] + 1
        result = model(
            inputs_embeds=embed(next_ids.unsqueeze(1)),
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past,
            use_cache=True,
            **last,
        )
        past = result.past_key_values
    return out


@torch.no_grad()
def generate_text(
    model,
    tokenizer,
    prompts: Sequence[str],
    max_new_tokens: int = 40,
    temperature: float = 0.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    add_special_tokens: bool = True,
) -> list[str]:
    """The continuation of each text prompt (the text after the prompt, up to EOS): greedy at ``temperature`` 0,
    else sampled (:func:`next_tokens`) with draws from ``generator``, one prompt after the other.
    ``add_special_tokens=False``: the prompt's ids without the tokenizer's special tokens (as a model fine-tuned on
    such ids saw them: a WordPiece tokenizer's [SEP] is its EOS).

    Each prompt runs alone (a batch of one, no padding) through :func:`greedy_generate` with its ids embedded by the
    model's input embeddings, so a prompt's continuation does not depend on the other prompts. Puts the model in
    eval mode.
    """
    if temperature != 0.0 and generator is None:
        raise ValueError(f"sampling (temperature={temperature!r}) needs a generator")
    model.eval()
    device = next(model.parameters()).device
    embed = model.get_input_embeddings()
    texts = []
    for prompt in prompts:
        ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=add_special_tokens).input_ids.to(device)
        if ids.shape[1] == 0:
            raise ValueError(f"prompt {prompt!r} has no tokens to condition on")
        new = greedy_generate(
            model,
            embed(ids),
            torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
            temperature=temperature,
            top_p=top_p,
            generators=None if generator is None else [generator],
        )[0]
        texts.append(tokenizer.decode(new, skip_special_tokens=True))
    return texts


@torch.no_grad()
def generate_ids(
    model,
    tokenizer,
    ids: Sequence[Sequence[int]],
    *,
    max_new_tokens: Sequence[int],
    batch_size: int = 16,
    temperature: float = 0.0,
    seeds: Sequence[int] | None = None,
) -> list[list[int]]:
    """The new ids of each prompt (``ids[i]``, at most ``max_new_tokens[i]`` of them), the prompts run in left-padded
    batches of similar length; sampled at ``temperature`` > 0 with one generator per prompt seeded by ``seeds[i]``
    (so a prompt's output does not depend on its batch)."""
    if len(max_new_tokens) != len(ids) or (seeds is not None and len(seeds) != len(ids)):
        raise ValueError(f"{len(ids)} prompts need as many max_new_tokens (and seeds), got {len(max_new_tokens)}")
    model.eval()
    device = next(model.parameters()).device
    embed = model.get_input_embeddings()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    order = sorted(range(len(ids)), key=lambda j: len(ids[j]))
    out: list[list[int]] = [[] for _ in ids]
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        width = max(len(ids[j]) for j in rows)
        batch = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for k, j in enumerate(rows):  # left padding
            batch[k, width - len(ids[j]) :] = torch.tensor(list(ids[j]))
            mask[k, width - len(ids[j]) :] = 1
        generators = None if seeds is None else [torch.Generator().manual_seed(int(seeds[j])) for j in rows]
        new = greedy_generate(model, embed(batch.to(device)), mask.to(device),
                              max_new_tokens=max(max_new_tokens[j] for j in rows), eos_token_id=tokenizer.eos_token_id,
                              pad_token_id=pad, temperature=temperature, generators=generators)  # fmt: skip
        for k, j in enumerate(rows):
            out[j] = list(new[k][: max_new_tokens[j]])
    return out
