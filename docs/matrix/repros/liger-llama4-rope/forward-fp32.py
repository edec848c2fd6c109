"""liger-llama4-rope 0.8.5: forward FP32, from test_fused_equals_oracle[fp32-4d-contiguous-sequence1-forward-normal-per-batch-angles] (row (0, 0, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("931d993f41f3d93d8d959bbeaed629bf6dfa813f14390dbfabac9cbf5c2c6cbede0aad3d20021c3e604e0e3f1aa434bda4ae8d3e6f402f3f4b8b14bffee6f0be76852dbf3fbdbf3fa45c2c3e657b27bf55c1b8bece40f03e8010043fc0d6f4be9c472e3f2c050c3faf03c7bc41da08bfbbb87e3e4e20fc3e1a5ed9bedcaee4bfd99e04bf6d36c9bf1a0f14bf878b303e0f67303fafcf45bedda5d9bed1efb1bfac83713f826f853ff91a613f268ae2bf8822d9bf0fb938bf7abb9f3f57c5a2be0e4df8be84bc9cbf33bb893f85f48a3fe489423c96e41c3d7fbff6be8362eabfeee158bf59cade3efce1593f09ac533d0175cb3e73b41c3ec3734e3fa3662a3f"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 1, 64)).to(device)
angles = torch.frombuffer(bytearray.fromhex("00b04d456e3e1a454a55e744b479ad4494168244d31a4344d54e1244536edb43cd8ca4434aca764308113943c3c70a431f24d04275159c42bb176a42758b2f42d7a30342a26ec541a00d94416a0c5e414d832641eebbf9403046bb40916f8c40bf9f52401bf21d4099e2ec3f89a3b13fd735853f8cc9473fc0d1153f83b2e03e"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
inverse, upstream = False, torch.ones_like(values)
factors, exact = (torch.polar(torch.ones_like(a), a).unsqueeze(2).detach() for a in (angles, angles.double()))
factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)
pairs = torch.view_as_complex(values.detach()[..., -64:].float().unflatten(-1, (-1, 2)).clone())
expected, truth = values.detach().clone(), values.detach().double()
expected[..., -64:] = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
truth[..., -64:] = torch.view_as_real(pairs.to(torch.complex128) * exact).flatten(-2)
from liger_kernel.ops.llama4_rope import LigerLlama4RopeFunction
width = 2 * angles.shape[-1]
block = values[..., values.shape[-1] - width :]  # the last 2P channels, rotated in place when contiguous
query = block if values.dim() == 4 else block.unsqueeze(2)
table = angles.expand(-1, values.shape[1], -1)
freqs_cis = torch.polar(torch.ones_like(table), table)  # as Hugging Face's Llama 4: complex64
freqs_cis = freqs_cis.conj().resolve_conj() if inverse else freqs_cis  # it takes no inverse flag
got, _ = LigerLlama4RopeFunction.apply(query, query.new_empty(*query.shape[:2], 0, width), freqs_cis)
got = torch.cat((values[..., : values.shape[-1] - width], got.reshape(block.shape)), dim=-1)
got, differ = got.detach(), (got.detach().view(torch.int32) != expected.view(torch.int32)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int32)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int32)[i].item():#x}) truth {truth[i].item()!r}")
