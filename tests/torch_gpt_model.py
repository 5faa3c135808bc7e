"""The lab kit's GPT written again in plain PyTorch (float32).

One definition, used by tests/torch_check.py (is the C model right?) and by
bench/torch_gpt.py (how fast is it next to PyTorch eager?). It follows
common/model.c (and layout.c's init) exactly:

    tokens -> wte[token] + wpe[t] -> L pre-LN blocks -> layernorm f -> x wte^T
    block:  x1 = x  + attproj(attention(qkv(ln1(x))))
            x2 = x1 + fcproj(gelu_tanh(fc(ln2(x1))))

Layernorm eps 1e-5; qkv is one (3C, C) linear whose output columns are
[q | k | v], head h taking columns h*hs..(h+1)*hs of each; causal softmax
attention scaled by 1/sqrt(hs); MLP width 4C; logits through the tied wte;
mean cross-entropy over all B*T positions.

The parameters carry gpt_tensor_table's names (layout.c), and
ordered_parameters() walks them in the C flat buffer's order: wte, wpe,
blocks.0.ln1w ... blocks.0.fcprojb, blocks.1..., lnfw, lnfb.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

LN_EPS = 1e-5
INIT_STD = 0.02

# The benchmark configs: common/config.c's named configs with train_gpt's
# default batch (tiny 8, small 16) and T = ctx.
CONFIGS = {
    "tiny": dict(vocab_size=256, ctx_len=64, n_layer=4, n_head=4, n_embd=64, batch=8, seq=64),
    "small": dict(vocab_size=256, ctx_len=128, n_layer=4, n_head=4, n_embd=128, batch=16,
                  seq=128),
}


def block_tensor_shapes(C):
    """A block's tensors as (name, shape), in gpt_tensor_table's order."""
    return [
        ("ln1w", (C,)), ("ln1b", (C,)),
        ("qkvw", (3 * C, C)), ("qkvb", (3 * C,)),
        ("attprojw", (C, C)), ("attprojb", (C,)),
        ("ln2w", (C,)), ("ln2b", (C,)),
        ("fcw", (4 * C, C)), ("fcb", (4 * C,)),
        ("fcprojw", (C, 4 * C)), ("fcprojb", (C,)),
    ]


def tensor_table(vocab_size, ctx_len, n_layer, n_embd):
    """[(name, offset, shape)] of the flat buffer, as gpt_tensor_table lays it out."""
    C = n_embd
    shapes = [("wte", (vocab_size, C)), ("wpe", (ctx_len, C))]
    for layer in range(n_layer):
        shapes += [(f"blocks.{layer}.{n}", s) for n, s in block_tensor_shapes(C)]
    shapes += [("lnfw", (C,)), ("lnfb", (C,))]
    table, offset = [], 0
    for name, shape in shapes:
        table.append((name, offset, shape))
        offset += math.prod(shape)
    return table


def _init_tensor(name, shape, n_layer):
    """layout.c's init: layernorm weights 1, biases 0, weight matrices N(0, 0.02),
    the two projections into the residual stream N(0, 0.02 / sqrt(2L))."""
    short = name.rsplit(".", 1)[-1]
    if short in ("ln1w", "ln2w", "lnfw"):
        return torch.ones(shape)
    if len(shape) == 1:
        return torch.zeros(shape)
    std = INIT_STD / math.sqrt(2 * n_layer) if short in ("attprojw", "fcprojw") else INIT_STD
    return torch.randn(shape) * std


class Block(nn.Module):
    def __init__(self, n_embd, n_head, n_layer):
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        for name, shape in block_tensor_shapes(n_embd):
            self.register_parameter(name, nn.Parameter(_init_tensor(name, shape, n_layer)))

    def forward(self, x, causal_mask):
        B, T, C = x.shape
        NH, hs = self.n_head, C // self.n_head
        h = F.layer_norm(x, (C,), self.ln1w, self.ln1b, LN_EPS)
        q, k, v = F.linear(h, self.qkvw, self.qkvb).split(C, dim=2)
        # (B, T, C) -> (B, NH, T, hs): head j is columns j*hs..(j+1)*hs
        q, k, v = (u.view(B, T, NH, hs).transpose(1, 2) for u in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        scores = scores.masked_fill(~causal_mask[:T, :T], float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v                 # (B, NH, T, hs)
        y = y.transpose(1, 2).reshape(B, T, C)               # heads side by side
        x = x + F.linear(y, self.attprojw, self.attprojb)
        h = F.layer_norm(x, (C,), self.ln2w, self.ln2b, LN_EPS)
        h = F.gelu(F.linear(h, self.fcw, self.fcb), approximate="tanh")
        return x + F.linear(h, self.fcprojw, self.fcprojb)


class GPT(nn.Module):
    def __init__(self, vocab_size, ctx_len, n_layer, n_head, n_embd):
        super().__init__()
        if n_embd % n_head != 0:
            raise ValueError(f"n_embd {n_embd} is not divisible by n_head {n_head}")
        self.vocab_size, self.ctx_len, self.n_layer = vocab_size, ctx_len, n_layer
        self.n_head, self.n_embd = n_head, n_embd
        self.wte = nn.Parameter(_init_tensor("wte", (vocab_size, n_embd), n_layer))
        self.wpe = nn.Parameter(_init_tensor("wpe", (ctx_len, n_embd), n_layer))
        self.blocks = nn.ModuleList(Block(n_embd, n_head, n_layer) for _ in range(n_layer))
        self.lnfw = nn.Parameter(torch.ones(n_embd))
        self.lnfb = nn.Parameter(torch.zeros(n_embd))
        self.register_buffer("causal_mask",
                             torch.tril(torch.ones(ctx_len, ctx_len, dtype=torch.bool)),
                             persistent=False)

    def table(self):
        return tensor_table(self.vocab_size, self.ctx_len, self.n_layer, self.n_embd)

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, inputs, targets):
        """Mean cross-entropy of (B, T) int64 inputs against targets."""
        B, T = inputs.shape
        x = F.embedding(inputs, self.wte) + self.wpe[:T]
        for block in self.blocks:
            x = block(x, self.causal_mask)
        x = F.layer_norm(x, (self.n_embd,), self.lnfw, self.lnfb, LN_EPS)
        logits = x @ self.wte.t()                            # tied LM head
        # the loss in fp32 whatever the weights' type (as the C trainer's)
        return F.cross_entropy(logits.reshape(B * T, self.vocab_size).float(),
                               targets.reshape(B * T))

    def ordered_parameters(self):
        """[(name, parameter)] in the order of the C flat buffer. (Not
        named_parameters(): that lists a module's own parameters, lnfw and
        lnfb included, before its submodules' ones.)"""
        by_name = dict(self.named_parameters())
        table = self.table()
        if sorted(by_name) != sorted(n for n, _, _ in table):
            raise AssertionError(f"parameters {sorted(by_name)} differ from gpt_tensor_table's")
        for name, _, shape in table:
            if tuple(by_name[name].shape) != tuple(shape):
                raise AssertionError(f"{name}: shape {tuple(by_name[name].shape)}, "
                                     f"gpt_tensor_table says {tuple(shape)}")
        return [(name, by_name[name]) for name, _, _ in table]

    @torch.no_grad()
    def load_flat(self, flat):
        """Copy a flat float32 buffer in the C layout (tensor, numpy array or
        anything torch.as_tensor takes) into the parameters."""
        named, table = self.ordered_parameters(), self.table()
        flat = torch.as_tensor(flat, dtype=torch.float32)
        total = table[-1][1] + math.prod(table[-1][2])
        if flat.numel() != total:
            raise ValueError(f"flat buffer has {flat.numel()} floats, the model {total}")
        for (_, p), (_, offset, shape) in zip(named, table):
            p.copy_(flat[offset:offset + p.numel()].view(shape))

    def flat_grads(self):
        """The gradients as one flat buffer in the C layout (zeros where None)."""
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for _, p in self.ordered_parameters()])
