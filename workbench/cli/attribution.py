"""``attribute``: which words one prediction rests on (:mod:`bertology.attribution`), printed as a
per-word table: a masked word's MLM guess, or a fine-tuned classifier's class."""

from __future__ import annotations

from typing import Any, Optional

import typer

from bertology.cli.core import MODEL_HELP

METHOD_CHOICES = {
    "gxi": ("gxi",),
    "ig": ("ig",),
    "attention": ("attention", "rollout"),
    "all": ("gxi", "ig", "attention", "rollout"),
}


def register(app: typer.Typer) -> None:
    """``attribute``."""

    @app.command("attribute")
    def attribute_cmd(
        model: str = typer.Option(
            ..., help=f"{MODEL_HELP}: a model with an MLM head, or a fine-tuned classifier <run>@<step>"
        ),
        sentence: str = typer.Option(..., help="the sentence (split into words and punctuation marks)"),
        word: Optional[int] = typer.Option(
            None, help="index of the word (0 = first) to mask (MLM) or whose class to explain (token classifier)"
        ),
        target: Optional[str] = typer.Option(
            None, help="MLM: a vocabulary word (default: the top guess); classifier: a label (default: predicted)"
        ),
        foil: Optional[str] = typer.Option(
            None,
            help="MLM: a second vocabulary word; explain log p(target) - log p(foil) at the mask (Yin & Neubig 2022)",
        ),
        method: str = typer.Option("all", help="ig, gxi, attention (last-layer attention and rollout) or all"),
        steps: int = typer.Option(50, help="integrated gradients: points on the path from the baseline"),
        baseline: str = typer.Option("pad", help="integrated gradients: every word piece becomes pad or mask"),
        output: Optional[str] = typer.Option(
            None,
            help="classifier: explain the logit (default) or the log-probability; an MLM explains "
            "log-probability only (anything else is refused)",
        ),
        raw: bool = typer.Option(False, "--raw", help="print raw scores instead of normalised shares"),
        device: str = typer.Option("cpu", help="cpu, cuda, cuda:N or auto"),
    ) -> None:
        """Attribute one prediction to the sentence's words: gradient × input, integrated gradients
        (Captum), last-layer attention and rollout; pieces summed into words."""
        from bertology.attribution import attribute, unknown_words
        from bertology.errors import ConfigError
        from bertology.inspection import split_words

        if method not in METHOD_CHOICES:
            raise ConfigError(f"--method must be one of {', '.join(METHOD_CHOICES)}, got {method!r}")
        words = split_words(sentence)
        lm = load_for_attribution(model, device, attentions=method in ("attention", "all"))
        unknown = unknown_words(lm, words)
        if len(unknown) == len(words):
            typer.echo(
                f"warning: {lm.name}'s tokenizer makes {lm.tokenizer.unk_token} of every word of the sentence: "
                "the model sees none of them (is the tokenizer the model's?)",
                err=True,
            )
        result = attribute(
            lm,
            words,
            word,
            target,
            methods=METHOD_CHOICES[method],
            n_steps=steps,
            baseline=baseline,
            output=output,
            foil=foil,
        )
        typer.echo(result.summary())
        value = "score" if raw else "normalised"
        table = result.by_word(value).reset_index()
        typer.echo(table.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        if result.masked_line():
            typer.echo(result.masked_line())
        typer.echo(
            "pieces summed into words; "
            + ("raw scores" if raw else "normalised: score / sum of |scores| over the words, per method")
        )


def load_for_attribution(name: str, device: str, attentions: bool = True) -> Any:
    """A fine-tuned classifier (its config names ``*ForSequenceClassification`` /
    ``*ForTokenClassification``) with its head and adapters, or else the model with its MLM head,
    as a :class:`bertology.models.LoadedModel` on ``device``."""
    import json

    from bertology.errors import ModelError
    from bertology.models import load_model, resolve

    display, path = resolve(name)
    try:
        architectures = json.loads((path / "config.json").read_text(encoding="utf-8")).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        architectures = []  # load_model names what is wrong with the folder
    kinds = [k for k in ("Sequence", "Token") if any(str(a).endswith(f"For{k}Classification") for a in architectures)]
    if kinds:
        return _load_classifier(display, path, kinds[0].lower(), device, attentions)
    try:
        return load_model(name, mlm_head=True, device=device, attentions=attentions)
    except ModelError as exc:
        if "carry no MLM head" not in str(exc):
            raise
        raise ModelError(
            f"{display}: no MLM head and not a fine-tuned classifier, so there is no prediction to attribute; "
            "pick a model with an MLM head (e.g. minilm-english-mlm) or a fine-tune <run>@<step>"
        ) from None


def _load_classifier(display: str, path: Any, kind: str, device: str, attentions: bool) -> Any:
    """The fine-tuned classifier in ``path`` (labels from its config), eager attention if asked."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from bertology.adapters import restore_adapters
    from bertology.finetuning.heads import load_classifier, load_tokenizer
    from bertology.models import from_modules, resolve_device

    config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    labels = [str(config.id2label[i]) for i in sorted(config.id2label)]
    model: Any = load_classifier(path, kind, labels)
    restore_adapters(model, load_file(str(path / "model.safetensors")))  # none saved: nothing done
    if attentions:
        model.set_attn_implementation("eager")
    lm = from_modules(display, model, load_tokenizer(path))
    lm.model.to(resolve_device(device))
    return lm
