"""The jointly trained span probes: ``P`` independent probes with stacked parameters.

Every parameter has a leading probe axis ``P`` (batched matmuls over ``[P, batch, ...]``), so
probing all layers costs one training loop, not one per layer. A probe's forward pass, in the
order of :meth:`JointProbes.forward`:

1. scalar mix (:meth:`JointProbes.mix`): what each probe reads from the ``L`` input layers, set by
   :func:`mixing_spec` (one layer, a learned softmax mix ``gamma * sum_l softmax(a)_l h_l`` (ELMo),
   or fixed weights);
2. projection (MLP probes): token vectors ``D -> proj_dim``, separately for span 1 and span 2;
3. span pooling (:meth:`JointProbes.pool`): self-attentive (a learned score per token, softmax
   within the span, weighted sum) or mean; width-1 spans skip pooling;
4. classifier (:meth:`JointProbes.classify`): MLP probes concatenate the spans, then Linear, tanh,
   LayerNorm, dropout, Linear; linear probes one Linear layer on the concatenated pooled vectors.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from bertology.errors import ConfigError
from bertology.probes.probing._config import ProbeConfig

MODES = ("per_layer", "mix", "cumulative", "fixed")


def mixing_spec(mode: str, n_layers: int, weights: np.ndarray | None = None) -> tuple[np.ndarray, bool, list[int]]:
    """Which layers each probe reads.

    ``per_layer``: probe ``p`` reads layer ``p`` only; ``mix``: one probe reads a learned scalar
    mix of all layers; ``cumulative``: probe ``p`` reads a learned scalar mix of layers ``0..p``
    (Tenney's cumulative scoring); ``fixed``: given ``weights [P, L]`` (e.g. sum of the last four
    layers), not learned.

    Returns ``mask [P, L]`` (bool or fixed float weights), ``learned`` (mix weights trained) and
    the layer label of each probe (-1 = all layers).
    """
    if mode == "per_layer":
        return np.eye(n_layers, dtype=bool), False, list(range(n_layers))
    if mode == "mix":
        return np.ones((1, n_layers), dtype=bool), True, [-1]
    if mode == "cumulative":
        return np.tril(np.ones((n_layers, n_layers), dtype=bool)), True, list(range(n_layers))
    if mode == "fixed":
        if weights is None or np.ndim(weights) != 2 or np.shape(weights)[1] != n_layers:
            raise ConfigError(f"mode 'fixed' needs weights [P, {n_layers}]")
        return np.asarray(weights, dtype=np.float32), False, [-1] * len(weights)
    raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")


def _uniform(gen: torch.Generator, shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


def _selector(active: torch.Tensor | None) -> Callable[[torch.Tensor], torch.Tensor]:
    """Picks the rows of the active probes from a ``[P, ...]`` tensor (all when ``active`` is None)."""
    return (lambda t: t) if active is None else (lambda t: t[active])


class JointProbes(torch.nn.Module):
    """``P`` independent span probes with stacked parameters (leading axis ``P``).

    ``mixing [P, L]``: bool (a probe reads the marked layers, one-hot or through a learned scalar
    mix when ``learned_mix``) or fixed float weights. Parameters are drawn from ``seed``; dropout
    has its own generator (``seed + 2``), so seeded runs repeat exactly.
    """

    # buffers (registered in __init__ by mixing kind; declared here for the type checker)
    layer_of_probe: torch.Tensor  # [P] the layer a one-hot probe reads
    mix_mask: torch.Tensor  # [P, L] the layers a learned mix may weigh
    fixed_weights: torch.Tensor  # [P, L] given mixing weights

    def __init__(
        self,
        n_probes: int,
        n_layers: int,
        dim: int,
        n_spans: int,
        n_labels: int,
        mixing: np.ndarray,
        learned_mix: bool,
        config: ProbeConfig,
        seed: int,
    ):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        # a linear probe reads the (pooled) features directly: softmax(W pool(x) + b)
        self.project = config.probe == "mlp" and config.proj_dim > 0
        H = config.proj_dim if self.project else dim
        P, S, Hm, K = n_probes, n_spans, config.hidden_dim, n_labels
        self.config, self.learned_mix, self.n_layers = config, learned_mix, n_layers
        mixing = np.asarray(mixing)
        self.one_hot = mixing.dtype == bool and bool((mixing.sum(1) == 1).all()) and not learned_mix
        if self.one_hot:
            self.register_buffer("layer_of_probe", torch.as_tensor(mixing.argmax(1)))
            self.identity = bool((mixing.argmax(1) == np.arange(n_layers)).all()) and P == n_layers
        elif mixing.dtype == bool:
            self.register_buffer("mix_mask", torch.as_tensor(mixing))
            self.mix_logits = torch.nn.Parameter(torch.zeros(P, n_layers))
            self.gamma = torch.nn.Parameter(torch.ones(P))
        else:
            self.register_buffer("fixed_weights", torch.as_tensor(mixing, dtype=torch.float32))
        if self.project:
            self.proj_w = torch.nn.Parameter(_uniform(gen, (P, S, dim, H), dim))
            self.proj_b = torch.nn.Parameter(torch.zeros(P, S, H))
        self.attn_w = torch.nn.Parameter(_uniform(gen, (P, S, H), H))
        if config.probe == "mlp":
            self.w1 = torch.nn.Parameter(_uniform(gen, (P, S * H, Hm), S * H))
            self.b1 = torch.nn.Parameter(torch.zeros(P, Hm))
            self.w2 = torch.nn.Parameter(_uniform(gen, (P, Hm, K), Hm))
        else:
            self.w2 = torch.nn.Parameter(_uniform(gen, (P, S * H, K), S * H))
        self.b2 = torch.nn.Parameter(torch.zeros(P, K))
        self.dropout_gen = torch.Generator(device=config.device).manual_seed(seed + 2)

    def layer_weights(self) -> torch.Tensor:
        """``[P, L]`` effective weight of each layer for each probe (softmax mix, without gamma)."""
        if self.one_hot:
            return F.one_hot(self.layer_of_probe, self.n_layers).float()
        if hasattr(self, "fixed_weights"):
            return self.fixed_weights
        logits = self.mix_logits.masked_fill(~self.mix_mask, float("-inf"))
        return torch.softmax(logits, dim=-1)

    def mix(self, g: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``g [L, B, S, M, D]`` -> ``[P, B, S, M, D]`` (``P`` = active probes)."""
        sel = _selector(active)
        if self.one_hot:
            return g if self.identity and active is None else g[sel(self.layer_of_probe)]
        if hasattr(self, "fixed_weights"):
            return torch.einsum("pl,lbsmd->pbsmd", sel(self.fixed_weights), g)
        w = sel(self.layer_weights()) * sel(self.gamma)[:, None]
        return torch.einsum("pl,lbsmd->pbsmd", w, g)

    def project_tokens(self, x: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``x [P, B, S, M, D]`` -> ``[P, B, S, M, H]`` (MLP probes: ``H = proj_dim``; else ``x``)."""
        if not self.project:
            return x
        sel = _selector(active)
        return torch.einsum("pbsmd,psdh->pbsmh", x, sel(self.proj_w)) + sel(self.proj_b)[:, None, :, None, :]

    def pool(self, z: torch.Tensor, mask: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Span pooling: ``z [P, B, S, M, H]``, ``mask [B, S, M]`` -> ``[P, B, S, H]``."""
        P, B, S, M, _ = z.shape
        if M == 1:
            return z[:, :, :, 0]
        if self.config.pooling == "attention":
            scores = torch.einsum("pbsmh,psh->pbsm", z, _selector(active)(self.attn_w))
            scores = scores.masked_fill(~mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
        else:
            weights = (mask / mask.sum(-1, keepdim=True)).expand(P, B, S, M)
        return torch.einsum("pbsm,pbsmh->pbsh", weights, z)

    def classify(self, r: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """Concatenated pooled spans ``r [P, B, S * H]`` -> logits ``[P, B, K]``."""
        sel = _selector(active)
        if self.config.probe == "mlp":
            h = torch.tanh(torch.baddbmm(sel(self.b1)[:, None, :], r, sel(self.w1)))
            h = F.layer_norm(h, h.shape[-1:])
            if self.training and self.config.dropout > 0:
                # own generator: seeded runs repeat exactly (no global RNG)
                keep = torch.rand(h.shape, generator=self.dropout_gen, device=h.device)
                h = h * (keep >= self.config.dropout) / (1 - self.config.dropout)
            r = h
        return torch.baddbmm(sel(self.b2)[:, None, :], r, sel(self.w2))

    def forward(self, g: torch.Tensor, mask: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """``g [L, B, S, M, D]``, ``mask [B, S, M]`` -> logits ``[P, B, K]``.

        ``active``: indices of the probes to run (the others have stopped training); default all.
        """
        x = self.mix(g, active)  # [P, B, S, M, D]
        z = self.project_tokens(x, active)  # [P, B, S, M, H]
        pooled = self.pool(z, mask, active)  # [P, B, S, H]
        P, B = pooled.shape[:2]
        return self.classify(pooled.reshape(P, B, -1), active)
