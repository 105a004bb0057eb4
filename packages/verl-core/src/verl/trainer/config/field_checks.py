"""The schema's own rules, checked from its fields' metadata (`verl.trainer.config.fields.opt`): ``choices``,
``refused`` (any value but the default), ``engines`` (read by those rollout engines only) and gates (read only
when another key holds, unless the config sets that switch itself)."""

from __future__ import annotations

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.trainer.config.fields import absolute, interpolation_target, schema_fields
from verl.trainer.config.loader import explicit_keys


def field_problems(cfg: DictConfig) -> list[str]:
    """The schema's own rules, from its fields' metadata: ``choices``, ``refused`` (any value but the
    default) and ``engines`` (read only by those rollout engines: any other refuses a value but the default)."""
    problems = []
    explicit = explicit_keys(cfg)
    for key, info in schema_fields(OmegaConf.get_type(cfg)).items():
        value = OmegaConf.select(cfg, key)
        if isinstance(value, (DictConfig, ListConfig)):
            value = OmegaConf.to_container(value, resolve=True)
        if info.choices is not None and isinstance(value, list):
            for entry in value:
                one_of(problems, f"{key} entry", entry, info.choices)
        elif info.choices is not None and value not in info.choices:
            one_of(problems, key, value, info.choices)
        elif info.refused is not None and value != info.default:
            problems.append(f"{key}={value!r}: {info.refused} (accepted only at its default, {info.default!r})")
        elif info.engines is not None and value != info.default and (
            engine := OmegaConf.select(cfg, key.rsplit(".", 1)[0] + ".name")
        ) not in info.engines:  # read by the named engine: its gates, if any, are checked next
            problems.append(
                f"{key}={value!r} is read by the {' and '.join(info.engines)} rollout only; the {engine} rollout "
                f"does not read it: leave it at its default ({info.default!r}) or use rollout.name={info.engines[0]}"
            )
        elif info.gates and value != (default := _default(cfg, info)):
            shut = [gate.text(here) for gate, here in info.gates if not gate_open(cfg, gate, here, explicit)]
            if shut:
                problems.append(
                    f"{key}={value!r} is read only when {' and '.join(shut)}, which this config does not set, so "
                    f"the value would do nothing: leave it at its default ({default!r}) or set that"
                )
    return problems


def gate_open(cfg: DictConfig, gate, here: str, explicit: frozenset[str]) -> bool:
    """Whether a key under ``gate`` may hold a value other than its default: the gate holds, or the config sets
    one of its switches itself (``use_kl_loss=false`` next to ``kl_loss_coef=0.0``: the config says the
    feature is off, and its settings stay as written)."""
    return gate.test(cfg, here) or any(absolute(here, k) in explicit for k in gate.switches)


def _default(cfg: DictConfig, info) -> object:
    """A field's default, where it follows another key that key's value in ``cfg``."""
    target = interpolation_target(info.key, info.default)
    if target is None:
        return info.default
    value = OmegaConf.select(cfg, target)
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def one_of(problems: list[str], key: str, value, allowed) -> None:
    if value not in allowed:
        problems.append(f"{key}={value!r} is not one of: {', '.join(map(str, allowed))}")
