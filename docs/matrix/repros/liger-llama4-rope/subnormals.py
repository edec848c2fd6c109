"""liger-llama4-rope 0.8.5: subnormals, from test_fused_equals_oracle[bf16-4d-contiguous-sequence1-forward-tiny-per-batch-angles] (row (0, 0, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("7800d68096002e8012801580e580a900d7000a00a180e500928087004c004b00c50069005c00f5001b00ba00a680a400d2005580e800f2806d805c006d808b001400c1009100a10094007e001280ee80a180608064806380dd0085001380900052001d803800d8807480b900308012800680b9803100a500f70017800780ad00"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 64)).to(device)
angles = torch.frombuffer(bytearray.fromhex("0000cb43803a9843824f644373352b4373630043398ec042736590425b90584267662242ce90f34102a6b6418ff78841ea6b4d41600b1a41b808e7404840ad4085eb81403fda4240681e1240b125db3f5656a43f9978763fc7d3383fd4990a3f3cdfcf3ecce19b3e3fca693e5b512f3e4478033e482dc53d9fdc933dedc25d3d"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
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
