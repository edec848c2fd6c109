"""liger-llama4-rope 0.8.5: forward FP16, from test_fused_equals_oracle[fp16-4d-contiguous-sequence1-forward-normal-per-batch-angles] (row (0, 0, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("723b39393039763cb33e363c5cabb0b526bd7cb6bc35f832aa38d938e6bc0f37d1b68fb9e5331c41ecb64bbeae385d3a16bcdc3f24387c3e52b8ffbe52b8ea90e7a824a9e9bed73ee8b55134ddba71ada2b52dbeacba00b85aac8ab2ea3a3b3251b6f4a5b3b48aba1bbd5ebd443374c0d73e7938e13339b885b84639a640443c"), dtype=torch.int16).view(torch.float16).reshape((1, 1, 1, 64)).to(device)
angles = torch.frombuffer(bytearray.fromhex("00006843b7f92d4394760243ccaac342ccba924241105c423a0625426880f7419a99b9412d2e8b41b9bd5041a3881c417ac4ea40000db040fc04844052004640e17a144048b0de3f2dfea63f38747a3f62d03b3f33d70c3f2c3bd33ea9669e3e69916d3ea026323e2498053efa5cc83d4e40963d5258613d23fc283d0f71fd3c"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
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
