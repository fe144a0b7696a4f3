"""A checkpoint name is checked before anything loads: a missing folder, a folder without
config.json, and a hub id while the hub cannot be reached all fail at once, with the reason."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pagedkv.errors import ConfigError
from pagedkv.model_executor import hub


@pytest.fixture(autouse=True)
def fresh_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test probes afresh, with no offline variable from the environment."""
    monkeypatch.setattr(hub, "_PROBES", {})
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


def test_a_missing_folder_is_named() -> None:
    with pytest.raises(ConfigError, match=r"model='/no/such/folder' is invalid; valid: a folder "
                                          r"holding a Hugging Face config.json, or a hub id .*"
                                          r"\(no such folder: /no/such/folder\)"):
        hub.checkpoint_kwargs("/no/such/folder")
    with pytest.raises(ConfigError, match=r"model='\./rel' is invalid.*no such folder"):
        hub.checkpoint_kwargs("./rel")


def test_a_folder_without_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"\({tmp_path} has no config.json\)"):
        hub.checkpoint_kwargs(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert hub.checkpoint_kwargs(str(tmp_path)) == {}


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"])
def test_offline_variables_refuse_an_uncached_hub_id(monkeypatch: pytest.MonkeyPatch,
                                                     var: str) -> None:
    monkeypatch.setenv(var, "1")
    monkeypatch.setattr(socket, "create_connection", pytest.fail)  # no probe when told
    with pytest.raises(ConfigError, match=rf"model='org/not-downloaded' is invalid; valid: .* "
                                          rf"the Hugging Face hub cannot be reached \({var}=1 is "
                                          r"set\) and org/not-downloaded has not been downloaded"):
        hub.checkpoint_kwargs("org/not-downloaded", ", or 'tiny'")


def test_an_unreachable_host_is_found_by_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused
    assert hub.hub_offline_reason().startswith("127.0.0.1:9 is not reachable")
    with pytest.raises(ConfigError, match=r"cannot be reached \(127.0.0.1:9 is not reachable"):
        hub.checkpoint_kwargs("org/name")


def test_a_silent_host_is_given_up_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*args: object, **kwargs: object) -> None:
        time.sleep(2)
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", hang)
    start = time.perf_counter()
    assert hub.hub_offline_reason(timeout_s=0.2) == "huggingface.co:443 did not answer within 0.2 s"
    assert time.perf_counter() - start < 1.5  # gave up before the hanging connection did
    assert hub.hub_offline_reason() == "huggingface.co:443 did not answer within 0.2 s"  # kept


def test_a_cached_id_loads_offline_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hub, "_cached", lambda repo_id: repo_id == "org/cached")
    assert hub.checkpoint_kwargs("org/cached") == {"local_files_only": True}


def test_a_reachable_hub_leaves_the_id_to_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hub, "hub_offline_reason", lambda: None)
    assert hub.checkpoint_kwargs("org/name") == {}


def test_a_folder_without_tokenizer_files_has_none(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert hub.load_tokenizer(str(tmp_path)) is None
