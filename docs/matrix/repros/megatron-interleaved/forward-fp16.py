"""megatron-interleaved 0.19.2: forward FP16, from test_fused_equals_oracle[fp16-4d-contiguous-query-forward-normal] (row (0, 1, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("ae3caf32a739bc3bde3d19b1e2395d3c07bc3138cdad5eb4ac3bfebde6b8f1bc33b6f53b06bf5c3c1cb677c0a535729ae93b59bc133a4c3c9fc081bd1cb7343e85b651b59a3d3c3e234123b39c402338b237e4ba5d40ac9e013851ae2d3ca8b8f7b8b5bb1b42c93289bdab3ec334bbb9b23ee7b5e0bbfcbbf7ba30bcc038483402bd85ac42b425bbe1b964bc6e3c6f3df2bc8a35ba40004197adeb2ee93e7eb7a8397d3862ba9db0a9bc74bb9dc0bb3638b27ebc8eb5183b5d3e75bd50397539672c2a2dbe3b513e8b3812b5083b32b941c0b23e6529193b32b5673a26bfad36e73d43bc1fb4a43aec3ca8b653bfe8b33d3c80b60bb9861cfab9633ca33f7c3af3af8e3c3d3a933422b4843e06b2bab60fbc493b3abcc93de13d8ab473b1cf30e53ee6b4b835ca37aa38d6b8e0bc9e392e4097bdda37184050bf583b6b3a063480b8b9bfb83c1a3bfeb515354d3b73bd33366ebe65b85540633c8a2487b0ccb8b23edfb630b9a4c068b9dc2fda31353537347ab35dbca8bc8cb90c3c5bad26bd31b9e03d0eba9a35cbb812397933a9be7a25723f9d3a45bc01bbc1b953bc383af6bd661532ad0baa4ebaefab10b4dab65b30a139f02949acdcb84ebd2abc6c358b20a0bc2dbd3132f6ba67be013ca32f393901baffbc14bc2eabde39f8ac9bae82bec33a3fb8f4b030b5304073334cb9f038eb3a08bba3b20d355e33303b6137f1350bbb61bc3034e8bfacbbd638ce393f40efb8dcb9c7385d3d823e49c02f2e3e39463994bdf1b8153db134aa394f3b10b9bea6213a4f3becbe05bce338c83069bd80b98d209dbef638763abb3ae9343ab58db1b22ad6bcaa3a84bcc13316be9fb97735ba3c30b82b3ecf37aab0753564c05337a52839b52138bdc0d934c5aba43d3ab5dc9d1fb5943444b6f6b7f7b83fc0b835b3b78a341d34b43f86b4733219b6613d872fd3bd3ab89bba77344ebf10b80a3835bb9fb7ee3e5734f5b032c0d93a00bf0838c439453784bc8fb587b9e33e7db8b6ba56bc743409a92ec02439a9374f3cef2d59b552324fa9ec3d2b3cd03c9dbca53b692f88c11b3d6eb6a3b6843cf73c8935a1350b3560b47bc0593e8f360dc0f9afac3631bcc2bce42cfabcc7bc43b72c2d93b03436c3b9913d9fb6a4b7e92a3a31cfbad5b80e3ef6a9dbb361b8973dcfb91fba22b833bcebbd86bda1adf8b8943ca9b44f2ef8328eb0353bf83f0bbaa438d3c0cab641b93c2a28b6aa36e135932a1631e9b93e3d043bccbc433d6234ebbbecb804bd76b1da3a50bed73617a9513ca0b894bb55bb1830cabe453893bd9c36cc306238573140b62bb6bfb580b705c18eb648bc8dbab2ba8ebb31bd493c99ba2cbddcb7663eed3ad6b66bb7e7ba52be80b5dbbeeb3b32bd79bcd7b1b4bab63a7a3c283d843ad2b9cdaffeaebcbed4347fbfcbb828213b31f2b7"), dtype=torch.int16).view(torch.float16).reshape((1, 1, 1, 512)).to(device)
angles = torch.frombuffer(bytearray.fromhex("0000803f11f93f3f9af50f3f9be8d73e9be8a13e24d4723e8718363e778d083ecdcccc3d0e94993dc355663d15ba2c3de286013d5043c23c39ad913cf17b5a3c0ad7233cb0b9f53b9c44b83b772e8a3b373e4f3b0c691b3b2815e93a8ec9ae3a6f12833a8d94443a166a133a2617dd395fcba53914a8783953773a3972d40b39"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
inverse, upstream = False, torch.ones_like(values)
factors, exact = (torch.polar(torch.ones_like(a), a).unsqueeze(2).detach() for a in (angles, angles.double()))
factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)
pairs = torch.view_as_complex(values.detach()[..., -64:].float().unflatten(-1, (-1, 2)).clone())
expected, truth = values.detach().clone(), values.detach().double()
expected[..., -64:] = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
truth[..., -64:] = torch.view_as_real(pairs.to(torch.complex128) * exact).flatten(-2)
import types
from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
from megatron.core.transformer.transformer_config import TransformerConfig
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=1, rotary_interleaved=True,
                           apply_rope_fusion=False)
width = 2 * angles.shape[-1]
block = values[..., values.shape[-1] - width :]  # it rotates the FIRST freqs.shape[-1] channels
t = (block if values.dim() == 4 else block.unsqueeze(2)).transpose(0, 1)  # [S, B, H, 2P], sequence first
freqs = angles.repeat_interleave(2, dim=-1).transpose(0, 1).unsqueeze(2)  # [S, B, 1, 2P]: each angle twice
one_rank = types.SimpleNamespace(size=lambda: 1, rank=lambda: 0)  # no context parallelism
got = apply_rotary_pos_emb(t, -freqs if inverse else freqs, config, cp_group=one_rank).transpose(0, 1)
got = torch.cat((values[..., : values.shape[-1] - width], got.reshape(block.shape)), dim=-1)
got, differ = got.detach(), (got.detach().view(torch.int16) != expected.view(torch.int16)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int16)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int16)[i].item():#x}) truth {truth[i].item()!r}")
