"""Train WordPiece (BERT) and byte-level BPE (RoBERTa) tokenizers with the ``tokenizers`` library.

The result is saved in Hugging Face format (``tokenizer.json`` + ``tokenizer_config.json`` +
``special_tokens_map.json``; ``vocab.txt`` too for WordPiece) and loads with
``transformers.AutoTokenizer.from_pretrained(dir)`` as a fast tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator, Literal

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from bertology.errors import ConfigError
from bertology.pretraining.text_corpus import read_documents

BERT_SPECIALS = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
                 "sep_token": "[SEP]", "mask_token": "[MASK]"}
ROBERTA_SPECIALS = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>",
                    "unk_token": "<unk>", "mask_token": "<mask>", "cls_token": "<s>", "sep_token": "</s>"}

TokenizerKind = Literal["wordpiece", "bpe"]


def _wordpiece(vocab_size: int, lowercase: bool, min_frequency: int) -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=specials, continuing_subword_prefix="##",
                                        show_progress=False)
    return tok, trainer


def _bpe(vocab_size: int, lowercase: bool, min_frequency: int) -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.BPE(unk_token=None))
    if lowercase:
        tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer


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

    build = _wordpiece if kind == "wordpiece" else _bpe
    tok, trainer = build(vocab_size, lowercase, min_frequency)
    tok.train_from_iterator(iterator, trainer=trainer)

    if kind == "wordpiece":
        specials = BERT_SPECIALS
        cls, sep = "[CLS]", "[SEP]"
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, tok.token_to_id(cls)), (sep, tok.token_to_id(sep))])
    else:
        specials = ROBERTA_SPECIALS
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
            trim_offsets=True, add_prefix_space=False)

    input_names = ["input_ids", "token_type_ids", "attention_mask"] if kind == "wordpiece" else \
        ["input_ids", "attention_mask"]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=model_max_length,
                                   clean_up_tokenization_spaces=False,
                                   model_input_names=input_names, **specials)
    output_dir = Path(output_dir)
    fast.save_pretrained(output_dir)
    if kind == "wordpiece":  # vocab.txt for tools that expect the classic BERT layout
        vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
        (output_dir / "vocab.txt").write_text("".join(t + "\n" for t, _ in vocab), encoding="utf-8")
    return output_dir
