"""hf-transformers-dsv4 5.17.0: inverse, from test_fused_equals_oracle[bf16-4d-transposed-inverse-output-forward-normal] (row (0, 1, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("02403abf593f85bf60bee4bf7e3d53bea5be6c3f55bfd7be1a3f1e40643e61bfb73f9f3f873f4abe29c0213e163fe63ee4be9f3fcbbeacbe613f43bb5d3f403fcdbe353e263e973e6d3b7abfb43f13bfd0bff53fac3f1dbf91bf97beea3ea03f68bea73e37bf25bf21bf8fbe4f3f0c3fd3bd603f1c3faa3fdfbf4cbeb6bf463faabf18bf6ebf093fe03f203f283f93bea3be2240ab3f8c3fb53fe1bdb7be0d3f69befd3e00bf30bf213e2e4031c018bd72bebc3fe83ea83e67bf953d1abf733f2ac0dfbf24bf46bed53fbbbe263f2d3eaf3fa3bec73fb63f35409d3e99be11bf8a3fe3bee33ec3be213f033fa13fdfbfbc3f963f07c0dfbe4e3f8a3f983f433d633f02bfcabeaabe9bbe97be18bfba3e933f65bfcdbf1fc0a43f373f603e933cbcbfc8beb5bf6abf8abe0bbf643f1fbf02bf6c3f0d40303e0c401dbffcbe91bfbcbe27bd94bfadbe05bfb3be48bf853e273f893f433f94bf0ec0bf3f2b3f873fdd3f18bfeebfe63d30bf36bf574092bf5a3ea0bf19bcc93fdc3d033f87bf053f90bfbb3d2f3f1d3ea2bf04bfa8bf25bf9cbfe3bd04be383f9c3f05bfbbbfa13e8e3ec9bf1c3f023dd03e983fabbfdb3d983f0f3e9b3f383e03be86bfb23fc5bf2abfb3bf82bf893ff9bd6e3fda3eba3e8fbd1fc0c93d863fb13e7abf8a3f56bfcb3c953e9bbfd0bdc3bf1b3fb2be1d3fdabe793f3f3f603f0a3e633f5d3f153fd93fcf3eac3fa63f4c3f3abe05bfbb3e9a3ffd3ef93f693e74bffc3e88bf0ebf96beb3bfa63f28be3d3bb53fdfbe5fbfb23e9a3eaebf36bf26bfbb3faabe903f1c3fe53ed93d0abfbf3ee53e9dbf1940bc3f65bf40bf113b063f223f393f853e9dbc623e9cbfe13ed93e97bf983f0bbfa6bf3ebf9cbd4c3f7bbf60bfcf3f703eac3f183e3fbf3e3f88bf5cbe1b3f2c3e50bcf3be15bf363eeabe923fadbf55bf1e408abead3e37bfae3f863fe43e0a3f59bfa03d80bf1240ebbfdcbfb03fe13e703e6d3fb13c92bcabbdadbe8bbe673f6ebf3e3f993dd9be133fa6bf9c3dc93f16bd39bfe6beb83eeb3fac3f4a3fd7bd2c3d89bf0540febdcabfc83d963ecfbdc03fcebf8cbfd7bfa3bfea3e373e94bd823d393fefbf26bf64bee03e43bfb33e0840a1be82be0ac06e3f69bd213f69bed1beaf3e8ebf77be293f0f3fb0bc4bbe6dbf823fd93f143fe4bf17bf0dbe88bfe33fb0bf4abfcebe0cbff33f833f4c3ff73e0abfae3f33c0693f103fe4be21be8c3ef3bfbdbd34bfb03e28bf083dbebe52bf1abf263fb93ea93f993f5a3cadbf80bf6a3fd23e42bf074096bf3abfccbede3e20bf02bf7ebedfbd3dbda9be5d3e9cbf01bfdebe163fd03f2c3eba3fc43fb63ecabfacbfea3fef3f413f8bbedbbf00c0b0bfc23e053feb3f51c0063fa33e93be2f3ff2be953eebbf073f0fbff63ee43fbcbfe83fa2befbbc533f6dbe503f"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 512)).to(device)
values = values.transpose(1, 2).contiguous().transpose(1, 2)  # [B, H, S, C] storage
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
