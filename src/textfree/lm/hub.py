"""Runs by local path or Hugging Face hub id, the one resolver every system's ``from_pretrained`` goes through.

* :func:`resolve_pretrained`: a local file or directory is used as is (a clear error naming it when it is missing or
  holds no run); a hub id (``owner/name``, not an existing path) is downloaded with ``huggingface_hub``'s
  ``snapshot_download`` into the local cache, or read from the cache only when offline (``HF_HUB_OFFLINE=1``);
* :func:`resolve_source`: the server's form: a hub id resolved, anything else returned unchanged (each system then
  reports a bad local path in its own words);
* :func:`replace_dir`: a run directory written under a temporary name beside its destination and renamed into place;
* :func:`push_folder` / :func:`push_saved`: publish a folder (or what a ``save_pretrained`` writes into a temporary
  one) with ``huggingface_hub.HfApi().upload_folder``;
* :func:`local_ref`: a name a run records relative to itself (a bundled base model) as a path inside the run.

No system is imported here: each passes the file that marks its runs (``marker``).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = [
    "PretrainedNotFound",
    "is_hub_id",
    "resolve_pretrained",
    "resolve_source",
    "replace_dir",
    "copy_tree",
    "push_folder",
    "push_saved",
    "local_ref",
    "hub_offline",
]

_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
_TRUE = {"1", "true", "yes", "on"}


class PretrainedNotFound(FileNotFoundError):
    """No run at a local path, or a hub id that cannot be resolved (not in the cache offline, unknown on the hub)."""


def is_hub_id(name_or_path: str | os.PathLike) -> bool:
    """Whether ``name_or_path`` reads as a hub id ``owner/name`` and is no existing local path."""
    text = str(name_or_path)
    if not _HUB_ID.match(text) or ".." in text or text.endswith((".git", ".")):
        return False
    return not Path(text).exists()


def hub_offline() -> bool:
    """Whether the hub must not be reached: ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) set, now or at import."""
    if any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        return False


def _markers(marker: str | Sequence[str] | None) -> list[str]:
    return [] if marker is None else [marker] if isinstance(marker, str) else list(marker)


def _check_run(path: Path, markers: list[str], what: str, where: str) -> Path:
    if markers and path.is_dir() and not any((path / m).exists() for m in markers):
        raise PretrainedNotFound(f"{where} is not a {what} (it holds no {' or '.join(markers)})")
    return path


def resolve_pretrained(
    name_or_path: str | os.PathLike,
    *,
    revision: str | None = None,
    marker: str | Sequence[str] | None = None,
    what: str = "run",
    cache_dir: str | os.PathLike | None = None,
    token: str | bool | None = None,
) -> Path:
    """The local path of ``name_or_path``: an existing file or directory as is; a hub id ``owner/name`` through
    ``huggingface_hub.snapshot_download`` (at ``revision``; the cache only when offline). ``marker``: a file (or
    files, any one) a run directory holds, checked on both. :class:`PretrainedNotFound` naming the path or id."""
    text = os.path.expanduser(str(name_or_path))
    markers = _markers(marker)
    path = Path(text)
    if path.exists():
        return _check_run(path, markers, what, repr(text))
    if not is_hub_id(text):
        raise PretrainedNotFound(
            f"no {what} at {text!r}: no such local file or directory (a hub id is owner/name, e.g. 'org/my-run')"
        )
    import huggingface_hub
    from huggingface_hub import errors

    offline = hub_offline()
    try:
        local = huggingface_hub.snapshot_download(
            repo_id=text, revision=revision, cache_dir=cache_dir, token=token, local_files_only=offline
        )
    except (errors.LocalEntryNotFoundError, errors.OfflineModeIsEnabled) as exc:
        if offline:
            raise PretrainedNotFound(
                f"{text!r} is not a local directory, and the hub id {text!r} is not in the local Hugging Face cache "
                "(offline: HF_HUB_OFFLINE is set); download it once online, or pass a local run directory"
            ) from exc
        raise PretrainedNotFound(f"cannot download the {what} {text!r} from the hub: {exc}") from exc
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError) as exc:
        at = f" at revision {revision!r}" if revision else ""
        raise PretrainedNotFound(
            f"{text!r} is no local directory, and no hub repository {text!r}{at} can be read: {exc}"
        ) from exc
    except errors.HfHubHTTPError as exc:
        raise PretrainedNotFound(f"cannot download the {what} {text!r} from the hub: {exc}") from exc
    return _check_run(Path(local), markers, what, f"the hub repository {text!r}")


def resolve_source(source: str, *, revision: str | None = None) -> str:
    """A served model's source as a local path: a hub id resolved (:func:`resolve_pretrained`), anything else (a
    local path, whether or not it exists) unchanged."""
    return str(resolve_pretrained(source, revision=revision)) if is_hub_id(source) else source


def local_ref(run: str | os.PathLike, name_or_path: str) -> str:
    """``run/name_or_path`` when a run records a relative name of something it holds (a bundled base model), else
    ``name_or_path`` unchanged (an absolute path or a hub id)."""
    if name_or_path and not Path(name_or_path).is_absolute() and (Path(run) / name_or_path).exists():
        return str(Path(run) / name_or_path)
    return name_or_path


def copy_tree(source: str | os.PathLike, destination: str | os.PathLike) -> Path:
    """Copy the directory ``source`` to ``destination`` (files followed through links; hidden entries, such as a
    ``.cache`` or ``.git`` folder, left out)."""
    return Path(shutil.copytree(source, destination, ignore=lambda _d, names: [n for n in names if n.startswith(".")]))


def replace_dir(directory: str | os.PathLike, fill: Callable[[Path], Any], *, marker: str | None = None) -> Path:
    """Write a directory atomically: ``fill(tmp)`` fills a temporary directory beside ``directory``, which is then
    renamed into place (an earlier run there is replaced). Refuses to replace a file, or a directory that is neither
    empty nor a run (holds no ``marker``), so a wrong path never deletes unrelated files."""
    target = Path(directory)
    if target.exists() and (
        not target.is_dir() or (any(target.iterdir()) and (marker is None or not (target / marker).exists()))
    ):
        raise FileExistsError(f"{str(target)!r} exists and is not a run directory: not replacing it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        fill(tmp)
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
            os.replace(target, old / "run")
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def push_folder(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    token: str | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str | None = None,
    create_repo: bool = True,
) -> Any:
    """Upload ``folder`` to the hub model repository ``repo_id`` (created when missing, unless ``create_repo`` is
    False) with ``HfApi().upload_folder``; returns its commit info."""
    import huggingface_hub

    if not _HUB_ID.match(str(repo_id)):
        raise ValueError(f"push_to_hub needs a hub id owner/name, got {repo_id!r}")
    if hub_offline():
        raise RuntimeError(f"cannot push to {repo_id!r}: the hub is offline (HF_HUB_OFFLINE is set)")
    api = huggingface_hub.HfApi(token=token)
    if create_repo:
        api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    return api.upload_folder(
        repo_id=repo_id,
        folder_path=str(folder),
        repo_type="model",
        revision=revision,
        commit_message=commit_message or "Upload textfree run",
    )


def push_saved(save: Callable[[Path], Any], repo_id: str, **push: Any) -> Any:
    """``save(dir)`` into a temporary directory, then :func:`push_folder` of it (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="textfree-push-") as tmp:
        folder = Path(tmp) / "run"
        save(folder)
        return push_folder(folder, repo_id, **push)
