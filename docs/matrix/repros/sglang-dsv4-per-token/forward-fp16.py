"""sglang-dsv4-per-token 0.5.23: forward FP16, from test_fused_equals_oracle[fp16-4d-contiguous-sequence1-forward-normal-per-batch-angles] (row (1, 0, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("de3ec3bb8c3bc738d4b9feb171b8873e993093408437563a68372cbe5630eb3a83b900b9efb139bc50b987a0f431ac2c9c9cfb32c631033b93bc5331a1b6fbbb34bc9cb7ceb98cb1a21f37b80eb00d349e35ccbe9a3a63b55b3a452f00b9c1b8723aec356d377bac803cda3b7f35f63f41b0bb3a4ab0a3bd23aab2b1cf342fbb"), dtype=torch.int16).view(torch.float16).reshape((1, 1, 1, 64)).to(device)
angles = torch.frombuffer(bytearray.fromhex("00b03e45d6fe0e458276d64413d3a044e633714465e0344465a30744bf6dcb43cd8c9843f0ca644302922b43dca8004351f6c04284b390426f05594232be22427b14f441c008b7419b418941f9da4d41a85e1a419e85e740f29dad40c231824096434340676d12402b9cdb3f2eafa43fd9fd763fb237393fc2e40a3f9d4fd03e"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
inverse, upstream = False, torch.ones_like(values)
factors, exact = (torch.polar(torch.ones_like(a), a).unsqueeze(2).detach() for a in (angles, angles.double()))
factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)
pairs = torch.view_as_complex(values.detach()[..., -64:].float().unflatten(-1, (-1, 2)).clone())
expected, truth = values.detach().clone(), values.detach().double()
expected[..., -64:] = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
truth[..., -64:] = torch.view_as_real(pairs.to(torch.complex128) * exact).flatten(-2)
import importlib.metadata, importlib.util
path = importlib.metadata.distribution("sglang").locate_file("sglang/kernels/ops/attention/dsv4/rope.py")
spec = importlib.util.spec_from_file_location("sglang_dsv4_rope", path)  # by path: sglang/__init__ starts a server
spec.loader.exec_module(rope := importlib.util.module_from_spec(spec))
got = values.clone(memory_format=torch.contiguous_format)  # the kernel works in place
table = angles.expand(*values.shape[:2], -1).flatten(0, 1)
freqs_cis = torch.polar(torch.ones_like(table), table)  # precompute_freqs_cis: complex64, one row per position
rows = got.view(len(freqs_cis), *values.shape[2:])[..., values.shape[-1] - 2 * angles.shape[-1] :]
rope.set_batched_rope(False)  # the default: apply_rotary_emb_triton_kernel
rope.apply_rotary_emb_triton(rows, freqs_cis, positions=torch.arange(len(rows), device=values.device), inverse=inverse)
got, differ = got.detach(), (got.detach().view(torch.int16) != expected.view(torch.int16)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int16)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int16)[i].item():#x}) truth {truth[i].item()!r}")
