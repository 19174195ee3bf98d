"""One way to make the Accelerate ``Accelerator`` every trainer of textfree uses.

Accelerate keeps its device and mixed-precision settings in a process-wide state that the first ``Accelerator``
fixes; a second one asking for other settings raises ("AcceleratorState has already been initialized").
Under ``accelerate launch`` that is right: the launcher decides. In a single process, though, one Python session
may well pretrain in bf16 on the GPU, then run stage 1 (which asks for no mixed precision: it would silently
inherit bf16), then serve with fine-tuning jobs pinned to the CPU (which would raise). There the state of the earlier
run is dropped and made again with the settings asked for, so a run's numerics never depend on what ran before it.
"""

from __future__ import annotations

__all__ = ["make_accelerator", "is_main_process", "wait_for_everyone"]


def make_accelerator(*, cpu: bool = False, mixed_precision: str | None = None):
    """``Accelerator(cpu=cpu, mixed_precision=mixed_precision)``; in a single process whose Accelerate state an
    earlier run set up otherwise, that state is reset first (never in a launched multi-process job)."""
    import os

    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, PartialState

    # None: what a fresh process would get (the launcher's setting, else none), never an earlier run's leftovers
    wanted = mixed_precision or os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    if AcceleratorState._shared_state and PartialState().num_processes == 1:  # set up by an earlier Accelerator
        state = AcceleratorState()
        on_cpu = state.device.type == "cpu"
        if (cpu and not on_cpu) or (not cpu and on_cpu and _has_accelerator()) or wanted != state.mixed_precision:
            AcceleratorState._reset_state(reset_partial_state=True)
    return Accelerator(cpu=cpu, mixed_precision=mixed_precision)


def is_main_process() -> bool:
    """Whether this process writes a run's files: the main one of a launched job (``accelerate launch``, ``torchrun``),
    and always in a plain single process. Before any ``Accelerator`` exists, the launcher's ``RANK`` says."""
    import os

    from accelerate.state import PartialState

    if PartialState._shared_state:
        return PartialState().is_main_process
    rank = os.environ.get("RANK", "0")
    if not rank.isdigit():
        raise ValueError(f"RANK must be a process index >= 0, got {rank!r}")
    return int(rank) == 0


def wait_for_everyone() -> None:
    """Block until every process of a launched job gets here (nothing in a single process, or before Accelerate is set
    up: then there is no process group to wait on)."""
    from accelerate.state import PartialState

    if PartialState._shared_state and PartialState().num_processes > 1:
        PartialState().wait_for_everyone()


def _has_accelerator() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return torch.cuda.is_available() or bool(mps is not None and mps.is_available())
