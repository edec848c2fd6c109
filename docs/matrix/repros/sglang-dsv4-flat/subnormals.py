"""sglang-dsv4-flat 0.5.23: subnormals, from test_fused_equals_oracle[bf16-4d-contiguous-odd-channels-forward-tiny] (row (0, 0, 1))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("5900170026003680fe80448085806980ad809f80220040006b808980e1008b8047806200ac004c0015804a00208004006300e600d0800780be0002809b0074805b807380f500e800d100"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 37)).to(device)
angles = torch.frombuffer(bytearray.fromhex("0000000000000000000000000000000000000000"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 5)).to(device)
inverse, upstream = False, torch.ones_like(values)
factors, exact = (torch.polar(torch.ones_like(a), a).unsqueeze(2).detach() for a in (angles, angles.double()))
factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)
pairs = torch.view_as_complex(values.detach()[..., -10:].float().unflatten(-1, (-1, 2)).clone())
expected, truth = values.detach().clone(), values.detach().double()
expected[..., -10:] = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
truth[..., -10:] = torch.view_as_real(pairs.to(torch.complex128) * exact).flatten(-2)
import importlib.metadata, importlib.util
path = importlib.metadata.distribution("sglang").locate_file("sglang/kernels/ops/attention/dsv4/rope.py")
spec = importlib.util.spec_from_file_location("sglang_dsv4_rope", path)  # by path: sglang/__init__ starts a server
spec.loader.exec_module(rope := importlib.util.module_from_spec(spec))
# the copy (it works in place) and the table each have a spare row after them: the kernel's tile runs past a row
got = values.new_empty(values.numel() + values.shape[-1])[: values.numel()].view(values.shape).copy_(values)
table = angles.expand(*values.shape[:2], -1).flatten(0, 1)
freqs_cis = torch.polar(torch.ones_like(table), table)  # precompute_freqs_cis: complex64, one row per position
freqs_cis = torch.cat((freqs_cis, torch.zeros_like(freqs_cis[:1])))[:-1]  # zeros: the last token's heads read them
rows = got.view(len(freqs_cis), -1, values.shape[-1])[..., values.shape[-1] - 2 * angles.shape[-1] :]
rope.set_batched_rope(True)  # 3-D x: apply_rotary_emb_flat_kernel
rope.apply_rotary_emb_triton(rows, freqs_cis, positions=torch.arange(len(rows), device=values.device), inverse=inverse)
got, differ = got.detach(), (got.detach().view(torch.int16) != expected.view(torch.int16)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int16)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int16)[i].item():#x}) truth {truth[i].item()!r}")
