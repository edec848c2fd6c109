"""Each adapter's reproduction lines (``dsv41_rope.peers.repro_call``) compute what the adapter computes, bit for bit.

The lines are executed in a fresh namespace holding only ``torch``, ``values``, ``angles`` and ``inverse``, beside a
call of the adapter on identical fresh inputs. Against fakes of the peers (always run): both hand the peer the same
arguments (shapes, strides, dtypes, bits, conjugate bits, whether a view of the values) and return the same bits.
Against the real peers where they are installed (Triton ones under the interpreter): the same bits, the same exception
type, and the same in-place effect on the values. And the lines are short and import only torch, the standard
library and their peer. What a fake cannot stand in for (the real kernels' bits) skips naming the missing peer.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import sys
import tarfile
import types

import pytest
import torch

from dsv41_rope.peers import (
    PEERS,
    by_name,
    compiled,
    flash_rotary,
    huggingface,
    liger,
    megatron,
    nemo,
    repro_call,
    repro_calls,
    sglang_rope,
    vllm_rope,
)
from dsv41_rope.peers.registry import Peer

# (values shape, angles shape, a slice of the last dimension, whose view are the values); channels > 2P throughout.
CASES = {
    "3d-per-token": ((2, 3, 10), (2, 3, 4), None),
    "3d-shared": ((2, 3, 10), (1, 3, 4), None),
    "3d-odd-width": ((2, 3, 10), (1, 3, 3), None),  # 2P = 6: SGLang's flat kernel runs on into the next row
    "3d-odd-offset": ((1, 1, 9), (1, 1, 4), None),  # an FP32 rotary block at an odd storage offset
    "4d-per-token": ((2, 3, 2, 12), (2, 3, 4), None),
    "4d-shared": ((2, 3, 2, 12), (1, 3, 4), None),
    "4d-one-position": ((2, 3, 2, 12), (2, 1, 4), None),
    "4d-one-angle-row": ((2, 3, 2, 12), (1, 1, 4), None),
    "4d-strided-odd-width": ((2, 3, 2, 16), (1, 3, 3), slice(1, 13)),
}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
OWN = {"torch-compile", "torch-compile-fullgraph", "eager-control"}
PEER_NAMES = [peer.name for peer in PEERS]


def make_inputs(case: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh values and angles of ``case``, the same bits and layout at every call."""
    values_shape, angles_shape, channels = CASES[case]
    generator = torch.Generator().manual_seed(sum(map(ord, case)))
    values = torch.randn(values_shape, generator=generator).to(dtype)
    angles = torch.randn(angles_shape, generator=generator) * 3
    return (values if channels is None else values[..., channels]), angles


def adapter_of(peer: Peer):
    return getattr(importlib.import_module(peer.adapter_module), peer.adapter_function)


def run_snippet(peer: Peer, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> torch.Tensor:
    namespace = {"torch": torch, "values": values, "angles": angles, "inverse": inverse}
    exec(compile(repro_call(peer.adapter), f"<repro of {peer.name}>", "exec"), namespace)
    return namespace["got"]


def outcome(call) -> tuple[str, torch.Tensor | None]:
    """``("", result)``, or the exception's type name and None."""
    try:
        return "", call()
    except Exception as error:  # noqa: BLE001 (any exception: the lines must raise the adapter's)
        return type(error).__name__, None


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes in logical order (complex as real pairs)."""
    tensor = tensor.detach().resolve_conj().resolve_neg()
    tensor = torch.view_as_real(tensor) if tensor.is_complex() else tensor
    return tensor.contiguous().view(torch.uint8)


def expect_same(got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert (got.shape, got.dtype) == (expected.shape, expected.dtype), f"{what}: {got.shape} {got.dtype}"
    assert torch.equal(bits(got), bits(expected)), f"{what}: bits differ\nlines {got}\nadapter {expected}"


def compare(peer: Peer, case: str, dtype: torch.dtype, inverse: bool) -> None:
    """The adapter and the lines on identical fresh inputs: the same exception, or the same result's bits and the
    same values afterwards (a peer working in place may rotate them)."""
    values, angles = make_inputs(case, dtype)
    error, expected = outcome(lambda: adapter_of(peer)(values, angles, inverse=inverse))
    values_then, angles_then = make_inputs(case, dtype)
    got_error, got = outcome(lambda: run_snippet(peer, values_then, angles_then, inverse))
    where = f"{case}, {dtype}, {'inverse' if inverse else 'forward'}"
    assert got_error == error, f"{where}: the adapter raised {error or 'nothing'}, the lines {got_error or 'nothing'}"
    if not error:
        expect_same(got, expected, f"{where}: result")
        expect_same(values_then, values, f"{where}: the values after the call")


# Fakes: each records what it is handed, described by `describe`, into RECORD, and returns something simple.
RECORD: list = []
FAKE_STATE = {"batched": False, "values": None}


def describe(thing: object) -> object:
    """What a fake was handed, comparable across two calls: tensors by layout and bits, groups by size and rank."""
    if isinstance(thing, torch.Tensor):
        values = FAKE_STATE["values"]
        view = values is not None and thing.untyped_storage().data_ptr() == values.untyped_storage().data_ptr()
        offset = thing.storage_offset() - (values.storage_offset() if view else 0)
        layout = (tuple(thing.shape), thing.stride(), offset, thing.dtype, thing.is_conj(), view)
        return ("tensor", *layout, bits(thing).numpy().tobytes())
    if isinstance(thing, (tuple, list)):
        return tuple(describe(item) for item in thing)
    if isinstance(thing, dict):
        return {key: describe(item) for key, item in thing.items()}
    if callable(getattr(thing, "size", None)) and callable(getattr(thing, "rank", None)):
        return ("group", thing.size(), thing.rank())
    if isinstance(thing, FakeConfig):
        return ("config", describe(vars(thing)))
    return (type(thing).__name__, thing)


def recorder(name: str, result):
    """A fake peer function: records its arguments (by name), returns ``result(arguments)``."""

    def fake(*args, **kwargs):
        RECORD.append((name, describe(args), describe(kwargs), FAKE_STATE["batched"]))
        return result(*args, **kwargs)

    return fake


class FakeConfig:
    """Megatron's ``TransformerConfig``: what it was made with."""

    def __init__(self, **kwargs) -> None:
        vars(self).update(kwargs)


class FakeVllmRope:
    """vLLM's ``DeepseekV4ScalingRotaryEmbedding``: records its construction, its cache and its call."""

    def __init__(self, *args, **kwargs) -> None:
        RECORD.append(("init", describe(args), describe(kwargs)))

    def __call__(self, positions, query, key=None, offsets=None, inverse=False):
        RECORD.append(("call", describe((positions, query, key, offsets, inverse, self.cos_sin_cache))))
        return query * 2, key


def in_place(factor: float):
    return lambda x, *args, **kwargs: x.mul_(factor)


def liger_apply(q, k, freqs_cis, BLOCK_SIZE=None):  # noqa: N803 (the peer's name)
    return q.contiguous().mul_(2), k  # as the peer: in place on q.contiguous()


def set_batched_rope(enabled: bool = True) -> None:
    FAKE_STATE["batched"] = enabled


FAKE_MODULES = {  # module name: its fake attributes
    "nemo_automodel.components.models.common.rope_triton": {
        "apply_rope_triton": recorder("apply_rope_triton", lambda values, angles, inverse=False: values * 2)
    },
    "nemo_automodel.components.models.deepseek_v4.layers": {
        "_apply_partial_rope_interleaved": recorder("partial", lambda x, cos, sin, rope_head_dim: x * 2)
    },
    "transformers.models.deepseek_v4.modeling_deepseek_v4": {
        "apply_rotary_pos_emb": recorder("apply_rotary_pos_emb", lambda x, cos, sin, unsqueeze_dim=1: x * 2)
    },
    "liger_kernel.ops.llama4_rope": {
        "LigerLlama4RopeFunction": types.SimpleNamespace(apply=recorder("apply", liger_apply))
    },
    "megatron.core.models.common.embeddings.rope_utils": {
        "apply_rotary_pos_emb": recorder("apply_rotary_pos_emb", lambda t, *args, **kwargs: t * 2)
    },
    "megatron.core.transformer.transformer_config": {"TransformerConfig": FakeConfig},
    "megatron.core.fusions.fused_mla_yarn_rope_apply": {
        "fused_apply_mla_rope_for_q": recorder("fused_apply_mla_rope_for_q", in_place(2.0))
    },
    "vllm.model_executor.layers.rotary_embedding.deepseek_scaling_rope": {
        "DeepseekV4ScalingRotaryEmbedding": FakeVllmRope
    },
    # loaded by path (a fake file delegates to this module): SGLang's dsv4/rope.py and flash-attention's rotary.py
    "dsv41_repro_fake_by_path": {
        "_USE_BATCHED_ROPE": False,
        "set_batched_rope": set_batched_rope,
        "apply_rotary_emb_triton": recorder("apply_rotary_emb_triton", in_place(-1.0)),
        "apply_rotary": recorder("apply_rotary", lambda x, *args, **kwargs: x * 2),
    },
}
FAKE_FILE = 'import sys\nglobals().update(vars(sys.modules["dsv41_repro_fake_by_path"]))\n'


def module_of(name: str, attributes: dict) -> types.ModuleType:
    module = types.ModuleType(name)
    vars(module).update(attributes)
    return module


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    """Every peer replaced by its fake, for the adapters (their loaders) and for the lines (imports, files)."""
    RECORD.clear()
    FAKE_STATE.update(batched=False, values=None)
    for name, attributes in FAKE_MODULES.items():
        monkeypatch.setitem(sys.modules, name, module_of(name, attributes))
    for adapter_module in {peer.adapter_module for peer in PEERS if peer.distribution}:
        module = importlib.import_module(adapter_module)
        if hasattr(module, "import_installed"):
            monkeypatch.setattr(module, "import_installed", lambda name, pin: sys.modules[name])
        for attribute, value in list(vars(module).items()):
            if callable(getattr(value, "cache_clear", None)):  # its cached loaders, past a real peer loaded before
                monkeypatch.setattr(module, attribute, value.__wrapped__)
    by_path = sys.modules["dsv41_repro_fake_by_path"]
    monkeypatch.setattr(sglang_rope, "load_dsv4_rope", lambda: by_path)
    monkeypatch.setattr(flash_rotary, "load_rotary", lambda: by_path)
    # SGLang's distribution, installed first on the path, with the fake file where its rope.py lies
    site = tmp_path / "site"
    (site / "sglang-0.5.23.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.23.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    (site / sglang_rope.ROPE_FILE).parent.mkdir(parents=True)
    (site / sglang_rope.ROPE_FILE).write_text(FAKE_FILE)
    monkeypatch.syspath_prepend(str(site))
    # flash-attention's sdist, with the fake file as its member
    with tarfile.open(tmp_path / "flash_attn-2.8.3.post2.tar.gz", "w:gz") as sdist:
        member = tarfile.TarInfo(flash_rotary.ROTARY_MEMBER)
        member.size = len(FAKE_FILE)
        sdist.addfile(member, io.BytesIO(FAKE_FILE.encode()))
    monkeypatch.setenv("DSV41_PEER_WHEELS", str(tmp_path))


def recorded_call(call, values: torch.Tensor) -> tuple[str, torch.Tensor | None, list]:
    """The call's outcome and what the fakes were handed."""
    RECORD.clear()
    FAKE_STATE.update(batched=False, values=values)
    error, result = outcome(call)
    return error, result, list(RECORD)


def expect_same_record(got: list, expected: list) -> None:
    assert len(got) == len(expected), f"the lines made {len(got)} peer calls, the adapter {len(expected)}"
    for got_call, expected_call in zip(got, expected, strict=True):
        assert got_call == expected_call, f"the lines handed\n{got_call}\nthe adapter handed\n{expected_call}"


FAKED = [peer.name for peer in PEERS if peer.name not in OWN]


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", FAKED)
def test_the_lines_hand_a_fake_peer_what_the_adapter_hands_it(fakes, name, case, dtype, inverse):
    peer = by_name(name)
    values, angles = make_inputs(case, dtype)
    error, expected, expected_calls = recorded_call(lambda: adapter_of(peer)(values, angles, inverse=inverse), values)
    values_then, angles_then = make_inputs(case, dtype)
    got_error, got, calls = recorded_call(lambda: run_snippet(peer, values_then, angles_then, inverse), values_then)
    assert got_error == error, f"the adapter raised {error or 'nothing'}, the lines {got_error or 'nothing'}"
    expect_same_record(calls, expected_calls)
    if not error:
        expect_same(got, expected, "result")
        expect_same(values_then, values, "the values after the call")


LOADERS = {  # each peer's loaders: where one raises ModuleNotFoundError, the peer is not here
    "nemo-rope-triton": (nemo.load_rope_triton,),
    "nemo-dsv4-eager": (nemo.load_dsv4_layers,),
    "hf-transformers-dsv4": (huggingface.load_modeling,),
    "sglang-dsv4-per-token": (sglang_rope.load_dsv4_rope,),
    "sglang-dsv4-batched": (sglang_rope.load_dsv4_rope,),
    "sglang-dsv4-flat": (sglang_rope.load_dsv4_rope,),
    "vllm-dsv4": (vllm_rope.load_deepseek_scaling_rope,),
    "flash-attn-rotary": (flash_rotary.load_rotary,),
    "liger-llama4-rope": (liger.load_llama4_rope,),
    "megatron-interleaved": (megatron.load_rope_utils, megatron.interleaved_config),
    "megatron-fused-mla": (megatron.load_fused_mla_rope,),
}


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES)
@pytest.mark.parametrize("name", FAKED)
def test_the_lines_give_the_adapters_bits_with_the_real_peer(monkeypatch, name, dtype):
    peer = by_name(name)
    try:
        for loader in LOADERS[name]:
            loader()
    except ModuleNotFoundError:
        pytest.skip(f"{peer.pin} is not here: its lines were run against a fake only")
    if name == "flash-attn-rotary":  # it enters torch.cuda.device(x.device.index), which a CPU tensor's None breaks
        monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    if name == "megatron-fused-mla":  # autotuning benchmarks on a GPU driver, which the interpreter lacks
        kernel = megatron.load_fused_mla_rope().rotary_fwd_q_kernel
        monkeypatch.setattr(kernel, "configs", kernel.configs[:1])
    for case in CASES:
        for inverse in (False, True):
            compare(peer, case, dtype, inverse)


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_the_written_out_reference_gives_the_eager_references_bits(case, dtype, inverse):
    compare(by_name("eager-control"), case, dtype, inverse)


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("case", ["3d-odd-offset", "4d-strided-odd-width", "4d-one-angle-row"])
@pytest.mark.parametrize("name", ["torch-compile", "torch-compile-fullgraph"])
def test_the_written_out_reference_compiled_gives_the_compiled_references_bits(name, case, dtype, inverse):
    # Both compiled afresh, with static shapes: a reproduction compiles once, in a process of its own
    torch._dynamo.reset()
    compiled.compiled_eager.cache_clear()
    compare(by_name(name), case, dtype, inverse)


STDLIB = sys.stdlib_module_names


def peer_package(peer: Peer) -> str | None:
    """The peer's top-level package (the first part of the file it adapts), None for this project's own rows."""
    return peer.peer_function.partition("/")[0] if peer.distribution else None


@pytest.mark.parametrize("name", PEER_NAMES)
def test_the_lines_are_short_and_import_only_torch_the_standard_library_and_their_peer(name):
    peer = by_name(name)
    lines = repro_call(peer.adapter)
    assert lines.endswith("\n") and len(lines.splitlines()) <= 12, f"{len(lines.splitlines())} lines:\n{lines}"
    assert max(map(len, lines.splitlines())) <= 120, "a line over 120 characters"
    tree = ast.parse(lines)
    allowed = {"torch", *STDLIB} | ({peer_package(peer)} if peer_package(peer) else set())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and node.module, f"line {node.lineno}: a relative import"
            imported = [node.module]
        else:
            continue
        for module in imported:
            assert module.partition(".")[0] in allowed, (
                f"line {node.lineno} imports {module}: not torch, stdlib or peer"
            )
    stored = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    assert repro_calls.REPRO_OUTPUT in stored, f"the lines never bind {repro_calls.REPRO_OUTPUT}"
    assert not stored & set(repro_calls.REPRO_INPUTS), f"the lines rebind {stored & set(repro_calls.REPRO_INPUTS)}"


def test_every_peers_lines_sit_beside_its_adapter():
    for peer in PEERS:
        module, constant = repro_calls.repro_constant(peer.adapter)
        expected = "dsv41_rope.peers.compiled" if peer.name == "eager-control" else peer.adapter_module
        assert (module, constant) == (expected, peer.adapter_function.upper() + "_REPRO"), peer.adapter
        assert constant in importlib.import_module(module).__all__, f"{module}.__all__ lacks {constant}"


def test_an_adapter_without_lines_is_named(monkeypatch):
    with pytest.raises(KeyError, match="no reproduction lines for 'their.module:rope': no adapter of the registry"):
        repro_call("their.module:rope")
    stray = Peer(
        "stray", None, None, "dsv41_rope.peers.broadcast:rotary_width", "x.py: f()", "pytorch", "project", True
    )
    monkeypatch.setattr(repro_calls, "PEERS", (*PEERS, stray))
    with pytest.raises(KeyError, match=r"'dsv41_rope.peers.broadcast:rotary_width': .* has no ROTARY_WIDTH_REPRO"):
        repro_call(stray.adapter)
