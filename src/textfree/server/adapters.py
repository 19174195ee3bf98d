"""Fine-tuned adapters behind ``/v1/generate?adapter=<id>``: loaded on first use, kept while used, unloaded when idle.

An adapter is the run directory a succeeded job wrote (projection + LoRA + decoder reference). It is looked up for
the requesting tenant only (another tenant's adapter is a 404 exactly like a missing one), must belong to the model
named in the request, and is loaded by that model's served system (its ``load_adapter``) as its own handler
with its own micro-batcher. At most ``max_loaded_adapters`` stay loaded: the least recently used one that no
request is using is unloaded first. Adapters run in this process (PyTorch), whatever ``backend`` serves the base models.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from typing import AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool

from .batching import MicroBatcher
from .config import ServerConfig
from .errors import ApiError
from .registry import ServedModel, ServedSystem, get_system
from .store import Store

__all__ = ["AdapterModels"]


class _Loaded:
    def __init__(self, model: ServedModel, batcher: MicroBatcher):
        self.model, self.batcher, self.users = model, batcher, 0


class AdapterModels:
    """The loaded adapters (LRU), each with its own micro-batcher. ``system_of(model_id)`` is the served system that
    loads a model's adapters (default: the one ``config`` names)."""

    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        *,
        on_batch: Callable[[int, int], None] | None = None,
        system_of: Callable[[str], ServedSystem] | None = None,
    ):
        self.store = store
        self.config = config
        self.on_batch = on_batch
        self.system_of = system_of or (lambda model_id: get_system(config.system_of(model_id)))
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()
        self._loading: dict[str, asyncio.Lock] = {}

    @property
    def queue_depth(self) -> int:
        return sum(e.batcher.queue_depth for e in self._loaded.values())

    def loaded(self) -> list[str]:
        return list(self._loaded)

    def lookup(self, tenant: str, model_id: str, adapter_id: str) -> dict:
        """The tenant's adapter row, or 404 (the same answer for a missing id and for another tenant's)."""
        row = self.store.get_adapter(tenant, adapter_id)
        if row is None:
            raise ApiError(
                404,
                "adapter_not_found",
                f"no adapter {adapter_id!r} for this API key (GET /v1/models lists yours per model)",
            )
        if row["model"] != model_id:
            raise ApiError(
                404,
                "adapter_not_found",
                f"adapter {adapter_id!r} was trained for model {row['model']!r}, not {model_id!r}",
            )
        return row

    @contextlib.asynccontextmanager
    async def use(self, tenant: str, model_id: str, adapter_id: str) -> AsyncIterator[tuple[ServedModel, MicroBatcher]]:
        """(model, batcher) of the tenant's adapter, loaded if needed, not unloaded while the block runs."""
        row = self.lookup(tenant, model_id, adapter_id)
        entry = self._loaded.get(adapter_id)
        if entry is None:
            lock = self._loading.setdefault(adapter_id, asyncio.Lock())
            async with lock:  # concurrent first requests load it once
                entry = self._loaded.get(adapter_id)
                if entry is None:
                    run = self.store.job_dir(row["job"])
                    model = await run_in_threadpool(self._load, model_id, str(run))
                    batcher = MicroBatcher(
                        model.run,
                        max_rows=self.config.batch_max_rows,
                        max_wait_s=self.config.batch_wait_ms / 1000.0,
                        on_batch=self.on_batch,
                    )
                    entry = self._loaded[adapter_id] = _Loaded(model, batcher)
            self._loading.pop(adapter_id, None)
        self._loaded.move_to_end(adapter_id)
        entry.users += 1
        try:
            await self._evict()
            yield entry.model, entry.batcher
        finally:
            entry.users -= 1

    def _load(self, model_id: str, run_dir: str) -> ServedModel:
        """The adapter at ``run_dir`` loaded by ``model_id``'s served system, in this process."""
        system = self.system_of(model_id)
        if system.load_adapter is None:
            raise ValueError(f"served system {system.name!r} of model {model_id!r} has no adapters to load")
        return system.load_adapter(model_id, run_dir, self.config.device)

    async def _evict(self) -> None:
        while len(self._loaded) > self.config.max_loaded_adapters:
            idle = next((k for k, e in self._loaded.items() if e.users == 0), None)
            if idle is None:  # every loaded adapter is in use: unload later
                return
            await self._loaded.pop(idle).batcher.close()

    async def close(self) -> None:
        for entry in self._loaded.values():
            await entry.batcher.close()
        self._loaded.clear()
