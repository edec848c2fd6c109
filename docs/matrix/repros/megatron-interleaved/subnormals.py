"""megatron-interleaved 0.19.2: subnormals, from test_fused_equals_oracle[bf16-4d-contiguous-query-forward-tiny] (row (0, 1, 0))"""
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
values = torch.frombuffer(bytearray.fromhex("22001180de80d3803180b380a500ce803680580020808400df006c003600f080670019806400380081009280308085007d005680fa802e0096807c80c700df0003003a009d803b808f00540034800c802780a680e3803b00e4009380b780ca80c600ba80d38041800900a48039804c80a000f70013005a0010000d00e600ee000c80d40046808b001600fc80c1800d8060006f804480530032802500fa007580eb00c0001300c5002200ce80f6808100b00071005e807e00a88001008d00a1004d00f880bb804280190047807180c5801d003800a780fa009b800b003f8058800c80240034007780c2802c807a80a8805c003700a4803080a880e0004b804680a500f78038002180db005c807d0027806b80d48015003100f800b7000880df00b08080807d804080cc0035006d80ef805280fa807e809a007400af00c380460025805d80a600c3803a808a004b004080a7809a00c180c480008012004f80d5807e00b3806d80c080a000218054004c8064006880c780570054804f80a000cb807980e80023807180da8097002380ac802b007e007180b2007380c080478060803d80f3805200be80d7003100e6009280c8001f00bc00a1006f8039002980aa0050000600dd004f00cc00a0007a00d00074803b800d80508044807a80b0805080cd801c80db007b801a804f804900ab80e8802680bd00c380f900aa80a080a1000800fd809f00eb00bb00f10033004f800d8032803c00fc80e1804c8047802a009280a30018005a000480fc00db001c0059806700f480a300f2002f800180ab802a00a080fa807200cd00f280f800ab00e000c980580098002f008b8099008680cd80c8001d80bd004100e90099002a00c3806d00260000802580b98065807080b28026800b8022003a00b2800e80be00f7004180af80b700b980cb80dd80b3008f00dd80e7809a80a5800880e380bc80c78046800c80e700720056806a004380bc80550063803380ee003f002200ba80cd00b2802400a8809b001d80c48032009680cf00ce80b200ce00d400f4003100600073008e008f00020084804f00340049003680d8004780a48074008f80960096808d8031005a804b80e080bb80810006806e809a00b0001780c800370090007a801200b2808480c4806f8075007380bb800100de00b0003780dc801880e2804780fc00b080f500f28057005880290073004d002680f30082006c00808072007800ed0082005a80ae80c70071809580f90065804e0096005b004400f100cc80f180fd80918046803e00a4001980b30007007a804300b580dc0062809800d9007400a400d3808b80e08016000b809480638026808a00bc006580b580aa00c98045806680ab80158070804f8041807700f1808600d3802b00be80f1809300a80048804680d380f080da80ff801800d000"), dtype=torch.int16).view(torch.bfloat16).reshape((1, 1, 1, 512)).to(device)
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
