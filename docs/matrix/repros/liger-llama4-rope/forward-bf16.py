"""liger-llama4-rope 0.8.5: forward BF16, from test_fused_equals_oracle[bf16-4d-contiguous-sequence1-forward-normal-per-batch-angles] (row (0, 0, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("573f1fbd83be21bf0bc0593fbebf9abf953f37bfbcbfcfbf043f23bff23f883f25bf03c0013fc3bf53bf15be83be40bfd1bd653fa43e413d2dbffb3f49bf963e80bc913f2bc03f3fa1bfdf3d37bf9f3e833ff2bcc3bd3c4020bf1b3f413f993fab3f6abf413e1140aabf93bfa63da23e8bbf163e8dbf98be213f59beecbddc3c"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 64)).to(device)
angles = torch.frombuffer(bytearray.fromhex("009050455a661c450f91ea4471e6af4411e88344f5d445445b5a1444817fde439ad9a6435d3d7a433fa73b435ab80c43e70cd342f7439e42605d6d429aff3142e17a05421731c841651f9641f626614120d728418a39fd404ce4bd4015668e4069915540462720403b32f03f2c1fb43f8012873f6f944a3fd7e9173f88d6e33e"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
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
got, differ = got.detach(), (got.detach().view(torch.int16) != expected.view(torch.int16)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int16)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int16)[i].item():#x}) truth {truth[i].item()!r}")
