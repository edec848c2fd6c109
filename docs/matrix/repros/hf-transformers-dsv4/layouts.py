"""hf-transformers-dsv4 5.17.0: layouts, from test_fused_equals_oracle[bf16-4d-padded-rows-query-forward-normal] (row (0, 1, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("a03e893efd3e5e3cf6bf6ebfccbf64bf2f3f404040be373fe6bea3bbb03ee6bf973f4abf873e113fa93f83bf53bf2e3f1c3e83bfc83fad3dbd3fc2bf9e3e583f373f2a40a33f973f0bbf5cbfdd3f123fc7be413fdc3fa13ea2bfc73e04bf0dbfc63ebbbe8abd9a3e4abfcd3e983f22bf9bbf22be663f93bfc03f82bef0bec83eb63e0a3f913f03bf8e3e15409dbfeabe7bbfd83eebbfea3ee23e55bf8dbed3be883fa7be613f1a3fa2be1d40313e993e3ebfb4bc9fbf1b3ea1bedbbff0bfadbf20bf443c723e05c0e13fc53ff73d3f3f063f583e0340e3be043fff3f86bf60bf5f3fc5bf61bf123d813f19bf963eae3f553f0440fc3e33c0cdbeabbf5c3f9c3ca43ed0bfd4be31bfda3ef5bfe23e403f1ac00ebf6d3e39bfd53d833e24bf473fd7be08bf59be7a3ef6bd123f8f3ffb3ca53eab3fefbf003fd4bc86bf42be463f90bc3ac0cabd9abf5c3fb7bf3a3f363f363fec3ece3f8ebe913f2b3ee63f84bfa43f3d3faf3dd23f1ec064bf44beb9bc9c3ef23ee2be993f9cbfad3e32bfc13d5b406e3e293f44beb9bedb3ec4bd8cbfa73de33eecbee93ef0bf003ff43e87beb9babb3eda3e8d3d87bf9fbf083fbd3f6f3fc13bb0be3b3f8e3fb43ffb3e993f5b3ff53fdf3e72bfeabe14c0e53e4cbf343f24402b3f41bf8d3f69bf2ebfdebf7c3fa13d4ebfbbbe823f42bc9bbf353f7fbf393fad3f323fe73e053f08bf44bf12be54bfdd3a423f09bfb2bf043ea0bfa03e6abfdd3f2f3ffcbef43f9dbcb93d0840243f5fbe21bf1dc0a33f763f213f7fbf103e503f61bfa23f00be3740fb3ebb3f2a3edc3f8a3fd7bf90bfb6bc4ebf783f033f2cbf88bf893f3fbf54bfeb3e513fd1bf9f3dfc3f49be883d8abe34be273f9cbe8fbf653faa3c84bf4d3f8d3f1bbfab3fd33fabbf9abed63e16be98bf133df9be6c3f1d3d45bf2cbf253f9d3e0a3f0f3d3b3fe9befcbd183fd93fa53f15bfb13d01bd403fdfbf273f65bfb13fdf3f9bbefc3e0bbe91bf423ffb3e833f3bba27be99bfa53ea4bdbdbd963e54bf95bf29be0ebf10be453f873f2c3f963f0f3f06b9ca3f723f69bee1be89bec03fd53f3bbf1b3fe0becebffd3d883f2dbf113e863fd63d22bfba3f943f14bf9c3fff3efb3d41bfd93f52bf99bfd03d39be09bf023f39bec13ed93e8ebfc73f41be323fcb3f693fa93f68bf49bf9d3f233f74bf8a3fc83ea13d7e3e85bfc83f73bf90bf2cbe1cbf463ed5be083f643eb2bd24bfe13ee43e3d3e0ac0c9bfb93ec9bf8dbf89bfddbfbb3e08be5abee63f90bfc7bf303f933f91bff63d0e3f0e3e6ebba33f7bbdc3bf0a3f98beb23f90bf133f3c3fc33fc4be50bff23e20c0693f97bef5bffabebb3ee2be2cc0c3be143f61bf58bf02be2a3f333e763df53eb03fd1be24406b3f2ac01fc0193f49befc3f4b3f9b3f66be01bd063fcc3ee53f47be0d40"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 512)).to(device)
values = torch.nn.functional.pad(values, (0, 8))[..., : values.shape[-1]]  # rows of a wider one
angles = torch.frombuffer(bytearray.fromhex("0000803f11f93f3f9af50f3f9be8d73e9be8a13e24d4723e8718363e778d083ecdcccc3d0e94993dc355663d15ba2c3de286013d5043c23c39ad913cf17b5a3c0ad7233cb0b9f53b9c44b83b772e8a3b373e4f3b0c691b3b2815e93a8ec9ae3a6f12833a8d94443a166a133a2617dd395fcba53914a8783953773a3972d40b39"), dtype=torch.int32).view(torch.float32).reshape((1, 1, 32)).to(device)
inverse, upstream = False, torch.ones_like(values)
factors, exact = (torch.polar(torch.ones_like(a), a).unsqueeze(2).detach() for a in (angles, angles.double()))
factors, exact = (factors.conj(), exact.conj()) if inverse else (factors, exact)
pairs = torch.view_as_complex(values.detach()[..., -64:].float().unflatten(-1, (-1, 2)).clone())
expected, truth = values.detach().clone(), values.detach().double()
expected[..., -64:] = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
truth[..., -64:] = torch.view_as_real(pairs.to(torch.complex128) * exact).flatten(-2)
from transformers.models.deepseek_v4.modeling_deepseek_v4 import apply_rotary_pos_emb
cos, sin = angles.cos().to(values.dtype), angles.sin().to(values.dtype)  # as DeepseekV4RotaryEmbedding: x's dtype
heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)  # [B, H, S, C] as the attention's
got = apply_rotary_pos_emb(heads_first, cos, -sin if inverse else sin)
got = got.transpose(1, 2) if values.dim() == 4 else got.squeeze(1)
got, differ = got.detach(), (got.detach().view(torch.int16) != expected.view(torch.int16)).nonzero().tolist()
print(f"{len(differ)} of {got.numel()} elements differ from eager on {device}")
for i in map(tuple, differ[:3]):
    print(i, f"got {got[i].item()!r} ({got.view(torch.int16)[i].item():#x}) expected {expected[i].item()!r} ({expected.view(torch.int16)[i].item():#x}) truth {truth[i].item()!r}")
