"""Train WordPiece (BERT) and byte-level BPE (RoBERTa) tokenizers with the ``tokenizers`` library.

The result is saved in Hugging Face format (``tokenizer.json`` + ``tokenizer_config.json`` +
``special_tokens_map.json``; ``vocab.txt`` too for WordPiece) and loads with
``transformers.AutoTokenizer.from_pretrained(dir)`` as a fast tokenizer.

Reproducibility: the same text and settings give a byte-identical ``tokenizer.json``.
``tokenizers``' ``WordPieceTrainer`` (BPE merges with a ``##`` continuation prefix) numbers the
``##x`` alphabet in Rust hash-map order, which differs from run to run -- and since tied merge
counts are broken by symbol id, even the merges can differ. So WordPiece is trained here as plain
BPE (whose alphabet the library sorts) on words whose characters are replaced by stand-in
characters, one per (character, word-initial or continuation); the learnt vocabulary is mapped
back (a continuation-initial token gets ``##``) and ordered canonically: special tokens, the
word-initial characters, the ``##`` characters (each by code point), then the merges in the
order they were learnt.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertology.errors import ConfigError, WorkbenchError
from bertology.pretraining.text_corpus import read_documents

BERT_SPECIALS = {
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "mask_token": "[MASK]",
}
ROBERTA_SPECIALS = {
    "bos_token": "<s>",
    "pad_token": "<pad>",
    "eos_token": "</s>",
    "unk_token": "<unk>",
    "mask_token": "<mask>",
    "cls_token": "<s>",
    "sep_token": "</s>",
}

TokenizerKind = Literal["wordpiece", "bpe"]
WORDPIECE_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Stand-in characters: the two supplementary private-use planes (U+F0000.., U+100000..).
_STAND_IN_PLANES = ((0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))


def _stand_in(k: int) -> str:
    """The k-th stand-in character (k from 0), in increasing code-point order."""
    for start, end in _STAND_IN_PLANES:
        if k <= end - start:
            return chr(start + k)
        k -= end - start + 1
    raise ConfigError(
        "tokenizer training: the text has more distinct characters than there are stand-in characters (131,068)"
    )


def _wordpiece_empty(lowercase: bool, vocab: dict[str, int] | None = None) -> Tokenizer:
    tok = Tokenizer(
        models.WordPiece(
            vocab or {s: i for i, s in enumerate(WORDPIECE_SPECIALS)}, unk_token="[UNK]", max_input_chars_per_word=100
        )
    )
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def wordpiece_vocabulary(
    lines: Iterable[str], *, vocab_size: int, lowercase: bool = True, min_frequency: int = 2
) -> list[str]:
    """The WordPiece vocabulary (tokens in id order) learnt from ``lines``, deterministically.

    The algorithm is that of ``tokenizers.trainers.WordPieceTrainer`` (BPE merges over the
    normalised, pre-tokenised words, ``##`` marking pieces that continue a word), run as plain BPE
    on stand-in characters so that every symbol id, and so every tie between merge counts, is a
    function of the text alone (see the module docstring).
    """
    shell = _wordpiece_empty(lowercase)
    normalizer, pre_tokenizer = shell.normalizer, shell.pre_tokenizer
    symbols: dict[tuple[str, bool], str] = {}  # (character, continues a word) -> stand-in
    encoded_words: dict[str, str] = {}

    def encode_word(word: str) -> str:
        out = encoded_words.get(word)
        if out is None:
            chars = []
            for i, c in enumerate(word):
                key = (c, i > 0)
                if key not in symbols:
                    symbols[key] = _stand_in(len(symbols))
                chars.append(symbols[key])
            out = encoded_words[word] = "".join(chars)
        return out

    def encoded_lines() -> Iterator[str]:
        for line in lines:
            words = pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(line))
            yield " ".join(encode_word(w) for w, _ in words)

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=WORDPIECE_SPECIALS, show_progress=False
    )
    bpe.train_from_iterator(encoded_lines(), trainer=trainer)

    original = {v: k for k, v in symbols.items()}
    singles: list[tuple[bool, str]] = []
    merged: list[tuple[int, str]] = []
    for token, idx in bpe.get_vocab().items():
        if token in WORDPIECE_SPECIALS:
            continue
        chars = [original[c] for c in token]
        text = ("##" if chars[0][1] else "") + "".join(c for c, _ in chars)
        if len(chars) == 1:
            singles.append((chars[0][1], chars[0][0]))
        else:
            merged.append((idx, text))
    return (
        WORDPIECE_SPECIALS
        + [("##" if cont else "") + c for cont, c in sorted(singles)]
        + [text for _, text in sorted(merged)]
    )


def _bpe(vocab_size: int, lowercase: bool, min_frequency: int) -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.BPE(unk_token=None))
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    return tok, trainer


def _special_id(tok: Tokenizer, token: str) -> int:
    """The id of special token ``token`` in the trained ``tok`` (the trainers add every special)."""
    token_id = tok.token_to_id(token)
    if token_id is None:
        raise WorkbenchError(f"the trained tokenizer has no special token {token!r}")
    return token_id


def train_tokenizer(
    texts: str | Path | Iterable[str],
    output_dir: str | Path,
    *,
    kind: TokenizerKind = "wordpiece",
    vocab_size: int = 8000,
    lowercase: bool = True,
    min_frequency: int = 2,
    model_max_length: int = 512,
) -> Path:
    """Train a tokenizer on a text file/directory (or an iterable of strings) and save it.

    ``kind="wordpiece"``: BERT-style (``[CLS] A [SEP] B [SEP]``, ``##`` continuation pieces,
    uncased when ``lowercase``). ``kind="bpe"``: RoBERTa-style byte-level BPE
    (``<s> A </s></s> B </s>``). Returns ``output_dir``.
    """
    from transformers import PreTrainedTokenizerFast

    if kind not in ("wordpiece", "bpe"):
        raise ConfigError(f"tokenizer kind: expected 'wordpiece' or 'bpe', got {kind!r}")
    if vocab_size < 50:
        raise ConfigError(f"vocab_size: must be >= 50, got {vocab_size}")
    if isinstance(texts, (str, Path)):
        source = Path(texts)

        def lines() -> Iterator[str]:
            for doc in read_documents(source):
                yield from doc

        iterator: Iterable[str] = lines()
    else:
        iterator = texts

    if kind == "wordpiece":
        vocab = wordpiece_vocabulary(iterator, vocab_size=vocab_size, lowercase=lowercase, min_frequency=min_frequency)
        tok = _wordpiece_empty(lowercase, {t: i for i, t in enumerate(vocab)})
    else:  # the BPE trainer sorts its (byte) alphabet, so its ids and merges are deterministic
        tok, trainer = _bpe(vocab_size, lowercase, min_frequency)
        tok.train_from_iterator(iterator, trainer=trainer)

    if kind == "wordpiece":
        specials = BERT_SPECIALS
        cls, sep = "[CLS]", "[SEP]"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))],
        )
    else:
        specials = ROBERTA_SPECIALS
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", _special_id(tok, "</s>")),
            ("<s>", _special_id(tok, "<s>")),
            trim_offsets=True,
            add_prefix_space=False,
        )

    input_names = (
        ["input_ids", "token_type_ids", "attention_mask"] if kind == "wordpiece" else ["input_ids", "attention_mask"]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        model_input_names=input_names,
        **specials,
    )
    output_dir = Path(output_dir)
    fast.save_pretrained(output_dir)
    if kind == "wordpiece":  # vocab.txt for tools that expect the classic BERT layout
        by_id = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        (output_dir / "vocab.txt").write_text("".join(t + "\n" for t, _ in by_id), encoding="utf-8")
    return output_dir
