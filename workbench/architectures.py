"""One table of what the workbench knows about each supported encoder architecture.

Loading (:mod:`bertology.models`), extraction (:mod:`bertology.features`, :mod:`bertology.store`),
head gates and pruning (:mod:`bertology.probes.heads.gates`) ask this table instead of branching on
``model_type`` themselves: where the layers are, where each layer's query / key / value and
attention output projection are, which config fields hold the sizes, how the tokenizer must be
loaded for pre-split words, whether a pooler is expected, whether layers share parameters.

Only types tested end to end with transformers 5 (``tests/test_architectures.py`` runs every entry:
load, extraction equal to a plain forward pass, head gates equal to real pruning, pruned save and
reload) are listed. Not listed: ``deberta`` (v1: query / key / value fused in one ``in_proj`` with a
per-head interleaved layout and separate ``q_bias`` / ``v_bias``, so heads cannot be gated or
pruned through separate projections).

The modern encoders (``modernbert``, ``eurobert``, ``nomic_bert``) differ from BERT in ways the
table records rather than hides: rotary positions (no position embeddings, so no position offset),
gated feed-forward blocks (not touched by head gates or pruning), a fused query / key / value
projection (ModernBERT ``Wqkv``: rows ``[q | k | v]``, each heads-major; see ``qkv``), grouped-query
attention (EuroBERT with ``num_key_value_heads < num_attention_heads``: query heads can be gated, real
pruning is refused; see ``kv_heads_field``) and layers whose heads see only a local window
(ModernBERT: :func:`attention_windows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bertology.errors import ModelError

__all__ = [
    "Architecture",
    "ARCHITECTURES",
    "SUPPORTED_TYPES",
    "AttentionLayer",
    "architecture_for",
    "supported_types",
    "num_layers",
    "num_heads",
    "hidden_size",
    "attention_layers",
    "get_module",
    "mlm_parts",
    "attention_windows",
    "key_value_heads",
    "ensure_prefix_space",
]


@dataclass(frozen=True)
class Architecture:
    """How one ``model_type`` is laid out. Module paths are dotted attribute paths (list items by
    index, ``"albert_layers.0"``); ``layers`` is relative to the base model (``model.base_model``),
    the per-layer paths are relative to one entry of that list.

    - ``attention``: the module computing attention; it holds ``head_size_attr`` (size of one head)
      and ``heads_attr`` (number of heads, updated by pruning).
    - ``query`` / ``key`` / ``value``: the projections whose output rows are per head (empty
      strings when ``qkv`` is set).
    - ``qkv``: one fused projection computing query, key and value (ModernBERT ``attn.Wqkv``); its
      output rows are ``[q | k | v]``, each block heads-major (``view(..., 3, heads, head_dim)``), so
      pruning head ``h`` removes rows ``part * heads * d + h * d + [0, d)`` for each part.
    - ``output``: the projection whose *input* is the concatenation of the heads' outputs: the hook
      point of head gates; pruning slices its input columns. When it sits inside ``attention``
      (DistilBERT, MPNet, ALBERT), the attention module applies it itself.
    - ``ffn_output``: the feed-forward block's output projection (its output, bias included, is the
      block's contribution before the residual sum: the hook point of FFN gates, Prasanna et al. 2020).
    - ``extra_head_projections``: further per-head projections of the attention module, sliced by
      rows with query / key / value when present (DeBERTa-v2 ``pos_key_proj`` / ``pos_query_proj``,
      built only when ``share_att_key`` is off).
    - ``head_bias_argument``: an argument of the attention module's forward carrying a per-head
      bias ``[batch, heads, T, T]`` computed once for all heads (MPNet ``position_bias``); a pruned
      layer keeps only its heads' slice.
    - ``layers_field`` / ``heads_field`` / ``hidden_field``: config fields of the sizes.
    - ``heads_attr``: None when the attention module keeps no head count and derives it from the
      projections' width at each forward (rotary encoders: ``view(..., -1, head_dim)``).
    - ``kv_heads_field``: config field of the number of key / value heads (grouped-query attention);
      when it is smaller than the number of query heads, each key / value head serves several query
      heads: query heads can still be gated (the gate acts on the output projection's input, one
      slice per query head), but real pruning is refused.
    - ``prefix_space``: load the tokenizer with ``add_prefix_space=True`` so that every pre-split
      word is tokenised as a word start (byte-level BPE and SentencePiece tokenizers).
    - ``pooler``: the base model class adds a pooler (``add_pooling_layer``); an MLM checkpoint
      carries none, so it is not added when the weights lack it.
    - ``mlm_keys``: substrings of the weight names of the MLM head (tells whether a checkpoint has one).
    - ``position_offset``: positions reserved before the first token (RoBERTa-style position ids
      start after the padding index), subtracted from ``max_position_embeddings``.
    - ``groups_field``: for models whose layers share parameters (ALBERT), the config field with
      the number of distinct layer modules; layer position ``i`` runs module
      ``int(i / (layers / groups))`` (the transformers formula). Gates still act per layer
      position; real pruning is refused (a head removed from a shared module is removed at every
      position that uses it).
    - ``requirements``: ``(config field, value)`` pairs the workbench needs (ALBERT: one layer per
      group).
    """

    model_type: str
    layers: str
    attention: str
    query: str
    key: str
    value: str
    output: str
    layers_field: str = "num_hidden_layers"
    heads_field: str = "num_attention_heads"
    hidden_field: str = "hidden_size"
    head_size_attr: str = "attention_head_size"
    heads_attr: str | None = "num_attention_heads"
    qkv: str | None = None
    ffn_output: str = "output.dense"
    kv_heads_field: str | None = None
    extra_head_projections: tuple[str, ...] = ()
    head_bias_argument: str | None = None
    prefix_space: bool = False
    pooler: bool = False
    mlm_keys: tuple[str, ...] = ()
    position_offset: int = 0
    groups_field: str | None = None
    requirements: tuple[tuple[str, Any], ...] = ()

    @property
    def shares_layers(self) -> bool:
        """Whether layer positions share parameters (one module runs at several positions)."""
        return self.groups_field is not None

    @property
    def output_inside_attention(self) -> bool:
        """Whether the attention module applies the output projection itself."""
        return self.output.startswith(self.attention + ".")

    @property
    def projection_roles(self) -> tuple[str, ...]:
        """The table roles of the per-head input projections: ``("qkv",)`` or query, key, value."""
        return ("qkv",) if self.qkv else ("query", "key", "value")

    def num_layers(self, config: Any) -> int:
        return int(getattr(config, self.layers_field))

    def num_heads(self, config: Any) -> int:
        return int(getattr(config, self.heads_field))

    def hidden_size(self, config: Any) -> int:
        return int(getattr(config, self.hidden_field))

    def check(self, config: Any) -> None:
        """Refuse a config this table entry cannot handle (clear message naming the field)."""
        for field, expected in self.requirements:
            if getattr(config, field, expected) != expected:
                raise ModelError(
                    f"model_type {self.model_type!r}: the workbench needs {field}={expected!r}, "
                    f"this config has {getattr(config, field)!r}"
                )


_BERT_LAYER: dict[str, Any] = dict(  # Architecture fields shared by the BERT-layout entries
    layers="encoder.layer",
    attention="attention.self",
    query="attention.self.query",
    key="attention.self.key",
    value="attention.self.value",
    output="attention.output.dense",
)
_ROBERTA_LIKE: dict[str, Any] = dict(
    _BERT_LAYER, prefix_space=True, pooler=True, mlm_keys=("lm_head",), position_offset=2
)

ARCHITECTURES: dict[str, Architecture] = {
    a.model_type: a
    for a in (
        Architecture("bert", **_BERT_LAYER, pooler=True, mlm_keys=("cls.predictions",)),
        Architecture("roberta", **_ROBERTA_LIKE),
        Architecture("xlm-roberta", **_ROBERTA_LIKE),
        Architecture("camembert", **_ROBERTA_LIKE),
        Architecture("electra", **_BERT_LAYER, mlm_keys=("generator_lm_head", "generator_predictions")),
        Architecture(
            "distilbert",
            layers="transformer.layer",
            attention="attention",
            query="attention.q_lin",
            key="attention.k_lin",
            value="attention.v_lin",
            output="attention.out_lin",
            layers_field="n_layers",
            heads_field="n_heads",
            hidden_field="dim",
            heads_attr="n_heads",
            ffn_output="ffn.lin2",
            mlm_keys=("vocab_projector", "vocab_transform"),
        ),
        Architecture(
            "albert",
            layers="encoder.albert_layer_groups",
            attention="albert_layers.0.attention",
            query="albert_layers.0.attention.query",
            key="albert_layers.0.attention.key",
            value="albert_layers.0.attention.value",
            output="albert_layers.0.attention.dense",
            ffn_output="albert_layers.0.ffn_output",
            prefix_space=True,
            pooler=True,
            mlm_keys=("predictions.",),
            groups_field="num_hidden_groups",
            requirements=(("inner_group_num", 1),),
        ),
        Architecture(
            "deberta-v2",
            layers="encoder.layer",
            attention="attention.self",
            query="attention.self.query_proj",
            key="attention.self.key_proj",
            value="attention.self.value_proj",
            output="attention.output.dense",
            extra_head_projections=("pos_key_proj", "pos_query_proj"),
            prefix_space=True,
            mlm_keys=("cls.predictions", "lm_predictions"),
        ),
        Architecture(
            "mpnet",
            layers="encoder.layer",
            attention="attention.attn",
            query="attention.attn.q",
            key="attention.attn.k",
            value="attention.attn.v",
            output="attention.attn.o",
            head_bias_argument="position_bias",
            pooler=True,
            mlm_keys=("lm_head",),
            position_offset=2,
        ),
        # rotary encoders: no position embeddings (offset 0), gated FFN, head count from the projections
        Architecture(
            "modernbert",
            layers="layers",
            attention="attn",
            query="",
            key="",
            value="",
            qkv="attn.Wqkv",
            output="attn.Wo",
            ffn_output="mlp.Wo",
            head_size_attr="head_dim",
            heads_attr=None,
            prefix_space=True,
            mlm_keys=("head.dense", "decoder."),
        ),
        Architecture(
            "eurobert",
            layers="layers",
            attention="self_attn",
            query="self_attn.q_proj",
            key="self_attn.k_proj",
            value="self_attn.v_proj",
            output="self_attn.o_proj",
            head_size_attr="head_dim",
            ffn_output="mlp.down_proj",
            heads_attr=None,
            kv_heads_field="num_key_value_heads",
            prefix_space=True,
            mlm_keys=("lm_head",),
        ),
        Architecture(
            "nomic_bert",
            layers="layers",
            attention="self_attn",
            query="self_attn.q_proj",
            key="self_attn.k_proj",
            value="self_attn.v_proj",
            output="self_attn.o_proj",
            head_size_attr="head_dim",
            ffn_output="mlp.down_proj",
            heads_attr=None,
            pooler=True,
            mlm_keys=("cls.predictions",),
        ),
    )
}

SUPPORTED_TYPES = frozenset(ARCHITECTURES)


def supported_types() -> list[str]:
    """The accepted ``model_type`` values, sorted."""
    return sorted(ARCHITECTURES)


def _config_of(obj: Any) -> Any:
    """A config from a config, a model, a :class:`~bertology.models.LoadedModel` or None for a str."""
    if isinstance(obj, str):
        return None
    config = getattr(obj, "config", obj)
    if not hasattr(config, "model_type"):
        raise ModelError(f"{type(obj).__name__}: not a model config, model or loaded model (no model_type)")
    return config


def architecture_for(config_or_model: Any) -> Architecture:
    """The table entry for a config, a model, a loaded model or a ``model_type`` string.

    Raises :class:`~bertology.errors.ModelError` naming the type and the supported list when the
    type is not in the table, or naming the field when a config needs what the workbench cannot
    handle (e.g. ALBERT with several layers per group).
    """
    config = _config_of(config_or_model)
    model_type = config_or_model if config is None else config.model_type
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise ModelError(
            f"model_type {model_type!r} is not a BERT-family encoder the workbench supports "
            f"(supported: {', '.join(supported_types())})"
        )
    if config is not None:
        arch.check(config)
        _layer_windows(config, arch.num_layers(config))  # local / global layers the workbench can describe
    return arch


def num_layers(config_or_model: Any) -> int:
    """Number of transformer layers (positions) of the original architecture."""
    config = _config_of(config_or_model)
    return architecture_for(config).num_layers(config)


def num_heads(config_or_model: Any) -> int:
    """Attention heads per layer of the original (unpruned) architecture."""
    config = _config_of(config_or_model)
    return architecture_for(config).num_heads(config)


def hidden_size(config_or_model: Any) -> int:
    """Width of the hidden states."""
    config = _config_of(config_or_model)
    return architecture_for(config).hidden_size(config)


def key_value_heads(config_or_model: Any) -> int:
    """Key / value heads per layer: fewer than :func:`num_heads` under grouped-query attention
    (EuroBERT ``num_key_value_heads``), else equal to it."""
    config = _config_of(config_or_model)
    arch = architecture_for(config)
    value = getattr(config, arch.kv_heads_field, None) if arch.kv_heads_field else None
    return arch.num_heads(config) if value is None else int(value)


def attention_windows(config_or_model: Any) -> list[int | None]:
    """Per layer position, the farthest token a query may attend to (``|query - key| <= window``),
    or None where attention is global.

    ModernBERT alternates global layers with local ones (``config.layer_types``: every
    ``global_attn_every_n_layers``-th layer is ``"full_attention"``, the others
    ``"sliding_attention"``); a local layer's heads see ``local_attention // 2`` tokens on each side
    (``config.sliding_window``, the bidirectional sliding-window mask of transformers, inclusive).
    Every other type of the table attends globally everywhere.
    """
    config = _config_of(config_or_model)
    return _layer_windows(config, architecture_for(config).num_layers(config))


def _layer_windows(config: Any, n: int) -> list[int | None]:
    """:func:`attention_windows` for a config already matched to the table (``n`` layers);
    :class:`~bertology.errors.ModelError` for layer types the workbench does not understand."""
    kinds = getattr(config, "layer_types", None)
    if not kinds:
        return [None] * n
    if len(kinds) != n:
        raise ModelError(f"model_type {config.model_type!r}: {len(kinds)} layer_types for {n} layers")
    unknown = sorted(set(kinds) - {"full_attention", "sliding_attention"})
    if unknown:
        raise ModelError(
            f"model_type {config.model_type!r}: layer type(s) {unknown} are not understood by the "
            "workbench (known: full_attention, sliding_attention)"
        )
    window = getattr(config, "sliding_window", None)
    if "sliding_attention" in kinds and not isinstance(window, int):
        raise ModelError(
            f"model_type {config.model_type!r}: sliding_attention layers without an integer sliding_window ({window!r})"
        )
    return [window if kind == "sliding_attention" else None for kind in kinds]


def ensure_prefix_space(tokenizer: Any) -> bool:
    """Make a byte-level BPE tokenizer cut every pre-split word as a word start (``Ġword``), as
    running text after a space is cut; returns whether the tokenizer was changed.

    ``add_prefix_space=True`` reaches the pre-tokenizer only in tokenizer classes that rebuild it
    (RoBERTa's); the generic ``tokenizer.json`` of ModernBERT and EuroBERT checkpoints keeps a
    byte-level pre-tokenizer without the prefix space, so a pre-split word would be cut as if it
    began the text. Then a normaliser prepending one space is added (applied to each pre-split word,
    and once at the start of running text). Tokenizers that are not byte-level (WordPiece,
    SentencePiece's ``▁``), that add the space already, or were fixed before are left alone.
    """
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return False
    state = json.loads(backend.to_str())
    pre = state.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    byte_level = [p for p in parts if p.get("type") == "ByteLevel"]
    if not byte_level or any(p.get("add_prefix_space") for p in byte_level):
        return False
    normalizer = state.get("normalizer") or {}
    steps = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else [normalizer]
    if any(step.get("type") == "Prepend" and step.get("prepend") == " " for step in steps):
        return False
    from tokenizers import normalizers

    prepend = normalizers.Prepend(" ")
    backend.normalizer = prepend if backend.normalizer is None else normalizers.Sequence([backend.normalizer, prepend])
    return True


def get_module(root: Any, path: str) -> Any:
    """``root.a.b.0.c`` for ``path="a.b.0.c"`` (``ModuleList`` items by index); None if absent."""
    module = root
    for part in path.split("."):
        if part.isdigit() and not hasattr(module, part):
            try:
                module = module[int(part)]
            except (IndexError, TypeError, KeyError):
                return None
        else:
            module = getattr(module, part, None)
        if module is None:
            return None
    return module


@dataclass(frozen=True)
class AttentionLayer:
    """Handles on the attention of one layer position (see :class:`Architecture` for the roles).
    Layers sharing parameters (ALBERT) give the same modules at several positions."""

    position: int
    module: Any  # the layer module (entry of the layer list)
    attention: Any
    query: Any  # None when the architecture fuses query / key / value (then ``qkv``)
    key: Any
    value: Any
    output: Any
    qkv: Any = None


def layer_modules(model: Any) -> list[Any]:
    """The layer module run at each layer position of ``model`` (base model or with a head), in
    order; layers sharing parameters (ALBERT) give the same module at several positions. Raises
    :class:`~bertology.errors.ModelError` when the layout is not the table's."""
    arch = architecture_for(model)
    base = getattr(model, "base_model", model)
    modules = get_module(base, arch.layers)
    if modules is None:
        raise ModelError(f"{type(model).__name__} ({arch.model_type}): no layer list at {arch.layers!r}")
    modules = list(modules)
    n = arch.num_layers(model.config)
    if arch.groups_field is not None:  # arch.shares_layers
        groups = int(getattr(model.config, arch.groups_field))
        modules = [modules[int(i / (n / groups))] for i in range(n)]
    if len(modules) != n:
        raise ModelError(
            f"{type(model).__name__} ({arch.model_type}): {len(modules)} layers at {arch.layers!r}, "
            f"config {arch.layers_field}={n}"
        )
    return modules


def ffn_outputs(model: Any) -> list[Any]:
    """The feed-forward output projection (``ffn_output``) run at each layer position of ``model``."""
    arch = architecture_for(model)
    out = []
    for position, layer in enumerate(layer_modules(model)):
        module = get_module(layer, arch.ffn_output)
        if module is None:
            raise ModelError(
                f"{type(model).__name__} ({arch.model_type}) layer {position}: no feed-forward output "
                f"projection at {arch.ffn_output!r}"
            )
        out.append(module)
    return out


def attention_layers(model: Any) -> list[AttentionLayer]:
    """One :class:`AttentionLayer` per layer position of ``model`` (base model or with a head), in
    order; raises :class:`~bertology.errors.ModelError` when the layout is not the table's."""
    arch = architecture_for(model)
    modules = layer_modules(model)
    out = []
    for position, layer in enumerate(modules):
        roles = ("attention", *arch.projection_roles, "output")
        parts = {role: get_module(layer, getattr(arch, role)) for role in roles}
        absent = [f"{role} ({getattr(arch, role)})" for role, m in parts.items() if m is None]
        if absent:
            raise ModelError(f"{type(model).__name__} ({arch.model_type}) layer {position}: no {', '.join(absent)}")
        out.append(
            AttentionLayer(
                position,
                layer,
                parts["attention"],
                parts.get("query"),
                parts.get("key"),
                parts.get("value"),
                parts["output"],
                parts.get("qkv"),
            )
        )
    return out


def mlm_parts(model: Any) -> tuple[Any, Any, Any]:
    """``(encoder, mlm_head, pair_head | None)`` of an MLM model of the table (``*ForMaskedLM``, or
    BERT / ALBERT with a pair head); ``mlm_head`` maps hidden states ``[n, H]`` to logits ``[n, V]``,
    ``pair_head`` the pooled output. With them the vocabulary logits can be computed at the scored
    positions only (pretraining losses, head importance and pruning); every MLM head is
    position-wise. Raises :class:`~bertology.errors.ModelError` for other models."""
    if hasattr(model, "cls") and hasattr(model, "bert"):
        return model.bert, model.cls.predictions, getattr(model.cls, "seq_relationship", None)
    if hasattr(model, "albert") and hasattr(model, "predictions"):
        return model.albert, model.predictions, getattr(model, "sop_classifier", None)
    if hasattr(model, "electra") and hasattr(model, "generator_lm_head"):
        return model.electra, lambda h: model.generator_lm_head(model.generator_predictions(h)), None
    if hasattr(model, "lm_head") and (hasattr(model, "roberta") or hasattr(model, "mpnet")):  # RoBERTa family, MPNet
        return model.base_model, model.lm_head, None
    if hasattr(model, "deberta") and getattr(model, "legacy", True) and hasattr(model, "cls"):
        return model.deberta, model.cls, None
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type == "modernbert" and hasattr(model, "decoder") and hasattr(model, "head"):
        return model.model, lambda h: model.decoder(model.head(h)), None
    if model_type == "eurobert" and hasattr(model, "lm_head"):
        return model.model, model.lm_head, None
    if model_type == "nomic_bert" and hasattr(model, "cls"):
        return model.nomic_bert, model.cls, None
    if hasattr(model, "distilbert") and hasattr(model, "vocab_projector"):
        return (
            model.distilbert,
            lambda h: model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(h)))),
            None,
        )
    raise ModelError(f"{type(model).__name__}: no MLM head of a known layout")
