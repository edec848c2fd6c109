"""nemo-dsv4-eager 0.7.0: forward BF16, from test_fused_equals_oracle[bf16-4d-contiguous-query-forward-normal] (row (0, 1, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("e7bfa73d95be243f5abf993f63bf6a3fa7bfed3f163f7dbda2be7b3e64bfd63eb8bf8a3f68be97be01bf12bf9c3ef63d0b3fa43ffbbfba3e9f3f84bea83f28401e3f843fd13fb93e95be52be29bffb3da63f26bff23f843e0bbf793f06bf31bf39bfe8beca3e9bbfb2be5c3ff8bebabf1d3f7dbf8f3f0e3f62bea7bf7ebf583f35bfe0be173ff33d583ee1be03be6abfacbf623fdebe23bfa1bef43e2fbf95bfa4bf703f8fbf223f0440d8bd733fcabf6abf58bec2bd20bfef3eb53f8fbea3bf173f1a3fb1be93be7a3fde3f4bbf893f93be893fcf3f933f0fbe8bbe7ebe3a3f92bf78bf763f223fb4bf9f3ccdbf97bf653f853c4bbf3bbf81bf9dbf3dbf093edc3ff2bd1b3e033f793fd13f1bbf503eeb3ec1beb0be2abf143f5bbf7f3f98bf13bf403d7b3f9cbeabbd153e07bd9b3ecfbe16c011c01ebe0940753bc03d17bf37bfe13e2cbe8ebff2bed93e0240a1bf4dbf473f2bbf11bedbbdefbe9bbf4f3dd9be5b3f90bf433ef73f66be66be3b3fa13f8d3f13c0ccbea8bea0bc003fb3bf823fbfbf8abe8abf47bb4c3f833e113f8dbc6d3f2d3e76bd053fcf3f803f71bf033e3abf7c3b59bf8e3f48bf59bf01bf9dbf01bf69bf4ebfe5bf83bfb73c18bfbd3f80bf69bf453feabf843f093dd0bf08bf923f5cbf0d3f15bf463fab3fdbbeb93f623da53ed1beae3f7e3d48bf2fbf1c400a3ea13fa13ff23dc63fddbfd03fcdbe71bf583ea93ea53f753febbe2ebcb2bed83f923f84bf4cbdec3e773ef23e13bf913f97bf3f3ecc3ea9bf7bbf6dbd7d3eab3f38c05fbf58bf90bf1a4082bf76bfd43e7ebf02bf6ebe663d473f21bca1be0e3fcb3fefbfc33f3bbfbc3f7abf0e405e3f393e643ccc3fadbe903f553c123ed53e43bf3abd883fbb3e293e223f0ac0b43f4a3fe2bc603fab3d81bf173f194084bfdebf1d3fbdbea6bfbf3e4d3f42beb03d94bfb13f31bfc23db83f69bf0d3f573f74bf0b3f1c3f5cbf2d3f963f633eaebe023fcfbeef3e8a3ff1bffc3fa43de2bf00bdaf3f673e383f3f3fc53ffcbeb4be87beaabf143f00bfd3be41bf58bf49bf90bda7bf25bfa7bd773ff9bd0140283f1ac0a7bf63beec3f9e3ea9bf17bf94be5ebea4bf7e3f8d3f60bef7be7a3faebfecbdc5bdafbffdbf90bfba3f823fc1bf8cbe6cbc1bbf703f8bbf513f783f19bf253fad3faf3f8f3eaebdf53e90bfb0bd3f3ff6bf703ed5bfc5beb5bd393f5ebfeabedcbf42bf463e15c0653e843f883ed13e2f3e22bf803fb7bec9bf91bf1bbfc5bfcfbd92bf873c3abf2ac0ae3ef23fbcbfb53e34bfadbfea3f37bf12bfa8bfd53e073fb1be9a3f5fbf24bec9bf92bf5dbf3fbe913dbfbe9cbd7fbe683f0f40f43f5f3f6bbf973f63bfe83f86bf313fb1be1fbfb2bfb6bfe73e183ffa3e83bea4be4f3f15bf57bfa2bef8be2bbea2be49bfb03ee7bca13ea9bc82bf"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 512)).to(device)
angles = torch.frombuffer(bytearray.fromhex("0000803f11f93f3f9af50f3f9be8d73e9be8a13e24d4723e8718363e778d083ecdcccc3d0e94993dc355663d15ba2c3de286013d5043c23c39ad913cf17b5a3c0ad7233cb0b9f53b9c44b83b772e8a3b373e4f3b0c691b3b2815e93a8ec9ae3a6f12833a8d94443a166a133a2617dd395fcba53914a8783953773a3972d40b39"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
inverse, upstream = False, torch.ones_like(values)
factors, exact = (torch.polar(torch.ones_like(a), a).unsqueeze(2).detach() for a in (angles, angles.double()))
factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)
pairs = torch.view_as_complex(values.detach()[..., -64:].float().unflatten(-1, (-1, 2)).clone())
expected, truth = values.detach().clone(), values.detach().double()
expected[..., -64:] = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
truth[..., -64:] = torch.view_as_real(pairs.to(torch.complex128) * exact).flatten(-2)
from nemo_automodel.components.models.deepseek_v4.layers import _apply_partial_rope_interleaved
doubled = torch.cat((angles, angles), dim=-1)  # DeepseekV4RotaryEmbedding: cat((freqs, freqs)), cast to x's dtype
cos, sin = doubled.cos().to(values.dtype), doubled.sin().to(values.dtype)
heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)  # [B, H, S, C] as the model's
got = _apply_partial_rope_interleaved(heads_first, cos, -sin if inverse else sin, 2 * angles.shape[-1])
got = got.transpose(1, 2) if values.dim() == 4 else got.squeeze(1)
got, differ = got.detach(), (got.detach().view(torch.int16) != expected.view(torch.int16)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int16)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int16)[i].item():#x}) truth {truth[i].item()!r}")
