"""liger-llama4-rope 0.8.5: inverse, from test_fused_equals_oracle[bf16-4d-transposed-inverse-output-forward-special] (row (0, 0, 3))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("5d3f03809c3f20bf8000857ff23f9e3f893f000020bc483ec37ff53e0bbf7fff083fafbfd43ec37fc3ff27bf41bf9d3f7f7f983ff03e683e31bf203fc37f7f7fdbbf3f40b73ec1bf000062be1abf353efcbec37f7f7fb63fc3ff01007fff010091bf14bd857f008000009abd800041bf7f7f0380e73c7f7f8000a9bf353e323f0380010033bf0380503e8ebf2e3fc3ff0100993f923f873e373f03800080c3ffc33e7f7fc37f010080ff7fff8bbfebbeebbd80ffcdbe03807f7f80ff3c3f01000000a2bfc3ff5dbec37fa33fd4ba8cbf7fff953f80ff80ff807f67bf2940e03e7f7fc3ffb43fc8be807f95bf28c01e40c3bf7f7f0abf4cbc33bfb63e0080ad3fa03f8000000080ff613fa0bf8000807f7f7f0340f8bf0100a43f008071bf403f8000c13dc3ff7fffaebf857fbb3d8dbf00004c3f523f5e3f84bf4b3f583e1a3fbcbf6c3e857f03800100b83d9f3f76be38bf0000fe3f8c3fb73e857f4bbe800030bfa03c383f00000100853f3ebf0080857f90bd453f15bc7f7fcc3f7dbf0000703e483f89bf7f7f023f9dbea4bfce3da93e533f3840807f80ffb2bf7fff807f857fa03dc3ffb4bf0380c3ff03807fff80ffadbfd7bebb3f843f00003f3eb5be807fe23dd93f0f3f5dbf008081bd807ffe3e0100213fd73e03c00080c73f143f69bf00805bbf283f15bd857f2ebf9c3f59c07fff8d3f00000000c83f857facbf00007f7f073e2c3eb23f18bf7f7f093fd6bf7f7f00bfc37f0080cf3e1f3fc37fdb3c4fbf807f7f7f05c0c37f00807b3f7fff0380c37f7f7f01005abf0080b0bf2240173edfbf7f7fc1be807f93bf8000cebf843ed3beb1be008003807f7fc3ffc37f00807f7fa03e0000807f983fc3ff857fa3bf807fba3ff0bca53fc3ffb13f7fff010080ff857f0000038000002f3fc3ff01007f7fbcbf903f00807f7f953f4ebe807f07bf9c3f807fcd3e21bfcbbe2cbf0380c37fe7bf7fff80ff0000807f0100bd3e2c40e73ebebe80ff0100807f807fff3e8d3e8a3ffa3ecbbfafbe038080ffcb3f8000aebfc3ff80ff807f0000c3ffc37ffabffc3f807f313f80ffe0bfd73e39bf807fe6bfc37f0000a9bf5b3e7fffebbfe3bd04c001009fbef13f7f7fc37f493f000088be883f9bbe0000183ed53e80ff7f7f03807f7fc37fc3ffb63fcfbe807fb4be803fb63e03804bbe80000abf073e80ffc3ff80ff807f857f233fa63f4fbfe6bf857f823f80008000857fd23d857fa73e7fff7fff7fff12c00100c37f19c0f13f7fff1a3e44bd31bf8000b93f7f7f893d01006d3ed13e80ffcf3e0100c03e7f7f80ff45be01008dbe01007fff893e008000000380807fb2bd8000807f857fc3ff08c004be800080005bbf7ffffa3ecf3f9f3f4d3f807f80008dbe00008abffa3e6fbfc3ff7dbf857fd6bf80ff807fc37f0100383f1a3fc37fc37f"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 512)).to(device)
values = values.transpose(1, 2).contiguous().transpose(1, 2)  # [B, H, S, C] storage
angles = torch.frombuffer(bytearray.fromhex("0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
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
