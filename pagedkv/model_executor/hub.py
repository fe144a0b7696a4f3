"""Where a named checkpoint lives: a local folder, the Hugging Face hub, or its local cache.

Checked before anything is loaded, so that a bad name fails at once with the reason instead
of an ``OSError`` from deep inside ``transformers`` (which, with no network, retries the hub
for about 50 s first):

- a name that is an existing folder must hold a ``config.json``;
- a name that looks like a path (``/x``, ``./x``, ``~/x``, more than one ``/``) but is not a
  folder is refused;
- a hub id (``name`` or ``org/name``) needs the hub, or the local cache when the hub cannot
  be reached. "Cannot be reached" is decided at once: ``HF_HUB_OFFLINE`` (or
  ``TRANSFORMERS_OFFLINE``) set, or no TCP connection to the hub's host within
  :data:`HUB_PROBE_TIMEOUT_S`. An id found only in the cache is then loaded with
  ``local_files_only=True``, so ``transformers`` does not try the network either.

SGLang takes the same two kinds of ``--model-path`` (``hf_transformers_utils.get_config``
and ``model_loader/weight_utils.py`` download a hub id, read a folder as it is).
"""

from __future__ import annotations

import os
import re
import socket
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pagedkv.errors import bad_value

#: Seconds the connection probe waits for the hub's host (DNS included).
HUB_PROBE_TIMEOUT_S = 2.0
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
_PROBES: dict[tuple[str, int], str | None] = {}  # one probe per host and process


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def hub_offline_reason(timeout_s: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Why the Hugging Face hub cannot be reached now, or None when it answers.

    Reads ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE`` first; otherwise opens one TCP
    connection to the host of ``HF_ENDPOINT`` (default ``huggingface.co``, port 443) in a
    background thread and waits at most ``timeout_s`` seconds for it (a resolver that hangs
    counts as no answer). The probe's answer is kept for the rest of the process.
    """
    for var in _OFFLINE_VARS:
        if _flag(os.environ.get(var)):
            return f"{var}={os.environ[var]} is set"
    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = url.hostname or "huggingface.co"
    port = url.port or (80 if url.scheme == "http" else 443)
    if (host, port) not in _PROBES:
        result: list[str | None] = []

        def probe() -> None:
            try:
                socket.create_connection((host, port), timeout=timeout_s).close()
                result.append(None)
            except OSError as exc:
                result.append(f"{host}:{port} is not reachable ({exc})")

        thread = threading.Thread(target=probe, daemon=True)
        thread.start()
        thread.join(timeout_s)
        _PROBES[(host, port)] = (result[0] if result else
                                 f"{host}:{port} did not answer within {timeout_s:g} s")
    return _PROBES[(host, port)]


def _cached(repo_id: str) -> bool:
    """Whether ``repo_id``'s ``config.json`` is in the local Hugging Face cache."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)


def checkpoint_kwargs(name: str, valid: str = "") -> dict[str, Any]:
    """Check a checkpoint name before loading; return the ``from_pretrained`` keywords.

    Args:
        name: a local folder or a hub id.
        valid: other accepted forms, added to the error's list (the CLI's random models).

    Returns:
        ``{}`` for a folder or a hub id the hub serves; ``{"local_files_only": True}`` for a
        hub id found in the local cache while the hub cannot be reached.

    Raises:
        ConfigError: ``model=...`` naming the folder that does not exist or has no
            ``config.json``, or the hub id that cannot be fetched now and why.
    """
    forms = f"a folder holding a Hugging Face config.json, or a hub id such as " \
            f"Qwen/Qwen2.5-0.5B-Instruct{valid}"
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise bad_value("model", name, f"{forms} ({path} has no config.json)")
        return {}
    if not _HUB_ID.match(name) or name.startswith((".", "~")):
        raise bad_value("model", name, f"{forms} (no such folder: {path})")
    reason = hub_offline_reason()
    if reason is None:
        return {}
    if _cached(name):
        return {"local_files_only": True}
    raise bad_value("model", name, f"{forms} that is in the local cache: the Hugging Face hub "
                    f"cannot be reached ({reason}) and {name} has not been downloaded before; "
                    "download it where there is network, or give its folder")


def load_tokenizer(name: str, **kwargs: Any) -> Any:
    """The checkpoint's tokenizer, or None when it has none (a folder with weights only).

    ``kwargs``: from :func:`checkpoint_kwargs`. Text prompts then need a tokenizer, token
    ids do not (``Engine.generate`` says so).
    """
    from transformers import AutoTokenizer  # after TRITON_INTERPRET is settled

    path = Path(name).expanduser()
    if path.is_dir() and not any((path / f).is_file() for f in _TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except (OSError, ValueError):  # the checkpoint ships no tokenizer
        return None
