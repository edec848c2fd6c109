"""liger-llama4-rope 0.8.5: signed zeros, from test_fused_equals_oracle[bf16-4d-contiguous-query-forward-special] (row (0, 6, 3))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("80003e3f173f807fc3ffc37f2ebe373e7f7fb5bd43bfd1bf01008000e13f6bbe00000100c3ff2bbf807f857fc37f913f7fff0f402bbfc3ff857f0380e2bee4be857ffc3f943df5be7fff0380bc3d093f0080da3c857f0380983f010080ffc3ff000080000380c3ff853f80ffc37fe2bfb43f857f99bf613e8fbf80ff04bdc3ff807f863f083f27bf03800100008026bf80007f7f82bf9e3f34bfc3ff8000babe8000dc3e80ff034081bfd33f008027bfc37f30bfc3ff03408ebdc37f857f7fff773fa4be800080007fffc3ffb93fc3ff03807fffbabfc37fc53d933f4f3f7f7f7f7f0100008080ffc03f800080ff0000a83fc3ff0000807f6ebfe3bfb5bf9b3e9e3f857f003e89bf4a3f943f857f857f0380800048bfc37f0080807f807f038080ff9cbe80ff008080000100be3f800096be01c034bf7e3f857fc3ff80ff80ff80ff0000c1be9abf4f3f0100124004bff6be857f807f01006bbfc37f807f857f0000c3ff893f0100ea3d283fae3e0d3f30bfc3ff7f7f9f3f7f7f8d3f0b3f807f0080c3ff6ebf0080473f45bf5f3f807f7c3f00007f7fbb3e0100cb3e7f7f97be03806fbff93e463e743f923feb3e953fdd3f7f7fddbedfbec73f7fff0100000028bf038080ff17bf008092bffebe7fff2dbf80fff53d073de73e0000807f80ff01000380c3ff807f0ac025bf00000380c23fb9bf1c3f26be01005f3e80bfc37f2fbf857f807f073f3dbf008013c000007fff7fffd43f723f857f543f973fc3ff80008000038080ff3ebf7f3f163f857f9fbe04bf7f7f7fff7f7f22bf42bf52bf93bf7f7fa8be97be807fa63f7fff80ff03800080a8bfc37fe73fb33e857f4a3f8ebfac3e39bd857f12bd6ebfc37f7cbf807fedbe7fff00005bbf807f9c3f0100010092bc7f7fbc3c807f7f7f8000d63e6bbfc3ff01007f7fcdbe00bf0080857f7fff41bfb43d0ac0103e4cbf7fff0100063fc3ff14bed5bd0080f6bf75be42bfc37f86bfc0be8000293f7f7f857f80ffc3ff0100c3ff0000c3ff7fff343f80000100807f010080ffee3e03808000c3ff80000080553f807f763f038003800000b2bd8000857f9cbf6b3e807fc3ff0080ba3e0380d1be7fffeebf87be807f807f97bec37f7f7fc37f7fff7f7fc3ff80ffa23f0380c3ffd13f02be00800100c37f80ff80002bbe42be0100a4bf807f763f8dbf9b3f807fc3ff91bfc37f5cbd094080ff00802dbe038003807f7f0ac003808000a5bfce3df73ef1be10bf7fff0380857f00007f7f01008000c3ffc43fc37f0080113f30bf807f7f7f17bf010080ff963f4c3f857f7fff7b3e857f7f7f1ebf0380813f0000b33d80ff8000c37f553f03800100bfbeb9bd807f84be01005bbe80fff33ec37f02bf5dbfc13e857f857f7f7fab3f7f7f0340a13f807f163f39bf1d4033bd123fce3e7fff423fb2bf0380"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 512)).to(device)
angles = torch.frombuffer(bytearray.fromhex("0000c040cdfa8f4067f0574074ee2140e8dcf23f1b1fb63f6592883f32d44c3f9a99193f155ee63e52c0ac3e908b813e534a423e7cb2113ed683da3df5dca33d8fc2753d444b383d75330a3db245cf3ca96e9b3c921d693cdecf2e3c2a17033ca69bc43b6a6f933b211f5d3b5cd1253b0eb1f83a0f7eba3a7ed98b3aabbe513a"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
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
