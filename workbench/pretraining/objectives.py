"""The pretraining objectives after BERT, one loss module each, and the models they train.

The trainer (:mod:`bertology.pretraining.trainer`) asks this module three things: which model to
build for a config (:func:`build_model`), which loss module to wrap it in (:func:`make_loss`) and,
for objectives with their own held-out metrics, how to evaluate (:func:`evaluate_variant`); the
config's validation runs its field checks (:data:`OBJECTIVE_CHECKS`). Every
loss module has the same call signature::

    loss, mlm_loss, extras = loss_module(input_ids, attention_mask, token_type_ids, labels,
                                         pair_labels=None, reduction="mean")

inputs ``[batch, tokens]`` (``labels`` = original token ids at the masked positions, ``-100``
elsewhere; ``pair_labels [batch]`` for NSP/SOP); ``loss`` is what is optimised, ``mlm_loss`` the
masked-token cross-entropy (nats; of the generator for ELECTRA), ``extras`` objective-specific
terms (sums when ``reduction="sum"``).

| ``objective`` | model saved (what the registry loads) | loss |
|---|---|---|
| ``mlm`` / ``mlm+nsp`` / ``mlm+sop`` | ``BertForMaskedLM`` / ``BertForPreTraining``; with ``architecture: albert`` ``AlbertForMaskedLM`` / ``AlbertForPreTraining`` (factorised embedding ``V x E, E x H``, ``num_hidden_groups`` shared layer modules) | MLM (+ pair cross-entropy) |
| ``mlm+sbo`` | ``BertForMaskedLM`` (+ ``sbo.*`` weights the registry ignores) | MLM + ``sbo_weight`` x span boundary objective (SpanBERT) |
| ``electra`` | the discriminator, ``ElectraForPreTraining`` (+ ``generator.*``); ``generator/`` a stand-alone ``ElectraForMaskedLM`` | generator MLM + ``rtd_weight`` x replaced token detection (ELECTRA) |
| ``distill`` | the student, ``BertForMaskedLM`` (or ALBERT) | ``T^2 KL(teacher_T || student_T)`` (+ MLM, + cosine of last hidden states) |
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from bertology.architectures import mlm_parts
from bertology.errors import ConfigError, ModelError
from bertology.hub import MODEL_NAME_HELP
from bertology.pretraining.masking import IGNORE_INDEX

if TYPE_CHECKING:
    from transformers.models.electra.modeling_electra import ElectraEmbeddings

_M = TypeVar("_M", bound=nn.Module)

__all__ = [
    "OBJECTIVES",
    "ARCHITECTURES",
    "pair_task",
    "OBJECTIVE_CHECKS",
    "build_model",
    "make_loss",
    "PretrainingLoss",
    "ElectraLoss",
    "SpanBoundaryLoss",
    "DistillationLoss",
    "ElectraPretrainingModel",
    "BertForSpanBoundary",
    "SpanBoundaryHead",
    "span_boundaries",
    "distillation_kl",
    "tied_parameter_names",
    "DISTILL_INITS",
    "every_other_layer",
    "init_student_from_teacher",
    "save_unique_state",
    "evaluate_variant",
    "generator_config",
    "teacher_directory",
    "OWN_EVALUATION",
    "initial_model_directory",
    "load_initial_model",
    "target_positions",
]

OBJECTIVES = ("mlm", "mlm+nsp", "mlm+sop", "mlm+sbo", "electra", "distill")
ARCHITECTURES = ("bert", "albert")
OWN_EVALUATION = ("electra", "mlm+sbo")  # objectives whose held-out metrics go through evaluate_variant
_ALBERT_OBJECTIVES = ("mlm", "mlm+nsp", "mlm+sop", "distill")


_PAIR_TASKS: dict[str, Literal["nsp", "sop"]] = {"mlm+nsp": "nsp", "mlm+sop": "sop"}


def pair_task(objective: str) -> Literal["nsp", "sop"] | None:
    """``"nsp"`` / ``"sop"`` for the sentence-pair objectives, None for single-segment ones."""
    return _PAIR_TASKS.get(objective)


def generator_config(cfg: Any) -> tuple[int, int, int]:
    """ELECTRA generator ``(hidden, heads, intermediate)``: the discriminator's times ``generator_size``
    (heads at least 1), as in ELECTRA's own scaling of the generator."""
    size = cfg.generator_size
    return (
        max(1, round(cfg.hidden_size * size)),
        max(1, round(cfg.num_attention_heads * size)),
        max(1, round(cfg.intermediate_size * size)),
    )


def _generator_heads_divide_width(cfg: Any) -> bool:
    hidden, heads, _ = generator_config(cfg)
    return hidden % heads == 0


def _generator_width_message(cfg: Any) -> str:
    hidden, heads, _ = generator_config(cfg)
    return f"gives a generator of width {hidden} not divisible by its {heads} heads"


DISTILL_INITS = ("random", "every_other")
_DISTILL_WEIGHTS = ("distill_kl_weight", "distill_mlm_weight", "distill_cosine_weight")


# The checks of a PretrainConfig's objective and architecture fields, run in this order by
# bertology.pretraining.config.validate_config after its own: (field, ok(config) -> bool, what the
# field must be -- text, or a function of the config that gives it).
def _model_problem(name: str) -> str | None:
    """Why ``name`` (a registry name, model folder or hub name) cannot be loaded, or None: checked with the
    config, before a run folder is made or any text is read."""
    from bertology.models import resolve

    try:
        resolve(name)
    except ModelError as exc:
        return str(exc)
    return None


OBJECTIVE_CHECKS: tuple[tuple[str, Callable[[Any], bool], str | Callable[[Any], str]], ...] = (
    ("objective", lambda c: c.objective in OBJECTIVES, f"must be one of {', '.join(OBJECTIVES)}"),
    ("architecture", lambda c: c.architecture in ARCHITECTURES, f"must be one of {', '.join(ARCHITECTURES)}"),
    (
        "objective",
        lambda c: c.architecture != "albert" or c.objective in _ALBERT_OBJECTIVES,
        f"with architecture albert must be one of {', '.join(_ALBERT_OBJECTIVES)}",
    ),
    ("embedding_size", lambda c: c.embedding_size is None or c.embedding_size >= 1, "must be >= 1"),
    (
        "embedding_size",
        lambda c: (
            c.embedding_size is None
            or c.embedding_size == c.hidden_size
            or c.architecture == "albert"
            or c.objective == "electra"
        ),
        "a factorised embedding (embedding_size != hidden_size) needs architecture albert or objective electra",
    ),
    (
        "num_hidden_groups",
        lambda c: 1 <= c.num_hidden_groups <= c.num_hidden_layers,
        lambda c: f"must be in [1, num_hidden_layers={c.num_hidden_layers}]",
    ),
    (
        "num_hidden_groups",
        lambda c: c.num_hidden_groups == 1 or c.architecture == "albert",
        "layer sharing needs architecture albert (BERT layers are all distinct)",
    ),
    ("generator_size", lambda c: 0.0 < c.generator_size <= 1.0, "must be in (0, 1]"),
    (
        "generator_size",
        lambda c: c.objective != "electra" or _generator_heads_divide_width(c),
        _generator_width_message,
    ),
    ("rtd_weight", lambda c: c.rtd_weight > 0, "must be > 0"),
    ("sbo_weight", lambda c: c.sbo_weight > 0, "must be > 0"),
    (
        "masking",
        lambda c: c.objective != "mlm+sbo" or c.masking == "span",
        "the span boundary objective (mlm+sbo) needs masking: span",
    ),
    (
        "teacher",
        lambda c: c.objective != "distill" or bool(c.teacher),
        f"objective distill needs a teacher (a {MODEL_NAME_HELP})",
    ),
    (
        "teacher",
        lambda c: c.objective != "distill" or not c.teacher or _model_problem(c.teacher) is None,
        lambda c: str(_model_problem(c.teacher)),
    ),
    ("distill_temperature", lambda c: c.distill_temperature > 0, "must be > 0"),
    *((name, lambda c, name=name: getattr(c, name) >= 0, "must be >= 0") for name in _DISTILL_WEIGHTS),
    (
        "distill_kl_weight",
        lambda c: sum(getattr(c, name) for name in _DISTILL_WEIGHTS) > 0,
        "the distillation weights (kl, mlm, cosine) must not all be 0",
    ),
    ("distill_positions", lambda c: c.distill_positions in ("masked", "all"), "must be all or masked"),
    ("distill_init", lambda c: c.distill_init in DISTILL_INITS, f"must be one of {', '.join(DISTILL_INITS)}"),
    (
        "distill_init",
        lambda c: c.distill_init == "random" or (c.objective == "distill" and c.architecture == "bert"),
        "every_other copies BERT teacher layers into a BERT student: it needs objective distill, architecture bert",
    ),
    (
        "init_from",
        lambda c: c.init_from is None or (c.objective == "mlm" and c.architecture == "bert"),
        "continued pretraining (init_from) needs objective mlm and architecture bert",
    ),
    (
        "init_from",
        lambda c: c.init_from is None or _model_problem(c.init_from) is None,
        lambda c: str(_model_problem(c.init_from)),
    ),
    (
        "tokenizer",
        lambda c: c.init_from is None or c.tokenizer is None,
        "must be empty with init_from (the run reads with that model's tokenizer)",
    ),
    ("stream_start", lambda c: c.stream_start >= 0, "must be >= 0"),
)


# --------------------------------------------------------------------------- saving models with extra parts


def tied_parameter_names(model: nn.Module) -> set[str]:
    """State-dict names whose tensor is the same as that of an earlier name (tied weights: the
    MLM decoder and the word embeddings, ELECTRA's shared embeddings). Saved once, under the first
    name, so they are the names a checkpoint may lack."""
    seen: set[tuple[int, tuple[int, ...]]] = set()
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            tied.add(name)
        seen.add(key)
    return tied


def save_unique_state(model: nn.Module, path: str | Path) -> None:
    """Save ``model.state_dict()`` as safetensors, each shared tensor once under its first name
    (what ``save_pretrained`` does for tied weights)."""
    from safetensors.torch import save_file

    tied = tied_parameter_names(model)
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in tied}
    save_file(state, str(path), metadata={"format": "pt"})


def _init_linear(module: nn.Module, std: float) -> None:
    """BERT's initialisation (normal(0, std) weights, zero biases, unit LayerNorm) for added heads."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


# --------------------------------------------------------------------------- ELECTRA


class ElectraGenerator(nn.Module):
    """The ELECTRA generator: a narrow ``ElectraModel`` whose embedding module is the
    discriminator's (token, position and segment embeddings and their LayerNorm, shared), an
    ``embeddings_project`` ``E -> H_g``, and an MLM head ``H_g -> E -> V`` whose output matrix is the
    shared word embedding. Parameter names avoid the ``generator_predictions`` / ``generator_lm_head``
    of ``ElectraForMaskedLM`` so that the discriminator's checkpoint does not look MLM-headed."""

    def __init__(self, config: Any, embeddings: ElectraEmbeddings):
        super().__init__()
        from transformers import ElectraModel
        from transformers.models.electra.modeling_electra import ElectraGeneratorPredictions

        self.config = config
        self.electra = ElectraModel(config)
        self.electra.embeddings = embeddings
        self.head = ElectraGeneratorPredictions(config)
        self.decoder = nn.Linear(config.embedding_size, config.vocab_size)
        _init_linear(self.head, config.initializer_range)
        _init_linear(self.decoder, config.initializer_range)
        self.decoder.weight = embeddings.word_embeddings.weight

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[..., H_g]`` -> vocabulary logits ``[..., V]``."""
        return self.decoder(self.head(hidden))

    def to_hf(self):
        """The generator as a stand-alone ``ElectraForMaskedLM`` (a copy of the weights)."""
        from transformers import ElectraForMaskedLM

        hf = ElectraForMaskedLM(self.config)
        rename = {"head.": "generator_predictions.", "decoder.": "generator_lm_head."}
        state = {}
        for k, v in self.state_dict().items():
            for old, new in rename.items():
                if k.startswith(old):
                    k = new + k[len(old) :]
            state[k] = v
        hf.load_state_dict(state, strict=True)
        return hf


class ElectraPretrainingModel(nn.Module):
    """Generator + discriminator of ELECTRA (Clark et al. 2020). Parameter names of the
    discriminator are those of ``ElectraForPreTraining`` (``electra.*``,
    ``discriminator_predictions.*``), so its checkpoint loads as one; the generator's are
    ``generator.*`` (ignored when the registry loads the discriminator)."""

    def __init__(self, config: Any, gen_config: Any):
        super().__init__()
        from transformers import ElectraForPreTraining

        disc = ElectraForPreTraining(config)
        self.config = disc.config
        self.electra = disc.electra
        self.discriminator_predictions = disc.discriminator_predictions
        self.generator = ElectraGenerator(gen_config, self.electra.embeddings)

    def save_pretrained(self, directory: str | Path, **_: Any) -> None:
        """``config.json`` + ``model.safetensors`` of the discriminator (with the generator's own
        weights), and ``generator/``: the generator as an ``ElectraForMaskedLM`` directory."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.architectures = ["ElectraForPreTraining"]
        self.config.save_pretrained(directory)
        save_unique_state(self, directory / "model.safetensors")
        self.generator.to_hf().save_pretrained(directory / "generator")


class ElectraLoss(nn.Module):
    """ELECTRA's loss: ``L_MLM(generator) + rtd_weight * L_RTD(discriminator)``.

    The generator predicts the masked positions; a token is sampled at each from its softmax
    (temperature 1, no gradient through the sampling); the discriminator reads the original sequence
    with those samples in place and classifies every non-padding token as original / replaced
    (binary cross-entropy, mean over tokens). A sample equal to the original token is labelled
    "original".
    """

    def __init__(self, model: ElectraPretrainingModel, rtd_weight: float = 50.0):
        super().__init__()
        self.model = model
        self.rtd_weight = rtd_weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        pair_labels: torch.Tensor | None = None,
        reduction: str = "mean",
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """``generator``: random source of the sampling (None = the global stream, restored on resume)."""
        targets = labels != IGNORE_INDEX
        original = torch.where(targets, labels, input_ids)
        gen = self.model.generator
        gen_hidden = gen.electra(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        logits = gen.logits(gen_hidden[targets]).float()  # [n_targets, V]
        if logits.shape[0] > 0:
            mlm_loss = F.cross_entropy(logits, labels[targets], reduction=reduction)
            with torch.no_grad():
                sampled = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator).squeeze(-1)
        else:  # keeps every generator parameter in the graph (DDP needs that)
            mlm_loss = logits.sum() * 0.0
            sampled = labels[targets]
        corrupted = original.clone()
        corrupted[targets] = sampled
        tokens = attention_mask.bool()
        replaced = (corrupted != original) & tokens
        hidden = self.model.electra(input_ids=corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids)[
            0
        ]
        rtd_logits = self.model.discriminator_predictions(hidden)[tokens].float()  # [n_tokens]
        truth = replaced[tokens].float()
        rtd_loss = F.binary_cross_entropy_with_logits(rtd_logits, truth, reduction=reduction)
        extras = {
            "rtd_loss": rtd_loss,
            "rtd_correct": ((rtd_logits > 0).float() == truth).sum(),
            "tokens": tokens.sum(),
            "replaced": replaced.sum(),
            "targets": targets.sum(),
        }
        return mlm_loss + self.rtd_weight * rtd_loss, mlm_loss, extras


# --------------------------------------------------------------------------- SpanBERT


def span_boundaries(targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each target position (row-major order, as ``x[targets]``): the left boundary ``s - 1``,
    the right boundary ``e + 1`` of its span ``[s, e]`` and its 0-based position ``i - s`` inside.

    A span is a maximal run of consecutive target positions, so two masked spans that touch are one
    span here. targets: bool ``[B, T]`` -> three long tensors ``[n_targets]``.
    """
    B, T = targets.shape
    pos = torch.arange(T, device=targets.device).expand(B, T)
    prev = F.pad(targets[:, :-1], (1, 0), value=False)
    nxt = F.pad(targets[:, 1:], (0, 1), value=False)
    start_at = torch.where(targets & ~prev, pos, torch.full_like(pos, -1)).cummax(1).values
    end_at = torch.where(targets & ~nxt, pos, torch.full_like(pos, T)).flip(1).cummin(1).values.flip(1)
    left = (start_at - 1).clamp(0, T - 1)
    right = (end_at + 1).clamp(0, T - 1)
    return left[targets], right[targets], (pos - start_at)[targets]


class SpanBoundaryHead(nn.Module):
    """SpanBERT's SBO head: ``y_i = LN(GeLU(W2 LN(GeLU(W1 [x_{s-1}; x_{e+1}; p_{i-s}]))))``.

    Boundary states ``[n, H]`` and relative positions ``[n]`` -> ``[n, H]``; positions beyond the
    table are clipped to its last entry.
    """

    def __init__(self, hidden_size: int, max_positions: int, layer_norm_eps: float = 1e-12):
        super().__init__()
        self.position_embeddings = nn.Embedding(max_positions, hidden_size)
        self.dense1 = nn.Linear(3 * hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dense2 = nn.Linear(hidden_size, hidden_size)
        self.norm2 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)

    def forward(self, left: torch.Tensor, right: torch.Tensor, relative: torch.Tensor) -> torch.Tensor:
        p = self.position_embeddings(relative.clamp(max=self.position_embeddings.num_embeddings - 1))
        h = self.norm1(F.gelu(self.dense1(torch.cat([left, right, p], -1))))
        return self.norm2(F.gelu(self.dense2(h)))


class BertForSpanBoundary(nn.Module):
    """``BertForMaskedLM`` plus SpanBERT's span boundary head (``sbo.*``), whose output is scored
    against the tied word embeddings plus its own bias. Saved as a ``BertForMaskedLM`` checkpoint
    that also holds the ``sbo.*`` weights (the registry ignores them; the trainer resumes them)."""

    def __init__(self, config: Any, max_positions: int):
        super().__init__()
        from transformers import BertForMaskedLM

        mlm = BertForMaskedLM(config)
        self.config = mlm.config
        self.bert = mlm.bert
        self.cls = mlm.cls
        self.sbo = SpanBoundaryHead(config.hidden_size, max_positions, config.layer_norm_eps)
        self.sbo_bias = nn.Parameter(torch.zeros(config.vocab_size))
        _init_linear(self.sbo, config.initializer_range)

    def sbo_logits(self, y: torch.Tensor) -> torch.Tensor:
        """``[n, H]`` -> ``[n, V]`` through the word embedding matrix."""
        return F.linear(y, self.bert.embeddings.word_embeddings.weight, self.sbo_bias)

    def save_pretrained(self, directory: str | Path, **_: Any) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.config.architectures = ["BertForMaskedLM"]
        self.config.save_pretrained(directory)
        save_unique_state(self, directory / "model.safetensors")


class SpanBoundaryLoss(nn.Module):
    """SpanBERT's loss: MLM + ``sbo_weight`` x SBO, both mean cross-entropy over the masked tokens."""

    def __init__(self, model: BertForSpanBoundary, sbo_weight: float = 1.0):
        super().__init__()
        self.model = model
        self.sbo_weight = sbo_weight

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        pair_labels: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        seq = self.model.bert(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        targets = labels != IGNORE_INDEX
        gold = labels[targets]
        mlm_logits = self.model.cls.predictions(seq[targets]).float()
        rows = targets.nonzero()[:, 0]
        left, right, rel = span_boundaries(targets)
        y = self.model.sbo(seq[rows, left], seq[rows, right], rel)
        sbo_logits = self.model.sbo_logits(y).float()
        if gold.numel() > 0:
            mlm_loss = F.cross_entropy(mlm_logits, gold, reduction=reduction)
            sbo_loss = F.cross_entropy(sbo_logits, gold, reduction=reduction)
        else:
            mlm_loss, sbo_loss = mlm_logits.sum() * 0.0, sbo_logits.sum() * 0.0
        return mlm_loss + self.sbo_weight * sbo_loss, mlm_loss, {"sbo_loss": sbo_loss, "targets": targets.sum()}


# --------------------------------------------------------------------------- MLM (+ pair) on BERT / ALBERT


def target_positions(labels: torch.Tensor) -> torch.Tensor:
    """The flat positions (row-major, ``long [n_targets]``) of ``labels [B, T]`` that are scored
    (not ``IGNORE_INDEX``): :class:`PretrainingLoss`'s ``target_index``."""
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().reshape(-1)


class PretrainingLoss(nn.Module):
    """MLM (+ NSP/SOP) loss of a BERT or ALBERT MLM model, computing the vocabulary logits only at
    the target positions (~15% of tokens): the same loss as the HF model's ``labels=`` path (mean
    cross-entropy over targets, + pair loss) at a fraction of the output-layer cost. Wrapped by DDP
    in multi-process runs.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        pair_labels: torch.Tensor | None = None,
        reduction: str = "mean",
        target_index: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Inputs [B, T] (pair_labels [B] for NSP/SOP) -> ``(loss, mlm_loss, pair_logits [B, 2] | None)``.

        ``mlm_loss``: cross-entropy over the targets (mean or sum, nats); ``loss`` = ``mlm_loss`` +
        the pair cross-entropy when ``pair_labels`` is given and the model has a pair head.
        ``target_index`` (optional, :func:`target_positions` of ``labels``, made where the batch is
        made): the targets' flat positions, so that finding them reads nothing back from a GPU;
        the same rows in the same order as without it, so the same loss and gradients.
        """
        encoder, mlm_head, pair_head = mlm_parts(self.model)
        out = encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if target_index is None:
            targets = labels != IGNORE_INDEX
            hidden, gold = out[0][targets], labels[targets]
        else:
            hidden = out[0].reshape(-1, out[0].shape[-1]).index_select(0, target_index)
            gold = labels.reshape(-1).index_select(0, target_index)
        logits = mlm_head(hidden)  # [n_targets, vocab]
        if logits.shape[0] > 0:
            mlm_loss = F.cross_entropy(logits.float(), gold, reduction=reduction)
        else:  # keeps every head parameter in the graph (DDP needs that)
            mlm_loss = logits.sum() * 0.0
        loss, pair_logits = mlm_loss, None
        if pair_labels is not None and pair_head is not None:
            pair_logits = pair_head(out[1])
            loss = loss + F.cross_entropy(pair_logits.float(), pair_labels, reduction=reduction)
        return loss, mlm_loss, pair_logits


# --------------------------------------------------------------------------- distillation


def distillation_kl(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float, reduction: str = "mean"
) -> torch.Tensor:
    """``T^2 * KL(softmax(t/T) || softmax(s/T))`` per position, summed over the vocabulary, then
    averaged (``mean``) or summed over positions. Logits ``[n, V]``; nats (the ``T^2`` keeps the
    gradient scale independent of ``T``, Hinton et al. 2015)."""
    t = F.log_softmax(teacher_logits.float() / temperature, -1)
    s = F.log_softmax(student_logits.float() / temperature, -1)
    per_position = (t.exp() * (t - s)).sum(-1) * temperature**2
    return per_position.mean() if reduction == "mean" else per_position.sum()


def teacher_directory(cfg: Any) -> Path:
    """The directory of ``cfg.teacher`` (a registry name, a path or a hub name)."""
    from bertology.models import resolve

    try:
        return resolve(cfg.teacher)[1]
    except ModelError as exc:
        raise ConfigError(f"config field 'teacher': {exc}") from None


def initial_model_directory(cfg: Any) -> Path:
    """The directory of ``cfg.init_from`` (a registry name, a path or a hub name)."""
    from bertology.models import resolve

    try:
        return resolve(cfg.init_from)[1]
    except ModelError as exc:
        raise ConfigError(f"config field 'init_from': {exc}") from None


_SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def load_initial_model(cfg: Any, vocab_size: int) -> nn.Module:
    """Continued pretraining: ``BertForMaskedLM`` with the weights of ``cfg.init_from`` (its MLM
    head when it has one; otherwise BERT's initialisation of the head from the global RNG, the
    decoder tied to the word embeddings), dropout set to ``cfg.dropout``. The config's size fields
    must equal the model's (``ConfigError`` naming each that differs)."""
    import logging

    from transformers import AutoConfig, BertForMaskedLM

    folder = initial_model_directory(cfg)
    config = AutoConfig.from_pretrained(str(folder))
    if config.model_type != "bert":
        raise ConfigError(
            f"config field 'init_from': {cfg.init_from} is a {config.model_type} model; "
            "continued pretraining takes a BERT encoder"
        )
    wrong = [
        f"{name} {getattr(cfg, name)} (the model has {getattr(config, name)})"
        for name in _SIZE_FIELDS
        if getattr(cfg, name) != getattr(config, name)
    ]
    if config.vocab_size != vocab_size:
        wrong.append(f"tokenizer of {vocab_size} tokens (the model's vocabulary has {config.vocab_size})")
    if cfg.max_seq_len > config.max_position_embeddings:
        wrong.append(f"max_seq_len {cfg.max_seq_len} (the model has {config.max_position_embeddings} positions)")
    if wrong:
        raise ConfigError(f"config field 'init_from': {cfg.init_from} does not match the config: {'; '.join(wrong)}")
    quiet = logging.getLogger("transformers.modeling_utils")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # "newly initialized: cls.predictions..." is expected here
    try:
        return BertForMaskedLM.from_pretrained(  # float32 to train, also from a float16 release
            str(folder),
            hidden_dropout_prob=cfg.dropout,
            attention_probs_dropout_prob=cfg.dropout,
            use_safetensors=True,
            dtype=torch.float32,
        )
    finally:
        quiet.setLevel(level)


def load_teacher(cfg: Any, vocab_size: int, hidden_size: int, device: torch.device) -> nn.Module:
    """The frozen teacher: ``*ForMaskedLM`` from the registry, eval mode, on ``device``."""
    from bertology.models import load_model

    try:
        lm = load_model(cfg.teacher, attentions=True, mlm_head=True)  # eager: FlopCounterMode counts it exactly
    except ModelError as exc:
        raise ConfigError(f"config field 'teacher': {exc}") from None
    if lm.model.config.vocab_size != vocab_size:
        raise ConfigError(
            f"config field 'teacher': {cfg.teacher} has a vocabulary of {lm.model.config.vocab_size} "
            f"tokens, the student's tokenizer {vocab_size}: the student must use the teacher's tokenizer "
            "(leave 'tokenizer' empty)"
        )
    if cfg.distill_cosine_weight > 0 and lm.hidden_size != hidden_size:
        raise ConfigError(
            f"config field 'distill_cosine_weight': hidden-state alignment needs the student's "
            f"hidden_size ({hidden_size}) to equal the teacher's ({lm.hidden_size})"
        )
    teacher = lm.model.to(device).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


def every_other_layer(n_student_layers: int) -> list[int]:
    """DistilBERT's choice of teacher layers ("one layer out of two"): student layer i <- teacher
    layer 2i, i.e. ``[0, 2, 4, ...]``."""
    return [2 * i for i in range(n_student_layers)]


def init_student_from_teacher(student: nn.Module, teacher: nn.Module, teacher_layers: Sequence[int]) -> None:
    """Overwrite a BERT student's weights in place with its teacher's (DistilBERT's initialisation):
    encoder layer i <- teacher layer ``teacher_layers[i]``; the embeddings and the MLM head
    (transform, LayerNorm, output bias; the decoder is tied to the word embeddings) <- the
    teacher's. Both must be BERT with equal widths (hidden, heads, FFN), vocabulary and positions;
    ``ConfigError`` naming ``distill_init`` otherwise."""

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"config field 'distill_init': every_other {why}")

    # Hugging Face configs (torch types a module's attributes as ``Tensor | Module``)
    teacher_config, student_config = cast(Any, teacher.config), cast(Any, student.config)
    if teacher_config.model_type != "bert" or student_config.model_type != "bert":
        raise refuse(
            f"needs a BERT teacher and student, got {teacher_config.model_type} -> {student_config.model_type}"
        )
    if len(teacher_layers) != student_config.num_hidden_layers:
        raise refuse(
            f"needs one teacher layer per student layer ({student_config.num_hidden_layers}), "
            f"got {list(teacher_layers)}"
        )
    if max(teacher_layers, default=0) >= teacher_config.num_hidden_layers:
        raise refuse(
            f"needs teacher layers {list(teacher_layers)}, the teacher has "
            f"{teacher_config.num_hidden_layers}: use at most {(teacher_config.num_hidden_layers + 1) // 2} "
            "student layers"
        )
    source = teacher.state_dict()
    state = {}
    for name, tensor in student.state_dict().items():
        parts = name.split(".")
        if name.startswith("bert.encoder.layer."):
            parts[3] = str(teacher_layers[int(parts[3])])
        origin = ".".join(parts)
        if origin not in source or source[origin].shape != tensor.shape:
            found = tuple(source[origin].shape) if origin in source else "absent"
            raise refuse(
                f"needs the teacher's {origin} shaped {tuple(tensor.shape)} (student {name}), "
                f"the teacher's is {found}: the widths, vocabulary and positions must match"
            )
        state[name] = source[origin]
    student.load_state_dict(state)


def _init_student(cfg: Any, student: nn.Module) -> None:
    """``cfg.distill_init == "every_other"``: copy every other teacher layer into ``student``."""
    from bertology.models import load_model

    try:
        teacher = load_model(cfg.teacher, attentions=True, mlm_head=True).model
    except ModelError as exc:
        raise ConfigError(f"config field 'teacher': {exc}") from None
    init_student_from_teacher(student, teacher, every_other_layer(cfg.num_hidden_layers))


class DistillationLoss(nn.Module):
    """Knowledge distillation (Hinton et al. 2015; DistilBERT, Sanh et al. 2019) of a student MLM
    model from a frozen MLM teacher reading the same masked input:
    ``kl_weight * T^2 KL(p_teacher^T || p_student^T) + mlm_weight * CE(student, gold)
    + cosine_weight * (1 - cos(h_student, h_teacher))``. The KL runs over every non-padding token
    (``positions="all"``, the default: DistilBERT's distillation loss, as Hinton's) or over the
    masked positions only (``"masked"``, an option of ours); the cosine over the last hidden states
    of every non-padding token. The teacher is held outside the
    module's parameters: it is neither trained, nor saved, nor synchronised by DDP.
    """

    def __init__(
        self,
        student: nn.Module,
        teacher: nn.Module,
        temperature: float = 2.0,
        kl_weight: float = 1.0,
        mlm_weight: float = 0.0,
        cosine_weight: float = 0.0,
        positions: str = "all",
    ):
        super().__init__()
        self.model = student
        self._teacher = (teacher,)  # a tuple: not registered as a submodule
        self.temperature, self.kl_weight, self.mlm_weight = temperature, kl_weight, mlm_weight
        self.cosine_weight, self.positions = cosine_weight, positions
        accepted = inspect.signature(teacher.forward).parameters
        self._teacher_types = "token_type_ids" in accepted

    @property
    def teacher(self) -> nn.Module:
        return self._teacher[0]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor,
        labels: torch.Tensor,
        pair_labels: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        encoder, mlm_head, _ = mlm_parts(self.model)
        seq = encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)[0]
        targets = labels != IGNORE_INDEX
        tokens = attention_mask.bool()
        where = targets if self.positions == "masked" else tokens
        extra = {"token_type_ids": token_type_ids} if self._teacher_types else {}
        with torch.no_grad():
            t_out = self.teacher(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=self.cosine_weight > 0, **extra
            )
        s_logits = mlm_head(seq[where]).float()  # [n, V]
        kl = (
            distillation_kl(s_logits, t_out.logits[where], self.temperature, reduction)
            if s_logits.shape[0]
            else s_logits.sum() * 0.0
        )
        gold_here = targets[where]
        if gold_here.any():
            mlm_loss = F.cross_entropy(s_logits[gold_here], labels[targets], reduction=reduction)
        else:
            mlm_loss = s_logits.sum() * 0.0
        loss = self.kl_weight * kl + self.mlm_weight * mlm_loss
        extras = {"kl": kl}
        if self.cosine_weight > 0:
            cos = F.cosine_similarity(seq[tokens].float(), t_out.hidden_states[-1][tokens].float(), dim=-1)
            cos_loss = (1 - cos).mean() if reduction == "mean" else (1 - cos).sum()
            loss = loss + self.cosine_weight * cos_loss
            extras["cosine_loss"] = cos_loss
        return loss, mlm_loss, extras


# --------------------------------------------------------------------------- dispatch


def build_model(cfg: Any, vocab_size: int, pad_token_id: int) -> nn.Module:
    """A freshly initialised model for ``cfg`` (from the global RNG, as HF does):
    ``BertForMaskedLM`` / ``BertForPreTraining`` (pairs), ``AlbertForMaskedLM`` /
    ``AlbertForPreTraining``, :class:`BertForSpanBoundary` or :class:`ElectraPretrainingModel`.
    A distillation student is the BERT / ALBERT MLM model of the config's sizes; with
    ``distill_init: every_other`` its weights are then copied from the teacher
    (:func:`init_student_from_teacher`)."""
    pairs = pair_task(cfg.objective) is not None
    common = dict(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        intermediate_size=cfg.intermediate_size,
        max_position_embeddings=max(cfg.max_seq_len, 512),
        type_vocab_size=2,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        pad_token_id=pad_token_id,
    )
    if cfg.objective == "electra":
        from transformers import ElectraConfig

        embedding = cfg.embedding_size or cfg.hidden_size
        disc = ElectraConfig(**common, embedding_size=embedding)
        g_hidden, g_heads, g_inter = generator_config(cfg)
        gen = ElectraConfig(
            **{**common, "hidden_size": g_hidden, "num_attention_heads": g_heads, "intermediate_size": g_inter},
            embedding_size=embedding,
        )
        return ElectraPretrainingModel(disc, gen)
    if cfg.architecture == "albert":
        from transformers import AlbertConfig, AlbertForMaskedLM, AlbertForPreTraining

        albert = AlbertConfig(
            **common,
            embedding_size=cfg.embedding_size or cfg.hidden_size,
            num_hidden_groups=cfg.num_hidden_groups,
            inner_group_num=1,
            classifier_dropout_prob=cfg.dropout,
            bos_token_id=None,
            eos_token_id=None,
        )
        return (AlbertForPreTraining if pairs else AlbertForMaskedLM)(albert)
    from transformers import BertConfig, BertForMaskedLM, BertForPreTraining

    if cfg.init_from:
        return load_initial_model(cfg, vocab_size)
    bert_cfg = BertConfig(**common)
    if cfg.objective == "mlm+sbo":
        return BertForSpanBoundary(bert_cfg, max_positions=cfg.max_seq_len)
    model = (BertForPreTraining if pairs else BertForMaskedLM)(bert_cfg)
    if cfg.objective == "distill" and cfg.distill_init == "every_other":
        _init_student(cfg, model)  # after the random init: the global RNG stream is the same either way
    return model


def _expect(model: nn.Module, kind: type[_M], objective: str) -> _M:
    """``model`` as the ``kind`` that objective ``objective``'s loss needs (what :func:`build_model` gives)."""
    if not isinstance(model, kind):
        raise TypeError(f"objective {objective} needs a {kind.__name__} model, got {type(model).__name__}")
    return model


def make_loss(cfg: Any, model: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
    """The loss module of ``cfg.objective`` around ``model`` (the teacher is loaded for ``distill``)."""
    if cfg.objective == "electra":
        return ElectraLoss(_expect(model, ElectraPretrainingModel, cfg.objective), cfg.rtd_weight)
    if cfg.objective == "mlm+sbo":
        return SpanBoundaryLoss(_expect(model, BertForSpanBoundary, cfg.objective), cfg.sbo_weight)
    if cfg.objective == "distill":
        config = cast(Any, model.config)  # a Hugging Face config (torch types it ``Tensor | Module``)
        teacher = load_teacher(cfg, config.vocab_size, config.hidden_size, torch.device(device))
        return DistillationLoss(
            model,
            teacher,
            cfg.distill_temperature,
            cfg.distill_kl_weight,
            cfg.distill_mlm_weight,
            cfg.distill_cosine_weight,
            cfg.distill_positions,
        )
    return PretrainingLoss(model)


@torch.no_grad()
def evaluate_variant(
    cfg: Any,
    model: nn.Module,
    batches: Iterable,
    device: torch.device,
    autocast_dtype: torch.dtype | None,
    world_size: int,
    seed: int,
) -> dict[str, float]:
    """Held-out metrics of the objectives in :data:`OWN_EVALUATION` over ``batches`` (what
    ``bertology.pretraining.data.heldout_batches`` yields: ``(rows, batch, masked ids, labels)``).

    Always ``eval_loss`` (MLM cross-entropy at the masked positions, nats; for ELECTRA that of the
    generator) and ``perplexity``; ELECTRA adds ``eval_rtd_loss`` (mean BCE per token),
    ``eval_rtd_accuracy`` and ``eval_replaced_share`` (share of masked positions where the sample
    differs from the original); SpanBERT ``eval_sbo_loss``. ELECTRA's samples come from a generator
    seeded by ``seed``, so evaluations at different steps see comparable corruptions.
    """
    import torch.distributed as dist

    was_training = model.training
    model.eval()
    loss_module = make_loss(cfg, model, device)
    kw = {}
    if cfg.objective == "electra":
        kw["generator"] = torch.Generator(device=device).manual_seed(seed)
    names = ["mlm", "targets", "rtd_loss", "rtd_correct", "tokens", "replaced", "sbo_loss"]
    sums = torch.zeros(len(names), dtype=torch.float64)
    for _, batch, ids, labels in batches:
        with torch.autocast(device.type, dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
            _, mlm_sum, extras = loss_module(
                ids.to(device),
                batch["attention_mask"].to(device),
                batch["token_type_ids"].to(device),
                labels.to(device),
                reduction="sum",
                **kw,
            )
        sums[0] += float(mlm_sum)
        for i, name in enumerate(names[1:], 1):
            if name in extras:
                sums[i] += float(extras[name])
    if world_size > 1:
        dist.all_reduce(sums)
    model.train(was_training)
    s = dict(zip(names, sums.tolist()))
    loss = s["mlm"] / s["targets"] if s["targets"] > 0 else float("nan")
    out = {"eval_loss": loss, "perplexity": perplexity(loss)}
    if cfg.objective == "electra" and s["tokens"] > 0:
        out.update(
            eval_rtd_loss=s["rtd_loss"] / s["tokens"],
            eval_rtd_accuracy=s["rtd_correct"] / s["tokens"],
            eval_replaced_share=s["replaced"] / max(s["targets"], 1.0),
        )
    if cfg.objective == "mlm+sbo" and s["targets"] > 0:
        out["eval_sbo_loss"] = s["sbo_loss"] / s["targets"]
    return out


def perplexity(loss: float) -> float:
    """``exp(loss)``; ``inf`` where that overflows a float (a diverged loss), NaN for a NaN loss."""
    if loss != loss:
        return float("nan")
    return math.exp(loss) if loss < _MAX_EXP_ARG else float("inf")


# math.exp overflows beyond this (a diverged model's loss): perplexity is then reported as inf.
_MAX_EXP_ARG = math.log(sys.float_info.max)
