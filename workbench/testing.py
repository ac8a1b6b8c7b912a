"""Tiny in-process models for tests, examples and benchmarks (no download).

``make_tiny_bert(tokenizer)`` is a random 2-layer BERT sized to a real tokenizer's vocabulary;
``tiny_bert`` / ``pair_batches`` / ``trained_pair_model`` are a 40-token toy world with planted head
behaviour (copy the neighbouring token) for the attention-head tests.

``tiny_model(model_type)`` / ``tiny_tokenizer(model_type)`` / ``save_tiny_model_dir(model_type, path)``
build a tiny random model of any type of :mod:`bertology.architectures` with a small tokenizer of
the kind that type ships with (WordPiece, byte-level BPE or SentencePiece-style Unigram, built
in-process from a fixed word list), and save both as a local model directory (safetensors).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

__all__ = [
    "make_tiny_bert",
    "tiny_config",
    "tiny_bert",
    "pair_batches",
    "trained_pair_model",
    "VOCAB",
    "MASK_ID",
    "PAD_ID",
    "tiny_tokenizer",
    "tiny_model",
    "save_tiny_model_dir",
    "TINY_WORDS",
    "plant_offset_head",
    "write_planted_token_task",
]

VOCAB, MASK_ID, PAD_ID = 40, 3, 0


def make_tiny_bert(
    tokenizer: Any,
    *,
    layers: int = 2,
    heads: int = 4,
    hidden: int = 32,
    seed: int = 0,
    max_positions: int = 64,
    mlm: bool = False,
) -> BertModel | BertForMaskedLM:
    """A random BERT (eager attention, eval mode) with ``tokenizer``'s vocabulary size."""
    config = BertConfig(  # type: ignore[call-arg]  # the dataclass stub omits the **kwargs (attn_implementation) it takes
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=max_positions,
        attn_implementation="eager",
    )
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm else BertModel)(config)
    return model.eval()


def tiny_config(layers: int = 2, heads: int = 4, hidden: int = 32) -> BertConfig:
    """Config of the toy-world BERT: vocabulary ``VOCAB``, no dropout, eager attention."""
    return BertConfig(  # type: ignore[call-arg]  # the dataclass stub omits the **kwargs (attn_implementation) it takes
        vocab_size=VOCAB,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        attn_implementation="eager",
    )


def tiny_bert(seed: int = 0, mlm: bool = False, **kw: Any) -> BertModel | BertForMaskedLM:
    """A random toy-world BERT in eval mode (``kw``: layers, heads, hidden)."""
    torch.manual_seed(seed)
    cls = BertForMaskedLM if mlm else BertModel
    return cls(tiny_config(**kw)).eval()


def pair_batches(n_batches: int, batch_size: int = 16, length: int = 12, seed: int = 0) -> list[dict]:
    """Sequences ``a a b b c c ...`` with one token of each pair masked: the answer is a neighbour.

    Each batch: ``input_ids``, ``attention_mask``, ``labels`` ``[batch_size, length]`` (labels -100
    except at masked positions)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        base = torch.randint(5, VOCAB, (batch_size, length // 2), generator=gen)
        ids = base.repeat_interleave(2, dim=1)
        labels = torch.full_like(ids, -100)
        pick = torch.randint(0, 2, (batch_size, length // 2), generator=gen) + torch.arange(0, length, 2)
        pick = pick[:, ::2]  # mask every other pair: copies must come from the neighbour
        rows = torch.arange(batch_size)[:, None]
        labels[rows, pick] = ids[rows, pick]
        ids = ids.clone()
        ids[rows, pick] = MASK_ID
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return out


def trained_pair_model(steps: int = 150, seed: int = 0, **kw: Any) -> BertForMaskedLM:
    """A tiny MLM trained briefly on :func:`pair_batches`, so heads differ in importance."""
    model = tiny_bert(seed, mlm=True, **kw).train()
    data = pair_batches(steps, seed=seed + 1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for batch in data:
        loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


# --------------------------------------------------------------------------- every architecture

TINY_WORDS = tuple(
    """
the of and to a in that is was he for it with as his on be at by i this had not are but from or have
an they which one you were her all she there would their we him been has when who will more no if out
so said what up its about into than them can only other new some could time these two may then do
first any my now such like our over man me even most made after also did many before must through
back years where much your way well down should because each just those people how too little state
good very make world still own see men work long get here between both life being under never day
same another know while last might us great old year off come since against go came right used take
three house city sat cat dog dogs bark jury said county election court report
""".split()
)

_BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
# model_type: (transformers tokenizer class, kind, special tokens in id order). A type missing here
# gets a byte-level BPE tokenizer when its table entry wants add_prefix_space, else WordPiece.
_TOKENIZERS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "bert": ("BertTokenizer", "wordpiece", _BERT_SPECIALS),
    "electra": ("ElectraTokenizer", "wordpiece", _BERT_SPECIALS),
    "distilbert": ("DistilBertTokenizer", "wordpiece", _BERT_SPECIALS),
    "mpnet": ("MPNetTokenizer", "wordpiece", ("<s>", "<pad>", "</s>", "[UNK]", "<mask>")),
    "roberta": ("RobertaTokenizer", "bpe", _ROBERTA_SPECIALS),
    "xlm-roberta": ("XLMRobertaTokenizer", "unigram", _ROBERTA_SPECIALS),
    "camembert": ("CamembertTokenizer", "unigram", _ROBERTA_SPECIALS),
    "albert": ("AlbertTokenizer", "unigram", ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")),
    "deberta-v2": ("DebertaV2Tokenizer", "unigram", ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    "nomic_bert": ("BertTokenizer", "wordpiece", _BERT_SPECIALS),
    # generic tokenizer.json without a prefix-space option, as the real checkpoints ship them:
    # ModernBERT (byte-level BPE, [CLS] ... [SEP]), EuroBERT (Llama-3 style: regex split, then
    # byte-level without its own regex; <|begin_of_text|> ... <|end_of_text|>)
    "modernbert": ("TokenizersBackend", "bpe-plain", ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")),
    "eurobert": ("TokenizersBackend", "bpe-split", ("<|begin_of_text|>", "<|end_of_text|>", "<|mask|>", "<|pad|>")),
}
_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789.,;:!?'\"`()-&$%/*"


def _tokenizer_spec(model_type: str) -> tuple[str, str, tuple[str, ...]]:
    from bertology.architectures import architecture_for

    arch = architecture_for(model_type)
    if model_type in _TOKENIZERS:
        return _TOKENIZERS[model_type]
    return (
        ("RobertaTokenizer", "bpe", _ROBERTA_SPECIALS)
        if arch.prefix_space
        else ("BertTokenizer", "wordpiece", _BERT_SPECIALS)
    )


def tiny_tokenizer(model_type: str = "bert") -> Any:
    """A small fast tokenizer of the class ``model_type`` ships with, built in-process: WordPiece
    (words of :data:`TINY_WORDS`, characters and ``##`` characters), byte-level BPE (every byte
    plus merges spelling ``Ġ`` + each word) or Unigram (``▁`` + each word and single characters).
    Other words are split into pieces."""
    import transformers

    class_name, kind, specials = _tokenizer_spec(model_type)
    cls = getattr(transformers, class_name)
    if kind == "wordpiece":
        tokens = list(specials) + list(TINY_WORDS) + list(_CHARS) + [f"##{c}" for c in _CHARS]
        return cls(vocab={t: i for i, t in enumerate(dict.fromkeys(tokens))})
    if kind == "bpe":
        from tokenizers.pre_tokenizers import ByteLevel

        tokens = list(specials) + sorted(ByteLevel.alphabet())
        merges: list[tuple[str, str]] = []
        for word in TINY_WORDS:
            current = "\u0120"  # Ġ: the byte-level space
            for ch in word:
                merges.append((current, ch))
                current += ch
                tokens.append(current)
        merges = list(dict.fromkeys(merges))
        return cls(vocab={t: i for i, t in enumerate(dict.fromkeys(tokens))}, merges=merges)
    if kind in ("bpe-plain", "bpe-split"):
        return _generic_byte_level(kind, specials)
    if kind == "unigram":
        pieces = [(t, 0.0) for t in specials] + [("\u2581", -3.0)]
        pieces += [(f"\u2581{w}", -5.0) for w in TINY_WORDS]
        pieces += [(c, -10.0) for c in _CHARS + _CHARS[:26].upper()]
        return cls(vocab=pieces)
    raise ValueError(f"unknown tokenizer kind {kind!r}")


def _byte_level_vocab(specials: tuple[str, ...]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Every byte plus merges spelling ``Ġ`` + each word of :data:`TINY_WORDS` (and each bare word)."""
    from tokenizers.pre_tokenizers import ByteLevel

    tokens = list(specials) + sorted(ByteLevel.alphabet())
    merges: list[tuple[str, str]] = []
    for word in TINY_WORDS:
        for current in ("\u0120", word[0]):  # Ġ: the byte-level space
            for ch in word if current == "\u0120" else word[1:]:
                merges.append((current, ch))
                current += ch
                tokens.append(current)
    return {t: i for i, t in enumerate(dict.fromkeys(tokens))}, list(dict.fromkeys(merges))


def _generic_byte_level(kind: str, specials: tuple[str, ...]) -> Any:
    """A generic fast tokenizer (``TokenizersBackend``) as ModernBERT / EuroBERT checkpoints ship:
    byte-level BPE whose pre-tokenizer adds no prefix space (so a pre-split word is a word start
    only if :func:`bertology.models.load_model` makes it one)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import TokenizersBackend

    vocab, merges = _byte_level_vocab(specials)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    if kind == "bpe-plain":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        pad, unk, cls, sep, mask = specials
        names = {"cls_token": cls, "sep_token": sep, "pad_token": pad, "unk_token": unk, "mask_token": mask}
    else:
        split = Regex(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+"
        )
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(split, behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        cls, sep, mask, pad = specials
        names = {"bos_token": cls, "eos_token": sep, "pad_token": pad, "mask_token": mask}
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B {sep}", special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])]
    )
    return TokenizersBackend(tokenizer_object=tok, **names)


def _tiny_config(
    model_type: str, *, vocab_size: int, layers: int, heads: int, hidden: int, special_ids: dict[str, int]
) -> Any:
    from transformers import AutoConfig

    from bertology.architectures import architecture_for

    arch = architecture_for(model_type)
    kwargs: dict[str, Any] = {
        "vocab_size": vocab_size,
        arch.layers_field: layers,
        arch.heads_field: heads,
        arch.hidden_field: hidden,
        "max_position_embeddings": 512 + arch.position_offset,
        "attn_implementation": "eager",
        **special_ids,
    }
    extra: dict[str, dict[str, Any]] = {  # each model type's own fields
        "distilbert": {"hidden_dim": 2 * hidden},
        "electra": {"embedding_size": hidden // 2, "intermediate_size": 2 * hidden},
        "albert": {"embedding_size": hidden // 2, "intermediate_size": 2 * hidden},
        # DeBERTa-v3 style: relative positions (shared key projections), no absolute ones
        # alternate global / local layers with a window of 2 tokens each side (tests see it)
        "modernbert": {
            "intermediate_size": 2 * hidden,
            "global_attn_every_n_layers": 2,
            "local_attention": 4,
            "max_position_embeddings": 512,
        },
        "deberta-v2": {
            "intermediate_size": 2 * hidden,
            "relative_attention": True,
            "pos_att_type": ["p2c", "c2p"],
            "position_buckets": 16,
            "max_relative_positions": -1,
            "position_biased_input": False,
            "share_att_key": True,
            "norm_rel_ebd": "layer_norm",
            "type_vocab_size": 0,
        },
    }
    kwargs.update(extra.get(model_type, {"intermediate_size": 2 * hidden}))
    config = AutoConfig.for_model(model_type, **kwargs)
    architecture_for(config)
    return config


def tiny_model(
    model_type: str = "bert",
    *,
    mlm: bool = False,
    seed: int = 0,
    vocab_size: int | None = None,
    layers: int = 2,
    heads: int = 4,
    hidden: int = 32,
    **config: Any,
) -> Any:
    """A tiny random model of a :mod:`bertology.architectures` type (eager attention, eval mode):
    the base encoder, or ``*ForMaskedLM`` with ``mlm=True``. ``vocab_size`` defaults to
    :func:`tiny_tokenizer`'s, whose special-token ids (padding, begin / end) the config takes;
    ``config``: further config fields (e.g. ``share_att_key=False``)."""
    from transformers import AutoModel, AutoModelForMaskedLM

    tok = tiny_tokenizer(model_type)
    ids = {
        f"{name}_token_id": getattr(tok, f"{name}_token_id")
        for name in ("pad", "bos", "eos")
        if getattr(tok, f"{name}_token_id", None) is not None
    }
    if model_type == "modernbert":  # its configs name [CLS] / [SEP] as begin / end too
        ids.update(
            bos_token_id=tok.cls_token_id,
            eos_token_id=tok.sep_token_id,
            cls_token_id=tok.cls_token_id,
            sep_token_id=tok.sep_token_id,
        )
    cfg = _tiny_config(
        model_type, vocab_size=vocab_size or len(tok), layers=layers, heads=heads, hidden=hidden, special_ids=ids
    )
    for key, value in config.items():
        setattr(cfg, key, value)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = (AutoModelForMaskedLM if mlm else AutoModel).from_config(cfg)
    return model.eval()


def save_tiny_model_dir(
    model_type: str, path: str | os.PathLike, *, mlm: bool = False, seed: int = 0, **kw: Any
) -> Path:
    """Save :func:`tiny_model` (safetensors) and :func:`tiny_tokenizer` as a local model directory
    that :func:`bertology.models.load_model` loads; returns the directory. ``kw``: as for tiny_model."""
    from transformers.utils import logging as hf_logging

    path = Path(path)
    model = tiny_model(model_type, mlm=mlm, seed=seed, **kw)
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        model.save_pretrained(path, safe_serialization=True)
    finally:
        hf_logging.set_verbosity(verbosity)
    tiny_tokenizer(model_type).save_pretrained(path)
    return path


# --------------------------------------------------------------------------- planted heads


def plant_offset_head(model: Any, layer: int, head: int, offset: int = -1) -> Any:
    """Force head ``head`` of layer ``layer`` of a BERT-style encoder to put all its attention on the
    token at relative position ``offset`` (a token whose target falls outside the sequence or on
    padding attends to itself). The head's attention probabilities -- what eager attention maps,
    and so the feature store, see -- and its output (the same weights applied to its values) are
    replaced by a forward hook on that layer's self-attention module, registered first so that
    transformers' output recording sees the planted map. Returns the hook handle
    (``handle.remove()`` undoes it).
    """
    encoder = getattr(model, "base_model", model)
    module = encoder.encoder.layer[layer].attention.self
    size = module.attention_head_size

    def hook(mod, args, kwargs, output):
        hidden = args[0] if args else kwargs["hidden_states"]
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        attn_output, weights = output[0], output[1]
        B, _, T, _ = weights.shape
        if mask is None:
            valid = torch.ones(B, T, dtype=torch.bool, device=weights.device)
        elif mask.dtype == torch.bool:
            valid = mask.expand(B, 1, T, T)[:, 0, -1] if mask.dim() == 4 else mask.bool()
        else:
            valid = (
                (mask.expand(B, 1, T, T)[:, 0, -1] > torch.finfo(mask.dtype).min / 2) if mask.dim() == 4 else mask > 0
            )
        positions = torch.arange(T, device=weights.device)
        target = (positions + offset).expand(B, T)
        inside = (target >= 0) & (target < T)
        inside &= torch.gather(valid, 1, target.clamp(0, T - 1))
        target = torch.where(inside, target, positions.expand(B, T))
        forced = torch.nn.functional.one_hot(target, T).to(weights.dtype)  # [B, T, T]
        value = mod.value(hidden).view(B, T, -1, size)[:, :, head]  # [B, T, d]
        weights = weights.clone()
        weights[:, head] = forced
        attn_output = attn_output.clone()
        attn_output[..., head * size : (head + 1) * size] = torch.bmm(forced, value.to(forced.dtype)).to(
            attn_output.dtype
        )
        return (attn_output, weights, *output[2:])

    return module.register_forward_hook(hook, with_kwargs=True, prepend=True)


PLANTED_WORDS = [f"w{i}" for i in range(30)]
"""The words of :func:`planted_head_store`'s sentences (one WordPiece each)."""


def planted_head_store(
    root: str | Path, position: tuple[int, int], *, name: str, sentences: int, lengths: tuple[int, int]
) -> tuple[Any, Any, Any]:
    """``(lm, corpus, store)``: a random 2-layer x 4-head BERT (seed 3) whose head at 0-based array
    ``position`` attends to the previous token (:func:`plant_offset_head`), ``sentences`` random
    sentences of :data:`PLANTED_WORDS` with ``lengths[0] <= length < lengths[1]`` words (seed 0),
    and the store of its hidden states and attention maps under ``root`` (the head unplanted after)."""
    import numpy as np
    from transformers import BertTokenizerFast  # type: ignore[attr-defined]  # transformers 5 keeps the alias, its stubs do not

    from bertology.corpus import Corpus, Sentence
    from bertology.models import from_modules
    from bertology.store import extract

    model = tiny_bert(seed=3, mlm=False, layers=2, heads=4, hidden=32)
    handle = plant_offset_head(model, *position, offset=-1)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + PLANTED_WORDS
    tokenizer = BertTokenizerFast(vocab={t: i for i, t in enumerate(vocab)})
    rng = np.random.default_rng(0)
    words = [list(rng.choice(PLANTED_WORDS, size=int(rng.integers(*lengths)))) for _ in range(sentences)]
    corpus = Corpus(name, [Sentence(f"s{i}", w) for i, w in enumerate(words)])
    lm = from_modules(f"tiny-{name}", model, tokenizer)
    store = extract(lm, corpus, attentions=True, root=root, progress=False)
    handle.remove()
    return lm, corpus, store


# --------------------------------------------------------------------------- a planted fine-tuning task


def write_planted_token_task(
    path: str | os.PathLike, *, n_sentences: int = 120, n_documents: int = 24, seed: int = 0
) -> Path:
    """Write a planted token-classification task as JSONL (docs/finetuning.md's format) and return its
    path: ``n_sentences`` six-word sentences of :data:`TINY_WORDS`, spread over ``n_documents``
    documents; a word's label is the set it comes from (``A``: the first 20 words, ``B``: the next
    20), so a fine-tune can reach ~100% test accuracy."""
    import json
    import random

    rng = random.Random(seed)
    set_a, set_b = TINY_WORDS[:20], TINY_WORDS[20:40]
    lines = []
    for i in range(n_sentences):
        words = [rng.choice(set_a + set_b) for _ in range(6)]
        lines.append(
            {"words": words, "labels": ["A" if w in set_a else "B" for w in words], "document": f"doc{i % n_documents}"}
        )
    path = Path(path)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def shipped_tokenizer() -> Any:
    """The WordPiece tokenizer of the shipped ``bert-mini-english`` (vocab 8,192), for tiny random
    models where the MiniLM package is not installed (e.g. a bare GPU image)."""
    from transformers import AutoTokenizer

    from bertology import paths

    return AutoTokenizer.from_pretrained(str(paths.shipped_models_dir() / "bert-mini-english" / "checkpoint-3800"))
