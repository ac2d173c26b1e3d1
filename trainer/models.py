"""The two small models the bundled trainer trains.

Both keep their repeated layers in ``model.blocks`` (an :class:`torch.nn.ModuleList`), the unit
FSDP2 shards one by one, and both compute their own loss: ``model(x, targets)`` returns the
scalar cross-entropy, ``model(x)`` the logits. Computing the loss inside ``forward`` keeps it
inside the wrapper (DataParallel splits it across replicas, FSDP2's root hooks cover it).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import TrainConfig


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused qkv projection."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        # (B, T, C) -> (B, heads, T, head_dim)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """A small decoder-only transformer: token + position embedding, ``n_layer`` blocks,
    final LayerNorm and a linear head (tied to the token embedding by default)."""

    def __init__(
        self, *, vocab: int, seq_len: int, n_layer: int, n_embd: int, n_head: int,
        tie_weights: bool = True,
    ) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab, n_embd)
        self.pos_emb = nn.Embedding(seq_len, n_embd)
        self.blocks = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab, bias=False)
        if tie_weights:
            self.head.weight = self.tok_emb.weight
        self.apply(self._init_weights)
        # GPT-2's scaled init of the residual projections keeps the residual stream's
        # variance from growing with depth.
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, vocab) for token ids ``idx`` (B, T); with ``targets`` (B, T), the mean
        next-token cross-entropy instead."""
        T = idx.size(1)
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


class ResidualMLPBlock(nn.Module):
    """x + Linear(GELU(Linear(LayerNorm(x))))."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, hidden)
        self.fc2 = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class MLP(nn.Module):
    """A residual MLP classifier: input projection, ``depth`` blocks, LayerNorm, head."""

    def __init__(self, *, in_dim: int, hidden: int, depth: int, n_classes: int) -> None:
        super().__init__()
        self.inp = nn.Linear(in_dim, hidden)
        self.blocks = nn.ModuleList(ResidualMLPBlock(hidden) for _ in range(depth))
        self.ln_f = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, n_classes) for features ``x`` (B, in_dim); with ``targets`` (B,), the mean
        cross-entropy instead."""
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        logits = self.head(self.ln_f(h))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float(), targets)


def build_model(cfg: TrainConfig) -> nn.Module:
    """The model ``cfg.model`` names, initialised from the current RNG state (seed it first, the
    same on every rank, so that unbroadcast strategies such as FSDP2 start identical)."""
    if cfg.model == "gpt":
        return GPT(
            vocab=cfg.vocab, seq_len=cfg.seq_len, n_layer=cfg.n_layer, n_embd=cfg.n_embd,
            n_head=cfg.n_head, tie_weights=cfg.tie_weights,
        )
    return MLP(in_dim=cfg.in_dim, hidden=cfg.hidden, depth=cfg.depth, n_classes=cfg.n_classes)


def count_params(model: nn.Module) -> tuple[int, int]:
    """(parameter count, bytes) of the full model, each shared (tied) parameter once."""
    count = nbytes = 0
    for p in model.parameters():  # parameters() already yields a tied parameter once
        count += p.numel()
        nbytes += p.numel() * p.element_size()
    return count, nbytes
