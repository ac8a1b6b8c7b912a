"""The probe's hyper-parameters: :class:`ProbeConfig` (plain data, checked once at construction)."""

from __future__ import annotations

from dataclasses import dataclass

from bertology.errors import ConfigError

# the allowed values of each choice field, checked in ProbeConfig.__post_init__
_CHOICES: dict[str, tuple[str, ...]] = {
    "probe": ("mlp", "linear"),
    "pooling": ("attention", "mean"),
    "solver": ("auto", "adam", "lbfgs"),
    "precision": ("auto", "float32", "bfloat16"),
}


@dataclass(frozen=True)
class ProbeConfig:
    """Probe hyper-parameters (plain data). A value outside a field's choices raises
    :class:`bertology.errors.ConfigError` naming the field."""

    probe: str = "mlp"  # "mlp" | "linear"
    pooling: str = "attention"  # "attention" | "mean"
    proj_dim: int = 256  # MLP probes only; 0 = no projection
    hidden_dim: int = 256
    dropout: float = 0.2
    lr: float = 1e-3
    mix_lr: float = 0.05  # scalar-mix logits and gamma learn faster than the probe
    weight_decay: float = 0.0
    batch_size: int = 512
    max_epochs: int = 40
    patience: int = 3
    min_batches_per_epoch: int = 10  # tiny training sets (MDL's first blocks) pass several times
    standardize: bool = True  # z-score each layer's dimensions (so mix weights compare layers)
    device: str = "cpu"
    solver: str = "auto"  # "auto" | "adam" | "lbfgs"; auto: full-batch L-BFGS for linear
    # probes on fixed pooled features (width-1 or mean-pooled spans,
    # per-layer or fixed mixing), minibatch Adam otherwise
    C: float = 1.0  # L-BFGS: inverse L2 strength, as scikit-learn's LogisticRegression
    lbfgs_steps: int = 5  # L-BFGS iterations per "epoch" (one dev check)
    cache_mb: float = 512.0  # gathered example features kept in memory up to this size (float32 MB);
    # above it they are spilled to an unnamed temporary file beside the store and read back per batch
    precision: str = "auto"  # training matmuls (L-BFGS and Adam): "float32" | "bfloat16" | "auto"
    # (bfloat16 where a measured micro-benchmark finds it faster:
    # bertology.runtime); predictions and metrics are float32

    def __post_init__(self) -> None:
        for field, choices in _CHOICES.items():
            value = getattr(self, field)
            if value not in choices:
                allowed = ", ".join(f"{c!r}" for c in choices[:-1]) + f" or {choices[-1]!r}"
                raise ConfigError(f"{field} must be {allowed}, got {value!r}")
