"""The peers' registry: a ``--rope-impl`` target for every adapter, each with the contract's signature and its
peer's pin, a missing peer named with that pin by each adapter's loaders, and ``python -m dsv41_rope.peers``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dsv41_rope.peers import PEERS, by_name, loading
from dsv41_rope.peers import registry as registry_module

REPO = Path(__file__).resolve().parents[1]
# Each adapter module's loaders (functools.cache'd), the pin they reach.
LOADERS = {
    "dsv41_rope.peers.nemo": (("load_rope_triton", "load_dsv4_layers"), "nemo-automodel==0.7.0"),
    "dsv41_rope.peers.huggingface": (("load_modeling",), "transformers==5.17.0"),
    "dsv41_rope.peers.sglang_rope": (("load_dsv4_rope",), "sglang==0.5.23"),
    "dsv41_rope.peers.vllm_rope": (("load_deepseek_scaling_rope",), "vllm==0.33.0"),
    "dsv41_rope.peers.liger": (("load_llama4_rope",), "liger-kernel==0.8.5"),
    "dsv41_rope.peers.megatron": (("load_rope_utils", "load_fused_mla_rope"), "megatron-core==0.19.2"),
}


@pytest.mark.parametrize("peer", PEERS, ids=lambda peer: peer.name)
def test_every_record_names_an_adapter_with_the_contract(peer):
    function = getattr(importlib.import_module(peer.adapter_module), peer.adapter_function)
    parameters = inspect.signature(function).parameters
    assert list(parameters)[:2] == ["values", "angles"], f"{peer.adapter}: parameters {list(parameters)}"
    inverse = parameters["inverse"]
    assert inverse.kind is inspect.Parameter.KEYWORD_ONLY and inverse.default is False, f"{peer.adapter}: {inverse}"
    assert peer.kind in registry_module.KINDS and peer.loaded in registry_module.LOADED_BY, peer
    assert (peer.distribution is None) == (peer.version is None) == (peer.loaded == "project"), peer
    assert peer.unavailable is None or "\n" not in peer.unavailable, "unavailable is one line"
    assert peer.peer_function.split(":")[0].endswith(".py"), f"{peer.peer_function}: the file, then the function"


def test_every_adapter_of_the_package_is_in_the_registry_once():
    adapters = [peer.adapter for peer in PEERS]
    assert len(set(adapters)) == len(adapters) and len({peer.name for peer in PEERS}) == len(PEERS)
    for path in sorted((REPO / "dsv41_rope" / "peers").glob("*.py")):
        module = importlib.import_module(f"dsv41_rope.peers.{path.stem}")
        exported = [name for name in getattr(module, "__all__", []) if name.startswith("apply_rope_")]
        for name in exported:
            assert f"{module.__name__}:{name}" in adapters, f"{module.__name__}:{name} has no registry record"


def test_the_records_pins_are_the_adapters_pins():
    for module_name, (_, pin) in LOADERS.items():
        module = importlib.import_module(module_name)
        pins = {str(value) for value in vars(module).values() if isinstance(value, loading.Pin)}
        records = {peer.pin for peer in PEERS if peer.adapter_module == module_name}
        assert pins == records == {pin}, f"{module_name}: adapter pins {pins}, registry {records}, expected {pin}"
    assert by_name("flash-attn-rotary").pin == "flash-attn==2.8.3.post2"
    with pytest.raises(KeyError, match="no peer 'nope'; peers: nemo-rope-triton"):
        by_name("nope")


def test_only_vllm_is_unavailable_and_the_command_lists_the_others():
    assert [peer.name for peer in PEERS if peer.unavailable] == ["vllm-dsv4"]
    assert "64 MiB" in by_name("vllm-dsv4").unavailable
    done = subprocess.run(
        [sys.executable, "-m", "dsv41_rope.peers", "--adapters"], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout.split() == [peer.adapter for peer in PEERS if peer.name != "vllm-dsv4"]


@pytest.mark.parametrize("module_name", LOADERS)
def test_a_missing_peer_names_the_distribution_and_version_to_install(monkeypatch, module_name):
    def not_installed(distribution):
        raise importlib.metadata.PackageNotFoundError(distribution)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    module = importlib.import_module(module_name)
    loaders, pin = LOADERS[module_name]
    for loader in loaders:
        with pytest.raises(
            ModuleNotFoundError, match=f"needs {re.escape(pin)} .*pip install --no-deps {re.escape(pin)}"
        ):
            getattr(module, loader).__wrapped__()  # past the cache: a real run may have loaded the peer


def test_a_missing_sdist_names_flash_attention_and_where_it_was_looked_for(monkeypatch, tmp_path):
    from dsv41_rope.peers import flash_rotary

    monkeypatch.setenv(loading.PEER_WHEELS_VARIABLE, str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match=r"needs flash-attn==2\.8\.3\.post2 .*flash_attn-2\.8\.3\.post2\.tar"):
        flash_rotary.load_rotary.__wrapped__()
