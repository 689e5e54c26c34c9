"""The one way to a white-box scorer: from a model value, a loaded local model, or a scorer.

    make_scorer("smollm2")                  # the embedded model (also a folder, hub id, gguf:FILE, tiny)
    make_scorer(hf_model)                   # a loaded local model: its weights are shared, not loaded again
    make_scorer(scorer)                     # a scorer (or any stand-in with the scorer's protocol), as it is
    make_scorer("trained")                  # a name another package registered (the planted benchmark's)

The API (``ag.load_scorer``), ``optimize``, the CLI and every benchmark call this. A name such as
``trained`` is registered by the package that builds it (:func:`register_scorer_value`, by
:mod:`agentgrad.benchmarks.planted.model`), so this module imports nothing above its layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from agentgrad.attribution.protocol import AttributionScorer
from agentgrad.errors import ConfigError

LOCAL = "smollm2, a model folder or hub id, gguf:FILE, tiny"  # what a white-box scorer can be made from

_NAMED: dict[str, tuple[Callable[[], str | Path], str]] = {}


def register_scorer_value(name: str, folder: Callable[[], str | Path], about: str) -> None:
    """Make ``name`` a scorer value: ``folder()`` gives the model folder it stands for (built on
    first use, say); ``about`` says what it is, in the list of values an error prints."""
    _NAMED[name] = (folder, about)


def scorer_values() -> str:
    """The forms a scorer value takes, registered names included, for help and error texts."""
    return ", ".join([LOCAL, *(f"{n} ({about})" for n, (_, about) in sorted(_NAMED.items()))])


def scorer_path(value: str | Path) -> str:
    """The folder or hub id (or embedded model's name, ``gguf:FILE``) a scorer value names.

    A registered name gives its folder; ``tiny`` / ``tiny:ARCH`` the cached tiny model; ``hf:PATH``
    its path. A served model (``openai:...``) has no weights to differentiate, and an existing path
    that is not a model folder (no ``config.json``) or a GGUF file is refused: both are one-line
    :class:`ConfigError`\\ s that list what a scorer can be.
    """
    from agentgrad.core.config import model_spec_from_value
    from agentgrad.models.spec import is_gguf_value

    text = str(value)
    if text in _NAMED:
        return str(_NAMED[text][0]())
    if text.startswith("fake:"):
        raise ConfigError(f"scorer {text!r} is a scripted model with no weights; a scorer is {scorer_values()}")
    spec = model_spec_from_value(text)
    if spec.backend == "tiny":
        from agentgrad.models.tiny import cached_tiny_model

        return str(cached_tiny_model(arch=spec.options().get("arch", "llama")))
    if spec.backend != "hf":
        raise ConfigError(f"scorer {text!r} is a served model, whose weights no gradient reaches; a scorer is "
                          f"{scorer_values()}")
    path = str(spec.options()["path"])
    p = Path(path).expanduser()
    if p.exists() and not is_gguf_value(path) and not (p / "config.json").exists():
        raise ConfigError(f"scorer {path} is not a model folder (no config.json); a scorer is {scorer_values()}")
    return path


def make_scorer(value: Any, *, device: str = "cpu", dtype: str = "float32", hint: str = "", **options: Any) -> Any:
    """A white-box scorer.

    Args:
        value: a scorer value (:func:`scorer_path`), a loaded local model (an ``hf`` or ``tiny``
            model: the scorer shares its weights, so ``device`` and ``dtype`` are the model's), or a
            scorer (anything with the :class:`~agentgrad.attribution.protocol.AttributionScorer`
            protocol), returned as it is.
        device, dtype: where the scorer's weights are loaded, and their type (a value only).
        hint: appended to the error for a value that cannot be a scorer (what to do instead).
        options: the :class:`~agentgrad.attribution.scorer.Scorer`'s (``mode``, ``on_too_long``, ...).
    """
    from agentgrad.attribution.scorer import Scorer
    from agentgrad.models.hf import HFModel

    if isinstance(value, AttributionScorer):
        return value
    if isinstance(value, HFModel):
        return Scorer.from_model(value, **options)
    if isinstance(value, (str, Path)) and str(value):
        try:
            return Scorer(scorer_path(value), device=device, dtype=dtype, **options)
        except ConfigError as e:
            raise ConfigError(f"{e}{'; ' + hint if hint else ''}") from None
    what = "none" if value is None or value == "" else type(value).__name__
    raise ConfigError(f"a scorer needs a local white-box model ({scorer_values()}), not {what}"
                      + (f"; {hint}" if hint else ""))
